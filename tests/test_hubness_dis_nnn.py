"""QB-Norm's dynamic inverted softmax (DIS) and nearest-neighbour normalisation (NNN) against loops written from
the papers' definitions (fraglib/metrics/hubness.py, docs/evaluation.md "Hubness"), and their place in the evaluation."""

import math

import numpy as np
import pytest
import torch
from test_hubness import _hub_data, _lse, _tied

from fraglib.metrics import hubness
from fraglib.metrics.retrieval import annotation_ranks

INF = float("-inf")


def _cases():
    """(Q, bank) pairs: tied integer scores with an empty candidate and a query tied at its top; a one-row bank."""
    Q = _tied(6, 5, seed=3, levels=4)
    Q[:, 3] = INF  # a candidate without rows
    Q[2, 0] = Q[2, 1] = 9.0  # query 2 has two top-1 candidates
    B = _tied(4, 5, seed=4, levels=4)
    B[1, 3] = INF
    yield Q, B
    R = torch.randn(4, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    yield R, R[:1] * 2.0  # tiny bank: one query


def _top(row, k):
    """Candidates in a row's top k, ties included: finite, fewer than k others strictly higher."""
    return {c for c, x in enumerate(row) if math.isfinite(x) and sum(y > x for y in row) < k}


def _loop_dis(Q, beta, bank, k):
    Q = Q.tolist()
    out = []
    for q, row in enumerate(Q):
        rows = bank.tolist() if bank is not None else [r for b, r in enumerate(Q) if b != q]
        active = set().union(*(_top(r, k) for r in rows))
        if _top(row, 1) & active:  # the query's top-1 is a candidate some bank query ranks in its top k
            row = [beta * x - _lse([beta * r[c] for r in rows]) if math.isfinite(x) else INF for c, x in enumerate(row)]
        out.append(row)
    return out


def _loop_nnn(Q, alpha, k, bank):
    Q = Q.tolist()
    out = []
    for q, row in enumerate(Q):
        rows = bank.tolist() if bank is not None else [r for b, r in enumerate(Q) if b != q]
        r = [np.mean(sorted((x[c] for x in rows), reverse=True)[:k]) for c in range(len(row))]
        out.append([x - alpha * r[c] if math.isfinite(x) else INF for c, x in enumerate(row)])
    return out


def _close(got, want):
    got = got.tolist()
    for g_row, w_row in zip(got, want, strict=True):
        for g, w in zip(g_row, w_row, strict=True):
            assert (g == w == INF) or g == pytest.approx(w, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("beta", [0.6, 30.0])
def test_dis_equals_the_loop_in_both_protocols(beta, k):
    for Q, B in _cases():
        _close(hubness.dis(Q, beta, B, k=k), _loop_dis(Q, beta, B, k))
        _close(hubness.dis(Q, beta, None, k=k), _loop_dis(Q, beta, None, k))


def test_dis_normalises_only_queries_whose_top_one_is_active():
    """Query 0's best candidate (0) is the training query's best, query 1's (2) nobody's: only row 0 changes;
    transductively, query 2 shares query 0's best, so both are normalised, and query 1 still is not."""
    Q = torch.tensor([[5.0, 1.0, 0.0], [0.0, 1.0, 4.0], [3.0, 0.0, 1.0]], dtype=torch.float64)
    B = torch.tensor([[2.0, 0.0, 1.0]], dtype=torch.float64)
    assert hubness.activated(Q, 1, B).tolist() == [True, False, True]
    assert hubness.activated(Q, 1).tolist() == [True, False, True]
    assert hubness.activated(Q[:2], 1).tolist() == [False, False]  # a query's own vote does not count
    got = hubness.dis(Q, 1.0, B)
    assert torch.equal(got[1], Q[1]) and torch.allclose(got[0], hubness.inverted_softmax(Q, 1.0, B)[0])


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_nnn_equals_the_loop_in_both_protocols(alpha, k):
    for Q, B in _cases():
        if k <= B.shape[0]:
            _close(hubness.nnn(Q, alpha, k, B), _loop_nnn(Q, alpha, k, B))
        _close(hubness.nnn(Q, alpha, k, None), _loop_nnn(Q, alpha, k, None))


@pytest.mark.parametrize("seed", [0, 1])
def test_csls_ranks_are_nnn_ranks_at_alpha_one_half(seed):
    """2 (Q − r/2) = 2Q − r: CSLS is NNN at α = 1/2 scaled by 2, exactly, so every rank is the same."""
    Q = _tied(12, 30, seed=seed) if seed else torch.randn(12, 30, generator=torch.Generator().manual_seed(6))
    B = _tied(7, 30, seed=9)
    si = np.repeat(np.arange(12), 30 // 12 + 1)[:30]
    for bank in (B, None):
        for k in (1, 3):
            half = hubness.nnn(Q, 0.5, k, bank)
            assert torch.equal(2 * half, hubness.csls(Q, k, bank))
            assert np.array_equal(annotation_ranks(half, si), annotation_ranks(hubness.csls(Q, k, bank), si))


def test_bad_parameters_are_named():
    Q = torch.randn(3, 4, dtype=torch.float64)
    for alpha in (math.nan, math.inf, -0.5):
        with pytest.raises(ValueError, match="NNN: the weight α must be finite and >= 0"):
            hubness.nnn(Q, alpha, 1)
    with pytest.raises(ValueError, match="transductive NNN k=3: needs 1 <= k <= 2 other queries"):
        hubness.nnn(Q, 0.5, 3)
    with pytest.raises(ValueError, match="NNN k=2: needs 1 <= k <= 1 bank queries"):
        hubness.nnn(Q, 0.5, 2, Q[:1])
    for k in (0, 5):
        with pytest.raises(ValueError, match=f"DIS k={k}: needs 1 <= k <= 4 candidates"):
            hubness.dis(Q, 1.0, None, k=k)
    with pytest.raises(ValueError, match="transductive DIS needs at least 2 queries"):
        hubness.dis(Q[:1], 1.0)
    with pytest.raises(ValueError, match="β must be finite and > 0"):
        hubness.dis(Q, 0.0, Q)


def test_the_sweep_yields_exactly_what_correct_applies():
    """Validation picks parameters from the shared-work sweep, test applies ``correct``: the same matrices."""
    Q = _tied(9, 7, seed=2)
    Q[:, 1] = INF
    B = _tied(5, 7, seed=8)
    for bank, n_bank in ((B, 5), (None, 8)):
        grids = {m: hubness.grid(m, 1.3, n_bank) for m in hubness.METHODS}
        seen = {m: [] for m in hubness.METHODS}
        for method, p, X in hubness.sweep(Q, bank, grids):
            seen[method].append(p)
            assert torch.equal(X, hubness.correct(Q, method, p, bank)), (method, p)
        assert seen == grids  # every grid point once, in grid order
    assert hubness.grid("nnn", 1.0, 12) == [(a, k) for k in (1, 10) for a in hubness.NNN_ALPHAS]
    assert hubness.grid("nnn", 1.0, 0) == [(a, 1) for a in hubness.NNN_ALPHAS]


def test_nnn_agrees_with_the_nnn_retrieval_ranker():
    """Our NNN on inner-product scores against nnn-retrieval's NNNRanker (the authors' package): the same top
    candidates and corrected scores, for a reference (bank) set of queries."""
    nnn_pkg = pytest.importorskip("nnn", reason="nnn-retrieval is not installed (pyproject.toml's dev extras)")
    g = np.random.default_rng(0)
    candidates, reference, queries = g.normal(size=(40, 8)), g.normal(size=(25, 8)), g.normal(size=(10, 8))
    for alpha, k in ((0.5, 1), (0.75, 5), (1.0, 25)):
        retriever = nnn_pkg.NNNRetriever(8)
        ranker = nnn_pkg.NNNRanker(retriever, candidates, reference, alternate_ks=k, alternate_weight=alpha)
        scores, idx = ranker.search(queries, 40)
        ours = hubness.nnn(
            torch.from_numpy(queries @ candidates.T), alpha, k, torch.from_numpy(reference @ candidates.T)
        )
        top = ours.topk(40, dim=1)
        assert np.array_equal(top.indices.numpy(), idx)
        assert np.allclose(top.values.numpy(), scores, atol=1e-10)


def test_evaluate_writes_the_new_corrections():
    test, si = _hub_data(0)
    val, vsi = _hub_data(1)
    bank = lambda seed: {d: hubness._orient(_hub_data(seed)[0], d) for d in hubness.DIRECTIONS}  # noqa: E731
    banks = {"val": bank(2), "test": bank(3)}
    summary, lists = hubness.evaluate(test, si, val, vsi, banks, k=5)
    scale = hubness.scale_of(val)
    for protocol in hubness.PROTOCOLS:
        for d in hubness.DIRECTIONS:
            qt = hubness._orient(test, d)
            bt = banks["test"][d] if protocol == "inductive" else None
            n_bank = min(banks["val"][d].shape[0], bt.shape[0]) if bt is not None else qt.shape[0] - 1
            dis, nnn = summary[f"dis_{protocol}"][d], summary[f"nnn_{protocol}"][d]
            assert dis["param"] in hubness.grid("dis", scale, n_bank) and 0 <= dis["active"] <= 100
            assert (nnn["param"], nnn["param_k"]) in hubness.grid("nnn", scale, n_bank)
            for got in (dis, nnn):
                assert got["val_rsum"] >= got["val_rsum_uncorrected"]
            want = hubness.nnn(qt, nnn["param"], nnn["param_k"], bt)
            ranks = hubness._ranks(want, d, si, "test")
            assert lists["corrected"][f"nnn_{protocol}"][d] == ranks.tolist()
            assert summary[f"nnn_{protocol}"][d]["r1"] == pytest.approx(100 * np.mean(ranks <= 1))


def test_average_leaves_out_a_correction_some_units_lack():
    """Units written before DIS and NNN existed lack their keys: the mean keeps what every unit has."""
    new = {"k": 10, "csls_inductive": {"r1": 2.0}, "nnn_inductive": {"r1": 5.0, "param_k": 10}}
    old = {"k": 10, "csls_inductive": {"r1": 4.0}}
    assert hubness.average([new, old]) == {"k": 10.0, "csls_inductive": {"r1": 3.0}}
