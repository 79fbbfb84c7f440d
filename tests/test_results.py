"""Study summaries, paired differences, the index page."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fraglib.metrics.retrieval import bootstrap_seed_mean, paired_difference
from fraglib.run.inputs import DataPaths
from fraglib_study.report.printed import published_table
from fraglib_study.report.tables import markdown

from conftest import ROOT, tiny_eval


def _pipelines(dest: Path) -> Path:
    """The committed dvc.yaml files (the studies, their pages) copied into the project root ``dest``."""
    for f in [ROOT / "dvc.yaml", *ROOT.glob("studies/*/dvc.yaml")]:
        (dest / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        (dest / f.relative_to(ROOT)).write_text(f.read_text())
    return dest


def test_paired_difference_by_hand():
    a = np.array([[1, 1, 5, 20], [1, 2, 5, 20]])  # seeds x queries
    b = np.array([[2, 1, 5, 20], [2, 2, 5, 20]])
    r = paired_difference(a, b, "r1", n_boot=200)
    # R@1: a = 50% and 25%, b = 25% and 0% -> difference 25 points for both seeds
    assert r["diff"] == pytest.approx(25.0)
    assert 0 <= r["lo"] <= 25 <= r["hi"] <= 100  # only query 0 differs: resamples give 0..100
    same = paired_difference(a, a, "r5", n_boot=50)
    assert same == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "excludes_zero": False}
    with pytest.raises(ValueError, match="same units and queries"):
        paired_difference(a, b[:1], "r1")


def test_paired_differences_use_the_seeds_both_runs_have():
    from fraglib_study.report.uncertainty import paired_differences

    a = np.array([[1, 1, 5, 20], [1, 2, 5, 20], [9, 9, 9, 9]])
    b = np.array([[2, 1, 5, 20], [2, 2, 5, 20]])
    study = {
        "big": {"units": ["0", "1", "2"], "groups": [0, 1, 2], "ranks": {"annotation": a}},
        "small": {"units": ["1", "0"], "groups": [1, 0], "ranks": {"annotation": b[::-1]}},
    }  # rows swapped
    d = paired_differences(study, [("big", "small")], tasks=("annotation",), metrics=("r1",), n_boot=100)
    assert d["n_seeds"].tolist() == [2] and d["diff"].tolist() == [pytest.approx(25.0)]  # seed 2 left out
    with pytest.raises(ValueError, match="share no seed"):
        paired_differences(
            {"x": {"units": ["3"], "groups": [3], "ranks": {}}, "y": {"units": ["4"], "groups": [4], "ranks": {}}},
            [("x", "y")],
        )


def test_bootstrap_draws_stay_inside_the_drawn_group():
    from fraglib.metrics.retrieval import bootstrap_draws

    groups = np.array([7, 7, 9, 9, 9])
    units, queries = bootstrap_draws(groups, n_queries=4, n_boot=200, seed=1)
    assert units.shape == (200, 2, 3) and queries.shape == (200, 2, 4)
    assert (groups[units] == groups[units[:, :, :1]]).all()  # one group per slot
    assert set(np.unique(units)) == {0, 1, 2, 3, 4} and queries.max() == 3


def test_bootstrap_values_are_the_plain_loop_over_draws():
    """Each resample's metric, written straight from the definition (for every drawn group slot and unit: the metric
    of that unit's ranks at the slot's drawn queries; averaged over slots and units), equals the vectorised form to
    the bit, with groups, strata and ties."""
    from fraglib.metrics.retrieval import _boot_values, bootstrap_draws, rank_metric

    rng = np.random.default_rng(3)
    for trial in range(6):
        ranks = rng.integers(1, 40, size=(5, 23))
        groups = [0, 0, 1, 1, 1] if trial % 2 else list(range(5))
        strata = rng.integers(0, 3, size=23) if trial % 3 == 0 else None
        units, queries = bootstrap_draws(groups, 23, 30, trial, strata)
        for name in ("r1", "r5", "r10", "mean_rank", "median_rank", "median_rank_vsepp"):
            loop = [
                np.mean(
                    [[rank_metric(ranks[u][queries[b, g]], name) for u in units[b, g]] for g in range(units.shape[1])]
                )
                for b in range(units.shape[0])
            ]
            np.testing.assert_allclose(_boot_values(ranks, name, units, queries), loop, rtol=0, atol=1e-12)


def test_training_noise_widens_the_ci():
    """Two training runs on one split whose ranks differ only between runs (every query alike within a
    run): a query bootstrap alone would give a zero-width CI at 50; resampling the runs spans both
    runs' values. Their noise: the within-split sd of R@1 (100 and 0 -> 70.7) and the mean gap 100."""
    from fraglib_study.report.uncertainty import training_noise

    r = np.array([[1] * 10, [5] * 10])
    lo, hi = bootstrap_seed_mean(r, "r1", n_boot=400, groups=[0, 0])
    assert lo == 0.0 and hi == 100.0
    d = paired_difference(r, np.full_like(r, 5), "r1", n_boot=400, groups=[0, 0])
    assert d["diff"] == 50.0 and (d["lo"], d["hi"]) == (0.0, 100.0) and not d["excludes_zero"]
    noise = training_noise({"x": {"groups": [0, 0], "ranks": {"annotation": r, "search": r}}}, metrics=("r1",))
    row = noise[noise.direction == "annotation"].iloc[0]
    assert row.within_split_sd == pytest.approx(100 / np.sqrt(2)) and row.mean_abs_gap == pytest.approx(100.0)


def test_seed_mean_ci_contains_point():
    rng = np.random.default_rng(0)
    r = rng.integers(1, 30, size=(3, 200))
    lo, hi = bootstrap_seed_mean(r, "r10", n_boot=300)
    point = (100.0 * (r <= 10).mean(axis=1)).mean()
    assert lo <= point <= hi


def test_published_table_layout():
    t = published_table("pascal1k")
    assert ("annotation", "R@1") in t.columns and ("search", "mean rank") in t.columns
    assert t.loc["paper: full_model", ("annotation", "R@1")] == 39.0


def test_study_summary_and_index(tiny_study, tmp_path, monkeypatch):
    from fraglib_study.pages.index import build
    from fraglib_study.report.loading import load_run
    from fraglib_study.report.tables import retrieval

    full = load_run(tiny_study / "full")
    assert full["seeds"] == [0] and full["ranks"]["search"].shape[0] == 1
    summary = json.loads((tiny_study / "full" / "metrics.json").read_text())
    assert "train_seconds" not in json.dumps(summary)  # nothing timing-dependent in the DVC metric
    table = retrieval({"full": full, "random": load_run(tiny_study / "random")}, {}, ("r1", "r5"), 20, sort=False)
    assert table.header[3:] == ("annotation R@1", "annotation R@5", "search R@1", "search R@5")
    assert [r[0] for r in table.rows] == ["`full` — full", "`random` — random"]  # the order given
    assert all(c.count("[") == 1 for r in table.rows for c in r[3:])  # each cell: its mean and 95 % CI
    monkeypatch.chdir(_pipelines(tmp_path))
    page = build(tmp_path / "reports" / "index.html").read_text().replace("&#39;", "'")
    assert (
        "rendered from commit" in page
        and "Pascal1K: every run beside the papers' tables <i>(page not built here)</i>" in page
    )


def test_breakdown_by_category_and_length_by_hand(tmp_path):
    import pandas as pd

    from fraglib.data import Dataset, write_karpathy_json
    from fraglib_study.report.breakdown import breakdown, have_groups, query_record

    images = [
        {"imgid": 0, "filename": "a.jpg", "split": "train", "category": "dog"},
        {"imgid": 1, "filename": "b.jpg", "split": "test", "category": "dog"},
        {"imgid": 2, "filename": "c.jpg", "split": "test", "category": "cat"},
    ]
    toks = lambda n: ["w"] * n
    sentences = [
        {"sentid": 0, "imgid": 0, "raw": "", "tokens": toks(5)},
        {"sentid": 1, "imgid": 1, "raw": "", "tokens": toks(5)},  # dog, <= 8 words
        {"sentid": 2, "imgid": 1, "raw": "", "tokens": toks(20)},  # dog, > 15 words
        {"sentid": 3, "imgid": 2, "raw": "", "tokens": toks(7)},
    ]  # cat, <= 8 words
    for seed in (0, 1):
        write_karpathy_json(Dataset("t", tmp_path, images, sentences), tmp_path / f"s{seed}" / "dataset.json")
    study = {
        "full": {
            "seeds": [0, 1],
            "units": ["0", "1"],
            "groups": [0, 1],
            "ranks": {
                "annotation": np.array([[1, 3], [1, 1]]),  # images 1 (dog), 2 (cat)
                "search": np.array([[1, 2, 1], [2, 2, 1]]),
            },
        }
    }  # sentences 1, 2, 3
    df = breakdown(study, str(tmp_path / "s{seed}"), ["full"], metric="r1").set_index(["direction", "by", "group"])
    assert df.loc[("annotation", "category", "dog"), "value"] == 100.0
    assert df.loc[("annotation", "category", "cat"), "value"] == 50.0  # seed 0 miss, seed 1 hit
    assert df.loc[("search", "category", "dog"), "value"] == 25.0  # (50 + 0) / 2
    assert df.loc[("search", "length", "<= 8 words"), "value"] == 75.0  # (100 + 50) / 2
    assert df.loc[("search", "length", "> 15 words"), "value"] == 0.0
    assert df.loc[("search", "category", "dog"), "queries"] == 2
    # without the data, the committed record of each split (fraglib_study.report.figure_data' queries.json) gives the same table
    records = {str(s): query_record(tmp_path / f"s{s}") for s in (0, 1)}
    assert records["0"] == {"category": ["dog", "cat"], "image": [0, 0, 1], "length": [5, 20, 7]}
    (tmp_path / "queries.json").write_text(json.dumps({"0": records["0"]}))
    gone = str(tmp_path / "gone{seed}")
    assert have_groups(str(tmp_path / "s{seed}"), [0, 1]) and not have_groups(gone, [0, 1], tmp_path / "queries.json")
    with pytest.raises(FileNotFoundError, match="split 1 is not in"):
        breakdown(study, gone, ["full"], metric="r1", queries_file=tmp_path / "queries.json")
    (tmp_path / "queries.json").write_text(json.dumps(records))
    assert have_groups(gone, [0, 1], tmp_path / "queries.json")
    assert not have_groups(gone, [0, 1], tmp_path / "queries.json", parse_file="p.conllu")  # no verbs recorded
    committed = breakdown(study, gone, ["full"], metric="r1", queries_file=tmp_path / "queries.json")
    pd.testing.assert_frame_equal(committed.set_index(["direction", "by", "group"]), df)
    study["full"]["ranks"]["search"] = study["full"]["ranks"]["search"][:, :2]
    with pytest.raises(ValueError, match="test queries"):
        breakdown(study, str(tmp_path / "s{seed}"), ["full"])


def test_group_differences_by_hand(tmp_path):
    """Per-category paired differences: the point is the mean of per-split differences within the group."""
    from fraglib.data import Dataset, write_karpathy_json
    from fraglib_study.report.breakdown import group_differences

    images = [
        {"imgid": i, "filename": f"{i}.jpg", "split": "test", "category": c}
        for i, c in enumerate(["dog", "dog", "cat", "cat"])
    ]
    sentences = [{"sentid": i, "imgid": i, "raw": "", "tokens": ["w"]} for i in range(4)]
    for seed in (0, 1):
        write_karpathy_json(Dataset("t", tmp_path, images, sentences), tmp_path / f"s{seed}" / "dataset.json")
    a = {"units": ["0", "1"], "groups": [0, 1], "ranks": {"annotation": np.array([[1, 1, 1, 9], [1, 9, 9, 9]])}}
    b = {"units": ["0", "1"], "groups": [0, 1], "ranks": {"annotation": np.array([[9, 9, 1, 1], [1, 9, 1, 1]])}}
    df = group_differences({"a": a, "b": b}, str(tmp_path / "s{seed}"), [("a", "b")], metric="r1", n_boot=200)
    df = df.set_index("group")
    assert df.loc["dog", "diff"] == pytest.approx(50.0)  # split 0: 100 - 0, split 1: 50 - 50
    assert df.loc["cat", "diff"] == pytest.approx(-75.0)  # split 0: 50 - 100, split 1: 0 - 100
    assert df.loc["cat", "lo"] <= -75.0 <= df.loc["cat", "hi"] and df.loc["dog", "queries"] == 2
    images[3]["category"] = "dog"  # split 1 no longer stratified
    write_karpathy_json(Dataset("t", tmp_path, images, sentences), tmp_path / "s1" / "dataset.json")
    with pytest.raises(ValueError, match="stratified"):
        group_differences({"a": a, "b": b}, str(tmp_path / "s{seed}"), [("a", "b")], metric="r1", n_boot=10)


def test_validation_by_split_by_hand(tmp_path):
    """Best validation R-sum per training run; first runs per split, their mean, all runs, the run gap."""
    from fraglib_study.report.loading import validation_by_split

    rows = {
        "a": [("0", 1, 10.0), ("0", 2, 30.0), ("0r1", 1, 20.0), ("0r1", 2, 25.0), ("1", 1, 50.0), ("1r1", 1, 40.0)],
        "b": [("0", 1, 5.0), ("1", 1, 7.0)],
    }
    for run, hist in rows.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "history.csv").write_text(
            "seed,epoch,val_rsum\n" + "".join(f"{u},{e},{v}\n" for u, e, v in hist)
        )
    t = validation_by_split(tmp_path, ["a", "b"], {"a": "A"})
    assert list(t.index) == ["A", "b"] and list(t.columns[:2]) == ["split 0", "split 1"]
    assert t.loc["A", "split 0"] == 30.0 and t.loc["A", "split 1"] == 50.0 and t.loc["A", "first runs"] == 40.0
    assert t.loc["A", "all runs"] == pytest.approx((30 + 25 + 50 + 40) / 4, abs=0.05)
    assert t.loc["A", "run gap"] == 7.5 and np.isnan(t.loc["b", "run gap"]) and t.loc["b", "first runs"] == 6.0


def test_rerun_agreement_by_hand():
    """The cross-machine check: z = diff / (pooled seed sd * sqrt(2 / n))."""
    from fraglib_study.audit.rerun import agreement

    def run(a1, sd_a1, s1=10.0, sd=1.0):
        flat = {"r1": 50.0, "r5": 70.0, "r10": 80.0}
        return {
            "seeds": [0, 1],
            "annotation": {**flat, "r1": a1},
            "search": {**flat, "r1": s1},
            "annotation_sd": {"r1": sd_a1, "r5": sd, "r10": sd},
            "search_sd": {"r1": sd, "r5": sd, "r10": sd},
        }

    ref = {"a": run(40.0, 3.0), "b": run(30.0, 4.0)}
    new = {"a": run(43.0, 3.0), "b": run(30.0, 4.0), "c": run(1.0, 1.0)}  # c: not in the reference
    rows = {(r["run"], r["direction"], r["metric"]): r for r in agreement(ref, new)}
    assert len(rows) == 12
    pooled = ((9 + 16) / 2) ** 0.5  # RMS of the two runs' sd
    assert rows["a", "annotation", "r1"]["z"] == pytest.approx(3.0 / (pooled * (2 / 2) ** 0.5))
    assert rows["a", "annotation", "r1"]["ok"] and rows["b", "annotation", "r1"]["z"] == 0
    rows = agreement(ref, {**new, "a": run(52.0, 3.0)})
    bad = [r for r in rows if not r["ok"]]
    assert [(r["run"], r["metric"]) for r in bad] == [("a", "r1")] and bad[0]["z"] == pytest.approx(12 / pooled)
    with pytest.raises(ValueError, match="no run is in both"):
        agreement(ref, {"z": run(1.0, 1.0)})
    one = lambda a1: {**run(a1, 0.0), "seeds": [0]}  # noqa: E731  one training run: sd 0
    twice = lambda a1: {**run(a1, 3.0), "seeds": [0], "units": ["0", "0r1"]}  # noqa: E731  seed 0 and its replicate
    rows = {
        (r["run"], r["direction"], r["metric"]): r
        for r in agreement({"a": twice(40.0), "o": one(20.0)}, {"a": twice(40.0), "o": one(23.0)})
    }
    assert rows["o", "annotation", "r1"]["pooled_sd"] == 3.0  # the one-run sd (0) is not pooled
    assert rows["o", "annotation", "r1"]["z"] == pytest.approx(3.0 / (3.0 * 2**0.5))  # n = 1 training run


def test_verb_groups_by_hand():
    from fraglib.text.parse import Token
    from fraglib_study.report.breakdown import groups_of, has_verb, verb_groups

    tok = lambda upos, xpos: Token(1, "w", "_", upos, xpos, 0, "root")  # noqa: E731
    assert has_verb([tok("_", "NN"), tok("_", "VBG")]) and has_verb([tok("VERB", "_")]) and has_verb([tok("AUX", "_")])
    assert not has_verb([tok("_", "NN"), tok("_", "IN")]) and not has_verb([tok("NOUN", "NN")])

    has_verb = np.array([1, 1, 1, 0, 0, 0, 0, 1, 1, 0], bool)
    image = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    got = verb_groups(has_verb, image).tolist()
    record = {"category": ["a", "b", "c"], "image": image.tolist(), "length": [9] * 10, "verb": has_verb.tolist()}
    assert groups_of(record)["similarity_verb"].tolist() == got  # the committed record's verbs: the same split
    assert groups_of(record)["search_category"].tolist() == ["a"] * 4 + ["b"] * 4 + ["c"] * 2
    assert got == ["verb, like the others"] * 3 + ["no verb, unlike the others"] + ["no verb, like the others"] * 3 + [
        "verb, unlike the others"
    ] + ["verb, unlike the others", "no verb, unlike the others"]


def test_socher_tables_by_hand():
    """Socher et al.'s tables as the index and the results notebook show them (one builder): ours with the CIs
    the notebook asks for, the paper's in brackets; a row whose run is not here is left out."""
    from fraglib_study.report.tables import html, socher

    study = {
        "a": {
            "groups": [0, 1],
            "seeds": [0, 1],
            "ranks": {"search": np.array([[1, 3], [2, 2]]), "annotation": np.array([[4], [6]])},
        }
    }
    params = {"results_report": {"socher_tables": {"margin": {"bow": "a", "dt_rnn": "b"}}}}
    t1, t3 = (b for b in socher(study, params, n_boot=50) if not isinstance(b, str))
    assert t1.header == ("paper row", "run", "sentence similarity", "image search", "describing images")
    assert [r[:2] for r in t1.rows] == [("bow", "`a`")]  # dt_rnn's run b is not here: named under the table
    assert "Not run here: dt_rnn (`b`)." in socher(study, params)
    assert t1.rows[0][2] == "— (11.8)"  # a ranked no sentence against sentences
    assert t1.rows[0][3].startswith("2.0 [") and t1.rows[0][3].endswith("] (14.6)")
    # one query per split: the CI comes from resampling the two splits (mean ranks 4 and 6)
    assert t1.rows[0][4] == "5.0 [4.0, 6.0] (21.1)"
    assert t3.header[2] == "image search R@1" and t3.rows[0][2].startswith("25.0 [")  # R@1 per split: 50 and 0
    assert t3.rows[0][2].endswith("] (15.8)")
    page = socher(study, params)  # the index: no CIs
    assert page[1].rows[0][4] == "5.0 (21.1)" and "Table 1" in page[0]
    alone = socher(study, params, paper=False)  # another dataset: ours alone
    assert alone[1].rows[0][4] == "5.0" and "(paper)" not in alone[0]
    assert "<td>5.0 (21.1)</td>" in html(page) and page[1]._repr_html_() == html([page[1]])


def test_study_keeps_sentence_similarity_ranks(tiny_study):
    from fraglib_study.report.loading import load_run
    from fraglib_study.report.uncertainty import paired_differences

    runs = {r: load_run(tiny_study / r) for r in ("dtrnn", "random", "full")}
    assert "similarity" in runs["dtrnn"]["ranks"] and "similarity" in runs["random"]["ranks"]
    assert "similarity" not in runs["full"]["ranks"]  # the fragment model has no sentence space
    d = paired_differences(runs, [("dtrnn", "random"), ("full", "random")], ("similarity",), ("mean_rank",), n_boot=20)
    assert d.run.tolist() == ["dtrnn"] and d.metric.tolist() == ["mean rank"]


def test_relation_norms_of_a_trained_sdtrnn(tiny_full, tiny_study, tmp_path):
    import torch

    from fraglib.run.checkpoint import load_system
    from fraglib.run.train import resolve_run, train
    from fraglib_study.report.figure_data import relation_norms

    from conftest import tiny_params

    spec = resolve_run(tiny_params(r={"system": "socher", "encoder": "sdtrnn"}), "r", extra={"epochs": 1})
    train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=torch.device("cpu"), progress=False)
    df = relation_norms([tmp_path], [tiny_full])
    system, ck = load_system(tmp_path / "best.pt")
    want = dict(zip(ck["info"]["relations"], system.W.detach().flatten(1).norm(dim=1).tolist()))
    assert df.norm.is_monotonic_decreasing and len(df) == len(want)
    assert all(abs(n - want[r]) < 1e-6 for r, n in zip(df.relation, df.norm))
    assert df.loc[df.relation == "root", "train_edges"].item() > 0
    with pytest.raises(ValueError, match="not an SDT-RNN"):
        relation_norms([tiny_study / "dtrnn" / "seeds" / "seed0"], [tiny_full])


def test_run_names_skip_runs_whose_ranks_are_not_here(tmp_path):
    from fraglib_study.report.loading import run_names

    params = {"runs": {"a": {}, "b": {}, "c": {}}}
    for r in ("a", "b"):
        (tmp_path / r).mkdir()
        (tmp_path / r / "metrics.json").write_text("{}")
    (tmp_path / "a" / "seeds").mkdir()  # b: metrics from git, ranks never checked out
    assert run_names(params) == ["a", "b", "c"] and run_names(params, tmp_path) == ["a"]
    params["runs"]["t"] = {"system": "stt", "images": "none"}  # text only: no retrieval to report
    assert run_names(params) == ["a", "b", "c"]


def test_vsepp_median_and_peri_table():
    """The VSE++ median per seed in the results table, and Peri's rows in their own table."""
    from fraglib_study.report.printed import peri_published_table
    from fraglib_study.report.tables import retrieval

    ranks = np.array([[1, 2, 3, 4], [2, 2, 5, 9]])  # VSE++ medians: floor(1.5)+1 = 2, floor(2.5)+1 = 3
    run = {"groups": [0, 1], "seeds": [0, 1], "system": "vse", "ranks": {"annotation": ranks, "search": ranks}}
    table = retrieval({"x": run}, {}, ("median_rank_vsepp",), n_boot=20, sort=False)
    assert table.header[-1] == "search median rank (VSE++)"
    assert table.rows[0][-1].startswith("2.5 ± 0.7 [")  # mean of (2, 3), sd with ddof=1
    t = peri_published_table()
    assert t.loc["mscoco_5k_test: vse_baseline_1024", ("annotation", "R@1")] == 55.5
    assert t.loc["flickr30k_1k_test: stt_att_1024", ("search", "mean rank")] == 18.3


def test_index_shows_growth_and_coco_benchmarks(tmp_path, monkeypatch):
    from fraglib_study.pages.index import build

    e = lambda name, v, scale, images: {
        "name": name,
        "value": v,
        "unit": "s",
        "scale": scale,
        "images": images,  # noqa: E731
        "peak_rss_mb": 100 * scale,
        "machine": "m",
        "threads": "1",
    }
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "results.json").write_text(
        json.dumps(
            [
                e("growth_features_x1_s", 3.0, 1, 1000),
                e("growth_features_x4_s", 12.5, 4, 4000),
                e("growth_epoch_full_x1_s", 1.0, 1, 1000),
                {**e("growth_epoch_full_random_x1_s", 2.0, 1, 1000), "machine": "n"},
                {**e("growth_epoch_full_random_x4_s", 8.0, 4, 4000), "machine": "o"},  # another machine: its own line
                {"name": "coco5k_scores_vse_s", "value": 7.1, "unit": "s", "peak_rss_mb": 972, "measured_tiles": "7/7"},
                {
                    "name": "coco5k_scores_vse_s_cuda",
                    "value": 0.8,
                    "unit": "s",
                    "peak_gpu_mb": 385,
                    "device": "cuda:0 G",
                },
                {"name": "coco5k_scores_kcca_s", "value": 6.2, "unit": "s", "peak_rss_mb": 9, "measured_tiles": "7/7"},
                {"name": "coco5k_gpu", "value": None, "unit": "s", "note": "not measured: run coco_eval"},
            ]
        )
    )
    monkeypatch.chdir(tmp_path)
    page = build(tmp_path / "reports" / "index.html").read_text()
    assert "Growth with data size" in page and "12.5 s, 400 MB" in page and "data:image/png;base64," in page
    assert "<td>epoch_full</td><td>1.0 s, 100 MB</td><td>—</td>" in page  # a missing scale is a dash
    assert "<td>features</td><td>3.0 s, 100 MB</td><td>12.5 s, 400 MB</td><td>1.03</td><td>m, 1</td>" in page
    assert "<td>epoch_full_random</td><td>2.0 s, 100 MB</td><td>—</td><td>—</td><td>n, 1</td>" in page
    assert "<td>epoch_full_random</td><td>—</td><td>8.0 s, 400 MB</td><td>—</td><td>o, 1</td>" in page
    # the GPU figure sits in its CPU row; a system without one gets dashes; the "how to measure" row is moot
    assert (
        "<td>coco5k_scores_vse_s</td><td>7.1</td><td>972 MB</td><td>7/7 sentence tiles</td><td>0.8</td><td>385 MB</td>"
    ) in page
    assert (
        "<td>coco5k_scores_kcca_s</td><td>6.2</td><td>9 MB</td><td>7/7 sentence tiles</td><td>—</td><td>—</td>" in page
    )
    assert "coco5k_scores_vse_s_cuda" not in page and "run coco_eval" not in page and "GPU: cuda:0 G" in page


def test_split_differences_by_hand():
    """Per-split R@1 differences 2, 4, 6 -> mean 4, sd 2, t(0.975, 2) = 4.303: 4 ± 4.303 · 2 / √3 (a
    split's replicates are averaged before the difference)."""
    from fraglib_study.report.uncertainty import split_differences, t975

    def run(r1s):
        return {"per_seed": {str(i): {d: {"r1": v} for d in ("annotation", "search")} for i, v in enumerate(r1s)}}

    b = run([10, 12, 10])
    b["per_seed"]["1r1"] = {d: {"r1": 8} for d in ("annotation", "search")}  # split 1's replicate: 12 and 8 average 10
    out = split_differences({"a": run([12, 14, 16, 99]), "b": b}, [("a", "b")], metrics=("r1",))
    row = out[out.direction == "search"].iloc[0]
    half = 4.303 * 2 / np.sqrt(3)
    assert row.n_seeds == 3 and row["diff"] == pytest.approx(4.0)  # seed 3 only in a: left out
    assert (row.lo, row.hi) == (pytest.approx(4 - half), pytest.approx(4 + half)) and not row.excludes_zero  # 4 < 4.97
    assert t975(4) == 2.776 and t975(100) == 1.96
    with pytest.raises(ValueError, match="a t interval needs two"):
        split_differences({"a": run([1]), "b": run([1])}, [("a", "b")])


def test_rerun_reads_committed_runs_from_any_folder_and_names_damage(tmp_path, monkeypatch, capsys):
    """``fraglib_study.audit.rerun`` with an absolute path or from a subfolder finds the committed summaries (once: "no
    metrics at git HEAD"); a damaged ``metrics.json`` is named, not a traceback."""
    import shutil

    from fraglib_study.audit.rerun import main, read_runs

    committed = read_runs(ROOT / "runs" / "synthetic", "HEAD")  # absolute path
    assert "full" in committed and len(committed["full"]["seeds"]) >= 1
    monkeypatch.chdir(ROOT / "runs")
    assert read_runs("synthetic", "HEAD").keys() == committed.keys()  # from a subfolder
    copy = tmp_path / "runs"
    shutil.copytree(ROOT / "runs" / "synthetic" / "full", copy / "full", ignore=shutil.ignore_patterns("seeds"))
    (copy / "full" / "metrics.json").write_text('{"annotation": {"r1": 3')
    with pytest.raises(SystemExit):
        main([str(copy), "--reference-dir", str(ROOT / "runs" / "synthetic")])
    assert (
        f"{copy / 'full' / 'metrics.json'}: not a run summary fraglib_study.experiments.study writes (damaged?"
        in capsys.readouterr().err
    )
    with pytest.raises(ValueError, match="not inside a git repository"):
        read_runs(copy, "HEAD")


def test_results_page_is_generated_from_the_committed_summaries():
    """docs/results.md holds no hand-typed number: it equals what the committed summaries give, its rows
    read their metrics.json, and the verdict says that no confirmation on unseen partitions is part of the study."""
    from fraglib_study.pages.summary import results_markdown
    from fraglib_study.report.tables import UNCONFIRMED

    page = (ROOT / "docs" / "results.md").read_text()
    assert page == results_markdown(ROOT), "docs/results.md is stale: run python -m fraglib_study summary"
    m = json.loads((ROOT / "runs" / "pascal1k" / "fr_lr01" / "metrics.json").read_text())
    pascal = page[page.index("## Pascal1K") :]  # other studies have fr_lr01 too
    row = next(line for line in pascal.splitlines() if line.startswith("| `fr_lr01`"))
    assert re.search(rf"\| {m['annotation']['r1']:.1f} ± {m['annotation_sd']['r1']:.1f} \|", row)
    assert f"{m['search']['mean_rank']:.1f} ± {m['search_sd']['mean_rank']:.1f} |" in row
    assert UNCONFIRMED in page and "[−" not in page  # no quoted CI of a check not computed here


def test_the_readme_verdict_matches_the_committed_runs():
    """docs/findings.md states the fight's five-split annotation lead: its number is the committed runs' difference; the index
    and docs/results.md say that no confirmation on unseen partitions is part of the study yet."""
    import yaml

    from fraglib_study.report.tables import UNCONFIRMED, verdict_pair

    pair = verdict_pair(yaml.safe_load((ROOT / "params.yaml").read_text()))
    best, base = (json.loads((ROOT / "runs" / "pascal1k" / r / "metrics.json").read_text()) for r in pair)
    lead = best["annotation"]["r1"] - base["annotation"]["r1"]
    assert re.search(
        r"annotation\s+\(R@1 " + re.escape(f"{lead:+.1f}") + r"(<!--[^>]*-->)?\s+points",
        (ROOT / "docs" / "findings.md").read_text(),
    )
    for page in ((ROOT / "docs" / "results.md").read_text(), (ROOT / "reports" / "index.html").read_text()):
        assert UNCONFIRMED in page


def test_socher_tables_put_our_runs_beside_the_paper_by_hand():
    """Socher et al.'s Tables 1-3 in docs/results.md and on the index: our mean over the splits beside the
    printed number, one row per paper row whose run is here (hand-made summaries)."""
    from fraglib_study.reference import published
    from fraglib_study.report.tables import socher

    def summary(mr_search, mr_ann, r1=20.0):
        d = lambda mr: {"r1": r1, "r5": 50.0, "r10": 70.0, "mean_rank": mr, "median_rank": 3.0}  # noqa: E731
        return {"search": d(mr_search), "annotation": d(mr_ann)}

    params = {
        "results_report": {
            "socher_tables": {
                "margin": {"dt_rnn": "dtrnn", "sdt_rnn": "sdtrnn", "kcca": "kcca"},
                "squared": {"dt_rnn": "dtrnn_sq"},
            }
        }
    }
    runs = {
        "dtrnn": {**summary(8.24, 8.6), "similarity": {"mean_rank": 7.9}},
        "sdtrnn": summary(8.2, 8.8),
        "dtrnn_sq": summary(45.7, 60.2),
    }  # kcca: not run here -> no row
    lines = markdown(socher(runs, params)).splitlines()
    paper = published()["socher2014_dtrnn"]
    t1 = next(x for x in lines if x.startswith("| dt_rnn | `dtrnn`"))
    assert (
        t1
        == f"| dt_rnn | `dtrnn` | 7.9 ({paper['pascal1k_mean_rank']['sentence_similarity']['dt_rnn']:g}) | 8.2 (13.6) | 8.6 (19.2) |"
    )
    assert next(x for x in lines if x.startswith("| sdt_rnn | `sdtrnn`")).split(" | ")[2] == "— (10.5)"  # no similarity
    assert "| dt_rnn | `dtrnn_sq` | 45.7 (13.3) | 60.2 (26.8) |" in lines
    assert not any("`kcca`" in x for x in lines if x.startswith("|"))  # no row: named as not run
    assert "Not run here: kcca (`kcca`)." in lines
    t3 = [x for x in lines if x.startswith("| sdt_rnn | `sdtrnn`")][-1]  # Table 3: R@1, R@5, R@10, mean rank per task
    assert t3 == (
        "| sdt_rnn | `sdtrnn` | 20.0 (16.4) | 50.0 (46.6) | 70.0 (65.6) | 8.2 (12.5) "
        "| 20.0 (23) | 50.0 (45) | 70.0 (63) | 8.8 (16.9) |"
    )
    assert socher({}, params) == []


def test_the_index_findings_are_read_from_the_committed_results(monkeypatch):
    """Each report's one-line finding on the index comes from files in git: the fight's difference equals
    the committed summaries', a results page's finding counts its runs (the best of each protocol: the index's
    first table, tests/test_index_best.py)."""
    from fraglib_study.pages.index import finding
    from fraglib_study.params import read_params
    from fraglib_study.report.registry import studies
    from fraglib_study.report.tables import verdict_pair

    monkeypatch.chdir(ROOT)
    params = read_params(ROOT / "params.yaml")
    found = {s.name: s for s in studies(ROOT)}
    fight = finding(found["pascal1k"], found["pascal1k"].page("fight_report"), params)
    from fraglib_study.audit.claims import our_difference

    a, b = (ROOT / "runs" / "pascal1k" / r for r in verdict_pair(params))  # the claims' own paired difference
    assert (
        f"five splits: annotation R@1 {our_difference(a, b, 'annotation', 'r1', train_var=1.0)['diff']:+.1f}" in fight
    )
    # a page's finding counts the runs that page shows: the extended page both studies' runs, no fusion run
    from fraglib_study.report.loading import run_folders

    for name, folders in (
        ("synthetic", ["runs/synthetic"]),
        ("synthetic_extended", ["runs/synthetic", "runs/synthetic_extended"]),
        ("pascal1k", ["runs/pascal1k"]),
    ):
        shown = [r for r in run_folders(params, folders) if (params["runs"].get(r) or {}).get("images") != "none"]
        line = finding(found[name], found[name].page("results_report"), params)
        assert line.startswith(f"{len(shown)} runs (the best per direction") and "fuse_" not in line, line


def test_peri_table_puts_our_runs_beside_the_thesis_by_hand():
    from fraglib_study.reference import published
    from fraglib_study.report.tables import peri

    m = lambda r1: {"r1": r1, "r5": 50.0, "r10": 70.0, "mean_rank": 9.0, "median_rank": 3.0}  # noqa: E731
    params = {"results_report": {"peri": {"thesis_rows": {"stt_att": "stt_att_1024", "stt": "stt_1024"}}}}
    lines = markdown(
        peri(
            {"stt_att": {"annotation": m(26.5), "search": m(2.7)}, "full": {"annotation": m(1), "search": m(1)}}, params
        )
    ).splitlines()
    ref = published()["peri2018_thesis"]["flickr30k_1k_test"]["stt_att_1024"]["t2i"]
    row = next(x for x in lines if x.startswith("| `stt_att`"))
    assert row == (
        "| `stt_att` | stt_att_1024 | 26.5 / 50.0 / 70.0 (59.2 / 83.5 / 91.0) | "
        f"2.7 / 50.0 / 70.0 ({ref['r1']:.1f} / {ref['r5']:.1f} / {ref['r10']:.1f}) |"
    )
    assert not any("`full`" in x or "`stt`" in x for x in lines) and peri({}, params) == []


def _summary(**fields):
    """A run summary holding every key fraglib_study.experiments.study writes (what summary pages check), ``fields`` replacing them
    (a direction's figures are merged into the defaults)."""
    base = {
        "system": "x",
        "seeds": [0],
        **{d: {"r1": 0.0, "r5": 0.0, "r10": 0.0, "mean_rank": 1.0} for d in ("annotation", "search")},
    }
    return {**base, **fields, **{d: {**base[d], **fields.get(d, {})} for d in ("annotation", "search")}}


def test_working_forms_table_by_hand(tmp_path):
    """Before -> after rows: a run is found in the first study folder that has it; CIDEr from captions.json."""
    from fraglib_study.report.tables import working_forms

    def put(study, run, a, s, n, cider=None):
        d = tmp_path / "runs" / study / run
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(
            json.dumps(_summary(annotation={"r1": a}, search={"r1": s}, best_epoch={str(i): 3 for i in range(n)}))
        )
        if cider is not None:
            (d / "captions.json").write_text(json.dumps({"captioning": {"cider": cider}}))

    put("base", "vsepp", 21.4, 3.0, 5)
    put("ext", "vsepp_tuned", 37.4, 26.1, 10)
    put("base", "vsepp_tuned", 1.0, 1.0, 1)  # shadowed: "ext" is looked up first
    put("base", "stt_att", 26.5, 2.7, 2, 0.487)
    put("ext", "stt_att_sum", 43.0, 28.2, 2, 0.351)
    params = {
        "results_report": {
            "peri": {"working_forms": {"vsepp": "vsepp_tuned", "stt_att": "stt_att_sum", "att_top36": "att_tuned"}}
        }
    }
    folders = [tmp_path / "runs" / "ext", tmp_path / "runs" / "base"]
    lines = markdown(working_forms(folders, params)).splitlines()
    assert "| `vsepp` → `vsepp_tuned` | 5 → 10 | 21.4 → 37.4 | 3.0 → 26.1 | — → — |" in lines
    assert "| `stt_att` → `stt_att_sum` | 2 → 2 | 26.5 → 43.0 | 2.7 → 28.2 | 48.7 → 35.1 |" in lines
    assert not any("att_top36" in x for x in lines)  # neither run exists
    assert working_forms(folders, {}) == []


def test_peri_caption_table_by_hand(tmp_path):
    """Our captions beside the thesis's Flickr30K row of the same decoder; text-only runs are left out."""
    from fraglib_study.report.tables import peri_captions

    def put(run, **tasks):
        d = tmp_path / "runs" / "p" / run
        d.mkdir(parents=True)
        (d / "captions.json").write_text(json.dumps(tasks))

    put("stt", captioning={"bleu4": 0.136, "meteor": 0.146, "cider": 0.421})
    put("stt_att", paraphrasing={"bleu4": 0.129, "meteor": 0.135, "cider": 0.364})
    put("stt_text", paraphrasing={"bleu4": 0.5, "meteor": 0.5, "cider": 0.5})
    params = {
        "runs": {
            "stt": {"system": "stt"},
            "stt_att": {"system": "stt", "similarity": "attention"},
            "stt_text": {"system": "stt", "images": "none"},
        }
    }
    lines = markdown(peri_captions(tmp_path / "runs" / "p", params)).splitlines()
    # thesis, Flickr30K: STT captioning B-4 .129, METEOR .178, CIDEr .252; STT-ATT paraphrasing .252 / .221 / .573
    assert "| `stt` | captioning | stt_1024 | 13.6 (12.9) | 14.6 (17.8) | 42.1 (25.2) |" in lines
    assert "| `stt_att` | paraphrasing | stt_att_1024 | 12.9 (25.2) | 13.5 (22.1) | 36.4 (57.3) |" in lines
    assert not any("stt_text" in x for x in lines)
    assert peri_captions(tmp_path / "runs" / "none", params) == []


def test_per_unit_coverage_names_runs_without_their_ranks(tmp_path):
    from fraglib_study.report.tables import coverage

    for run, units, have in (("a", ["0", "0r1"], ["0", "0r1"]), ("b", ["0", "1"], ["0"])):
        d = tmp_path / "runs" / "s" / run
        d.mkdir(parents=True)
        (d / "metrics.json").write_text(json.dumps(_summary(annotation={"r1": 1.0}, units=units)))
        for u in have:
            (d / "seeds" / f"seed{u}").mkdir(parents=True)
            (d / "seeds" / f"seed{u}" / "ranks.json").write_text("{}")
    assert coverage(tmp_path / "runs" / "s") == [
        "Per-query results of every training run are here for 1 of 2 runs; summaries only: `b`."
    ]
    assert coverage(tmp_path / "runs" / "none") == []


def test_hubness_table_and_index_line_by_hand():
    """docs/results.md's hubness rows and the index's hubness clause read metrics.json's ``hubness`` as written."""
    from fraglib_study.pages.index import hubness_line
    from fraglib_study.report.tables import hubness

    def run(skew_a, skew_s, r1, is_r1, csls_r1):
        corr = lambda v: {d: {"r1": v, "param": 1.0} for d in ("annotation", "search")}  # noqa: E731
        return _summary(
            annotation={"r1": r1},
            search={"r1": r1},
            hubness={
                "k": 10.0,
                "annotation": {"skewness": skew_a, "never": 40.0},
                "search": {"skewness": skew_s, "never": 2.0},
                "inverted_softmax_inductive": corr(is_r1),
                "csls_inductive": corr(csls_r1),
            },
        )

    runs = {
        "a": run(0.5, 0.4, 20.0, 25.0, 19.0),
        "b": run(3.0, 1.0, 10.0, 12.0, 12.0),
        "c": {"annotation": {}, "search": {}},
    }
    lines = markdown(hubness(runs, {"a": "Run A"})).splitlines()
    assert lines[0].startswith("Hubness of the test scores (k = 10;")
    rows = [x for x in lines if x.startswith("| `")]
    assert rows == [
        "| `b` — b | 3.00 | 40.0 | 1.00 | 2.0 | 10.0 / 12.0 / 12.0 | 10.0 / 12.0 / 12.0 |",
        "| `a` — Run A | 0.50 | 40.0 | 0.40 | 2.0 | 20.0 / 25.0 / 19.0 | 20.0 / 25.0 / 19.0 |",
    ]
    assert hubness({"c": runs["c"]}, {}) == []
    assert hubness_line(runs) == (
        "; hubness: largest k-occurrence skew 3.0 (b, annotation); inductive inverted softmax / "
        "CSLS raise R@1 in 4 / 2 of 4 run-directions"
    )


def r1_run(folder: Path, name: str, r1: dict[str, float], corrected: dict[str, float] | None = None, **summary) -> Path:
    """Run ``name`` of ``folder`` with one training run on 200 queries per direction whose R@1 is ``r1[d]`` (the
    first 2·r1 queries at rank 1, the rest at 10), and with ``corrected`` its inductive inverted softmax's R@1."""
    from fraglib.metrics.retrieval import recall_table

    def ranks(x: float) -> list[int]:
        return [1] * round(2 * x) + [10] * (200 - round(2 * x))

    unit = {d: recall_table(np.asarray(ranks(v))) for d, v in r1.items()}
    run = folder / name
    (run / "seeds" / "seed0").mkdir(parents=True)
    per = {d: ranks(v) for d, v in r1.items()}
    if corrected:
        per["hubness"] = {
            "corrected": {"inverted_softmax_inductive": {d: ranks(v) for d, v in corrected.items()}},
            "occurrence": {d: [5] * 200 for d in corrected},
        }
    (run / "seeds" / "seed0" / "ranks.json").write_text(json.dumps(per))
    meta = {"run": name, "system": "x", "seeds": [0], "per_seed": {"0": unit}, **unit, **summary}
    (run / "metrics.json").write_text(json.dumps(meta))
    return run


def test_fight_baselines_table_by_hand(tmp_path):
    """docs/results.md's fight table: the ladder's last run minus each baseline present, in the baselines' order,
    paired by training run, plain and under the inductive inverted softmax (— where a run measured no hubness)."""
    from fraglib_study.report.tables import fight_baselines

    params = {"results_report": {"fight": {"ladder": ["old", "best"], "baselines": ["k", "missing", "d"]}}}
    r1_run(tmp_path, "best", {"annotation": 40.0, "search": 30.0}, {"annotation": 45.0, "search": 33.0})
    r1_run(tmp_path, "k", {"annotation": 15.0, "search": 34.0}, {"annotation": 47.5, "search": 30.0})
    r1_run(tmp_path, "d", {"annotation": 36.0, "search": 30.5})
    lines = markdown(fight_baselines(tmp_path, params, {"k": "kCCA"})).splitlines()
    rows = [x for x in lines if x.startswith("| `")]
    assert rows == ["| `k` — kCCA | +25.0 | -4.0 | -2.5 | +3.0 |", "| `d` — d | +4.0 | -0.5 | — | — |"]
    assert fight_baselines(tmp_path, {}, {}) == []
    assert fight_baselines(tmp_path / "k", params, {}) == []  # no best recipe there
    assert "on the five splits" in lines[0] and "paired by training run" in lines[0]
    assert "on the ten folds" in markdown(fight_baselines(tmp_path, params, {}, "ten folds"))
    r1_run(tmp_path, "gpo", {"annotation": 41.0, "search": 29.0})  # a run after the papers: a row after the baselines
    params["results_report"]["fight"]["after"] = ["gpo", "not_trained"]
    rows = [x for x in markdown(fight_baselines(tmp_path, params, {})).splitlines() if x.startswith("| `")]
    assert rows[-1] == "| `gpo` — gpo | -1.0 | +1.0 | — | — |" and len(rows) == 3


def test_the_verdict_states_the_folds_where_they_hold_the_pair(tmp_path):
    """The verdict line: the five splits' paired difference, then the ten folds' where both runs are on them."""
    from fraglib_study.report.tables import verdict

    pair, splits, folds = ("best", "d"), tmp_path / "splits", tmp_path / "folds"
    r1_run(splits, "best", {"annotation": 40.0, "search": 30.0})
    r1_run(splits, "d", {"annotation": 36.0, "search": 30.5})
    plain = markdown(verdict(splits, pair, "fight.html"))
    assert "annotation +4.0, image search -0.5" in plain and "On the" not in plain
    r1_run(folds, "best", {"annotation": 30.0, "search": 29.0}, folds=10, replicates=2)
    r1_run(folds, "d", {"annotation": 31.5, "search": 27.0}, folds=10)
    on_folds = markdown(verdict(splits, pair, "fight.html", folds))
    assert (
        "On the 10 folds (every image tested once, each run trained once or twice per fold; paired by training run): "
        "annotation -1.5, image search +2.0" in on_folds
    )
    assert verdict(tmp_path / "nothing", pair, "fight.html") == []


def test_markdown_and_html_render_one_table_with_the_same_cells():
    """A table is built once (fraglib_study.report.tables.retrieval): docs/results.md's Markdown and the index's HTML are two
    renderings of it, cell for cell; the committed pages carry the same retrieval table of each study."""
    from fraglib_study.report.tables import html, retrieval

    runs = {
        "a": _summary(
            system="fragment",
            annotation={"r1": 12.345, "r10": 50.0, "mean_rank": 7.25},
            search={"r1": 3.0},
            units=["0", "0r1"],
            annotation_sd={"r1": 0.5, "r10": 1.0, "mean_rank": 0.25},
        ),
        "b": _summary(system="devise", annotation={"r1": 40.0}, search={"r1": 1.0}),
    }
    t = retrieval(runs, {"a": "Run <A>"})
    assert t.rows[0][:3] == ("`b` — b", "devise", "1") and t.rows[1][3] == "12.3 ± 0.5"
    md = [[c.strip() for c in line.strip("|").split("|")] for line in markdown([t]).splitlines()[2:]]
    page = html([t])
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", page)[1:]]
    assert md == [list(r) for r in t.rows]
    assert cells == [
        [
            c.replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace("`b`", "<code>b</code>")
            .replace("`a`", "<code>a</code>")
            for c in r
        ]
        for r in t.rows
    ]

    def numbers(text: str) -> list[str]:
        return re.findall(r"\d+\.\d", re.sub(r"<[^>]+>", " ", text))

    results = (ROOT / "docs" / "results.md").read_text()
    index = (ROOT / "reports" / "index.html").read_text()
    for title in ("Synthetic benchmark", "Pascal1K, five stratified splits"):
        section = results[results.index(f"## {title} (") :]
        table = section[section.index("Retrieval (") :].split("\n\n")[1]
        on_index = index[re.search(rf"<h2[^>]*>{re.escape(title)}</h2>", index).start() :]
        on_index = on_index[on_index.index("<table>") : on_index.index("</table>")]
        assert numbers(table) and numbers(table) == numbers(on_index), title


def test_search_budget_by_hand(tmp_path):
    """Trials, trainings (trials × splits) and core-minutes per system, two tables of one system summed."""
    from fraglib_study.report.loading import search_budget

    def table(name, run, splits, seconds):
        (tmp_path / f"{name}.csv").write_text("lr,val_rsum_best,seconds\n" + "".join(f"0.1,1.0,{s}\n" for s in seconds))
        (tmp_path / f"{name}.json").write_text(json.dumps({"run": run, "splits": splits}))
        return tmp_path / f"{name}.csv"

    params = {"runs": {"vse0": {"system": "vse"}, "att": {"system": "vse"}, "devise": {"system": "devise"}}}
    got = search_budget(
        [
            table("a", "vse0", [0, 1], [60, 120]),
            table("b", "att", [2, 3, 4], [30]),
            table("c", "devise", [0, 1], [600]),
            tmp_path / "absent.csv",
        ],
        params,
    )
    assert got.to_dict("records") == [
        {"system": "vse", "tables": 2, "trials": 3, "trainings": 2 * 2 + 1 * 3, "core_minutes": 3.5},
        {"system": "devise", "tables": 1, "trials": 1, "trainings": 2, "core_minutes": 10.0},
    ]


# ----------------------------------------------------------------------------- damaged or foreign inputs, named
def _fake_run(run_dir, units=("0", "0r1"), n_images=20, seed=0):
    """A run folder as fraglib_study.experiments.study writes it (metrics.json whose per_seed figures are its ranks.json's),
    with random ranks of ``n_images`` test images and 5 sentences each."""
    from fraglib.metrics.retrieval import recall_table

    rng = np.random.default_rng(seed)
    per_seed = {}
    for u in units:
        ranks = {
            "annotation": rng.integers(1, 30, n_images).tolist(),
            "search": rng.integers(1, 30, 5 * n_images).tolist(),
        }
        (run_dir / "seeds" / f"seed{u}").mkdir(parents=True)
        (run_dir / "seeds" / f"seed{u}" / "ranks.json").write_text(json.dumps(ranks) + "\n")
        per_seed[u] = {d: recall_table(np.asarray(ranks[d])) for d in ranks}
    mean = {
        d: {k: float(np.mean([p[d][k] for p in per_seed.values()])) for k in per_seed[units[0]][d]}
        for d in ("annotation", "search")
    }
    metrics = {
        "run": run_dir.name,
        "system": "fragment",
        "seeds": sorted({int(u.split("r")[0]) for u in units}),
        "units": list(units),
        "groups": [int(u.split("r")[0]) for u in units],
        "per_seed": per_seed,
        **mean,
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    return run_dir


def test_load_run_names_a_cut_or_foreign_ranks_file(tmp_path):
    from fraglib_study.report.loading import load_run

    run = _fake_run(tmp_path / "runs" / "x")
    assert load_run(run)["ranks"]["annotation"].shape == (2, 20)
    f = run / "seeds" / "seed0r1" / "ranks.json"
    good = json.loads(f.read_text())
    f.write_text(json.dumps({**good, "annotation": good["annotation"][:-1]}))  # one image short
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(f))}: 19 annotation ranks whose .* are not the run's "
        r"metrics.json figures for this training run .*: not the ranks of its test images",
    ):
        load_run(run)
    one = _fake_run(tmp_path / "runs" / "one", units=("0",), seed=1)  # nothing to compare lengths with
    g = one / "seeds" / "seed0" / "ranks.json"
    g.write_text(json.dumps({**json.loads(g.read_text()), "search": good["search"]}))  # another run's ranks
    with pytest.raises(ValueError, match=rf"^{re.escape(str(g))}: 100 search ranks whose"):
        load_run(one)
    g.write_text(g.read_text()[:50])  # cut mid-write
    with pytest.raises(ValueError, match=rf"^{re.escape(str(g))}: not valid JSON \(.*\): the file is cut or damaged"):
        load_run(one)


def test_load_run_names_a_damaged_summary(tmp_path):
    from fraglib_study.report.loading import load_run

    run = _fake_run(tmp_path / "x")
    m = run / "metrics.json"
    text = m.read_text()
    m.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(m))}: not valid JSON"):
        load_run(run)
    m.write_text(json.dumps({"seeds": [0], "annotation": {"r1": 3}}))
    with pytest.raises(
        ValueError,
        match=rf"^{re.escape(str(m))}: not a run summary fraglib_study.experiments.study writes: it lacks "
        r"system, search, annotation.r5, annotation.r10, annotation.mean_rank; restore it",
    ):
        load_run(run)


def _results_root(tmp_path):
    """A project root for fraglib_study.pages.summary: the committed params.yaml and dvc.yaml files, two runs of the synthetic
    study."""
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    _pipelines(tmp_path)
    for i, r in enumerate(("full", "devise")):
        _fake_run(tmp_path / "runs" / "synthetic" / r, seed=i)
    return tmp_path


def test_summary_names_a_summary_that_is_not_one_instead_of_leaving_the_run_out(tmp_path, monkeypatch, capsys):
    from fraglib_study.pages.summary import main

    monkeypatch.chdir(_results_root(tmp_path))
    empty = Path("runs/synthetic/empty/metrics.json")
    empty.parent.mkdir()
    empty.write_text("{}\n")
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2 and not Path("docs/results.md").exists()
    assert (
        f"{empty}: not a run summary fraglib_study.experiments.study writes: it lacks system, seeds, annotation, search; restore it"
        in capsys.readouterr().err
    )
    empty.write_text('{"annotation": {"r1": 3')  # cut
    with pytest.raises(SystemExit) as e:
        main(["--check"])
    assert e.value.code == 2 and f"{empty}: not valid JSON (Expecting" in capsys.readouterr().err


def test_summary_replaces_only_a_page_it_wrote(tmp_path, monkeypatch, capsys):
    from fraglib_study.pages.summary import GENERATED, main

    monkeypatch.chdir(_results_root(tmp_path))
    Path("README.md").write_text("# my project\n")
    with pytest.raises(SystemExit) as e:
        main(["--out", "README.md"])
    assert e.value.code == 2 and Path("README.md").read_text() == "# my project\n"
    assert (
        "--out README.md: refusing to replace a file fraglib_study.pages.summary did not write"
        in capsys.readouterr().err
    )
    main([])  # docs/results.md: new, then regenerated
    main([])
    assert GENERATED in Path("docs/results.md").read_text()
    main(["--out", "README.md", "--overwrite"])
    assert Path("README.md").read_text() == Path("docs/results.md").read_text()


@pytest.fixture
def full_disk(monkeypatch):
    """Every Path.write_text / write_bytes writes half its data, then fails as a full disk does (ENOSPC)."""
    import errno
    import pathlib

    def cut(write):
        def f(self, data, *args, **kwargs):
            write(self, data[: len(data) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, "No space left on device", str(self))

        return f

    monkeypatch.setattr(pathlib.Path, "write_text", cut(pathlib.Path.write_text))
    monkeypatch.setattr(pathlib.Path, "write_bytes", cut(pathlib.Path.write_bytes))


def test_a_full_disk_leaves_the_results_page_and_the_index_as_they_were(tmp_path, monkeypatch, request, capsys):
    from fraglib_study.pages.index import build
    from fraglib_study.pages.summary import main

    monkeypatch.chdir(_results_root(tmp_path))
    main([])
    build("reports/index.html")
    before = {p: p.read_bytes() for p in (Path("docs/results.md"), Path("reports/index.html"))}
    _fake_run(Path("runs/synthetic/random"), seed=2)  # the new page differs
    request.getfixturevalue("full_disk")
    with pytest.raises(SystemExit) as exc:  # the command: one line naming the file, exit status 1
        main([])
    assert exc.value.code == 1
    assert "docs/results.md: could not write it (No space left on device)" in capsys.readouterr().err
    with pytest.raises(OSError, match="reports/index.html: could not write it .No space left"):
        build("reports/index.html")
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in Path("docs").iterdir()) == ["results.md"]  # no temporary file left


def test_the_index_names_a_damaged_benchmark_register(tmp_path, monkeypatch, capsys):
    from fraglib_study.pages.index import main

    monkeypatch.chdir(tmp_path)
    Path("benchmarks").mkdir()
    Path("benchmarks/results.json").write_text('{"name": "epoch_full"}\n')
    with pytest.raises(SystemExit) as e:
        main(["--out", "index.html"])
    assert e.value.code == 2 and not Path("index.html").exists()
    assert (
        "benchmarks/results.json: not a benchmark register (a JSON dict, not a list of entries)"
        in capsys.readouterr().err
    )


def test_ci_table_keeps_the_metrics_in_the_order_computed():
    """R@1, R@5, R@10 left to right (a pivot alone sorts them as text: R@1, R@10, R@5), each 'diff [lo, hi]'."""
    import pandas as pd

    from fraglib_study.report.uncertainty import ci_table

    rows = [
        {"run": "a", "base": "b", "direction": d, "metric": m, "diff": 1.25, "lo": -0.5, "hi": 3.0}
        for d in ("annotation", "search")
        for m in ("R@1", "R@5", "R@10")
    ]
    t = ci_table(pd.DataFrame(rows))
    assert list(t.columns) == [(d, m) for d in ("annotation", "search") for m in ("R@1", "R@5", "R@10")]
    assert t.loc[("a", "b"), ("search", "R@10")] == "+1.2 [-0.5, +3.0]"


def test_hubness_tables_show_dis_and_nnn_beside_older_runs_without_them(tmp_path):
    """A run with all four corrections beside one written before DIS and NNN: the tables show the new ones (—
    where a run lacks them), the index counts each over the runs that have it, the chosen parameters come out in
    their units, and a run whose training runs disagree on the corrections keeps those all of them have."""
    from fraglib_study.pages.index import hubness_line
    from fraglib_study.report.corrections import correction_parameters
    from fraglib_study.report.loading import load_run
    from fraglib_study.report.tables import hubness

    def corr(v, **extra):
        return {
            d: {"r1": v, "param": 0.5, "val_rsum": 3.0, "val_rsum_uncorrected": 1.0, **extra}
            for d in ("annotation", "search")
        }

    def run(skew, r1, *rs):
        h = {
            "k": 10.0,
            "beta_unit": 2.0,
            "annotation": {"skewness": skew, "never": 4.0},
            "search": {"skewness": 0.1, "never": 0.0},
        }
        for m, v in zip(("inverted_softmax", "csls", "dis", "nnn"), rs):
            h[f"{m}_inductive"] = corr(v, **({"param_k": 10.0} if m == "nnn" else {}))
        return _summary(annotation={"r1": r1}, search={"r1": r1}, hubness=h)

    runs = {"new": run(3.0, 20.0, 25.0, 19.0, 21.0, 22.0), "old": run(1.0, 10.0, 12.0, 9.0)}
    lines = markdown(hubness(runs, {})).splitlines()
    assert "annotation R@1: plain / inv. softmax / CSLS / DIS / NNN" in lines[2]
    assert [x.split(" | ")[-2:] for x in lines if x.startswith("| `")] == [
        ["20.0 / 25.0 / 19.0 / 21.0 / 22.0", "20.0 / 25.0 / 19.0 / 21.0 / 22.0 |"],
        ["10.0 / 12.0 / 9.0 / — / —", "10.0 / 12.0 / 9.0 / — / — |"],
    ]
    assert hubness_line(runs).endswith(
        "inductive inverted softmax / CSLS / DIS / NNN raise R@1 in 4 of 4 / 0 of 4 / 2 of 2 / 2 of 2 run-directions"
    )
    p = correction_parameters(runs, {"old": "Old"})
    assert len(p) == 12 and set(p.run) == {"new", "Old"}
    got = p[p.direction == "search"].set_index(["run", "correction"])
    assert got.loc[("new", "DIS, inductive"), "parameter"] == 1.0  # β x the validation scores' sd
    assert got.loc[("new", "CSLS, inductive"), "parameter"] == 0.5 and got.loc[("new", "NNN, inductive"), "k"] == 10
    assert got["val gain"].eq(2.0).all() and correction_parameters({"c": {}}).empty

    d = tmp_path / "r"
    units = {"0": {"csls_inductive", "nnn_inductive"}, "1": {"csls_inductive"}}
    figures = {d_: {"r1": 50.0, "r5": 100.0, "r10": 100.0, "mean_rank": 1.5} for d_ in ("annotation", "search")}
    (d / "seeds").mkdir(parents=True)
    (d / "metrics.json").write_text(
        json.dumps(_summary(seeds=[0, 1], units=list(units), per_seed={u: figures for u in units}, **figures))
    )
    for u, keys in units.items():
        ranks = {"annotation": [1, 2], "search": [2, 1]}
        corrected = {key: {"annotation": [1, 1], "search": [1, 1]} for key in keys}
        (d / "seeds" / f"seed{u}").mkdir()
        (d / "seeds" / f"seed{u}" / "ranks.json").write_text(
            json.dumps({**ranks, "hubness": {"corrected": corrected, "occurrence": {"annotation": [1], "search": [1]}}})
        )
    assert list(load_run(d)["corrected"]) == ["csls_inductive"]


def test_a_study_scored_on_another_test_split_is_left_out_and_said_so(tmp_path):
    """run_folders over two study folders: runs of the second scored on a test split of another size (not re-run
    since the benchmark grew) are left out, and other_test_sets says which and why; same sizes merge."""
    import json

    from fraglib_study.report.loading import left_out_runs, other_test_sets, run_folders

    def put(folder, run, n):
        seed = tmp_path / folder / run / "seeds" / "seed0"
        seed.mkdir(parents=True)
        (seed.parent.parent / "metrics.json").write_text("{}")
        (seed / "ranks.json").write_text(json.dumps({"annotation": [1] * n, "search": [1] * (5 * n)}))

    params = {"runs": {"full": {"system": "fragment"}, "bow": {"system": "fragment"}}}
    put("new", "full", 500)
    put("old", "bow", 100)
    dirs = [tmp_path / "new", tmp_path / "old"]
    assert run_folders(params, dirs) == {"full": tmp_path / "new" / "full"}
    (why,) = other_test_sets(params, dirs).values()
    assert "scored on 100 test images" in why and "on 500" in why
    put("same", "bow", 500)
    assert run_folders(params, [tmp_path / "new", tmp_path / "same"]) == {
        "full": tmp_path / "new" / "full",
        "bow": tmp_path / "same" / "bow",
    }
    assert other_test_sets(params, [tmp_path / "new", tmp_path / "same"]) == {}
    # a study part re-run: its re-run runs join, the others stay out, named
    params["runs"]["no_mil"] = {"system": "fragment"}
    put("old", "no_mil", 500)
    assert run_folders(params, dirs) == {"full": tmp_path / "new" / "full", "no_mil": tmp_path / "old" / "no_mil"}
    assert left_out_runs(params, dirs) == {str(tmp_path / "old"): ["bow"]}
    (why,) = other_test_sets(params, dirs).values()
    assert "1 run(s)" in why and "(bow)" in why


def test_rerun_compares_the_claims_verdicts_and_one_training_run_of_each(tmp_path, capsys):
    """``fraglib_study.audit.rerun --claims``: the claims both result sets test get a verdict from each; a re-run whose `bow`
    overtakes `full` changes the bag-of-words claims' verdicts, reported and failing; ``--units`` keeps one
    training run per run (a run trained once keeps its one)."""
    from test_claims import put_run

    from fraglib.metrics.retrieval import recall_table
    from fraglib_study.audit.rerun import main, one_unit, verdict_agreement
    from fraglib_study.params import read_params

    params = read_params(ROOT / "params.yaml")
    rng = np.random.default_rng(0)
    good = rng.integers(1, 4, size=(2, 200))
    bad = rng.integers(2, 12, size=(2, 200))  # worse, but far from chance (a side near chance says nothing)

    def study(folder, full, bow):
        for name, r in (("full", full), ("bow", bow)):
            run = put_run(tmp_path / folder / name, {"annotation": r, "search": r}, ["0", "0r1"], [0, 0])
            m = json.loads((run / "metrics.json").read_text())  # the spread fraglib_study.experiments.study adds
            m.update({f"{d}_sd": {k: 1.0 for k in m[d]} for d in ("annotation", "search")})
            (run / "metrics.json").write_text(json.dumps(m))
        return tmp_path / folder

    ref, same, flipped = study("ref", good, bad), study("same", good, bad), study("flip", bad, good)
    rows = verdict_agreement(params, ref, same, "synthetic")
    assert rows and all(r["same"] for r in rows) and {r["claim"] for r in rows} >= {"karpathy_t2_dependencies_vs_bow"}
    flips = verdict_agreement(params, ref, flipped, "synthetic")
    assert flips and not any(r["same"] for r in flips if r["claim"] == "karpathy_t2_dependencies_vs_bow")
    (ref / "full" / "seeds" / "0").mkdir(parents=True, exist_ok=True)
    (ref / "full" / "seeds" / "0" / "timing.json").write_text(json.dumps({"machine": "CPU A"}))
    record = tmp_path / "rerun.json"
    with pytest.raises(SystemExit) as out:
        main(
            [
                str(flipped),
                "--reference-dir",
                str(ref),
                "--params",
                str(ROOT / "params.yaml"),
                "--json",
                str(record),
                "--dataset",
                "synthetic",
            ]
        )  # a folder no study of the project names: its data given
    assert out.value.code == 1 and "VERDICT CHANGED: karpathy_t2_dependencies_vs_bow" in capsys.readouterr().out
    rec = json.loads(record.read_text())  # the comparison as data: every metric, every verdict, the machines
    assert rec["reference_machines"] == ["CPU A"] and rec["new_machines"] == []
    assert rec["metrics_within"] == sum(r["ok"] for r in rec["metrics"]) and len(rec["metrics"]) == 12
    changed = [v for v in rec["verdicts"] if not v["same"]]
    assert rec["verdicts_same"] == len(rec["verdicts"]) - len(changed) and changed
    v = next(v for v in changed if v["claim"] == "karpathy_t2_dependencies_vs_bow")
    assert v["committed_ours"]["diff"] == -v["new_ours"]["diff"] != 0  # the two sides swapped runs
    assert v["committed_ours"]["lo"] <= v["committed_ours"]["diff"] <= v["committed_ours"]["hi"]
    cut = one_unit(ref, "0r1", tmp_path / "cut")
    m = json.loads((cut / "full" / "metrics.json").read_text())
    assert m["units"] == ["0r1"] and (cut / "full" / "seeds" / "seed0r1" / "ranks.json").exists()
    assert m["annotation"] == recall_table(good[1])  # the kept training run's figures, not the mean
    assert not (cut / "full" / "seeds" / "seed0").exists()


def test_index_rehearsal_table_orders_the_pipeline_and_fits_trainings_per_epoch():
    """The rehearsal's table: make → import → parse → fragments, then each run's training and re-scoring, last the
    results page; a stage's
    slope from its seconds, a training's from its seconds per epoch (2 epochs at one size, 1 at the other)."""
    from fraglib_study.pages.index import costs_html

    def e(stage, n, v, **kw):
        return {"name": f"rehearsal_{stage}_n{n}_s", "stage": stage, "images": n, "value": v, "peak_rss_mb": 10,
                "machine": "m", "threads": "1", **kw}  # fmt: skip

    rows = [
        e("fragments", 100, 1.0), e("fragments", 400, 4.0), e("import", 100, 2.0), e("import", 400, 4.0),
        e("train_x", 100, 50.0, epochs=2, epoch_s=20.0, test_r1=[5.0, 4.0]),
        e("train_x", 400, 90.0, epochs=1, epoch_s=80.0, test_r1=[9.5, 7.25], commit="abc1234", date="2026-11-28"),
        e("report", 100, 3.0), e("rescore_x", 100, 1.0), e("make", 100, 1.0),
    ]  # fmt: skip
    html = costs_html(rows)
    order = [html.index(f"<td>{s}</td>") for s in ("make", "import", "fragments", "train_x", "rescore_x", "report")]
    assert order == sorted(order)
    assert "<td>import</td><td>2.0 s, 10 MB</td><td>4.0 s, 10 MB</td><td>0.50</td>" in html  # 2× for 4×: b = 0.5
    assert (
        "<td>train_x</td><td>50.0 s, 10 MB</td><td>90.0 s, 10 MB</td><td>1.00</td><td>80.0 s</td><td>9.5 / 7.25</td>"
        "<td>abc1234, 2026-11-28</td>" in html
    )
    assert "<td>import</td>" in html and html.split("<td>import</td>")[1].split("</tr>")[0].endswith("<td>—</td>")
    assert "100 images: 2, 400 images: 1 epoch(s)" in html


def test_the_index_fight_line_reads_the_folds_first(tmp_path):
    """The fight page's one-line finding on the index: the ten folds' R@1 differences where both runs are on them,
    then the five splits', each paired by training run."""
    from fraglib_study.pages.index import fight_line

    params = {"results_report": {"fight": {"ladder": ["best"], "baselines": ["d"]}}}
    splits, folds = tmp_path / "splits", tmp_path / "folds"
    r1_run(splits, "best", {"annotation": 40.0, "search": 30.0})
    r1_run(splits, "d", {"annotation": 36.0, "search": 30.5})
    r1_run(folds, "best", {"annotation": 30.0, "search": 29.0})
    r1_run(folds, "d", {"annotation": 31.5, "search": 27.0})
    line = fight_line(splits, params, folds)
    assert line.startswith(
        "best − d, ten folds: annotation R@1 -1.5, search +2.0; five splits: annotation R@1 +4.0, search -0.5."
    )
    assert "ten folds" not in fight_line(splits, params) and fight_line(tmp_path / "nothing", params) == ""


def test_lead_summary_counts_and_words_by_hand():
    """The fight's sentences: a CI above zero is a lead, below zero a loss, across zero not distinguishable."""
    import pandas as pd

    from fraglib_study.report.uncertainty import lead_summary, lead_word

    rows = pd.DataFrame(
        {
            "base": ["a", "b", "c"],
            "direction": ["search"] * 3,
            "diff": [2.0, -3.0, 0.5],
            "lo": [0.1, -5.0, -1.0],
            "hi": [4.0, -0.2, 2.0],
        }
    )
    assert lead_summary(rows) == (
        "fragments ahead in 1, behind in 1, not distinguishable in 1 of 3. a / search: +2.0 [+0.1, +4.0] — fragments "
        "ahead; b / search: -3.0 [-5.0, -0.2] — fragments behind; c / search: +0.5 [-1.0, +2.0] — not distinguishable"
    )
    assert lead_word(0.0, 1.0) == "not distinguishable"
    assert lead_word(0.1, 1.0, "vse_gpo_tuned") == "vse_gpo_tuned ahead"  # a run after the papers, by its name
    assert lead_summary(rows.iloc[1:2], who="scan").startswith("scan ahead in 0, behind in 1, not distinguishable in 0")


def test_the_hubness_tables_are_rounded_headed_text_with_a_dash_where_a_run_lacks_a_value():
    """The results page's hubness tables (k-occurrence, corrected R@1, chosen parameters): text cells rounded, every
    column named and few enough that pandas hides none, "—" (never NaN) where a run was measured before a
    statistic or a correction existed."""
    import pandas as pd

    from fraglib.metrics.retrieval import DIRECTIONS
    from fraglib_study.report.corrections import (
        MISSING,
        correction_parameter_table,
        correction_parameters,
        correction_table,
    )
    from fraglib_study.report.tables import HUB_STATS, hubness_table

    def corr(**extra):
        return {d: {"param": 0.5, "val_rsum": 3.0, "val_rsum_uncorrected": 1.04, **extra} for d in DIRECTIONS}

    new = {"skewness": 1.2345, "never": 26.123, "max": 10.8, "top5_share": 16.49}
    study = {
        "new": {
            "hubness": {
                "k": 10.0,
                "beta_unit": 2.0,
                **{d: dict(new) for d in DIRECTIONS},
                **{f"{m}_inductive": corr() for m in ("inverted_softmax", "csls", "dis")},
                "nnn_inductive": corr(param_k=10.0),
            }
        },
        "old": {  # before max N_k, the top-5 % share, DIS and NNN
            "hubness": {
                "k": 10.0,
                "beta_unit": 2.0,
                **{d: {"skewness": 3.0, "never": 40.0} for d in DIRECTIONS},
                "csls_inductive": corr(),
            }
        },
        "none": {},
    }
    labels = {"old": "Old run"}

    def shown(t: pd.DataFrame) -> str:
        with pd.option_context("display.max_columns", 20):  # the notebook's default: wider tables hide columns
            html = t.to_html()
        assert "nan" not in html.lower() and "..." not in html
        return html

    hub = hubness_table(study, labels, tuple(HUB_STATS), corrections=False, sort=False)  # the notebooks'
    assert [r[0] for r in hub.rows] == ["`new` — new", "`old` — Old run"] and len(hub.header) == 9
    col = {h: i for i, h in enumerate(hub.header)}
    assert hub.rows[0][col["annotation skew"]] == "1.23" and hub.rows[0][col["search never %"]] == "26.1"
    assert hub.rows[1][col["search max N10"]] == MISSING == "—" and "nan" not in str(hub.rows).lower()

    chosen = correction_parameter_table(correction_parameters(study, labels))
    assert list(chosen.index) == ["new", "Old run"] and list(chosen.columns.names) == ["direction", "correction"]
    assert chosen.shape[1] <= 16 and [c[1] for c in chosen.columns[:4]] == [
        "inverted softmax, inductive",
        "CSLS, inductive",
        "DIS, inductive",
        "NNN, inductive",
    ]
    assert chosen.loc["new", ("search", "DIS, inductive")] == "1 (+2.0)"  # β x the validation scores' sd
    assert chosen.loc["new", ("annotation", "NNN, inductive")] == "0.5, k 10 (+2.0)"
    assert chosen.loc["Old run", ("annotation", "CSLS, inductive")] == "0.5 (+2.0)"
    assert chosen.loc["Old run", ("annotation", "DIS, inductive")] == MISSING
    shown(chosen)
    assert correction_parameter_table(correction_parameters({"none": {}})).empty

    rows = [
        dict(
            run=r, correction=c, direction=d, metric="R@1", without=36.14, diff=0.1, lo=-4.2, hi=4.5, **{"with": 36.24}
        )
        for r, cs in (("new", ("CSLS, inductive", "DIS, inductive")), ("Old run", ("CSLS, inductive",)))
        for c in cs
        for d in DIRECTIONS
    ]
    table = correction_table(pd.DataFrame(rows))
    assert list(table.index) == ["new", "Old run"] and table.shape == (2, 6)
    assert table.loc["Old run", ("search", "none")] == "36.1"
    assert table.loc["new", ("annotation", "DIS, inductive")] == "36.2 (+0.1 [-4.2, +4.5])"
    assert table.loc["Old run", ("annotation", "DIS, inductive")] == MISSING
    shown(table)


def test_the_committed_index_answers_before_its_tables():
    """reports/index.html (issue #79): a contents line and the verdict counts per paper come first, then the links
    to every report, and only then the claims tables, each study's folded in a <details>."""
    page = (ROOT / "reports" / "index.html").read_text()
    nav, reports, claims = (page.index(x) for x in ("<nav id='contents'>", "<h2 id='reports'>", "<h2 id='claims'>"))
    assert nav < page.index("Verdicts per paper") < reports < claims < page.index("<details>")
    links = re.findall(r"<td><a href='([^']+)'>", page[reports:claims])
    assert len(links) >= 10 and all((ROOT / "reports" / link).exists() for link in links)
    assert page.count("<details>") >= 3  # a study's claims table, its A/A check and costs, folded
