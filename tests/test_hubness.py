"""Hubness: k-occurrence and the two corrections against loops written from the definitions
(fraglib/metrics/hubness.py, docs/evaluation.md "Hubness")."""

import math

import numpy as np
import pytest
import torch

from fraglib.metrics import hubness
from fraglib.metrics.retrieval import annotation_ranks, search_ranks
from fraglib.run.inputs import DataPaths


def _tied(n_q, n_c, seed=0, levels=6):
    """Integer-valued scores: many ties."""
    return torch.from_numpy(np.random.default_rng(seed).integers(0, levels, (n_q, n_c)).astype(np.float64))


def _loop_k_occurrence(Q, k):
    Q = np.asarray(Q)
    counts = np.zeros(Q.shape[1], np.int64)
    for q in range(Q.shape[0]):
        for c in range(Q.shape[1]):
            if not np.isfinite(Q[q, c]):
                continue
            rank = 1 + sum(Q[q, o] >= Q[q, c] for o in range(Q.shape[1]) if o != c)
            counts[c] += rank <= k
    return counts


def _lse(xs):
    m = max(xs)
    return m + math.log(sum(math.exp(x - m) for x in xs))


@pytest.mark.parametrize("k", [1, 3, 8])
def test_k_occurrence_equals_the_loop_with_ties_and_empty_candidates(k):
    Q = _tied(7, 9, seed=k)
    Q[:, 4] = float("-inf")  # a candidate without rows
    assert np.array_equal(hubness.k_occurrence(Q, k, chunk=3), _loop_k_occurrence(Q, k))
    R = torch.randn(5, 12, generator=torch.Generator().manual_seed(k))
    got = hubness.k_occurrence(R, k)
    assert np.array_equal(got, _loop_k_occurrence(R, k))
    assert got.sum() == 5 * min(k, 12)  # no ties: every query fills its top k


def test_hubness_stats_by_hand():
    s = hubness.hubness_stats(np.array([0, 0, 1, 3, 6]), k=2)  # 20 candidates would make top5 = 1 item
    assert s["never"] == 40.0 and s["max"] == 6 and s["mean"] == 2.0
    x = np.array([0, 0, 1, 3, 6], float)
    assert s["skewness"] == pytest.approx(((x - 2) ** 3).mean() / x.std() ** 3)
    assert s["top5_share"] == pytest.approx(100 * 6 / 10)
    assert hubness.skewness(np.ones(4)) == 0.0


@pytest.mark.parametrize("beta", [0.7, 40.0])
def test_inverted_softmax_equals_the_loop(beta):
    Q = _tied(6, 5, seed=1) + torch.rand(6, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.1
    Q[0, 2] = Q[3, 2] = Q[:, 2].max()  # a tied maximum in a column
    B = torch.randn(4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 3
    ind = hubness.inverted_softmax(Q, beta, B)
    tra = hubness.inverted_softmax(Q, beta)
    for q in range(6):
        for c in range(5):
            assert float(ind[q, c]) == pytest.approx(
                beta * float(Q[q, c]) - _lse([beta * float(B[b, c]) for b in range(4)]), rel=1e-9
            )
            others = [beta * float(Q[b, c]) for b in range(6) if b != q]  # never the query's own row
            assert float(tra[q, c]) == pytest.approx(beta * float(Q[q, c]) - _lse(others), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_csls_equals_the_loop(k):
    Q = _tied(6, 7, seed=k)
    B = _tied(5, 7, seed=10 + k)
    ind = hubness.csls(Q, k, B)
    tra = hubness.csls(Q, k)
    for q in range(6):
        for c in range(7):
            top_bank = sorted((float(B[b, c]) for b in range(5)), reverse=True)[:k]
            assert float(ind[q, c]) == pytest.approx(2 * float(Q[q, c]) - np.mean(top_bank))
            top_others = sorted((float(Q[b, c]) for b in range(6) if b != q), reverse=True)[:k]
            assert float(tra[q, c]) == pytest.approx(2 * float(Q[q, c]) - np.mean(top_others))


@pytest.mark.parametrize("method,param", [("inverted_softmax", 3.0), ("csls", 2)])
def test_transductive_row_is_the_inductive_one_with_the_other_queries_as_bank(method, param):
    Q = torch.randn(8, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    tra = hubness.correct(Q, method, param)
    for q in range(8):
        others = torch.cat([Q[:q], Q[q + 1 :]])
        ind = hubness.correct(Q[q : q + 1], method, param, others)
        assert torch.allclose(tra[q], ind[0], atol=1e-12)
        bumped = Q.clone()
        bumped[q] += 5.0  # the query's own row cannot move its normaliser
        moved = (
            hubness.correct(bumped, method, param)[q] - 2 * 5.0 * (method == "csls") - 3.0 * 5.0 * (method != "csls")
        )
        assert torch.allclose(moved, tra[q], atol=1e-9)


def test_empty_candidates_stay_last_and_bad_arguments_are_named():
    Q = torch.randn(4, 3, dtype=torch.float64)
    Q[:, 1] = float("-inf")
    for method, p in (("inverted_softmax", 1.0), ("csls", 2)):
        out = hubness.correct(Q, method, p)
        assert torch.isneginf(out[:, 1]).all() and torch.isfinite(out[:, [0, 2]]).all()
    with pytest.raises(ValueError, match="CSLS k=9"):
        hubness.csls(Q, 9)
    with pytest.raises(ValueError, match="expected one of"):
        hubness.correct(Q, "qb_norm", 1)
    with pytest.raises(ValueError, match="at least 2 queries"):
        hubness.inverted_softmax(Q[:1], 1.0)


def _hub_data(seed, n_img=30, per=2):
    """Scores with one planted hub image (every sentence scores it high) and one hub sentence."""
    g = np.random.default_rng(seed)
    si = np.repeat(np.arange(n_img), per)
    S = g.normal(size=(n_img, n_img * per))
    S[si, np.arange(len(si))] += 2.0  # the truth stands out a little
    S[0, :] += 2.5  # image 0 is near every sentence
    S[:, 1] += 2.5  # sentence 1 is near every image
    return torch.from_numpy(S), si


def test_planted_hubs_are_measured_and_corrected_without_touching_plain_ranks():
    test, si = _hub_data(0)
    val, vsi = _hub_data(1)
    bank = lambda seed: {d: hubness._orient(_hub_data(seed)[0], d) for d in hubness.DIRECTIONS}  # noqa: E731
    before = (annotation_ranks(test, si).copy(), search_ranks(test, si).copy(), test.clone())
    summary, lists = hubness.evaluate(test, si, val, vsi, {"val": bank(2), "test": bank(3)}, k=5)
    assert torch.equal(test, before[2])  # the plain matrix and its ranks are untouched
    assert np.array_equal(annotation_ranks(test, si), before[0]) and np.array_equal(search_ranks(test, si), before[1])
    occ = lists["occurrence"]["search"]  # images as candidates: image 0 is the hub
    assert occ[0] == max(occ) and summary["search"]["skewness"] > 2
    assert lists["occurrence"]["annotation"][1] == max(lists["occurrence"]["annotation"])
    for key in ("inverted_softmax_inductive", "inverted_softmax_transductive", "csls_inductive", "csls_transductive"):
        for d in hubness.DIRECTIONS:
            got = summary[key][d]
            assert got["val_rsum"] >= got["val_rsum_uncorrected"]  # chosen on validation, not worse there
            assert len(lists["corrected"][key][d]) == (len(si) if d == "search" else test.shape[0])
        plain = search_ranks(test, si)
        assert np.mean(np.array(lists["corrected"][key]["search"]) <= 1) > np.mean(plain <= 1)
    grid = hubness.grid("inverted_softmax", hubness.scale_of(val), 99)
    assert summary["inverted_softmax_inductive"]["search"]["param"] in grid


def test_average_of_units():
    a = {"k": 10, "x": {"r1": 1.0, "param": 2}, "name": "a"}
    b = {"k": 10, "x": {"r1": 3.0, "param": 4}, "name": "b"}
    assert hubness.average([a, b]) == {"k": 10.0, "x": {"r1": 2.0, "param": 3.0}, "name": "a"}


def test_trainer_writes_hubness_and_the_plain_ranks_do_not_depend_on_it(tiny_full, tmp_path):
    import json

    from fraglib.run.evaluate import evaluate_run
    from fraglib.run.train import train

    from conftest import tiny_eval, tiny_spec

    cpu = torch.device("cpu")
    on = train(
        DataPaths(tiny_full), tmp_path / "on", tiny_spec("devise", epochs=2), tiny_eval(), device=cpu, progress=False
    )
    train(
        DataPaths(tiny_full),
        tmp_path / "off",
        tiny_spec("devise", epochs=2),
        tiny_eval(hubness=False),
        device=cpu,
        progress=False,
    )
    r_on, r_off = (json.loads((tmp_path / x / "ranks.json").read_text()) for x in ("on", "off"))
    assert "hubness" not in r_off and set(r_on) == set(r_off) | {"hubness"}
    assert all(r_on[d] == r_off[d] for d in r_off)  # the option's default leaves the plain ranks alone
    h = on["test"]["hubness"]
    n_img, n_sent = len(r_on["annotation"]), len(r_on["search"])
    assert len(r_on["hubness"]["occurrence"]["annotation"]) == n_sent
    assert len(r_on["hubness"]["occurrence"]["search"]) == n_img
    assert sum(r_on["hubness"]["occurrence"]["search"]) <= n_sent * h["k"]
    assert set(h) >= {"annotation", "search", "csls_inductive", "inverted_softmax_transductive"}
    again = evaluate_run(tmp_path / "on", tiny_eval())  # re-scored from the checkpoint alone
    assert again["hubness"] == json.loads(json.dumps(h)) and again["ranks"]["hubness"] == r_on["hubness"]


def test_similarity_hubness_counts_nearest_other_sentences_by_hand():
    """N₁ of the sentence-similarity task: the diagonal (a sentence itself) never counts; sentence 0 is the
    nearest other sentence of sentences 1, 2 and 3, sentence 1 of sentence 0."""
    from fraglib.run.evaluate import similarity_hubness

    sim = torch.tensor([[9.0, 0.8, 0.1, 0.0], [0.9, 9.0, 0.2, 0.1], [0.7, 0.3, 9.0, 0.5], [0.6, 0.2, 0.4, 9.0]])
    got = similarity_hubness(sim)
    assert got["k"] == 1 and got["max"] == 3 and got["never"] == 50.0  # counts (3, 1, 0, 0)
    assert got["skewness"] == pytest.approx(hubness_ref_skew([3, 1, 0, 0]))


def hubness_ref_skew(x):
    x = np.asarray(x, float)
    return float(((x - x.mean()) ** 3).mean() / x.std() ** 3)
