"""Peri's (2018) systems against slow references written from the equations (docs/systems.md):
Eq. 7 (sum and hardest negative, same-image masking), the order-violation similarity, the attention
of Eqs. 13–17, GRU padding, VSE++'s median rank and the batches with images drawn twice."""

import numpy as np
import pytest
import torch

from fraglib.core.batches import Rows
from fraglib.metrics.retrieval import median_rank_vsepp
from fraglib.run.inputs import DataPaths
from fraglib.systems import vse
from fraglib.systems.objectives import contrastive_hinge, hinge_diagnostics, order_scores
from fraglib.systems.vse import VseSystem, attention_scores, attention_scores_reference


@pytest.fixture
def f64():
    """Double precision for the comparisons with the loop references (restored afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def hinge_loop(S, margin, hardest, same):
    """Eq. 7 term by term: for each pair b, its caption-retrieval and image-retrieval hinges."""
    B = len(S)
    total = 0.0
    for b in range(B):
        neg = [c for c in range(B) if c != b and not (same is not None and same[b][c])]
        cap = [max(0.0, margin - S[b][b] + S[b][c]) for c in neg]
        img = [max(0.0, margin - S[b][b] + S[c][b]) for c in neg]
        total += (max(cap, default=0.0) + max(img, default=0.0)) if hardest else (sum(cap) + sum(img))
    return total


@pytest.mark.parametrize("hardest", [True, False])
@pytest.mark.parametrize("masked", [True, False])
def test_contrastive_hinge_matches_the_equation(hardest, masked, f64):
    g = torch.Generator().manual_seed(0)
    S = torch.randn(6, 6, generator=g) * 0.3
    image = torch.tensor([0, 1, 0, 2, 3, 1])  # pairs 0 & 2 and 1 & 5 share an image
    same = (image[:, None] == image[None, :]) & ~torch.eye(6, dtype=torch.bool)
    got = contrastive_hinge(S, 0.2, hardest, same if masked else None)
    want = hinge_loop(S.tolist(), 0.2, hardest, same.tolist() if masked else None)
    assert float(got) == pytest.approx(want, rel=1e-12)
    if masked:  # a same-image caption scoring above the true one is no violation when masked
        S2 = S.clone()
        S2[0, 2] = 10.0
        assert float(contrastive_hinge(S2, 0.2, hardest, same)) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("masked", [True, False])
def test_collapse_diagnostics_match_a_loop(masked, f64):
    """hinge_diagnostics term by term: violated negatives of both directions; each image's hardest caption
    and each caption's hardest image, and whether its image is in the positive's group."""
    g = torch.Generator().manual_seed(3)
    S = torch.randn(7, 7, generator=g) * 0.3
    image = torch.tensor([0, 1, 0, 2, 3, 1, 4])
    group = torch.tensor([0, 1, 0, 1, 0, 1, 1])[image]
    same = (image[:, None] == image[None, :]) & ~torch.eye(7, dtype=torch.bool)
    got = hinge_diagnostics(S, 0.2, same if masked else None, group)
    B, viol, n_neg, hits, n_hard, same_group = 7, 0, 0, 0, 0, 0
    for b in range(B):
        neg = [c for c in range(B) if c != b and not (masked and same[b, c])]
        for c in neg:
            n_neg += 1
            viol += int(0.2 - S[b, b] + S[b, c] > 0) + int(0.2 - S[b, b] + S[c, b] > 0)
            same_group += int(group[c] == group[b])
        hc = max(neg, key=lambda c: S[b, c])  # image b's hardest caption (caption of pair hc)
        hi = max(neg, key=lambda c: S[c, b])  # caption b's hardest image
        hits += int(group[hc] == group[b]) + int(group[hi] == group[b])
        n_hard += 2
    assert got["violating"] == pytest.approx(float(viol) / (2 * n_neg))
    assert got["hardest_same_group"] == pytest.approx(float(hits) / n_hard)
    assert got["same_group_negatives"] == pytest.approx(float(same_group) / n_neg)
    # a collapsed batch (every score alike) violates every negative; no groups: no group entries
    assert hinge_diagnostics(torch.zeros(4, 4), 0.2) == {"violating": 1.0}


def test_order_similarity_by_hand_and_tiled(f64):
    img = torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.9, 0.3]])
    cap = torch.tensor([[0.2, 0.4, 0.0], [0.6, 0.1, 0.3]])
    # S(i, c) = -|| max(0, c - i) ||^2
    want = torch.tensor([[0.0, -(0.1**2 + 0.3**2)], [-(0.1**2), -(0.5**2)]])
    torch.testing.assert_close(order_scores(img, cap), want)
    g = torch.Generator().manual_seed(1)
    a, b = torch.rand(7, 5, generator=g), torch.rand(11, 5, generator=g)
    torch.testing.assert_close(order_scores(a, b, max_elems=7 * 5 * 2), order_scores(a, b))


def attention_loop(V, nv, E, ne, lam, clipped):
    """S(I, T) straight from Eqs. 13-17, one (image, caption) at a time, with the attended vector a_i
    formed explicitly; returns the scores and the attention weights of every pair."""
    n, m = len(V), len(E)
    S, alphas = torch.zeros(n, m), {}
    for k in range(n):
        for t in range(m):
            v, e = V[k, : nv[k]], E[t, : ne[t]]
            s = torch.stack([torch.stack([vi @ ej / (vi.norm() * ej.norm()) for ej in e]) for vi in v])  # (13)
            z = s
            if clipped:  # SCAN: LeakyReLU, L2 over regions per word
                z = torch.where(s > 0, s, 0.1 * s)
                z = z / z.norm(dim=0, keepdim=True)
            alpha = torch.stack([torch.exp(lam * z[i]) / torch.exp(lam * z[i]).sum() for i in range(len(v))])  # (15)
            rel = []
            for i, vi in enumerate(v):
                a = sum(alpha[i, j] * e[j] for j in range(len(e)))  # (14)
                rel.append(vi @ a / (vi.norm() * a.norm()))  # (17)
            S[k, t] = torch.stack(rel).mean()  # (16)
            alphas[k, t] = alpha
    return S, alphas


@pytest.mark.parametrize("clipped", [False, True])
def test_attention_matches_the_equations_and_tiles(clipped, f64):
    g = torch.Generator().manual_seed(2)
    nv, ne = [3, 1, 4], [2, 5, 1, 3]
    V = torch.nn.functional.normalize(torch.randn(3, 4, 6, generator=g), dim=2)
    E = torch.nn.functional.normalize(torch.randn(4, 5, 6, generator=g), dim=2)
    vm = torch.arange(4)[None] < torch.tensor(nv)[:, None]
    em = torch.arange(5)[None] < torch.tensor(ne)[:, None]
    V, E = V * vm[..., None], E * em[..., None]  # padding rows are zero, as the encoders give
    want, alphas = attention_loop(V, nv, E, ne, 4.0, clipped)
    torch.testing.assert_close(attention_scores(V, vm, E, em, 4.0, clipped), want)
    torch.testing.assert_close(attention_scores(V, vm, E, em, 4.0, clipped, max_elems=1), want)  # one caption per tile
    for a in alphas.values():  # softmax over the words, per region
        torch.testing.assert_close(a.sum(1), torch.ones(len(a)))


def test_attention_and_order_gradients(f64):
    g = torch.Generator().manual_seed(3)
    V = torch.nn.functional.normalize(torch.randn(2, 3, 4, generator=g), dim=2).requires_grad_()
    E = torch.nn.functional.normalize(torch.randn(3, 2, 4, generator=g), dim=2).requires_grad_()
    vm, em = torch.ones(2, 3, dtype=torch.bool), torch.tensor([[True, True], [True, False], [True, True]])
    assert torch.autograd.gradcheck(lambda a, b: attention_scores(a, vm, b, em, 4.0, True), (V, E))
    x, y = torch.rand(3, 4, generator=g).requires_grad_(), torch.rand(5, 4, generator=g).requires_grad_()
    assert torch.autograd.gradcheck(order_scores, (x, y))
    S = torch.randn(4, 4, generator=g).requires_grad_()
    assert torch.autograd.gradcheck(lambda s: contrastive_hinge(s, 0.2, False), (S,))


def ragged_attention_inputs(n, m, R, L, D, seed, dtype=torch.float64):
    """Unit regions and words with random real counts, zero padding (as the encoders give)."""
    g = torch.Generator().manual_seed(seed)
    V = torch.nn.functional.normalize(torch.randn(n, R, D, generator=g, dtype=dtype), dim=2)
    E = torch.nn.functional.normalize(torch.randn(m, L, D, generator=g, dtype=dtype), dim=2)
    vm = torch.arange(R)[None] < torch.randint(1, R + 1, (n,), generator=g)[:, None]
    em = torch.arange(L)[None] < torch.randint(1, L + 1, (m,), generator=g)[:, None]
    return (V * vm[..., None]).requires_grad_(), vm, (E * em[..., None]).requires_grad_(), em


@pytest.mark.parametrize("lam", [4.0, 60.0])  # shift by λ | by the largest real word
@pytest.mark.parametrize("keep", [True, False])  # backward from kept tiles | recomputed
@pytest.mark.parametrize("device", ["cpu", "cuda"])  # the tile shape chosen for that device, run here
def test_fused_attention_equals_the_reference(lam, keep, device, monkeypatch):
    """The fused scorer (length-sorted caption tiles, closed-form backward) gives the autograd
    reference's scores and gradients: float64 to 1e-12, float32 to 1e-5 × λ/4 (the gradient carries λ s);
    tiles of one image too, and the GPU's tile shape (all 70 captions in one tile) on this machine."""
    monkeypatch.setattr(vse, "KEEP_ELEMS", 1 << 30 if keep else 0)
    shape = vse.tile_shape(torch.device(device))
    monkeypatch.setattr(vse, "tile_shape", lambda _: shape)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5 * max(1.0, lam / 4))):
        V, vm, E, em = ragged_attention_inputs(9, 70, 5, 9, 8, seed=4, dtype=dtype)
        W = torch.randn(9, 70, generator=torch.Generator().manual_seed(5), dtype=dtype)
        want = attention_scores_reference(V, vm, E, em, lam)
        gw = torch.autograd.grad((want * W).sum(), (V, E))
        for max_elems in (1 << 24, 1):
            got = attention_scores(V, vm, E, em, lam, max_elems=max_elems)
            torch.testing.assert_close(got, want, rtol=tol, atol=tol)
            for a, b in zip(torch.autograd.grad((got * W).sum(), (V, E)), gw):
                torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_fused_attention_gradcheck(f64):
    V, vm, E, em = ragged_attention_inputs(3, 5, 4, 6, 5, seed=6)
    assert torch.autograd.gradcheck(lambda a, b: attention_scores(a, vm, b, em, 4.0), (V, E))


def test_standardized_linear_equals_standardise_then_map():
    from fraglib.systems.base import image_map, standardized_linear

    g = torch.Generator().manual_seed(7)
    lin = image_map(30, 8)
    torch.nn.init.normal_(lin.bias, generator=g)
    x, mu, sd = (
        torch.randn(50, 30, generator=g) * 3 + 1,
        torch.randn(30, generator=g),
        torch.rand(30, generator=g) + 0.1,
    )
    want = lin((x - mu) / sd)
    got = standardized_linear(lin, x, mu, sd)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    gw = torch.autograd.grad(want.square().sum(), (lin.weight, lin.bias))
    for a, b in zip(torch.autograd.grad(got.square().sum(), (lin.weight, lin.bias)), gw):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def token_rows(captions, index=None):
    """Rows of the tokens view holding ``captions`` (lists of vocabulary ids)."""
    rel = torch.tensor([t for c in captions for t in c], dtype=torch.long)
    owner = torch.tensor([n for n, c in enumerate(captions) for _ in c], dtype=torch.long)
    return Rows(
        {"rel": rel, "w1": rel.clone()}, owner, len(captions), np.arange(len(captions)) if index is None else index
    )


@pytest.mark.parametrize("similarity", ["cosine", "attention"])
def test_padding_never_changes_a_caption(similarity, f64):
    torch.manual_seed(0)
    cfg = VseSystem.Config(embed_dim=8, word_dim=6, hidden=7, similarity=similarity)
    system = VseSystem(cfg, {"n_relations": 20, "n_words": 20, "word_dim": 50, "img_dim": 5}).eval()
    caps = [[3, 4], [5, 6, 7, 8, 9, 1], [2]]
    batch = system.encode_sentences(token_rows(caps))
    for n, c in enumerate(caps):
        alone = system.encode_sentences(token_rows([c]))
        if similarity == "cosine":
            torch.testing.assert_close(batch[n], alone[0])
        else:
            torch.testing.assert_close(batch[0][n, : len(c)], alone[0][0])
            assert batch[1][n].sum() == len(c) and not batch[0][n, len(c) :].any()


def test_vsepp_median_rank_on_an_even_number_of_queries():
    ranks = np.array([1, 2, 3, 4])  # median of 1-based ranks 2.5; VSE++: floor(1.5) + 1 = 2
    assert median_rank_vsepp(ranks) == 2.0 and np.median(ranks) == 2.5
    assert median_rank_vsepp(np.array([0, 1, 1, 5, 9])) == 3.0  # rank 0 (no query) ignored: floor(2) + 1


def test_batches_with_repeated_images_and_the_mask(tiny_full):
    from fraglib.core.batches import Views
    from fraglib.run.inputs import load_splits, make_batches

    tr = load_splits(DataPaths(tiny_full), Views("fullframe", "tokens"), torch.device("cpu"))[0]["train"]
    plain = make_batches(tr, 8, seed=0, epoch=0, distinct=False)
    usable = np.nonzero(tr.usable_sentences())[0]
    assert sorted(np.concatenate(plain).tolist()) == sorted(usable.tolist())
    assert all(len(b) == 8 for b in plain[:-1])
    repeats = sum(len(b) - len(set(tr.sentence_image[b])) for b in plain)
    assert repeats > 0, "the tiny benchmark has 5 captions per image: plain batches repeat images"
    for b in make_batches(tr, 8, seed=0, epoch=0):
        assert len(set(tr.sentence_image[b])) == len(b)
    torch.manual_seed(0)
    system = VseSystem(
        VseSystem.Config(embed_dim=8, word_dim=6, hidden=7),
        {
            "n_relations": int(tr.sentences.data["rel"].max()) + 1,
            "n_words": 1,
            "word_dim": 50,
            "img_dim": tr.images.data["x"].shape[1],
        },
    )
    b = max(plain, key=lambda b: len(b) - len(set(tr.sentence_image[b])))
    _, parts = system.loss(
        system.encode_images(tr.images.take(tr.sentence_image[b])), system.encode_sentences(tr.sentences.take(b)), 0
    )
    k = tr.sentence_image[b]
    assert parts["same_image_pairs"] == ((k[:, None] == k[None, :]).sum() - len(k)) / 2
