"""The index's "Best per direction" (fraglib_study.pages.index.best_blocks, fraglib_study.report.tables.tied_with_best / best_per_direction)
and its flagging of runs scored on an older test split (fraglib_study.report.tables.retrieval_by_test_set), on hand-made numbers."""

from __future__ import annotations

import json
from pathlib import Path

from fraglib_study.report.tables import (
    best_per_direction,
    flagged,
    markdown,
    retrieval,
    retrieval_by_test_set,
    tied_with_best,
)


def test_tied_with_best_by_hand():
    """The best: the highest mean (equal means: the first name); tied: every other run whose CI overlaps the best's,
    touching ends included, highest mean first."""
    scores = {
        "b": (38.0, 35.0, 41.0),  # overlaps [36, 44]
        "a": (40.0, 36.0, 44.0),  # the best
        "e": (40.0, 30.0, 50.0),  # the same mean as a: a wins by name, e is tied
        "c": (30.0, 27.0, 35.9),  # ends below the best's low end: not tied
        "d": (30.0, 27.0, 36.0),  # touches it: tied
        "f": (20.0, 44.5, 46.0),  # a (malformed) CI above the best's: no overlap, not tied
    }
    assert tied_with_best(scores) == ("a", ["e", "b", "d"])
    assert tied_with_best({"only": (1.0, 0.0, 2.0)}) == ("only", [])
    assert tied_with_best({}) is None


def test_best_per_direction_tables_by_hand():
    """One compact row per protocol and direction (the best by label and name, its CI, the tied names, the runs),
    and one full row per best or tied run."""
    by = {
        "annotation": {"x": (50.0, 45.0, 55.0), "y": (47.25, 44.0, 50.0), "z": (10.0, 8.0, 12.0)},
        "search": {"x": (20.0, 19.0, 21.0), "y": (30.0, 29.0, 31.0), "z": (29.0, 27.0, 29.5)},
    }
    short, full = best_per_direction([("Proto, ten folds", by), ("Empty", {})], {"x": "Run X", "y": "Run Y"})
    assert short.header == ("protocol", "direction", "best run", "R@1 [95% CI]", "tied with it (CIs overlap)", "runs")
    assert short.rows == (
        ("Proto, ten folds", "annotation", "**Run X** (`x`)", "50.0 [45.0, 55.0]", "1: `y`", "3"),
        ("Proto, ten folds", "search", "**Run Y** (`y`)", "30.0 [29.0, 31.0]", "1: `z`", "3"),
    )
    assert full.rows == (
        ("Proto, ten folds", "annotation", "best", "`x` — Run X", "50.0 [45.0, 55.0]"),
        ("Proto, ten folds", "annotation", "tied", "`y` — Run Y", "47.2 [44.0, 50.0]"),
        ("Proto, ten folds", "search", "best", "`y` — Run Y", "30.0 [29.0, 31.0]"),
        ("Proto, ten folds", "search", "tied", "`z` — z", "29.0 [27.0, 29.5]"),
    )
    alone = best_per_direction([("P", {"annotation": {"x": (1.0, 0.5, 1.5), "y": (0.1, 0.0, 0.2)}})], {})[0]
    assert alone.rows == (("P", "annotation", "**x** (`x`)", "1.0 [0.5, 1.5]", "none", "2"),)


def _summary(a: float, s: float) -> dict:
    return {
        "system": "x",
        "seeds": [0],
        "annotation": {"r1": a, "r10": 90.0, "mean_rank": 2.0},
        "search": {"r1": s, "r10": 80.0, "mean_rank": 3.0},
    }


def test_runs_on_an_older_test_split_are_marked_and_listed_last():
    """A run scored on the old test split stays in the table, after every current run however high its R@1, marked
    † with a footnote naming both sizes and the command; without one the table is retrieval()'s own."""
    runs = {"new_low": _summary(10.0, 5.0), "old_high": _summary(61.0, 62.0), "new_high": _summary(40.0, 30.0)}
    table, note = retrieval_by_test_set(runs, {"old_high": "Old"}, {"old_high": 100, "elsewhere": 100}, 500, "make x")
    assert [r[0] for r in table.rows] == ["`new_high` — new_high", "`new_low` — new_low", "† `old_high` — Old"]
    assert table.rows[2][3] == "61.0" and table.header == retrieval(runs, {}).header
    assert note.startswith("† ") and "of 100 images" in note and "of 500" in note and "(1 here)" in note
    assert "`make x` re-scores them" in note
    assert retrieval_by_test_set(runs, {}, {}, 500) == [retrieval(runs, {})]
    assert "|† `old_high`" not in markdown([table]) and "| † `old_high` — Old |" in markdown([table])
    # the sentences' table marks by the run its first cell names
    caps = flagged(retrieval({"a": _summary(1, 1), "b": _summary(2, 2)}, {}), {"b"})  # by its first cell's `run`
    assert [r[0] for r in caps.rows] == ["`a` — a", "† `b` — b"]


# ----------------------------------------------------------------------------- from files: protocols and CIs
def _put(folder: Path, run: str, ranks: dict[str, tuple[list[int], list[int]]], **extra) -> None:
    """A run summary and its units' ranks.json (unit -> (annotation ranks, search ranks)), figures computed."""
    from fraglib.metrics.retrieval import recall_table

    per = {u: {"annotation": recall_table(a), "search": recall_table(s)} for u, (a, s) in ranks.items()}
    mean = {d: {k: sum(p[d][k] for p in per.values()) / len(per) for k in per[u][d]} for u in per for d in per[u]}
    units = list(ranks)
    summary = {"system": "x", "seeds": sorted({int(u.split("r")[0]) for u in units}), "units": units, **mean}
    summary |= {"groups": [int(u.split("r")[0]) for u in units], "per_seed": per, **extra}
    (folder / run).mkdir(parents=True)
    (folder / run / "metrics.json").write_text(json.dumps(summary))
    for u, (a, s) in ranks.items():
        (folder / run / "seeds" / f"seed{u}").mkdir(parents=True)
        (folder / run / "seeds" / f"seed{u}" / "ranks.json").write_text(json.dumps({"annotation": a, "search": s}))


def test_protocols_rank_the_current_runs_with_their_cis(tmp_path, monkeypatch):
    """The k-fold protocol first, then the dataset's studies together; a run of the second study scored on the old
    test split, and one without its ranks, are left out saying why; a run scored perfectly has the CI [100, 100] and
    another such is tied with it, one at 50 % with 200 queries is not."""
    from fraglib_study.pages.index import best_blocks, protocols
    from fraglib_study.report.registry import Study

    monkeypatch.chdir(tmp_path)
    one, half = [1] * 200, [1, 2] * 100
    _put(Path("runs/synthetic"), "top", {"0": (one, one)})
    _put(Path("runs/synthetic"), "mid", {"0": (half, half)})
    _put(Path("runs/synthetic_extended"), "top2", {"0": (one, one)})
    _put(Path("runs/synthetic_extended"), "old", {"0": ([1] * 100, [1] * 100)})
    _put(Path("runs/synthetic_extended"), "noranks", {"0": (half, half)})
    for f in Path("runs/synthetic_extended/noranks/seeds").glob("*/ranks.json"):
        f.unlink()
    _put(
        Path("runs/synthetic_folds"),
        "top",
        {"0": (one[:100], one[:100]), "1": (half[:100], half[:100])},
        protocol="folds",
        folds=2,
        partition=0,
    )

    titles = {"synthetic": "Synthetic benchmark", "synthetic_extended": "Synthetic benchmark, extended study"}

    def study(name: str, folds: str | None = None) -> Study:  # titles: the train stages' meta (registry)
        return Study(
            name, "dvc.yaml", f"runs/{name}", "synthetic", "seeds", None, (), "", None, "", folds, titles[name]
        )

    found = [study("synthetic", "runs/synthetic_folds"), study("synthetic_extended")]
    params = {"runs": {r: {"label": f"Run {r}"} for r in ("top", "mid", "top2", "old", "noranks")}}
    got = protocols(found, params)
    assert [p["title"] for p in got] == ["Synthetic benchmark, two folds", "Synthetic benchmark"]
    assert list(got[1]["runs"]) == ["mid", "top", "top2"] and got[1]["left_out"] == [
        ("old", "scored on an older test split of 100 images"),
        ("noranks", "no per-query ranks here"),
    ]
    (sentence, short), (full, *left) = best_blocks(found, params)
    assert "**tied**" in sentence
    assert short.rows[2:] == (
        ("Synthetic benchmark", "annotation", "**Run top** (`top`)", "100.0 [100.0, 100.0]", "1: `top2`", "3"),
        ("Synthetic benchmark", "search", "**Run top** (`top`)", "100.0 [100.0, 100.0]", "1: `top2`", "3"),
    )
    assert short.rows[0][:2] == ("Synthetic benchmark, two folds", "annotation") and short.rows[0][4] == "none"
    assert short.rows[0][3].startswith("75.0 [")  # fold 0 all first, fold 1 half: pooled 75 %
    assert left == [
        "Synthetic benchmark: left out `old` (scored on an older test split of 100 images); `noranks` (no per-query "
        "ranks here)."
    ]
    assert ("Synthetic benchmark", "annotation", "tied", "`top2` — Run top2", "100.0 [100.0, 100.0]") in full.rows


def test_no_runs_no_best_table(tmp_path, monkeypatch):
    """A project with no trained run: no table and no sentence (the page shows nothing in their place)."""
    from fraglib_study.pages.index import best_blocks
    from fraglib_study.report.registry import Study

    monkeypatch.chdir(tmp_path)
    assert best_blocks([], {"runs": {}}) == ([], [])
    empty = Study("synthetic", "dvc.yaml", "runs/synthetic", "synthetic", "seeds", None, (), "", None)
    assert best_blocks([empty], {"runs": {}}) == ([], [])
