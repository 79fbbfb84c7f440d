"""The claims registry and the verdict rule (fraglib_study/audit/claims.py): the rule on hand-made cases, the registry against
the papers' tables and params.yaml, the paired bootstrap and the table on hand-made runs."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fraglib.core.config import read_yaml
from fraglib.metrics.retrieval import DIRECTIONS, recall_table
from fraglib_study.audit import claims as C
from fraglib_study.report.tables import markdown

from conftest import ROOT

# (paper's a − b, ours, CI, comparable) -> verdict
RULE = [
    # reproduced: the CI excludes zero on the paper's side, even for a smaller effect than the paper's
    ((14.0, 5.0, (1.0, 9.0), True), C.REPRODUCED),
    ((14.0, 5.0, (1.0, 9.0), False), C.REPRODUCED),
    ((-14.0, -5.0, (-9.0, -1.0), True), C.REPRODUCED),
    # a rank metric, lower is better: a − b < 0 in the paper (a ranks better), the same in ours
    ((-2.9, -1.0, (-1.8, -0.2), True), C.REPRODUCED),
    # the CI's side decides where it excludes zero, whatever the point difference
    ((3.0, -0.1, (0.2, 1.0), True), C.REPRODUCED),
    # the CI barely off zero
    ((3.0, 1.0, (1e-9, 2.0), True), C.REPRODUCED),
    # reversed: the CI excludes zero on the other side
    ((14.0, -4.0, (-7.0, -1.0), True), C.REVERSED),
    ((-2.9, 1.5, (0.5, 2.5), True), C.REVERSED),
    ((-2.9, 1.5, (0.5, 2.5), False), C.REVERSED),
    # same direction, not significant: the CI covers zero and the paper's difference
    ((3.0, 2.0, (-1.0, 5.0), True), C.SAME_DIRECTION),
    ((-2.9, -1.0, (-3.5, 0.4), True), C.SAME_DIRECTION),
    # a CI touching zero covers it
    ((3.0, 1.0, (0.0, 3.0), True), C.SAME_DIRECTION),
    ((-3.0, -1.0, (-3.0, 0.0), True), C.SAME_DIRECTION),
    # the paper's difference on the CI's edge is covered
    ((5.0, 2.0, (-1.0, 5.0), True), C.SAME_DIRECTION),
    # not reproduced: the CI covers zero and excludes the paper's effect (where comparable) ...
    ((14.0, 2.0, (-1.0, 5.0), True), C.NOT_REPRODUCED),
    ((-14.0, -2.0, (-5.0, 1.0), True), C.NOT_REPRODUCED),
    # ... which counts only where the effect sizes are comparable
    ((14.0, 2.0, (-1.0, 5.0), False), C.SAME_DIRECTION),
    # ... or the point difference has the other sign (or none)
    ((3.0, -1.0, (-4.0, 4.0), True), C.NOT_REPRODUCED),
    ((3.0, -1.0, (-4.0, 4.0), False), C.NOT_REPRODUCED),
    ((-2.9, 0.5, (-3.0, 2.0), True), C.NOT_REPRODUCED),
    ((0.5, 0.0, (-1.0, 1.0), True), C.NOT_REPRODUCED),
    ((3.0, 0.0, (0.0, 0.0), False), C.NOT_REPRODUCED),
]


@pytest.mark.parametrize("args,expected", RULE, ids=[f"{a}->{v}" for a, v in RULE])
def test_the_rule_on_hand_made_cases(args, expected):
    paper, diff, ci, comparable = args
    assert C.verdict(paper, diff, ci, comparable) == expected


def test_every_verdict_is_reached_and_no_runs_is_not_testable():
    # undecided (no estimate of the training noise: tests/test_folds.py) and the rows the registry does not test
    # (uninformative, ordering, no order: below) are claim_rows' labels, never the rule's
    assert {v for _, v in RULE} | {C.verdict(3.0, None, None), C.UNDECIDED, *C.UNTESTED} == set(C.VERDICTS)
    assert C.verdict(-3.0, None, None, False) == C.NOT_TESTABLE


@pytest.mark.parametrize(
    "args,match",
    [
        ((0.0, 1.0, (0.5, 1.5)), "tie"),
        ((1.0, 1.0, (2.0, 0.5)), "lo"),
        ((float("nan"), 1.0, (0.5, 1.5)), "NaN"),
        ((1.0, 1.0, (float("nan"), 1.5)), "NaN"),
        ((1.0, 1.0, None), "CI"),
    ],
)
def test_the_rule_refuses_a_tie_a_reversed_ci_and_nans(args, match):
    with pytest.raises(ValueError, match=match):
        C.verdict(*args)


# ----------------------------------------------------------------------------- the registry
def test_the_registry_reads_and_every_claim_names_runs_of_params():
    found = C.read_claims()
    runs = read_yaml(ROOT / "params.yaml")["runs"]
    assert len({c["id"] for c in found}) == len(found) > 20
    named = {c["runs"][s] for c in found if c["tested_on"] for s in "ab"}
    assert named <= set(runs), f"runs not in params.yaml: {sorted(named - set(runs))}"
    untested = {c["id"] for c in found if not c["tested_on"]}
    assert {"karpathy_t3_finetune", "karpathy_t2_hodosh", "peri_attention_paraphrases"} <= untested
    # the data a claim is tested on are read from the registry, not a tuple: each a dataset a study here trains on
    from fraglib_study.report.registry import studies

    tested = {d for c in found for d in c["tested_on"]}
    assert tested <= {s.dataset for s in studies(ROOT)}, tested - {s.dataset for s in studies(ROOT)}


def test_the_registry_pairs_the_runs_params_yaml_maps_to_the_papers_rows():
    """Socher's tables, the ℓ ablation and STT's base run, as results_report maps them."""
    report = read_yaml(ROOT / "params.yaml")["results_report"]
    socher, found = report["socher_tables"], {c["id"]: c for c in C.read_claims()}
    for c in found.values():
        for side in "ab" if c["tested_on"] and "a" in c["paper"] else "":
            paper, table, row = C._ref(c["paper"][side])
            key = {"pascal1k_mean_rank": "margin", "pascal1k_recall": "margin"}.get(table)
            key = "squared" if table == "pascal1k_mean_rank_squared_loss_euclidean" else key
            if paper == "socher2014_dtrnn":  # kCCA: the paper's linear kernel, the tables' Gaussian choice beside
                assert socher[key][row] in (c["runs"][side], (c.get("beside") or {}).get(side)), (c["id"], side)
    ell = found["socher_length_weighting"]["runs"]
    assert [ell["a"], ell["b"]] == socher["length_weighting"]
    stt = found["peri_decoder_vs_retrieval"]
    assert report["peri"]["generation"][stt["runs"]["a"]] == stt["beside"]["b"]
    # one published row, one run: Peri's VSE baseline is the same run in every claim
    runs: dict[str, set] = {}
    for c in found.values():
        for side in "ab" if c["tested_on"] and "a" in c["paper"] else "":
            runs.setdefault(c["paper"][side], set()).add(c["runs"][side])
    assert runs["peri2018_thesis.flickr30k_1k_test:vse_baseline_1024"] == {"vsepp_order_tuned"}


def test_the_papers_difference_is_computed_from_the_printed_rows():
    found = {c["id"]: c for c in C.read_claims()}
    # Socher et al. Table 1, image search mean rank: SDT-RNN 12.5, DT-RNN 13.6
    assert C.paper_difference(found["socher_t1_sdtrnn_vs_dtrnn"], "search") == pytest.approx(-1.1)
    # Karpathy et al. Table 1, annotation R@1/5/10: full 39/68/79, DeViSE 17/57/68
    assert C.paper_difference(found["karpathy_t1_full_vs_devise"], "annotation") == pytest.approx(44.0)
    # Peri, Flickr30K captioning CIDEr-D: STT-ATT .442, STT .252 (× 100)
    assert C.paper_difference(found["peri_attention_captions"], "captioning") == pytest.approx(19.0)
    # a claim in text: its direction, in the metric's sense (mean rank: a better is a − b < 0)
    assert C.paper_difference(found["socher_length_weighting"], "search") == -1.0
    assert C.comparable(found["socher_t1_sdtrnn_vs_dtrnn"], "pascal1k")
    assert not C.comparable(found["socher_t1_sdtrnn_vs_dtrnn"], "synthetic")
    assert not C.comparable(found["karpathy_t2_mil"], "pascal1k")  # printed on Flickr8K
    assert not C.comparable(found["socher_length_weighting"], "pascal1k")  # no number


def _claim(**over):
    base = {
        "id": "x",
        "claim": "x",
        "source": "x",
        "paper": {
            "a": "socher2014_dtrnn.pascal1k_mean_rank:sdt_rnn",
            "b": "socher2014_dtrnn.pascal1k_mean_rank:dt_rnn",
        },
        "metric": "mean_rank",
        "tasks": ["search"],
        "runs": {"a": "a", "b": "b"},
        "tested_on": ["synthetic"],
    }
    return {**base, **over}


@pytest.mark.parametrize(
    "over,match",
    [
        # Table 3's kCCA image search mean rank is Table 1's (15.9 both): a tie the text orders has no size, and a
        # tie the text does not order is an ordering (below); refused: text without the paper's words
        ({"text": {"search": "a_better"}}, "quote"),
        ({"text": {"annotation": "a_better"}}, "text="),
        ({"text": {"search": "better"}}, "text="),
        ({"beside": {"c": "x"}}, "beside"),
        ({"metric": "r1"}, "metric"),
        ({"tasks": ["captions"]}, "unknown task"),
        ({"tested_on": [""]}, "unknown task or dataset"),
        ({"tested_on": [3]}, "unknown task or dataset"),
        ({"paper": {"a": "karpathy2014_defrag.flickr8k:bow", "b": "karpathy2014_defrag.pascal1k:devise"}}, "data"),
        ({"paper": {"a": "karpathy2014_defrag.flickr8k:bow", "b": "karpathy2014_defrag.flickr8k:devise"}}, "prints"),
        ({"paper": {"direction": "better"}}, "direction"),
        ({"runs": {"a": "a"}}, "runs"),
        ({"tested_on": []}, "not_testable"),
    ],
)
def test_a_claim_the_papers_do_not_make_is_refused(over, match, tmp_path):
    """Text without its quote, for a task the claim lacks, or saying neither side; a side beside that is not a or b;
    an unknown metric, task or dataset, rows of two data, a figure the paper does not print (Flickr8K has median
    ranks only), a malformed direction, missing runs or reasons."""
    f = tmp_path / "claims.yaml"
    f.write_text(json.dumps({"claims": [_claim(**over)]}))
    with pytest.raises(ValueError, match=match):
        C.read_claims(f)
    f.write_text(json.dumps({"claims": [_claim(), _claim()]}))
    with pytest.raises(ValueError, match="twice"):
        C.read_claims(f)


# ----------------------------------------------------------------------------- the analytic paired difference
def test_paired_analytic_one_test_set_is_the_queries_error_plus_the_training_noise():
    """Straight from the equations: d = mean over units of a − b per query; SE² = Σ_s (n_s/n)² var_s / n_s over
    the folds, + train_var × 2 / U; CI = d ± z SE; p two-sided normal."""
    from scipy import stats

    rng = np.random.default_rng(3)
    a, b = rng.normal(0, 3, size=(2, 30)), rng.normal(0.5, 3, size=(2, 30))
    strata = np.repeat([0, 1, 2], 10)
    got = C.paired_analytic(a, b, [0, 0], strata, train_var=0.7)
    d = (a - b).mean(axis=0)
    se2 = sum((10 / 30) ** 2 * d[strata == s].var(ddof=1) / 10 for s in range(3)) + 0.7 * 2 / 2
    z = stats.norm.ppf(0.975)
    assert got["diff"] == pytest.approx(d.mean()) and got["se"] == pytest.approx(np.sqrt(se2))
    assert (got["lo"], got["hi"]) == pytest.approx((d.mean() - z * np.sqrt(se2), d.mean() + z * np.sqrt(se2)))
    assert got["p"] == pytest.approx(2 * stats.norm.sf(abs(d.mean()) / np.sqrt(se2)))
    with pytest.raises(ValueError, match="same units"):
        C.paired_analytic(a[:1], b, [0])


def test_paired_analytic_several_splits_is_student_t_between_them():
    from scipy import stats

    rng = np.random.default_rng(4)
    a, b = rng.normal(1, 2, size=(6, 40)), rng.normal(0, 2, size=(6, 40))
    groups = [0, 0, 1, 1, 2, 2]
    got = C.paired_analytic(a, b, groups, train_var=99.0)  # the spread of the splits holds the training noise
    means = np.array([(a - b)[2 * g : 2 * g + 2].mean() for g in range(3)])
    se, q = means.std(ddof=1) / np.sqrt(3), stats.t.ppf(0.975, 2)
    assert (got["diff"], got["lo"], got["hi"]) == pytest.approx(
        (means.mean(), means.mean() - q * se, means.mean() + q * se)
    )


def test_training_variance_and_the_aa_pairs(tmp_path):
    """A run trained twice on one test set is an A/A pair: d = mean(first − second), se its queries' error;
    one training's variance is mean(d²) / 2 over the pairs, leaving one out on request; none: NaN."""
    r = np.arange(1, 21).reshape(1, 20) % 12 + 1
    twice = put_run(
        tmp_path / "twice", {"annotation": np.vstack([r, r + 2]), "search": np.vstack([r, r])}, ["0", "0r1"], [0, 0]
    )
    once = put_run(tmp_path / "once", {"annotation": r, "search": r}, ["0"], [0])
    (pair,) = C.aa_pairs(twice, "annotation", "mean_rank", {})
    assert pair["run"] == "twice" and pair["d"] == pytest.approx(-2.0) and pair["se"] == pytest.approx(0.0)
    assert C.aa_pairs(once, "annotation", "mean_rank", {}) == []
    assert C.aa_pairs(twice, "search", "mean_rank", {}) == []  # two identical trainings: a deterministic fit, no pair
    pairs = [pair, {"run": "other", "d": 4.0, "se": 1.0}]
    assert C.training_variance(pairs) == pytest.approx((4.0 + 16.0) / 2 / 2)
    assert C.training_variance(pairs, leave_out="other") == pytest.approx(2.0)
    assert np.isnan(C.training_variance([]))


def test_a_calibrated_rule_passes_its_own_aa_check_where_the_queries_alone_fail():
    """Simulated runs whose trainings shift a run's mean (σ_T = 2) and move each query (σ 20) on 200 queries: two
    trainings compared with the queries' error alone differ far beyond 5 % of the time (about 26 %); with the
    training noise estimated from the other runs' pairs (leave one out) at most 5 % (about 2.4 %)."""
    from scipy import stats

    rng = np.random.default_rng(0)
    z = stats.norm.ppf(0.975)
    pairs = []
    for j in range(1000):
        x = rng.normal(0, 10, size=200) + rng.normal(0, 2, size=(2, 1)) + rng.normal(0, 20, size=(2, 200))
        d, se = C.stratified_mean_se(x[0] - x[1])
        pairs.append({"run": str(j), "d": d, "se": se})
    before = np.mean([abs(p["d"]) > z * p["se"] for p in pairs])
    after = np.mean([abs(p["d"]) > z * np.sqrt(p["se"] ** 2 + 2 * C.training_variance(pairs, p["run"])) for p in pairs])
    assert before > 0.15 and after <= 0.05


def test_holm_adjusts_a_family_and_decides_the_verdicts(tmp_path):
    """Three rows of one paper in one study: Holm's adjusted p by hand; the row significant alone but not in its
    family keeps its CI, gets the not-significant verdict, and its own verdict stays in ``raw``."""
    from fraglib.metrics.retrieval import holm

    p = np.array([0.01, 0.04, 0.03])
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06])  # 3 × 0.01; max(2 × 0.03, 0.03); max(1 × 0.04, 0.06)
    c = _claim(source="Socher et al. 2014")
    rows = [
        C.Row(
            c,
            "search",
            "synthetic",
            -3.0,
            {"diff": -2.0, "lo": -3.0, "hi": -1.0, "p": q, "se": 0.5, "tau": 0.0},
            C.REPRODUCED,
            raw=C.REPRODUCED,
        )
        for q in p
    ]
    out = C.adjust(rows)
    assert [r.verdict for r in out] == [C.REPRODUCED, C.SAME_DIRECTION, C.SAME_DIRECTION]
    assert [r.raw for r in out] == [C.REPRODUCED] * 3 and [r.p_holm for r in out] == pytest.approx([0.03, 0.06, 0.06])


def test_a_decision_a_re_run_could_change_is_undecided():
    """Two rows of one family, both significant alone: the one whose difference a re-run's training noise could
    move across Holm's line is undecided, the one far from it keeps its verdict."""
    c = _claim(source="Socher et al. 2014")
    far = {"diff": -3.0, "se": 0.5, "tau": 0.2, "df": math.inf}
    near = {"diff": -1.2, "se": 0.5, "tau": 0.2, "df": math.inf}  # z = 2.4: p 0.016, × 2 in Holm's family: 0.033
    rows = [
        C.Row(
            c,
            "search",
            "synthetic",
            -3.0,
            {
                **o,
                "lo": o["diff"] - 1.96 * o["se"],
                "hi": o["diff"] + 1.96 * o["se"],
                "p": C._p_value(o["diff"], o["se"], o["df"]),
            },
            C.REPRODUCED,
            raw=C.REPRODUCED,
        )  # fmt: skip
        for o in (far, near)
    ]
    out = C.adjust(rows)
    assert [r.verdict for r in out] == [C.REPRODUCED, C.UNDECIDED] and "on the edge" in out[1].why
    # moved by 1.645 × √2 × 0.2 = 0.47 toward zero: z = 1.47, p 0.14: not significant — a re-run could flip it
    assert C.on_edge([rows[0].ours["p"], rows[1].ours["p"]], 1, near)
    assert not C.on_edge([rows[0].ours["p"], rows[1].ours["p"]], 1, {**near, "tau": 0.0})


def put_run(folder: Path, ranks: dict[str, np.ndarray], units: list[str], groups: list[int], cider=None) -> Path:
    """A run as fraglib_study.experiments.study writes it: metrics.json with every unit's figures and each unit's ranks.json;
    with ``cider`` (units × images) its captions records, one per unit."""
    per = {u: {d: recall_table(ranks[d][i]) for d in DIRECTIONS} for i, u in enumerate(units)}
    mean = {d: {k: float(np.mean([p[d][k] for p in per.values()])) for k in per[units[0]][d]} for d in DIRECTIONS}
    seeds = sorted(set(groups))
    summary = {"system": "x", "run": folder.name, "seeds": seeds, "units": units, "groups": groups, "per_seed": per}
    (folder / "seeds").mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({**summary, **mean}))
    for i, u in enumerate(units):
        (folder / "seeds" / f"seed{u}").mkdir()
        (folder / "seeds" / f"seed{u}" / "ranks.json").write_text(
            json.dumps({t: r[i].tolist() for t, r in ranks.items()})
        )
    if cider is not None:
        (folder / "captions").mkdir()
        for u, row in zip(units, cider, strict=True):
            caps = [{"image": i, "cider": float(x), "caption": "", "references": []} for i, x in enumerate(row)]
            (folder / "captions" / f"seed{u}.json").write_text(json.dumps({"captioning": caps}))
    return folder


def test_our_difference_pairs_the_training_runs_both_have(tmp_path):
    """a ranks every query one place better than b on its first run: mean rank −1 exactly, CI [−1, −1]; a's second
    training run (b has none) is left out; R@K sum and CIDEr-D by hand; a missing task is untestable."""
    r = np.arange(1, 21).reshape(1, 20) % 12 + 1
    a = put_run(
        tmp_path / "a",
        {"annotation": np.vstack([r, r + 5]), "search": np.vstack([r, r]), "similarity": np.vstack([r, r])},
        ["0", "0r1"],
        [0, 0],
        cider=[[0.5, 0.25, 0.0], [0.0, 0.0, 0.0]],
    )
    b = put_run(tmp_path / "b", {"annotation": r + 1, "search": r * 0 + 11}, ["0"], [0], cider=[[0.25, 0.25, 0.5]])
    got = C.our_difference(a, b, "annotation", "mean_rank", train_var=0.0)
    assert got == {
        "diff": pytest.approx(-1.0),
        "lo": pytest.approx(-1.0),
        "hi": pytest.approx(-1.0),
        "p": 0.0,
        "se": 0.0,
        "df": float("inf"),
        "tau": 0.0,
        "units": 1,
        "protocol": "1 split",
    }
    with pytest.raises(C.Undecided, match=r"-1\.0, but no run of this study trained twice"):
        C.our_difference(a, b, "annotation", "mean_rank")  # one test set, no estimate of the training noise
    # search: b ranks everything 11th (no hit); a's R@1 / R@5 / R@10 over ranks 1..12 (20 queries)
    hits = sum(np.mean(r <= k) for k in (1, 5, 10))
    assert C.our_difference(a, b, "search", "rsum", train_var=1.0)["diff"] == pytest.approx(100 * hits)
    assert C.our_difference(a, b, "captioning", "cider", train_var=1.0)["diff"] == pytest.approx(100 * (0.75 - 1.0) / 3)
    with pytest.raises(C.Untestable, match="ranks no similarity"):
        C.our_difference(b, a, "similarity", "mean_rank", train_var=1.0)
    c = put_run(tmp_path / "c", {"annotation": r, "search": r}, ["1"], [1])
    with pytest.raises(C.Untestable, match="share no training run"):
        C.our_difference(a, c, "annotation", "mean_rank", train_var=1.0)
    older = put_run(tmp_path / "older", {"annotation": r[:, :5], "search": r[:, :5]}, ["0"], [0])  # a smaller test
    with pytest.raises(C.Untestable, match="`a` has 20 annotation queries, `older` 5: not one test set"):
        C.our_difference(a, older, "annotation", "mean_rank", train_var=1.0)


def test_k_fold_captions_pool_each_training_fold_by_fold(tmp_path):
    """A k-fold generating run trained twice per fold: its captions read as its ranks are (fraglib_study.report.loading.pool_folds):
    one unit per replicate, its folds end to end in fold order, each image's fold its stratum; a replicate without
    a fold's captions is untestable, not pooled short."""
    r = np.arange(1, 5).reshape(1, 4)
    units = ["0", "0r1", "1", "1r1"]
    ranks = {"annotation": np.vstack([r] * 4), "search": np.vstack([r] * 4)}
    run = put_run(tmp_path / "k", ranks, units, [0, 0, 1, 1], cider=[[0.1, 0.2], [0.3, 0.4], [0.5], [0.6]])
    summary = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**summary, "protocol": "folds", "partition": 0}))
    got_units, groups, x, loaded = C._captions(run)
    assert got_units == ["r0", "r1"] and groups == [0, 0]
    assert x.tolist() == [[10.0, 20.0, 50.0], [30.0, 40.0, 60.0]]
    assert loaded["strata"]["captioning"].tolist() == [0, 0, 1]
    (run / "captions" / "seed1r1.json").unlink()
    with pytest.raises(C.Untestable, match="no captions of training run 1r1"):
        C._captions(run)


def test_claim_rows_and_the_table_by_hand(tmp_path):
    """A claim whose runs are here gets a verdict, one whose run is missing is not testable (why), one no study
    can test keeps its reason; the table and the counts name every verdict."""
    r = np.arange(1, 21).reshape(1, 20) % 4 + 1  # far from chance (ranks of 20 candidates)
    # sdtrnn trained twice, the second ranking two queries the other way round: the study's A/A pair, training noise
    # 0 (two identical trainings would be a deterministic fit, no pair)
    r2 = r.copy()
    r2[0, [0, 1]] = r[0, [1, 0]]
    put_run(
        tmp_path / "s" / "sdtrnn",
        {"annotation": np.vstack([r, r2]), "search": np.vstack([r, r2])},
        ["0", "0r1"],
        [0, 0],
    )
    put_run(tmp_path / "s" / "dtrnn", {"annotation": r + 2, "search": r + 2}, ["0"], [0])
    params = {"runs": {"sdtrnn": {}, "dtrnn": {}, "kcca": {}}}
    found = {c["id"]: c for c in C.read_claims()}
    picked = [
        found["socher_t2_margin_vs_squared_sdtrnn"],
        _claim(runs={"a": "sdtrnn", "b": "kcca"}, source="Socher et al. 2014"),
    ]
    picked += [found["karpathy_t3_finetune"]]
    picked[0] = {**picked[0], "runs": {"a": "sdtrnn", "b": "dtrnn"}, "tested_on": ["synthetic", "pascal1k"]}
    rows = C.claim_rows(params, {"synthetic": [tmp_path / "s"]}, picked)
    assert [(r.claim["id"], r.task, r.study, r.verdict) for r in rows] == [
        ("socher_t2_margin_vs_squared_sdtrnn", "search", "synthetic", C.REPRODUCED),
        ("socher_t2_margin_vs_squared_sdtrnn", "search", "pascal1k", C.NOT_TESTABLE),
        ("socher_t2_margin_vs_squared_sdtrnn", "annotation", "synthetic", C.REPRODUCED),
        ("socher_t2_margin_vs_squared_sdtrnn", "annotation", "pascal1k", C.NOT_TESTABLE),
        ("x", "search", "synthetic", C.NOT_TESTABLE),
        ("karpathy_t3_finetune", "annotation", "", C.NOT_TESTABLE),
        ("karpathy_t3_finetune", "search", "", C.NOT_TESTABLE),
    ]
    assert rows[0].ours["diff"] == pytest.approx(-2.0) and rows[4].why == "no run `kcca` in this study"
    tested = C.claims_table([r for r in rows if r.study])
    # Socher et al.: SDT-RNN image search mean rank 12.5 (Table 1), 15.8 (Table 2)
    assert tested.rows[0][3:] == (
        "text: a better", "`synthetic`", "-3.3 (SE 0.9)", "-2.0 [-2.0, -2.0]", "—", "< 0.001", "1", "1 split",
        C.REPRODUCED, "same"
    )  # fmt: skip
    assert tested.rows[1][3:] == (
        "text: a better",
        "`pascal1k`",
        "-3.3 † (SE 0.9)",
        "—",
        "—",
        "—",
        "—",
        "—",
        "not testable here: no run `sdtrnn` or `dtrnn` in this study",
        "—",
    )
    assert C.counts(rows) == (
        "2 reproduced, 0 same direction, not significant, 0 not reproduced, 0 reversed, 0 undecided, "
        "0 uninformative, 0 an ordering, not a claim, 0 no order claimed, 5 not testable here"
    )
    untested = markdown([C.untested_table([r for r in rows if not r.study])])
    assert "full_finetune" in untested and "Flickr30K" in untested and "We were not able to improve" in untested
    # per paper (README's lines, facts' ``claims`` markers): Socher's tested rows, the one Socher-sourced claim x
    # (source "Socher et al. 2014"), Karpathy's Table 3 not testable
    counted = C.paper_counts(rows)
    assert counted["Socher"]["synthetic"][C.REPRODUCED] == 2 and counted["Socher"]["synthetic"][C.NOT_TESTABLE] == 1
    assert counted["Socher"]["pascal1k"] == {**dict.fromkeys(C.VERDICTS, 0), C.NOT_TESTABLE: 2}
    assert counted["Karpathy"] == {"": {**dict.fromkeys(C.VERDICTS, 0), C.NOT_TESTABLE: 2}}
    table = C.counts_table(rows)
    assert table.rows[0][:4] == ("Socher et al. 2014", "`synthetic`", "2", "0") and table.rows[0][-1] == "1"
    assert table.rows[-1] == ("Karpathy et al. 2014", "none", *["0"] * 8, "2")
    with pytest.raises(ValueError, match="names none of"):
        C.paper_of({"id": "y", "source": "Someone 2020, Table 1"})


def test_claim_blocks_render_per_study_and_the_untestable_claims(tmp_path):
    """The blocks of a project with two synthetic runs: the rule's paragraph, the counts, the study's section with
    its rows, and the claims no study can test."""
    for f in [ROOT / "dvc.yaml", *ROOT.glob("studies/*/dvc.yaml")]:
        (tmp_path / f.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f.relative_to(ROOT)).write_text(f.read_text())
    r = np.arange(1, 21).reshape(1, 20) % 12 + 1
    put_run(tmp_path / "runs" / "synthetic" / "sdtrnn", {"annotation": r, "search": r, "similarity": r}, ["0"], [0])
    put_run(tmp_path / "runs" / "synthetic_extended" / "dtrnn", {"annotation": r, "search": r}, ["0"], [0])
    params = {"runs": {"sdtrnn": {}, "dtrnn": {}}}
    text = markdown(C.claim_blocks(tmp_path, params))
    assert "### Tested on `synthetic`: Synthetic benchmark" in text and "### Not testable here" in text
    assert "`sdtrnn` − `dtrnn`" in text and "`dtrnn` ranks no similarity queries" in text
    assert "### Tested on `pascal1k`: Pascal1K" in text  # every claim tested there is named, not testable: no runs
    assert text.count("All studies:") == 1 and "Verdicts:" in text


def test_rerun_blocks_show_each_comparison_and_every_verdict_that_changed(tmp_path):
    """``benchmarks/reruns/*.json`` (``fraglib_study.audit.rerun --json``): a row per comparison with its machines and counts,
    then each changed verdict with both sides' CIs; none kept: no section; a foreign file is named."""
    assert C.rerun_blocks(tmp_path) == []
    folder = tmp_path / "benchmarks" / "reruns"
    folder.mkdir(parents=True)
    same = {"claim": "a_claim", "task": "search", "committed": "reproduced", "new": "reproduced", "same": True}
    flip = {"claim": "b_claim", "task": "annotation", "committed": "reproduced", "new": "reversed", "same": False,
            "committed_ours": {"diff": 2.04, "lo": 0.5, "hi": 3.0}, "new_ours": {"diff": -1.0, "lo": -2.0, "hi": -0.1}}  # fmt: skip
    rec = {"reference_machines": ["CPU A"], "new_machines": ["CPU B"], "metrics_within": 5, "metrics": [{}] * 6,
           "verdicts_same": 1, "verdicts": [same, flip]}  # fmt: skip
    (folder / "synthetic_x.json").write_text(json.dumps(rec))
    text = markdown(C.rerun_blocks(tmp_path))
    assert "### The verdicts on another CPU" in text
    assert "| `synthetic_x.json` | CPU A | CPU B | 5 of 6 | 1 of 2 |" in text
    assert (
        "| `synthetic_x.json` | `b_claim` | annotation | reproduced: +2.0 [+0.5, +3.0] | reversed: -1.0 [-2.0, -0.1] |"
        in text
    )
    assert "`a_claim`" not in text  # a verdict that stayed is counted, not listed
    (folder / "bad.json").write_text(json.dumps([1]))
    with pytest.raises(ValueError, match="bad.json: not a comparison"):
        C.rerun_blocks(tmp_path)


def test_what_the_registry_reads_from_the_papers_words():
    """Text over table (flagged where they disagree), orderings inside the paper's own noise, no order claimed."""
    found = {c["id"]: c for c in C.read_claims()}
    # "kCCA also performs much better using inner products": Table 2's search says the reverse (15.9 vs 13.7)
    kcca = found["socher_t2_inner_vs_euclidean_kcca"]
    assert C.table_difference(kcca, "search") == pytest.approx(2.2) and C.paper_difference(kcca, "search") == -2.2
    assert C.conflicts(kcca, "search") and not C.conflicts(kcca, "annotation")
    assert not C.comparable(kcca, "pascal1k", "search") and C.comparable(kcca, "pascal1k", "annotation")
    # Peri: "STT model's performance is lower than the baseline model for retrieval", the table's search +0.1
    peri = found["peri_decoder_vs_retrieval"]
    assert C.paper_difference(peri, "search") == pytest.approx(-0.1) and C.conflicts(peri, "search")
    # Karpathy et al. Table 2, MIL annotation +3.8 R@K sum: under one SE of its 1,000 test images (5.8): an ordering
    mil = found["karpathy_t2_mil"]
    assert C.kind(mil, "annotation") == C.ORDERING and C.kind(mil, "search") is None
    assert C.paper_noise(mil, "annotation") == pytest.approx(5.77, abs=0.01)
    # "On Pascal1K the SDT-RNN appears to be competitive on Image Search"
    assert C.kind(found["karpathy_t1_full_vs_sdtrnn"], "search") == C.NO_ORDER
    # a printed tie the text does not order is an ordering, never a claim
    tie = _claim(paper={"a": "socher2014_dtrnn.pascal1k_recall:kcca", "b": "socher2014_dtrnn.pascal1k_mean_rank:kcca"})
    assert C.table_difference(tie, "search") == 0 and C.kind(tie, "search") == C.ORDERING


def test_the_papers_noise_by_hand():
    # Socher et al. Table 1 image search, SDT-RNN mean rank 12.5 over 500 sentences: 12.5 / √500
    assert C.paper_se("socher2014_dtrnn.pascal1k_mean_rank:sdt_rnn", "search", "mean_rank") == pytest.approx(
        12.5 / 500**0.5
    )
    # Karpathy et al. Table 1 annotation, full model R@1/5/10 39/68/79 over 100 images
    want = sum(100 * (p * (1 - p) / 100) ** 0.5 for p in (0.39, 0.68, 0.79))
    assert C.paper_se("karpathy2014_defrag.pascal1k:full_model", "annotation", "rsum") == pytest.approx(want)
    assert C.paper_se("peri2018_thesis.captioning_flickr30k:stt_1024", "captioning", "cider") is None


@pytest.mark.parametrize(
    "task,images,sentences,want",
    [
        # search over 4 images, one correct: R@1 1/4, R@5 and R@10 all
        ("search", 4, 20, 25 + 100 + 100),
        # annotation over 20 sentences, 5 correct: top 1: 5/20; top 5: 1 − C(15,5)/C(20,5); top 10: 1 − C(15,10)/C(20,10)
        ("annotation", 4, 20, 100 * (5 / 20 + 1 - 3003 / 15504 + 1 - 3003 / 184756)),
        # search over 100 images: R@K = K %
        ("search", 100, 500, 16.0),
    ],
)
def test_chance_by_hand(task, images, sentences, want):
    assert C.chance_rsum(task, images, sentences) == pytest.approx(want)


def test_a_side_near_chance_makes_the_row_uninformative(tmp_path):
    """One run ranking at chance's level, the other well: the row keeps our difference, says why, and is out of
    Holm's family; the magnitude of a comparable row by hand."""
    rng = np.random.default_rng(0)
    good = np.ones((1, 20), int)
    good2 = good.copy()
    good2[0, 0] = 2
    bad = rng.integers(1, 21, size=(1, 20))  # ranks of 20 candidates drawn at random
    put_run(tmp_path / "s" / "sdtrnn", {"annotation": np.vstack([good, good2]), "search": np.vstack([good, good2])},
            ["0", "0r1"], [0, 0])  # fmt: skip
    put_run(tmp_path / "s" / "dtrnn", {"annotation": bad, "search": bad}, ["0"], [0])
    claim = {
        **next(c for c in C.read_claims() if c["id"] == "socher_t2_margin_vs_squared_sdtrnn"),
        "runs": {"a": "sdtrnn", "b": "dtrnn"},
        "tested_on": ["synthetic"],
    }
    (row,) = [r for r in C.claim_rows({"runs": {"sdtrnn": {}, "dtrnn": {}}}, {"synthetic": [tmp_path / "s"]}, [claim])
              if r.task == "search"]  # fmt: skip
    assert row.verdict == C.UNINFORMATIVE and not row.tested and row.p_holm is None
    assert "`dtrnn`" in row.why and "`sdtrnn`" not in row.why and row.ours["diff"] < 0
    assert C.magnitude(-3.3, -4.0, -1.0) == "as large"
    assert C.magnitude(-3.3, -2.0, -1.0) == "smaller" and C.magnitude(-3.3, -6.0, -4.0) == "larger"
    assert C.magnitude(5.0, 1.0, 2.0) == "smaller" and C.magnitude(5.0, -2.0, -1.0) == "smaller"


def test_a_run_after_the_papers_is_outside_the_claims_noise_pool(tmp_path):
    """runs.<run>.after_papers: its A/A pair neither enters the training variance the claims are weighed with nor
    the A/A check, so adding it to a study moves no claim (docs/deviations.md)."""
    r = np.arange(1, 21).reshape(1, 20) % 12 + 1
    put_run(tmp_path / "a", {"annotation": np.vstack([r, r + 1]), "search": np.vstack([r, r])}, ["0", "0r1"], [0, 0])
    put_run(tmp_path / "z", {"annotation": np.vstack([r, r + 9]), "search": np.vstack([r, r])}, ["0", "0r1"], [0, 0])
    runs = {"a": {"system": "x"}, "z": {"system": "x"}}
    both, _ = C.study_noise({"runs": runs}, [tmp_path], "annotation", "mean_rank", {})
    assert sorted(p["run"] for p in both) == ["a", "z"]
    runs["z"]["after_papers"] = True
    pairs, var = C.study_noise({"runs": runs}, [tmp_path], "annotation", "mean_rank", {})
    assert [p["run"] for p in pairs] == ["a"] and var == pytest.approx(1.0 / 2)  # d = −1: σ²_T = d² / 2
    assert {row["run"] for row in C.aa_rows({"runs": runs}, [tmp_path], [("annotation", "mean_rank")])} == {"a"}
