"""Property-based tests (Hypothesis) of the one ranking path (fraglib/metrics/retrieval.py) and the hubness
corrections (fraglib/metrics/hubness.py) against loops written straight from their definitions, over score
matrices with many ties, -inf ("no score"), NaN and +inf, and degenerate shapes (one image, one sentence,
images without sentences). The examples are derandomised: CI sees the same cases on every run."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fraglib.metrics import hubness
from fraglib.metrics.retrieval import ScoreError, annotation_ranks, evaluate_scores, search_ranks, similarity_ranks

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)
# few distinct values: ties everywhere; -inf is a legitimate "no score"
VALUES = st.sampled_from([-2.0, -0.5, 0.0, 0.5, 1.0, 3.0, -math.inf])


@st.composite
def problems(draw, bad: bool = False):
    """(scores (n_img, n_sent) float64, sentence_image (n_sent,)); ``bad``: at least one NaN or +inf."""
    n_img = draw(st.integers(1, 6))
    n_sent = draw(st.integers(1, 9))
    si = np.array(draw(st.lists(st.integers(0, n_img - 1), min_size=n_sent, max_size=n_sent)), np.int64)
    S = np.array(draw(st.lists(VALUES, min_size=n_img * n_sent, max_size=n_img * n_sent)), np.float64)
    S = S.reshape(n_img, n_sent)
    if bad:
        i, j = draw(st.integers(0, n_img - 1)), draw(st.integers(0, n_sent - 1))
        S[i, j] = draw(st.sampled_from([math.nan, math.inf]))
    return S, si


def loop_annotation(S, si):
    """1 + #{sentences of other images scoring >= the image's best own sentence}; 0 without sentences."""
    out = []
    for k in range(S.shape[0]):
        own = [S[k, j] for j in range(S.shape[1]) if si[j] == k]
        if not own:
            out.append(0)
            continue
        out.append(1 + sum(S[k, j] >= max(own) for j in range(S.shape[1]) if si[j] != k))
    return out


def loop_search(S, si):
    """1 + #{other images scoring >= the sentence's own image}."""
    return [1 + sum(S[k, j] >= S[si[j], j] for k in range(S.shape[0]) if k != si[j]) for j in range(S.shape[1])]


def loop_similarity(T, si):
    """Each sentence ranks the others: 1 + #{other-image sentences >= its best same-image one}; 0 if alone."""
    out = []
    n = T.shape[0]
    for a in range(n):
        same = [T[a, b] for b in range(n) if b != a and si[b] == si[a]]
        if not same:
            out.append(0)
            continue
        out.append(1 + sum(T[a, b] >= max(same) for b in range(n) if b != a and si[b] != si[a]))
    return out


@SETTINGS
@given(problems(), st.sampled_from([1, 2, 256]))
def test_ranks_equal_the_loops_with_ties_and_minus_inf(problem, chunk):
    S, si = problem
    assert annotation_ranks(S, si, chunk=chunk).tolist() == loop_annotation(S, si)
    assert search_ranks(S, si, chunk=chunk).tolist() == loop_search(S, si)
    # ranks are pessimistic and bounded: never better than 1, never past every competitor
    a = annotation_ranks(S, si)
    assert all(1 <= r <= 1 + int((si != k).sum()) for k, r in enumerate(a) if (si == k).any())


@SETTINGS
@given(problems(bad=True))
def test_nan_or_plus_inf_anywhere_is_refused_never_ranked(problem):
    S, si = problem
    for rank in (annotation_ranks, search_ranks):
        with pytest.raises(ScoreError, match=r"run x, test: \d+ of \d+ scores are NaN or \+inf"):
            rank(S, si, what="run x, test")
    with pytest.raises(ScoreError, match="run x, test"):
        evaluate_scores(S, si, n_boot=2, what="run x, test")


def test_a_diverged_model_never_scores_as_perfect():
    """The issue's case: every weight NaN -> every score NaN. Before, every rank was 1 (R@1 = 100 %)."""
    S = np.full((4, 8), np.nan)
    si = np.repeat(np.arange(4), 2)
    with pytest.raises(ScoreError, match="32 of 32 scores are NaN"):
        evaluate_scores(S, si, n_boot=5, what="runs/x/seeds/seed0: test scores of best.pt")


@SETTINGS
@given(
    st.integers(1, 7).flatmap(
        lambda n: st.tuples(
            st.lists(VALUES, min_size=n * n, max_size=n * n), st.lists(st.integers(0, 2), min_size=n, max_size=n)
        )
    )
)
def test_similarity_ranks_equal_the_loop(case):
    values, si = case
    n = len(si)
    T, si = np.array(values).reshape(n, n), np.array(si)
    assert similarity_ranks(T, si, chunk=2).tolist() == loop_similarity(T, si)


@pytest.mark.parametrize("shape, si", [((3, 4), [0, 1, 2]), ((3, 4), [0, 1, 2, 3]), ((4,), [0, 1, 2, 3])])
def test_mismatched_shapes_are_refused_by_name(shape, si):
    with pytest.raises(ScoreError, match="fused val"):
        annotation_ranks(np.zeros(shape), np.array(si), what="fused val")


def _lse(xs):
    m = max(xs)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in xs))


@st.composite
def corrections(draw):
    """(Q (n_q, n_c), bank (n_b, n_c)), finite with ties (the corrections' inputs after the ranking check)."""
    n_q, n_c, n_b = draw(st.integers(2, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    vals = st.sampled_from([-1.5, 0.0, 0.25, 1.0, 2.0])
    Q = np.array(draw(st.lists(vals, min_size=n_q * n_c, max_size=n_q * n_c))).reshape(n_q, n_c)
    B = np.array(draw(st.lists(vals, min_size=n_b * n_c, max_size=n_b * n_c))).reshape(n_b, n_c)
    return torch.from_numpy(Q), torch.from_numpy(B)


@SETTINGS
@given(corrections(), st.sampled_from([0.3, 1.0, 7.0]))
def test_inverted_softmax_equals_the_loop(case, beta):
    Q, B = case
    ind, tra = hubness.inverted_softmax(Q, beta, B), hubness.inverted_softmax(Q, beta)
    for q in range(Q.shape[0]):
        for c in range(Q.shape[1]):
            want = beta * float(Q[q, c]) - _lse([beta * float(B[b, c]) for b in range(B.shape[0])])
            assert float(ind[q, c]) == pytest.approx(want, rel=1e-9, abs=1e-9)
            others = [beta * float(Q[b, c]) for b in range(Q.shape[0]) if b != q]
            assert float(tra[q, c]) == pytest.approx(beta * float(Q[q, c]) - _lse(others), rel=1e-9, abs=1e-9)


@SETTINGS
@given(corrections(), st.integers(1, 4))
def test_csls_equals_the_loop(case, k):
    Q, B = case
    if k <= B.shape[0]:
        got = hubness.csls(Q, k, B)
        for q in range(Q.shape[0]):
            for c in range(Q.shape[1]):
                top = sorted((float(B[b, c]) for b in range(B.shape[0])), reverse=True)[:k]
                assert float(got[q, c]) == pytest.approx(2 * float(Q[q, c]) - np.mean(top))
    else:
        with pytest.raises(ValueError, match=f"CSLS k={k}"):
            hubness.csls(Q, k, B)


@SETTINGS
@given(corrections(), st.integers(1, 6))
def test_k_occurrence_equals_the_loop_or_refuses_a_k_past_the_gallery(case, k):
    Q, _ = case
    n_c = Q.shape[1]
    if k >= n_c:  # every candidate in every top k: N_k constant, "no hubness" whatever the scores
        with pytest.raises(ValueError, match=rf"hubness k = {k}: needs 1 <= k < {n_c}"):
            hubness.k_occurrence(Q, k)
        return
    want = [
        sum(1 + sum(float(Q[q, o]) >= float(Q[q, c]) for o in range(n_c) if o != c) <= k for q in range(Q.shape[0]))
        for c in range(n_c)
    ]
    assert hubness.k_occurrence(Q, k, chunk=2).tolist() == want


@pytest.mark.parametrize("beta", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_inverted_softmax_refuses_a_temperature_that_is_not_positive_and_finite(beta):
    Q = torch.zeros(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="β must be finite and > 0"):
        hubness.inverted_softmax(Q, beta)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (checked on a lent GPU machine)")
def test_ranks_and_the_nan_refusal_on_cuda_equal_the_cpu():
    rng = np.random.default_rng(0)
    S = rng.integers(0, 4, (300, 700)).astype(np.float32)  # ties; more rows than one chunk
    si = rng.integers(0, 300, 700)
    St = torch.from_numpy(S).cuda()
    assert np.array_equal(annotation_ranks(St, si), annotation_ranks(S, si))
    assert np.array_equal(search_ranks(St, si), search_ranks(S, si))
    St[257, 3] = float("nan")
    with pytest.raises(ScoreError, match=r"1 of 210000 scores are NaN or \+inf \(first at \[257, 3\]"):
        search_ranks(St, si, what="cuda")
