"""Uncertainty of a study's numbers: CIs of means over training runs and paired differences (any system).

Uncertainty has three sources and every CI covers all of them (docs/evaluation.md, "Uncertainty"):
the data split, the training run (seed) and the test queries. A study's training runs ("units":
seeds, and their replicates, ``runs.<run>.replicates``) fall into groups that share a test set (the
splits; on one dataset all units are one group). The 95% percentile bootstrap draws, per resample,
the groups with replacement, then within each drawn group its units with replacement and its test
queries with replacement (one draw of queries for every unit of the group), and averages the metric
over the drawn units. Paired differences make the same draws for both runs, unit u of one paired
with unit u of the other. Tables also show the mean ± sd over units.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.core.outputs import unit_seed
from fraglib.metrics.retrieval import DIRECTIONS, KS, N_BOOT, bootstrap_seed_mean, paired_difference
from fraglib.metrics.retrieval import rank_metric as _metric
from fraglib_study.report.loading import load_run
from fraglib_study.report.pagetext import metric_label


def run_difference(a: dict[str, Any], b: dict[str, Any], task: str, metric: str) -> float:
    """Loaded run ``a`` (:func:`load_run`) minus ``b`` in a per-query ``metric`` (:func:`fraglib.metrics.retrieval.per_query`)
    on ``task``, paired by :func:`fraglib.metrics.retrieval.pair` (:func:`fraglib.metrics.retrieval.paired_value`, the claims' rule); ValueError when they share no training run."""
    from fraglib.metrics.retrieval import pair, paired_value, query_values

    common, ia, ib = pair(list(a["units"]), list(b["units"]))
    if not common:
        raise ValueError(f"runs {a.get('run')} and {b.get('run')} share no training run")
    return paired_value(
        query_values(a["ranks"][task][ia], metric),
        query_values(b["ranks"][task][ib], metric),
        [a["groups"][i] for i in ia],
        shared_strata([a, b], task),
    )


def paired_r1(folder: str | Path, a: str, b: str, correction: str | None = None) -> dict[str, float] | None:
    """R@1 of run ``a`` minus run ``b`` of ``folder`` per direction, paired as every page pairs
    (:func:`run_difference`), on their ranks or (``correction``, a key of :data:`fraglib_study.report.corrections.CORRECTIONS`' ranks, e.g.
    ``inverted_softmax_inductive``) their corrected ranks; None where either run, or that correction of it, is not
    here. A damaged run is a ValueError naming it (:func:`load_run`)."""
    folder = Path(folder)
    if not all((folder / r / "metrics.json").is_file() for r in (a, b)):
        return None
    ra, rb = load_run(folder / a), load_run(folder / b)
    if correction:
        if not all(correction in (r.get("corrected") or {}) for r in (ra, rb)):
            return None
        ra, rb = ({**r, "ranks": r["corrected"][correction]} for r in (ra, rb))
    return {d: run_difference(ra, rb, d, "r1") for d in DIRECTIONS}


def shared_strata(runs: list[dict[str, Any]], task: str) -> np.ndarray | None:
    """The query strata (folds, :func:`fraglib_study.report.loading.pool_folds`) of ``task`` the loaded ``runs`` share, None where none has
    any; ValueError when they differ (k-fold runs of two partitions, or one beside a split run): not one test set."""
    found = [(r.get("strata") or {}).get(task) for r in runs]
    if all(x is None for x in found):
        return None
    if (
        any(x is None for x in found)
        or len({r.get("partition") for r in runs}) > 1
        or any(not np.array_equal(found[0], x) for x in found)
    ):
        names = ", ".join(f"{r.get('run')} ({r.get('protocol', 'splits')} {r.get('partition', '')})" for r in runs)
        raise ValueError(f"{names}: not the same folds of one partition, so not one set of {task} queries")
    return found[0]


def mean_sd(run: dict[str, Any], task: str, metric: str) -> tuple[float, float | None]:
    """Mean and sd over training runs of ``metric`` on ``task`` (a direction, or ``similarity``): the summary's
    (``metrics.json``: ``<task>``, ``<task>_sd``), else from the per-query ranks of a loaded run (:func:`load_run`;
    e.g. ``median_rank_vsepp``, which the trainer does not write; sd with ddof 1, None for one training run)."""
    if metric in (run.get(task) or {}):
        return run[task][metric], (run.get(f"{task}_sd") or {}).get(metric)
    per_unit = _metric(run["ranks"][task], metric)
    return float(per_unit.mean()), float(per_unit.std(ddof=1)) if len(per_unit) > 1 else None


def seed_mean_cis(
    study: dict[str, dict[str, Any]],
    metrics: tuple[str, ...],
    n_boot: int = N_BOOT,
    tasks: tuple[str, ...] = DIRECTIONS,
) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(run, task, metric) -> the 95 % bootstrap CI of the mean over training runs (the module's resampling, the
    tables' CIs) for every loaded run of ``study`` (:func:`load_run`) and each of ``tasks`` it ranked."""
    return {
        (r, d, m): bootstrap_seed_mean(s["ranks"][d], m, n_boot, groups=s["groups"], strata=shared_strata([s], d))
        for r, s in study.items()
        for d in tasks
        if d in s["ranks"]
        for m in metrics
    }


def training_noise(
    study: dict[str, dict[str, Any]], metrics=("r1", "r5", "r10"), labels: dict[str, str] | None = None
) -> pd.DataFrame:
    """Run-to-run noise of runs trained more than once on a split: per run, direction and metric the
    pooled within-split sd over training seeds and the mean |difference| of two seeds on one split
    (same data and test queries: training noise alone). Long format; empty without replicates."""
    rows = []
    for v, s in study.items():
        groups = np.asarray(s["groups"])
        sets = [np.flatnonzero(groups == g) for g in np.unique(groups)]
        sets = [m for m in sets if len(m) > 1]
        if not sets:
            continue
        for d in DIRECTIONS:
            for m in metrics:
                vals = [_metric(s["ranks"][d][idx], m) for idx in sets]
                sd = float(np.sqrt(np.mean([np.var(x, ddof=1) for x in vals])))
                gap = float(np.mean([np.abs(x[:, None] - x[None]).sum() / (len(x) * (len(x) - 1)) for x in vals]))
                rows.append(
                    {
                        "run": (labels or {}).get(v, v),
                        "direction": d,
                        "metric": metric_label(m),
                        "within_split_sd": sd,
                        "mean_abs_gap": gap,
                        "splits": len(sets),
                        "seeds_per_split": float(np.mean([len(x) for x in vals])),
                    }
                )
    return pd.DataFrame(rows)


# Student's t 97.5 % quantiles for 1..30 degrees of freedom (standard tables); 1.96 beyond
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """Student's t 97.5 % quantile with ``df`` degrees of freedom (a table to 30, then 1.96)."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def split_differences(
    summaries: dict[str, dict[str, Any]],
    pairs: list[tuple[str, str]],
    metrics=("r1", "r5", "r10"),
    labels: dict[str, str] | None = None,
) -> pd.DataFrame:
    """a − b from the runs' ``metrics.json`` summaries alone (no per-query ranks needed): the per-split
    differences of each metric over the seeds/splits both runs have (a split's replicates averaged
    first), their mean and a 95 % t interval
    (mean ± t_{0.975, n−1} sd / √n). Each split's difference carries that split's query sampling and its
    training runs' noise, so the interval covers both — coarsely, with five splits. Long format."""

    def per_split(summary, d, m):  # a split's training runs (replicates) averaged
        out: dict[int, list[float]] = {}
        for u, v in summary["per_seed"].items():
            out.setdefault(unit_seed(u), []).append(v[d][m])
        return {k: float(np.mean(v)) for k, v in out.items()}

    rows = []
    for a, b in pairs:
        common = sorted(
            {unit_seed(u) for u in summaries[a]["per_seed"]} & {unit_seed(u) for u in summaries[b]["per_seed"]}
        )
        if len(common) < 2:
            raise ValueError(f"runs {a} and {b}: {len(common)} common seeds; a t interval needs two")
        for d in DIRECTIONS:
            for m in metrics:
                pa, pb = per_split(summaries[a], d, m), per_split(summaries[b], d, m)
                x = np.array([pa[k] - pb[k] for k in common])
                half = t975(len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
                rows.append(
                    {
                        "run": (labels or {}).get(a, a),
                        "base": (labels or {}).get(b, b),
                        "direction": d,
                        "metric": metric_label(m),
                        "n_seeds": len(x),
                        "diff": float(x.mean()),
                        "lo": float(x.mean() - half),
                        "hi": float(x.mean() + half),
                        "excludes_zero": bool(x.mean() - half > 0 or x.mean() + half < 0),
                    }
                )
    return pd.DataFrame(rows)


def ci_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """Paired differences (long format, :func:`paired_differences`) as 'diff [lo, hi]' strings
    (:func:`fraglib_study.report.pagetext.ci_text`, as the claims table prints them), rows (run, base), one column per
    (direction, metric)."""
    from fraglib_study.report.pagetext import ci_text

    d = diffs.assign(ci=[ci_text(x, lo, hi) for x, lo, hi in zip(diffs["diff"], diffs["lo"], diffs["hi"])])
    wide = d.pivot_table(index=["run", "base"], columns=["direction", "metric"], values="ci", aggfunc="first")
    return wide[list(dict.fromkeys(zip(d["direction"], d["metric"])))]  # columns as computed: R@1, R@5, R@10


def lead_word(lo: float, hi: float, who: str = "fragments") -> str:
    """A run − baseline difference in R@K (higher is better) read by its 95 % CI ``[lo, hi]``; ``who``: the
    first run's side in words (the fragment runs; a run after the papers by its name)."""
    return f"{who} ahead" if lo > 0 else f"{who} behind" if hi < 0 else "not distinguishable"


def lead_summary(diffs: pd.DataFrame, by: str = "direction", who: str = "fragments") -> str:
    """Rows of :func:`paired_differences` (a run − baseline, an R@K metric; ``who`` names the run's side, the
    fragment runs by default), one per baseline and ``by`` (a column: the direction, or a correction): the counts
    first ("fragments ahead in 1, behind in 3, not distinguishable in 14 of 18"), then each row as "base / by:
    diff [lo, hi] — word" (:func:`lead_word`)."""
    from fraglib_study.report.pagetext import ci_text

    words = [lead_word(lo, hi, who) for lo, hi in zip(diffs["lo"], diffs["hi"])]
    counts = {w: words.count(w) for w in (f"{who} ahead", f"{who} behind", "not distinguishable")}
    head = (
        f"{who} ahead in {counts[f'{who} ahead']}, behind in {counts[f'{who} behind']}, "
        f"not distinguishable in {counts['not distinguishable']} of {len(words)}"
    )
    rows = [f"{r.base} / {r[by]}: {ci_text(r['diff'], r.lo, r.hi)} — {w}" for (_, r), w in zip(diffs.iterrows(), words)]
    return head + ". " + "; ".join(rows)


def paired_differences(
    study: dict[str, dict[str, Any]],
    pairs: list[tuple[str, str]],
    tasks=DIRECTIONS,
    metrics=tuple(f"r{k}" for k in KS),
    labels: dict[str, str] | None = None,
    n_boot: int = N_BOOT,
) -> pd.DataFrame:
    """Difference a − b for each (a, b) in ``pairs`` (runs of ``study``), each task (``direction`` column) and
    metric, over the units both runs have (``n_seeds``: their seeds/splits, ``n_units``: training runs; a run
    limited to fewer seeds, ``runs.<run>.seeds``, or replicates is paired on those). The pairing and the difference
    are the claims' (:func:`fraglib.metrics.retrieval.pair`, :func:`fraglib.metrics.retrieval.paired_value`; docs/claims.md, "How
    differences are paired"), so a difference this prints is the one the claims table prints; the CI is the paired
    bootstrap's (module docstring). A median rank, no mean over queries, keeps the bootstrap's point (the mean over
    units). Long format."""
    from fraglib.metrics.retrieval import pair, paired_value, per_query, query_values

    rows = []
    for a, b in pairs:
        common, ia, ib = pair(list(study[a]["units"]), list(study[b]["units"]))
        if not common:
            raise ValueError(f"runs {a} and {b} share no seed ({study[a]['units']} vs {study[b]['units']})")
        groups = [study[a]["groups"][i] for i in ia]
        for d in tasks:
            if d not in study[a]["ranks"] or d not in study[b]["ranks"]:
                continue
            strata = shared_strata([study[a], study[b]], d)
            ra, rb = study[a]["ranks"][d][ia], study[b]["ranks"][d][ib]
            for m in metrics:
                r = paired_difference(ra, rb, m, n_boot, groups=groups, strata=strata)
                if per_query(m):
                    r["diff"] = paired_value(query_values(ra, m), query_values(rb, m), groups, strata)
                rows.append(
                    {
                        "run": (labels or {}).get(a, a),
                        "base": (labels or {}).get(b, b),
                        "direction": d,
                        "metric": metric_label(m),
                        "n_seeds": len(set(groups)),
                        "n_units": len(common),
                        **r,
                    }
                )
    return pd.DataFrame(rows)


def differences_from(
    study: dict[str, dict[str, Any]], base: str = "full", labels: dict[str, str] | None = None, n_boot: int = N_BOOT
) -> pd.DataFrame:
    """Paired-bootstrap difference (run - base) of R@1/5/10 both ways, with CIs."""
    return paired_differences(study, [(v, base) for v in study if v != base], labels=labels, n_boot=n_boot)
