"""Objectives against slow loop references written straight from the equations; gradients
checked in double precision."""

import itertools

import pytest
import torch

from fraglib.systems.objectives import (
    bag_entries,
    contrastive_hinge,
    counts,
    dense_alignment,
    mil_alignment,
    mil_labels,
    pair_scores,
    total_cost,
)


def random_batch(seed=0, B=4, h=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    nv = torch.randint(1, 4, (B,), generator=g)  # 1..3 image fragments per pair
    ns = torch.randint(1, 5, (B,), generator=g)  # 1..4 sentence fragments per pair
    v_owner = torch.repeat_interleave(torch.arange(B), nv)
    s_owner = torch.repeat_interleave(torch.arange(B), ns)
    V = torch.randn(len(v_owner), h, generator=g, dtype=dtype)
    S = torch.randn(len(s_owner), h, generator=g, dtype=dtype)
    return V, S, v_owner, s_owner


# ------------------------------------------------------------------ references (loops over the equations)
def ref_hinge(M, y, normalize):
    total = 0.0
    n_rows, n_cols = len(M), len(M[0])
    for j in range(n_cols):
        pos = [i for i in range(n_rows) if y[i][j] > 0]
        neg = [i for i in range(n_rows) if y[i][j] < 0]
        for i in range(n_rows):
            w = 1.0
            if normalize:
                w = 1.0 / len(pos) if y[i][j] > 0 else 1.0 / len(neg)
            total = total + w * max(0.0, 1.0 - y[i][j] * M[i][j])
    return total


def ref_dense(V, S, vo, so, normalize):
    M = [[float(V[i] @ S[j]) for j in range(len(S))] for i in range(len(V))]
    y = [[1.0 if vo[i] == so[j] else -1.0 for j in range(len(S))] for i in range(len(V))]
    return ref_hinge(M, y, normalize)


def ref_mil(V, S, vo, so, normalize):
    M = [[float(V[i] @ S[j]) for j in range(len(S))] for i in range(len(V))]
    y = [[-1.0] * len(S) for _ in range(len(V))]
    for j in range(len(S)):
        bag = [i for i in range(len(V)) if vo[i] == so[j]]
        for i in bag:
            y[i][j] = 1.0 if M[i][j] > 0 else -1.0
        if bag and all(y[i][j] < 0 for i in bag):
            best = max(bag, key=lambda i: M[i][j])
            y[best][j] = 1.0
    return ref_hinge(M, y, normalize)


def ref_pair_scores(V, S, vo, so, B, n, accumulate):
    out = [[0.0] * B for _ in range(B)]
    for k, l in itertools.product(range(B), range(B)):
        gk = [i for i in range(len(V)) if vo[i] == k]
        gl = [j for j in range(len(S)) if so[j] == l]
        if accumulate == "sum":
            tot = sum(max(0.0, float(V[i] @ S[j])) for i in gk for j in gl)
            out[k][l] = tot / (len(gk) * (len(gl) + n))
        else:
            tot = sum(max(max(0.0, float(V[i] @ S[j])) for i in gk) for j in gl)
            out[k][l] = tot / (len(gl) + n)
    return out


def ref_global(Skl, margin, hardest=False):
    B = len(Skl)
    c = 0.0
    for k in range(B):
        sent = [max(0.0, Skl[k][l] - Skl[k][k] + margin) for l in range(B) if l != k]  # image k, sentences l
        img = [max(0.0, Skl[l][k] - Skl[k][k] + margin) for l in range(B) if l != k]  # sentence k, images l
        c += (max(sent) + max(img)) if hardest else (sum(sent) + sum(img))
    return c


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("normalize", [True, False])
def test_fragment_objectives_match_references(seed, normalize):
    V, S, vo, so = random_batch(seed)
    M = V @ S.T
    assert dense_alignment(M, vo, so, normalize).item() == pytest.approx(ref_dense(V, S, vo, so, normalize), rel=1e-10)
    assert mil_alignment(M, vo, so, normalize).item() == pytest.approx(ref_mil(V, S, vo, so, normalize), rel=1e-10)


def test_bag_entries_by_hand():
    rows, cols = bag_entries(torch.tensor([1, 0, 1]), torch.tensor([0, 1, 1, 0]))
    assert sorted(zip(rows.tolist(), cols.tolist())) == [(0, 1), (0, 2), (1, 0), (1, 3), (2, 1), (2, 2)]


@pytest.mark.parametrize("seed", range(3))
def test_fragment_objectives_with_shuffled_fragments(seed):
    """Fragments in any order (owners not grouped) give the references' values."""
    V, S, vo, so = random_batch(seed, B=5)
    g = torch.Generator().manual_seed(100 + seed)
    pv, ps = torch.randperm(len(vo), generator=g), torch.randperm(len(so), generator=g)
    Mp = (V @ S.T)[pv][:, ps]
    assert dense_alignment(Mp, vo[pv], so[ps]).item() == pytest.approx(ref_dense(V, S, vo, so, True), rel=1e-10)
    assert mil_alignment(Mp, vo[pv], so[ps]).item() == pytest.approx(ref_mil(V, S, vo, so, True), rel=1e-10)


def test_fragment_objectives_when_a_pair_has_no_image_fragment():
    V, S, _, _ = random_batch(3)
    V, S = V[:2], S[:3]
    vo, so = torch.tensor([0, 0]), torch.tensor([0, 1, 1])  # pair 1: sentence fragments only
    for normalize in (True, False):
        M = V @ S.T
        assert dense_alignment(M, vo, so, normalize).item() == pytest.approx(
            ref_dense(V, S, vo, so, normalize), rel=1e-10
        )
        assert mil_alignment(M, vo, so, normalize).item() == pytest.approx(ref_mil(V, S, vo, so, normalize), rel=1e-10)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("accumulate", ["sum", "max"])
def test_global_objective_matches_reference(seed, accumulate):
    V, S, vo, so = random_batch(seed)
    B = int(vo.max()) + 1
    Skl = pair_scores(V @ S.T, vo, so, B, B, 5.0, accumulate)
    ref = ref_pair_scores(V, S, vo, so, B, 5.0, accumulate)
    torch.testing.assert_close(Skl, torch.tensor(ref, dtype=Skl.dtype), rtol=1e-10, atol=1e-12)
    assert contrastive_hinge(Skl, 0.7, False).item() == pytest.approx(ref_global(ref, 0.7), rel=1e-10)
    assert contrastive_hinge(Skl, 0.7, hardest=True).item() == pytest.approx(ref_global(ref, 0.7, True), rel=1e-10)
    assert contrastive_hinge(Skl, 0.7, hardest=True).item() < contrastive_hinge(Skl, 0.7, False).item()


def test_mil_labels_force_one_positive_per_bag():
    M = torch.tensor([[-0.5, 2.0], [-0.1, -1.0], [0.3, -3.0]], dtype=torch.float64)
    vo = torch.tensor([0, 0, 1])
    so = torch.tensor([0, 1])
    y = mil_labels(M, vo, so)
    # column 0 (pair 0): bag rows 0,1 both negative -> the best (row 1, -0.1) is forced positive
    # column 1 (pair 1): bag row 2 negative -> forced positive; rows 0, 1 are outside: -1
    assert y.tolist() == [[-1.0, -1.0], [1.0, -1.0], [-1.0, 1.0]]


def test_gradients_in_double_precision():
    V, S, vo, so = random_batch(7, B=3, h=4)
    V.requires_grad_(True)
    S.requires_grad_(True)
    for dense, acc, hard in [(True, "sum", False), (False, "sum", False), (False, "max", False), (True, "sum", True)]:
        f = lambda a, b: total_cost(a, b, vo, so, dense=dense, beta=0.5, margin=1.0, accumulate=acc, hardest=hard)[0]
        assert torch.autograd.gradcheck(f, (V, S), eps=1e-6, atol=1e-6)


def test_switching_terms_off():
    V, S, vo, so = random_batch(3)
    frag_only, parts = total_cost(V, S, vo, so, dense=True, beta=0.0)
    assert set(parts) == {"C_0"}
    glob_only, parts = total_cost(V, S, vo, so, dense=False, fragment_weight=0.0, beta=1.0)
    assert set(parts) == {"C_G"}
    both, parts = total_cost(V, S, vo, so, dense=True, beta=1.0)
    B = int(vo.max()) + 1
    assert both.item() == pytest.approx(
        frag_only.item() + contrastive_hinge(pair_scores(V @ S.T, vo, so, B, B), 1.0, False).item()
    )


@pytest.mark.parametrize("dense", [True, False])
def test_given_bags_and_pair_count_change_no_bit(dense):
    """What the GPU path hands the objective (bag entries worked out on the CPU, the number of pairs known to
    the loader, one of them without sentence fragments) gives the cost and gradients bit for bit; ``counts``
    is ``bincount``; the parts are detached 0-d tensors."""
    V, S, vo, so = random_batch(11, B=5, dtype=torch.float32)
    keep = so != 4  # pair 4: no sentence fragment
    S, so = S[keep], so[keep]
    out = {}
    for given in (False, True):
        a, b = V.clone().requires_grad_(), S.clone().requires_grad_()
        kw = dict(n=5, bags=bag_entries(vo, so, 5)) if given else {}
        cost, parts = total_cost(a, b, vo, so, dense=dense, beta=0.5, **kw)
        cost.backward()
        out[given] = (cost.detach(), a.grad, b.grad, parts)
    for x, y in zip(out[False][:3], out[True][:3]):
        assert torch.equal(x, y)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in out[True][3].values())
    assert torch.equal(counts(so, 6, torch.float32), torch.bincount(so, minlength=6).float())
