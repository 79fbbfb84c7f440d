"""The math of Socher et al. 2014's sentence encoders and objectives, as pure functions.

**One composition for every recursive encoder.** A forest of nodes (all trees of a batch, node
``i`` with ``parent[i]``, -1 at a root) is computed bottom-up as

    h_i = f( scale_i · ( base_i + Σ_{j ∈ C(i)} weight_j · W[slot_j] h_j ) )

and nodes marked ``raw`` take ``h_i = base_i`` unchanged. The encoders are settings of it
(docs/systems.md):

=============  ===========================  =============  ========  ===========  =========
encoder        nodes                        base_i          slot_j    weight_j     scale_i
=============  ===========================  =============  ========  ===========  =========
DT-RNN         words, basic tree            W_v x_i         side/rank  ℓ(j)        1/ℓ(i)
SDT-RNN        words, collapsed tree        W_v x_i         relation  ℓ(j)         1/ℓ(i)
unweighted     (either)                     W_v x_i         (either)  1            1
chain RNN      words, parent = next word    W_x x_i         0 (W_h)   1            1
CT-RNN         words (raw) + binary nodes   x_i | 0         0 left/1 right  1      1
=============  ===========================  =============  ========  ===========  =========

(ℓ(i) = nodes in the subtree of i, Eq. 4; the caller supplies ``base``, e.g. ``W_v x`` taken once per
distinct word and gathered to the nodes.) :func:`compose` runs it level by level — one matmul per
matrix per level, scattered into the parents, never one Python call per node;
:func:`compose_reference` is the plain recursion it is tested against.

**Eq. 5, all negatives.** For a batch of b positive pairs (image ``k_p``, sentence ``j_p``) scored
against *all* training images and sentences (inner products ``s = vᵀy``):

    J = (1/b) Σ_p [ Σ_{c: img(c) ≠ k_p} [Δ − s(k_p, j_p) + s(k_p, c)]_+  +  Σ_{c ≠ k_p} [Δ − s(k_p, j_p) + s(c, j_p)]_+ ]

(the mean over pairs, the sum over negatives: SYSTEMS reading S2, docs/systems.md). The
regulariser λ(‖θ‖² + ‖W_I‖²) is added by the system.

**Squared loss (Table 2):** ``(1/b) Σ_p ‖v_{k_p} − y_{j_p}‖²``, scored by ``−‖v − y‖``.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch


def levels(parent: np.ndarray) -> list[np.ndarray]:
    """Node indices grouped by height (leaves first) over a forest given by ``parent``."""
    n = len(parent)
    pending = np.bincount(parent[parent >= 0], minlength=n)       # children not yet placed
    frontier = np.nonzero(pending == 0)[0]
    out, done = [], 0
    while len(frontier):
        out.append(frontier)
        done += len(frontier)
        par = parent[frontier]
        par = par[par >= 0]
        np.subtract.at(pending, par, 1)
        frontier = np.unique(par[pending[par] == 0])
    if done != n:
        raise ValueError(f"parent array has a cycle ({n - done} nodes never become computable)")
    return out


@dataclasses.dataclass
class Level:
    """One level of a :class:`Plan`, its nodes in *level order*: the ``n_child`` nodes with a parent first,
    sorted by matrix, so that ``groups`` = [(matrix k, count)] are consecutive runs of them; their messages
    are permuted by ``to_target`` into runs per target level, ``targets`` = [(target level, count, the
    parents' positions in that level)], and ``from_target`` the inverse permutation."""

    size: int
    n_child: int
    groups: list[tuple[int, int]]
    to_target: torch.Tensor
    targets: list[tuple[int, int, torch.Tensor]]
    from_target: torch.Tensor


@dataclasses.dataclass
class Plan:
    """The schedule of one forest for :func:`compose`, built once per structure (:func:`plan`): the
    levels, ``order`` (N,) the node ids level after level in level order (one gather puts every input in
    place; each level is then a contiguous run), ``root_order`` (R,): the roots, which end their levels,
    taken level after level, permuted into node-id order, and the inverse permutations: ``inverse`` (N,)
    each node's position in ``order``, ``root_inverse`` (R,) that of ``root_order``."""

    levels: list[Level]
    order: torch.Tensor
    root_order: torch.Tensor
    inverse: torch.Tensor
    root_inverse: torch.Tensor


def plan(parent: np.ndarray, slot: np.ndarray, device: torch.device | str = "cpu") -> Plan:
    """The :class:`Plan` of a forest (``slot`` ignored at roots)."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
    lv = []
    for idx in levels(parent):                      # level order: children by matrix, then the roots
        has = parent[idx] >= 0
        kids = idx[has][np.argsort(slot[idx[has]], kind="stable")]
        lv.append(np.concatenate([kids, idx[~has]]))
    where = np.zeros((len(parent), 2), np.int64)
    for L, idx in enumerate(lv):
        where[idx, 0], where[idx, 1] = L, np.arange(len(idx))
    out = []
    for idx in lv:
        kids = idx[parent[idx] >= 0]
        ks, counts = np.unique(slot[kids], return_counts=True)
        par = parent[kids]
        tl = where[par, 0]
        perm = np.argsort(tl, kind="stable")
        Ts, tcounts = np.unique(tl, return_counts=True)
        out.append(Level(len(idx), len(kids), [(int(k), int(c)) for k, c in zip(ks, counts)], t(perm),
                         [(int(T), int(c), t(where[par[perm][tl[perm] == T], 1])) for T, c in zip(Ts, tcounts)],
                         t(np.argsort(perm, kind="stable"))))
    roots = np.concatenate([idx[parent[idx] < 0] for idx in lv]) if lv else np.zeros(0, np.int64)
    order = np.concatenate(lv) if lv else np.zeros(0, np.int64)
    root_order = np.argsort(roots, kind="stable")
    return Plan(out, t(order), t(root_order), t(np.argsort(order, kind="stable")),
                t(np.argsort(root_order, kind="stable")))


class _Gather(torch.autograd.Function):
    """``x.index_select(0, rows[perm])``, split into runs of ``sizes`` (or whole), with autograd's gradient of
    ``x.index_select(0, rows).index_select(0, perm).split(sizes)`` taken more cheaply and to the same bits:
    the runs' gradients are copied straight to their rows' places (one pass; autograd concatenates them,
    then scatters the permutation into zeros), then scatter-added over ``rows`` in the same (row) order.
    ``leaf_tanh``: the first run comes out as its tanh, taken on the rows of ``x`` (the leaves' words,
    ≈ 3,000) instead of on the run's (≈ 19,500 leaves): the same floats, and its gradient autograd's
    ``tanh_backward`` of them."""

    @staticmethod
    def forward(ctx, x, rows, perm, inverse, sizes, leaf_tanh=False):
        ctx.set_materialize_grads(False)
        ctx.n_in, ctx.sizes, ctx.leaf_tanh = x.shape[0], sizes, leaf_tanh
        idx = perm if rows is None else rows.index_select(0, perm)
        if not leaf_tanh:
            ctx.save_for_backward(rows, perm, inverse)
            out = x.index_select(0, idx)
            return out if sizes is None else out.split(sizes)
        first, rest = idx.split([sizes[0], len(idx) - sizes[0]])
        h = torch.tanh(x).index_select(0, first)
        ctx.save_for_backward(rows, perm, inverse, h)
        return (h, *x.index_select(0, rest).split(sizes[1:]))

    @staticmethod
    def backward(ctx, *grads):
        rows, perm, inverse = ctx.saved_tensors[:3]
        if ctx.leaf_tanh and grads[0] is not None:
            grads = (torch.ops.aten.tanh_backward(grads[0], ctx.saved_tensors[3]), *grads[1:])
        ref = next((g for g in grads if g is not None), None)
        if ref is None:
            return None, None, None, None, None, None
        if ctx.sizes is None:
            g = ref.index_select(0, inverse)
        else:
            g = ref.new_empty((len(perm),) + ref.shape[1:])
            for piece, at in zip(grads, perm.split(ctx.sizes)):
                if piece is None:
                    g.index_fill_(0, at, 0.0)
                else:
                    g.index_copy_(0, at, piece)
        if rows is not None:
            g = g.new_zeros((ctx.n_in,) + g.shape[1:]).index_add_(0, rows, g)
        return g, None, None, None, None, None


def gather_rows(x: torch.Tensor, perm: torch.Tensor, inverse: torch.Tensor, rows: torch.Tensor | None = None,
                sizes: list[int] | None = None, leaf_tanh: bool = False) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """(P, ...) rows ``x[rows][perm]`` (``rows`` None: ``x[perm]``) for a permutation ``perm`` (P,) of the
    rows of ``x[rows]`` and its ``inverse``, or with ``sizes`` its consecutive runs of those sizes; equal to
    the gathers (and the split) in value and gradient, bit for bit (:class:`_Gather`; ``leaf_tanh``: the first
    run as its tanh)."""
    return _Gather.apply(x, rows, perm, inverse, sizes, leaf_tanh)


class _Messages(torch.autograd.Function):
    """One level's messages ``hc[a:b] @ Wt[k]`` for its runs ``groups`` = [(k, count)] of children, written
    into one (n_child, n) tensor; the gradient is autograd's for the products one by one (the same products
    in the same layouts: ``g @ Wt[k]ᵀ``, ``hc[a:b]ᵀ @ g``), copied into one buffer per input instead of
    cut, concatenated and stacked by autograd's graph of ``len(groups)`` nodes. Every product is computed
    into a fresh tensor and copied: MKL may round a product written into an unaligned slice
    (``mm(out=...)``) differently, and the bits must not depend on where a run starts."""

    @staticmethod
    def forward(ctx, hc, Wt, groups):
        ctx.save_for_backward(hc, Wt)
        ctx.groups = groups
        if len(groups) == 1:
            return hc.mm(Wt[groups[0][0]])
        out = hc.new_empty((hc.shape[0], Wt.shape[2]))
        a = 0
        for k, c in groups:
            out[a:a + c] = hc[a:a + c].mm(Wt[k])
            a += c
        return out

    @staticmethod
    def backward(ctx, g):
        hc, Wt = ctx.saved_tensors
        g_hc = torch.empty_like(hc) if ctx.needs_input_grad[0] else None
        g_W = torch.zeros_like(Wt) if ctx.needs_input_grad[1] else None
        a = 0
        for k, c in ctx.groups:           # fresh products copied into place, as in the forward
            gk = g[a:a + c]
            if g_hc is not None:
                g_hc[a:a + c] = gk.mm(Wt[k].t())
            if g_W is not None:
                g_W[k] = hc[a:a + c].t().mm(gk)
            a += c
        return g_hc, g_W, None


def _factors(v: torch.Tensor | None, order: torch.Tensor, sizes: list[int], used: list[int] | None) -> list:
    """Per level (level order) the factors ``v`` (N,) of its first ``used[L]`` nodes (all: ``used`` None), or
    None where there is nothing to multiply: ``v`` None, or (on the CPU) every factor exactly 1, as ℓ and 1/ℓ
    are at the leaves, half of all nodes: a product by 1 changes no bit, forward or backward. (Not checked
    on a GPU, where reading the answer would stall the host.)"""
    if v is None:
        return [None] * len(sizes)
    per = [p[:k] for p, k in zip(v.index_select(0, order).split(sizes), used or sizes)]
    return per if v.device.type != "cpu" else [None if bool((p == 1).all()) else p for p in per]


def compose(x: torch.Tensor, parent: np.ndarray, slot: np.ndarray, W: torch.Tensor,
            weight: torch.Tensor | None = None, scale: torch.Tensor | None = None,
            raw: np.ndarray | None = None, f: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
            schedule: Plan | None = None, roots_only: bool = False, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Node vectors of a forest (module docstring), level by level: (N, n), or with ``roots_only`` the
    (R, n) vectors of the roots (``parent == -1``) in node-id order.

    ``x`` (N, n) node inputs ``base``, or with ``rows`` (N,) a table (V, n) of which node i reads row ``rows[i]``;
    ``parent``, ``slot`` (N,) int (slot ignored at roots); ``W`` (K, n, n); ``weight``, ``scale``
    (N,) or None for ones; ``raw`` (N,) bool or None; ``schedule`` = :func:`plan` of (parent, slot)
    when already known. The inputs are gathered once into level order and split into per-level views
    (:func:`gather_rows`, whose gradient is copied back into place instead of concatenated and scattered),
    a level's children are consecutive runs per matrix whose products are one autograd node
    (:class:`_Messages`), and each level keeps its own small accumulator: no gradient of a full-size
    tensor is formed per level or per matrix. Each level is split into its children (the messages'
    input) and its roots (the output's, when ``roots_only``); the leaves' level receives no message, so
    it has no accumulator, and on the CPU no product by weights or scales that are all 1
    (:func:`_factors`). Outputs and gradients equal those of the same schedule in plain autograd ops
    bit for bit (tests/test_recursive.py), so trained runs do not move."""
    if len(parent) == 0:
        return x[:0]
    schedule = plan(parent, slot, x.device) if schedule is None else schedule
    order = schedule.order
    sizes = [lv.size for lv in schedule.levels]
    scales = _factors(scale, order, sizes, None)
    leaf_tanh = rows is not None and f is torch.tanh and scales[0] is None and raw is None   # the leaves: tanh(row)
    base = gather_rows(x, order, schedule.inverse, rows, sizes, leaf_tanh)
    n = base[0].shape[1]
    weights = _factors(weight, order, sizes, [lv.n_child for lv in schedule.levels])
    raws = torch.from_numpy(raw).to(x.device).index_select(0, order).split(sizes) if raw is not None else None
    Wt = W.transpose(1, 2).contiguous()
    acc = [None] + [x.new_zeros((size, n)) for size in sizes[1:]]           # level 0: leaves, no message
    parts = []
    for L, lv in enumerate(schedule.levels):
        pre = base[L] if acc[L] is None else base[L] + acc[L]
        if scales[L] is not None:
            pre = pre * scales[L][:, None]
        h = pre if L == 0 and leaf_tanh else f(pre)
        if raws is not None:
            h = torch.where(raws[L][:, None], base[L], h)
        hc, hr = h.split([lv.n_child, lv.size - lv.n_child])
        parts.append(hr if roots_only else h)
        if not lv.n_child:
            continue
        if weights[L] is not None:
            hc = hc * weights[L][:, None]
        msg = gather_rows(_Messages.apply(hc, Wt, lv.groups), lv.to_target, lv.from_target)
        for (T, _, target), m in zip(lv.targets, msg.split([c for _, c, _ in lv.targets])):
            acc[T].index_add_(0, target, m)
    if roots_only:
        return gather_rows(torch.cat(parts), schedule.root_order, schedule.root_inverse)
    return gather_rows(torch.cat(parts), schedule.inverse, order)          # node i sits at inverse[i] in level order


def compose_reference(x: torch.Tensor, parent: np.ndarray, slot: np.ndarray, W: torch.Tensor,
                      weight: torch.Tensor | None = None,
                      scale: torch.Tensor | None = None, raw: np.ndarray | None = None,
                      f: Callable[[torch.Tensor], torch.Tensor] = torch.tanh) -> torch.Tensor:
    """The same as :func:`compose` by plain recursion, one node at a time (tests and benchmark)."""
    base = x
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parent):
        if p >= 0:
            children.setdefault(int(p), []).append(i)
    memo: dict[int, torch.Tensor] = {}

    def node(i: int) -> torch.Tensor:
        if i not in memo:
            if raw is not None and raw[i]:
                memo[i] = base[i]
            else:
                s = base[i]
                for j in children.get(i, []):
                    w = 1.0 if weight is None else weight[j]
                    s = s + w * (W[int(slot[j])] @ node(j))
                memo[i] = f(s * (1.0 if scale is None else scale[i]))
        return memo[i]

    return torch.stack([node(i) for i in range(len(parent))]) if len(parent) else base


def hinge_all_negatives(v_batch: torch.Tensor, y_batch: torch.Tensor, v_all: torch.Tensor, y_all: torch.Tensor,
                        image_batch: torch.Tensor, image_of_sentence: torch.Tensor, margin: float) -> torch.Tensor:
    """Eq. 5 over all negatives, mean over the b pairs (module docstring).

    ``v_batch`` (b, h) images of the pairs, ``y_batch`` (b, h) their sentences; ``v_all`` (N, h)
    every training image, ``y_all`` (M, h) every training sentence; ``image_batch`` (b,) positions
    of the pairs' images in ``v_all``; ``image_of_sentence`` (M,) image position of each sentence."""
    pos = (v_batch * y_batch).sum(1, keepdim=True)                     # (b, 1)
    to_sent = torch.relu(margin - pos + v_batch @ y_all.T)              # (b, M): sentences as negatives
    to_sent = to_sent.masked_fill(image_of_sentence[None, :] == image_batch[:, None], 0.0)
    to_img = torch.relu(margin - pos + y_batch @ v_all.T)               # (b, N): images as negatives
    to_img = to_img.masked_fill(torch.arange(v_all.shape[0], device=v_all.device)[None, :] == image_batch[:, None], 0.0)
    return (to_sent.sum() + to_img.sum()) / v_batch.shape[0]


def hinge_all_negatives_reference(v_all, y_all, pairs, image_of_sentence, margin: float) -> float:
    """Eq. 5 by loops, straight from the equation (tests only); ``pairs`` = [(image, sentence)]."""
    total = 0.0
    for k, j in pairs:
        s = float(v_all[k] @ y_all[j])
        for c in range(len(y_all)):
            if int(image_of_sentence[c]) != k:
                total += max(0.0, margin - s + float(v_all[k] @ y_all[c]))
        for c in range(len(v_all)):
            if c != k:
                total += max(0.0, margin - s + float(v_all[c] @ y_all[j]))
    return total / len(pairs)


def squared_loss(v_batch: torch.Tensor, y_batch: torch.Tensor) -> torch.Tensor:
    """Table 2's loss: mean over pairs of ‖v − y‖²."""
    return ((v_batch - y_batch) ** 2).sum(1).mean()


def neg_euclidean(v: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(n, m) scores −‖v_k − y_l‖ (Table 2's retrieval)."""
    return -torch.cdist(v, y)
