"""Hubness and its corrections read back (:mod:`fraglib.metrics.hubness` computes them; the k-occurrence table is
:func:`fraglib_study.report.tables.hubness_table`): each correction's R@1 against the plain one with paired CIs, the parameters chosen on validation, and a study with a
correction's ranks in place of the plain ones."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fraglib.metrics.retrieval import DIRECTIONS, N_BOOT, paired_difference
from fraglib.metrics.retrieval import rank_metric as _metric
from fraglib_study.report.pagetext import metric_label

CORRECTIONS = {
    "inverted_softmax_inductive": "inverted softmax, inductive",
    "csls_inductive": "CSLS, inductive",
    "dis_inductive": "DIS, inductive",
    "nnn_inductive": "NNN, inductive",
    "inverted_softmax_transductive": "inverted softmax, transductive",
    "csls_transductive": "CSLS, transductive",
    "dis_transductive": "DIS, transductive",
    "nnn_transductive": "NNN, transductive",
}


MISSING = "—"  # a hubness table's cell for what a run did not measure


def cell_text(value: Any, fmt: str) -> str:
    """``value`` formatted by ``fmt`` (a format spec), :data:`MISSING` for None or NaN."""
    return MISSING if value is None or value != value else format(value, fmt)


def correction_differences(
    study: dict[str, dict[str, Any]], labels: dict[str, str] | None = None, metric: str = "r1", n_boot: int = N_BOOT
) -> pd.DataFrame:
    """Per run, correction (:data:`CORRECTIONS`) and direction: the test ``metric`` without and with the
    correction (mean over units) and the paired three-level bootstrap difference (with − without, CI).
    Long format."""
    rows = []
    for r, s in study.items():
        for key, name in CORRECTIONS.items():
            if key not in s.get("corrected", {}):
                continue
            for d in DIRECTIONS:
                a, b = s["corrected"][key][d], s["ranks"][d]
                diff = paired_difference(a, b, metric, n_boot, groups=s["groups"])
                rows.append(
                    {
                        "run": (labels or {}).get(r, r),
                        "correction": name,
                        "direction": d,
                        "metric": metric_label(metric),
                        "without": float(_metric(b, metric).mean()),
                        "with": float(_metric(a, metric).mean()),
                        **diff,
                    }
                )
    return pd.DataFrame(rows)


def correction_parameters(study: dict[str, dict[str, Any]], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Per run, correction (:data:`CORRECTIONS`, those measured) and direction, mean over units: the parameter
    chosen on validation (β in units of the validation scores' sd for the inverted softmax and DIS, K for CSLS,
    α for NNN), NNN's ``k``, and ``val gain``: the validation R@1+5+10 gained by it (points; negative: the
    correction hurt on validation at every value tried). Long format."""
    rows = []
    for r, s in study.items():
        h = s.get("hubness") or {}
        for key, name in CORRECTIONS.items():
            for d in DIRECTIONS if key in h else ():
                c = h[key][d]
                beta = key.startswith(("inverted_softmax", "dis"))
                rows.append(
                    {
                        "run": (labels or {}).get(r, r),
                        "correction": name,
                        "direction": d,
                        "parameter": c["param"] * (h["beta_unit"] if beta else 1),
                        "k": c.get("param_k", float("nan")),
                        "val gain": c["val_rsum"] - c["val_rsum_uncorrected"],
                    }
                )
    return pd.DataFrame(rows, columns=["run", "correction", "direction", "parameter", "k", "val gain"])


def corrected_study(study: dict[str, dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """The runs of ``study`` that measured correction ``key`` (:data:`CORRECTIONS`), their per-query ranks
    replaced by the corrected ones: any table or paired difference of this module then reads the study
    under that correction."""
    return {r: {**s, "ranks": dict(s["corrected"][key])} for r, s in study.items() if key in s.get("corrected", {})}


def correction_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """:func:`correction_differences` as 'with (Δ [lo, hi])' strings: rows runs, columns (direction,
    correction), plus each direction's uncorrected value (``none``, to 0.1); :data:`MISSING` where a run lacks a
    correction."""
    if not len(diffs):
        return diffs
    d = diffs.assign(
        cell=[
            f"{w:.1f} ({x:+.1f} [{lo:+.1f}, {hi:+.1f}])"
            for w, x, lo, hi in zip(diffs["with"], diffs["diff"], diffs["lo"], diffs["hi"])
        ]
    )
    runs = list(dict.fromkeys(d["run"]))
    table = d.pivot_table(index="run", columns=["direction", "correction"], values="cell", aggfunc="first")
    plain = d.pivot_table(index="run", columns="direction", values="without", aggfunc="first")
    for dirn in plain.columns:
        table[(dirn, "none")] = [cell_text(v, ".1f") for v in plain[dirn].reindex(table.index)]
    order = [(dirn, c) for dirn in DIRECTIONS for c in ["none", *CORRECTIONS.values()] if (dirn, c) in table.columns]
    return table.loc[runs, order].fillna(MISSING)


def correction_parameter_table(chosen: pd.DataFrame) -> pd.DataFrame:
    """:func:`correction_parameters` as one cell per run (rows, in their order), direction and correction (columns,
    in :data:`CORRECTIONS` order): the parameter to 3 significant figures (NNN: α, then its k) and, in brackets, the
    validation R-sum it gained (points); :data:`MISSING` where a run lacks the correction (one written before it).
    At most 16 columns, so a page shows them all."""
    if not len(chosen):
        return chosen

    def cell(r) -> str:
        k = "" if r["k"] != r["k"] else f", k {cell_text(r['k'], '.0f')}"
        return f"{cell_text(r['parameter'], '.3g')}{k} ({cell_text(r['val gain'], '+.1f')})"

    d = chosen.assign(cell=[cell(r) for _, r in chosen.iterrows()])
    table = d.pivot_table(index="run", columns=["direction", "correction"], values="cell", aggfunc="first")
    order = [(dirn, c) for dirn in DIRECTIONS for c in CORRECTIONS.values() if (dirn, c) in table.columns]
    return table.loc[list(dict.fromkeys(d["run"])), order].fillna(MISSING)
