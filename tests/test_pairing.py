"""One pairing rule per difference (docs/claims.md, "How differences are paired"): the result pages' paired
differences (``fraglib_study.report.uncertainty.paired_differences``, the fight report's and the ``diff`` facts') are the claims
table's (``fraglib_study.audit.claims``), to the bit, so a difference printed in two places prints one value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fraglib.metrics import retrieval as metrics
from fraglib_study.audit import claims
from fraglib_study.report import pagetext, uncertainty
from fraglib_study.report.loading import load_run
from fraglib_study.report.pagetext import protocol_text
from fraglib_study.report.plots import differences_caption, differences_figure
from fraglib_study.report.uncertainty import paired_differences

from test_dvc_deps import ROOT

PAIRS = [  # (runs folder, a, b): committed results (per-query ranks in git)
    ("runs/pascal1k_folds", "fr_lr01", "devise_d2048"),  # the fight's verdict on ten folds: annotation R@1 −1.65
    ("runs/pascal1k_folds", "kcca", "kcca_euclidean"),  # a claim's pair (Socher et al., mean rank)
    ("runs/pascal1k", "fr_lr01", "kcca_euclidean"),  # five splits, two trainings per split against one
]


@pytest.mark.parametrize(("folder", "a", "b"), PAIRS, ids=lambda x: Path(x).name)
def test_the_fight_page_prints_the_claims_difference(folder, a, b):
    """For committed runs, every task and metric: the page's difference (what ``ci_table`` and the fight report
    print) equals the claims' (``our_difference``, the verdicts' own function) exactly, and prints the same."""
    where = ROOT / folder
    if not all((where / r / "metrics.json").exists() for r in (a, b)):
        pytest.skip(f"{folder}: {a} or {b} not committed here")
    study = {r: load_run(where / r) for r in (a, b)}
    page = paired_differences(study, [(a, b)], metrics=("r1", "r5", "mean_rank"), n_boot=20)
    assert len(page) == 6
    for _, row in page.iterrows():
        metric = {"R@1": "r1", "R@5": "r5", "mean rank": "mean_rank"}[row.metric]
        ours = claims.our_difference(where / a, where / b, row.direction, metric, train_var=0.0)
        assert row["diff"] == ours["diff"], (row.direction, metric)
        assert row["diff"] == uncertainty.run_difference(study[a], study[b], row.direction, metric)
        shown = pagetext.ci_text(row["diff"], row.lo, row.hi).split(" [")[0]
        assert shown == pagetext.ci_text(ours["diff"], ours["lo"], ours["hi"]).split(" [")[0]
        assert row.n_units == ours["units"]


def test_the_verdict_on_ten_folds_prints_one_value_for_a_half():
    """fr_lr01 − devise_d2048, ten folds, annotation R@1: −1.65 points, which one summation order printed −1.6 and
    another −1.7; computed once, by the claims' function, it prints −1.6 wherever it is printed."""
    where = ROOT / "runs/pascal1k_folds"
    if not (where / "devise_d2048" / "metrics.json").exists():
        pytest.skip("the k-fold runs are not committed here")
    study = {r: load_run(where / r) for r in ("fr_lr01", "devise_d2048")}
    d = paired_differences(study, [("fr_lr01", "devise_d2048")], ("annotation",), ("r1",), n_boot=20)
    assert d["diff"].iloc[0] == pytest.approx(-1.65)
    assert pagetext.ci_text(d["diff"].iloc[0], -1.0, 1.0).startswith("-1.6 ")


def _run(units: list[str], ranks: np.ndarray) -> dict:
    groups = [int(u.split("r")[0]) for u in units]
    return {
        "run": "x",
        "units": units,
        "groups": groups,
        "seeds": sorted(set(groups)),
        "ranks": {"annotation": ranks, "search": ranks},
    }


def test_pairing_leaves_out_the_training_runs_one_side_lacks():
    """a trained twice on splits 0 and 1, b once per split and twice on split 2: they pair on 0, 1 and 2 (first
    runs); the difference is the mean of the splits' mean differences, on the page as in the claims."""
    rng = np.random.default_rng(0)
    ra, rb = rng.integers(1, 20, (5, 40)), rng.integers(1, 20, (4, 40))
    a, b = _run(["0", "0r1", "1", "1r1", "2"], ra), _run(["0", "1", "2", "2r1"], rb)
    assert metrics.pair(a["units"], b["units"]) == (["0", "1", "2"], [0, 2, 4], [0, 1, 2])
    d = paired_differences({"a": a, "b": b}, [("a", "b")], ("annotation",), ("r1", "mean_rank"), n_boot=20)
    for _, row in d.iterrows():
        metric = "r1" if row.metric == "R@1" else "mean_rank"
        va, vb = metrics.query_values(ra[[0, 2, 4]], metric), metrics.query_values(rb[[0, 1, 2]], metric)
        assert row["diff"] == metrics.paired_value(va, vb, [0, 1, 2])
        assert row["diff"] == pytest.approx(np.mean([(va[i] - vb[i]).mean() for i in range(3)]))
        assert row.n_units == 3
    with pytest.raises(ValueError, match="share no"):
        uncertainty.run_difference(a, _run(["3"], rb[:1]), "annotation", "r1")


def test_query_values_of_one_recall():
    ranks = np.array([[1, 2, 6, 11]])
    assert metrics.query_values(ranks, "r5").tolist() == [[100.0, 100.0, 0.0, 0.0]]
    assert metrics.per_query("r10") and metrics.per_query("rsum") and not metrics.per_query("median_rank")
    with pytest.raises(ValueError):
        metrics.query_values(ranks, "median_rank")


def test_the_protocol_a_heading_says():
    """Test sets and trainings per test set, runs that differ named (three or fewer) or counted."""
    twice = _run(["0", "0r1", "1", "1r1", "2", "2r1", "3", "3r1", "4", "4r1"], np.ones((10, 2), int))
    once = _run(["0", "1", "2", "3", "4"], np.ones((5, 2), int))
    short = _run(["0", "1"], np.ones((2, 2), int))
    assert protocol_text({"a": twice, "b": twice}) == "five splits, two trainings per split"
    text = protocol_text({"a": twice, "b": twice, "k_e": once, "s": short})
    assert text == (
        r"five splits (<code>s</code> on two), two trainings per split "
        r"(<code>k\_e</code>, <code>s</code>: one)"
    )
    folds = {
        "protocol": "folds",
        "folds": 10,
        "units": ["r0", "r1"],
        "groups": [0, 0],
        "seeds": list(range(10)),
        "strata": {},
    }
    summary = {
        "protocol": "folds",
        "folds": 10,
        "seeds": list(range(10)),
        "units": [f"{f}{r}" for f in range(10) for r in ("", "r1")],
    }
    assert protocol_text({"a": folds}) == "ten folds, two trainings per fold"
    assert protocol_text({"a": summary}) == "ten folds, two trainings per fold"  # a metrics.json, not loaded
    assert protocol_text({"a": once}, ["a", "not_here"]) == "five splits, one training per split"
    many = {f"r{i}": once for i in range(4)} | {"t": twice}
    assert protocol_text(many) == "five splits, one training per split (<code>t</code>: two)"
    more = {f"t{i}": twice for i in range(5)} | {f"r{i}": once for i in range(4)}
    assert protocol_text(more) == "five splits, two trainings per split (4 of the 9 runs: one)"


def test_every_row_of_a_ci_figure_names_both_sides():
    """The figure's rows and the caption under it name the run and each base it is compared with."""
    rows = [
        {
            "run": "Fragments",
            "base": base,
            "direction": d,
            "metric": m,
            "diff": 1.0,
            "lo": 0.0,
            "hi": 2.0,
            "excludes_zero": False,
        }
        for base in ("DeViSE", "kCCA")
        for m in ("R@1", "R@5")
        for d in ("annotation", "search")
    ]
    diffs = pd.DataFrame(rows)
    fig = differences_figure(diffs)
    ticks = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(ticks) == 4 and all("Fragments" in t for t in ticks)
    assert [("DeViSE" in t, "kCCA" in t) for t in ticks] == [(True, False)] * 2 + [(False, True)] * 2
    assert differences_caption(diffs) == "Fragments − each of: DeViSE; kCCA (rows: R@1 then R@5 of each)"
    cats = pd.DataFrame([{**rows[0], "group": g} for g in ("cat", "dog")])
    assert differences_caption(cats, group_name="category") == "Fragments − DeViSE, per category: cat; dog (R@1)"
