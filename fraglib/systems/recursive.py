"""The math of Socher et al. 2014's sentence encoders and objectives, as pure functions.

**One composition for every recursive encoder.** A forest of nodes (all trees of a batch, node
``i`` with ``parent[i]``, -1 at a root) is computed bottom-up as

    h_i = tanh( scale_i · ( base_i + Σ_{j ∈ C(i)} weight_j · W[slot_j] h_j ) )

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
matrix per level, added into the parents, never one Python call per node — with its gradient written
out (:class:`_Compose`); :func:`compose_reference` is the plain recursion it is tested against.

**Eq. 5, all negatives.** For a batch of b positive pairs (image ``k_p``, sentence ``j_p``) scored
against *all* training images and sentences (inner products ``s = vᵀy``):

    J = (1/b) Σ_p [ Σ_{c: img(c) ≠ k_p} [Δ − s(k_p, j_p) + s(k_p, c)]_+  +  Σ_{c ≠ k_p} [Δ − s(k_p, j_p) + s(c, j_p)]_+ ]

(the mean over pairs, the sum over negatives: SYSTEMS reading S2, docs/systems.md). The
regulariser λ(‖θ‖² + ‖W_I‖²) is added by the system. With sampled negatives (``systems.socher.negatives``
= n) the two inner sums run over n drawn sentences and n drawn images instead, times M/n and N/n
(:func:`hinge_all_negatives`'s ``sentence_weight``, ``image_weight``): an unbiased estimate of J.

**Squared loss (Table 2):** ``(1/b) Σ_p ‖v_{k_p} − y_{j_p}‖²``, scored by ``−‖v − y‖``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch


def levels(parent: np.ndarray) -> list[np.ndarray]:
    """Node indices grouped by height (leaves first) over a forest given by ``parent``."""
    n = len(parent)
    pending = np.bincount(parent[parent >= 0], minlength=n)  # children not yet placed
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
    """One level of a :class:`Plan`: rows ``start:start + size`` of the level order, the ``n_child`` nodes
    with a parent first, sorted by matrix so that ``groups`` = [(matrix k, count)] are consecutive runs of
    them, then the roots; ``parents`` (n_child,) their parents' rows in the level order less the leaves'
    level (rows of :func:`compose`'s accumulator), ``root_out`` (size − n_child,) the roots' places in the
    ``roots_only`` output."""

    start: int
    size: int
    n_child: int
    groups: list[tuple[int, int]]
    parents: torch.Tensor
    root_out: torch.Tensor

    def __post_init__(self) -> None:
        self.mats, self.counts = [k for k, _ in self.groups], [c for _, c in self.groups]


@dataclasses.dataclass
class Plan:
    """The schedule of one forest for :func:`compose`, built once per structure (:func:`plan`): the
    levels (the leaves first); ``order`` (N,) the node ids level after level (the *level order*),
    ``inverse`` (N,) each node's row in it, ``roots`` (R,) the roots' rows, roots in node-id order;
    ``raw0`` (leaves,) bool: which of the leaves' level are raw, or None for none."""

    levels: list[Level]
    order: torch.Tensor
    inverse: torch.Tensor
    roots: torch.Tensor
    raw0: torch.Tensor | None = None


def plan(
    parent: np.ndarray, slot: np.ndarray, device: torch.device | str = "cpu", raw: np.ndarray | None = None
) -> Plan:
    """The :class:`Plan` of a forest (``slot`` ignored at roots; ``raw`` (N,) bool or None: leaves that
    :func:`compose` takes as their input, unchanged)."""
    if raw is not None and np.asarray(raw, bool)[parent[parent >= 0]].any():
        raise ValueError(
            "plan: raw nodes must be leaves (a raw node takes its input unchanged, so it would ignore its children)"
        )
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(device)  # noqa: E731
    lv = []
    for idx in levels(parent):  # level order: children by matrix, then the roots
        has = parent[idx] >= 0
        kids = idx[has][np.argsort(slot[idx[has]], kind="stable")]
        lv.append(np.concatenate([kids, idx[~has]]))
    order = np.concatenate(lv) if lv else np.zeros(0, np.int64)
    inverse = np.argsort(order, kind="stable")
    roots = np.nonzero(parent < 0)[0]
    out_of_root = np.full(len(parent), -1, np.int64)
    out_of_root[roots] = np.arange(len(roots))
    off = len(lv[0]) if lv else 0
    out, start = [], 0
    for idx in lv:
        kids = idx[parent[idx] >= 0]
        ks, counts = np.unique(slot[kids], return_counts=True)
        out.append(
            Level(
                start,
                len(idx),
                len(kids),
                [(int(k), int(c)) for k, c in zip(ks, counts)],
                t(inverse[parent[kids]] - off),
                t(out_of_root[idx[len(kids) :]]),
            )
        )
        start += len(idx)
    raw0 = np.asarray(raw, bool)[lv[0]] if raw is not None and lv and np.any(raw) else None
    return Plan(
        out, t(order), t(inverse), t(inverse[roots]), None if raw0 is None else torch.from_numpy(raw0).to(device)
    )


def _factors(v: torch.Tensor | None, order: torch.Tensor, sizes: list[int]) -> list:
    """Per level (level order) the factors ``v`` (N,) of its nodes, or None where there is nothing to
    multiply: ``v`` None, or (on the CPU) every factor exactly 1, as ℓ and 1/ℓ are at the leaves, half of
    all nodes. (Not checked on a GPU, where reading the answer would stall the host.)"""
    if v is None:
        return [None] * len(sizes)
    per = v.index_select(0, order).split(sizes)
    return list(per) if v.device.type != "cpu" else [None if bool((p == 1).all()) else p for p in per]


def _products(a: torch.Tensor, Ws: list[torch.Tensor], lv: Level, out: torch.Tensor) -> torch.Tensor:
    """``out`` (n_child, n) ← each run of ``a`` (n_child, ·) in ``lv.groups`` times its matrix ``Ws[k]``,
    one product per run written into place."""
    for ak, ok, k in zip(a.split(lv.counts), out.split(lv.counts), lv.mats):
        torch.mm(ak, Ws[k], out=ok)
    return out


def _add_products_t(gWs: list[torch.Tensor], g: torch.Tensor, u: torch.Tensor, lv: Level) -> None:
    """``gWs[k] += g[run]ᵀ u[run]`` for each run of ``lv.groups`` (the out= form of addmm, which
    ``FlopCounterMode`` counts; it does not count ``addmm_``)."""
    for gk, uk, k in zip(g.split(lv.counts), u.split(lv.counts), lv.mats):
        torch.addmm(gWs[k], gk.t(), uk, out=gWs[k])


class _Compose(torch.autograd.Function):
    """:func:`compose`'s forward and its gradient written out level by level (the gradient of the level
    schedule, not a recording of it), with as few passes over the (N, n) node rows as the math allows:
    the non-leaf bases are gathered once into the accumulator the messages are added to; products,
    tanh and its derivative write into place; the leaves' tanh is taken on the word table's rows
    (≈ 3,000 instead of ≈ 19,500 leaves) and its gradient summed per word before the tanh's derivative;
    one buffer holds the inputs' gradient and, for the non-leaf rows, what their children's messages
    receive. Tested against the plain recursion and by gradcheck (tests/test_recursive.py)."""

    @staticmethod
    def forward(ctx, x, W, sch, rows, weights, scales, raw0, roots_only):
        N, n, off = len(sch.order), x.shape[1], sch.levels[0].size
        idx = sch.order if rows is None else rows.index_select(0, sch.order)  # the row of x each node reads
        table = rows is not None and scales[0] is None  # the leaves: tanh of the table
        T = torch.tanh(x) if table else None
        H = x.new_empty((N, n))  # node vectors, level order
        A = x.index_select(0, idx[off:])  # the non-leaf bases, then + the messages, then scaled
        us = []  # each level's children's vectors times their weight
        Wt = [w.t() for w in W.unbind(0)]
        for L, lv in enumerate(sch.levels):
            s, e, c = lv.start, lv.start + lv.size, lv.n_child
            if L == 0:
                base = x.index_select(0, idx[:off]) if raw0 is not None or not table else None
                if table:
                    torch.index_select(T, 0, idx[:off], out=H[:off])
                else:
                    torch.tanh(base * scales[0][:, None] if scales[0] is not None else base, out=H[:off])
                if raw0 is not None:
                    H[:off] = torch.where(raw0[:, None], base, H[:off])
            else:
                a = A[s - off : e - off]
                torch.tanh(a.mul_(scales[L][:, None]) if scales[L] is not None else a, out=H[s:e])
            u = H[s : s + c] * weights[L][:c, None] if weights[L] is not None else H[s : s + c]
            us.append(u)
            if c:
                A.index_add_(0, lv.parents, _products(u, Wt, lv, x.new_empty((c, n))))
        ctx.save_for_backward(W)
        ctx.sch, ctx.idx, ctx.T, ctx.H, ctx.us, ctx.weights, ctx.scales, ctx.raw0 = (
            sch,
            idx,
            T,
            H,
            us,
            weights,
            scales,
            raw0,
        )
        ctx.roots_only, ctx.n_x, ctx.by_row = roots_only, x.shape[0], rows is not None
        return H.index_select(0, sch.roots if roots_only else sch.inverse)

    @staticmethod
    def backward(ctx, gout):
        (W,) = ctx.saved_tensors
        sch, idx, T, H, raw0 = ctx.sch, ctx.idx, ctx.T, ctx.H, ctx.raw0
        N, n, off = H.shape[0], H.shape[1], sch.levels[0].size
        G = None if ctx.roots_only else gout.index_select(0, sch.order)  # output gradient, level order
        gB = H.new_empty((N, n))  # the inputs' gradient; rows ≥ off: also what the messages receive
        gP = gB[off:]
        g_W = torch.zeros_like(W) if ctx.needs_input_grad[1] else None
        Ws, gWs = W.unbind(0), (g_W.unbind(0) if g_W is not None else None)
        g_table = None
        for L in range(len(sch.levels) - 1, -1, -1):
            lv = sch.levels[L]
            s, e, c = lv.start, lv.start + lv.size, lv.n_child
            if L == 0 and not ctx.needs_input_grad[0]:  # the leaves' gradient reaches x only; W's part:
                if g_W is not None and c:
                    _add_products_t(gWs, gP.index_select(0, lv.parents), ctx.us[0], lv)
                break
            gh = gB[s:e]  # built in place: d out/d h, then d out/d pre
            if G is not None:
                gh.copy_(G[s:e])
            else:
                torch.index_select(gout, 0, lv.root_out, out=gh[c:])
            if c:  # from the parents (higher levels, already done)
                gm = gP.index_select(0, lv.parents)
                gu = _products(gm, Ws, lv, H.new_empty((c, n)) if G is not None else gh[:c])
                w = ctx.weights[L]
                if G is not None:
                    gh[:c].add_(gu * w[:c, None] if w is not None else gu)
                elif w is not None:
                    gh[:c].mul_(w[:c, None])
                if g_W is not None:
                    _add_products_t(gWs, gm, ctx.us[L], lv)
            if T is not None and L == 0:  # d tanh summed per word first
                g_leaf = gh if raw0 is None else gh.masked_fill(raw0[:, None], 0.0)
                g_table = torch.ops.aten.tanh_backward(H.new_zeros(T.shape).index_add_(0, idx[:off], g_leaf), T)
                if raw0 is not None:
                    gh.masked_fill_(~raw0[:, None], 0.0)
                continue
            g_raw = gh.clone() if L == 0 and raw0 is not None else None
            torch.ops.aten.tanh_backward.grad_input(gh, H[s:e], grad_input=gh)
            if ctx.scales[L] is not None:
                gh.mul_(ctx.scales[L][:, None])
            if g_raw is not None:
                gh.copy_(torch.where(raw0[:, None], g_raw, gh))
        g_x = None
        if ctx.needs_input_grad[0]:
            if not ctx.by_row:
                g_x = gB.index_select(0, sch.inverse)
            elif g_table is None:
                g_x = H.new_zeros((ctx.n_x, n)).index_add_(0, idx, gB)
            else:  # the leaves' rows of gB: raw leaves only
                lo = 0 if raw0 is not None else off
                g_x = g_table.index_add_(0, idx[lo:], gB[lo:])
        return g_x, g_W, None, None, None, None, None, None


def compose(
    x: torch.Tensor,
    parent: np.ndarray,
    slot: np.ndarray,
    W: torch.Tensor,
    weight: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    raw: np.ndarray | None = None,
    schedule: Plan | None = None,
    roots_only: bool = False,
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Node vectors of a forest (module docstring), level by level: (N, n), or with ``roots_only`` the
    (R, n) vectors of the roots (``parent == -1``) in node-id order.

    ``x`` (N, n) node inputs ``base``, or with ``rows`` (N,) a table (V, n) of which node i reads row ``rows[i]``;
    ``parent``, ``slot`` (N,) int (slot ignored at roots); ``W`` (K, n, n); ``weight``, ``scale``
    (N,) constants (no gradient flows to them) or None for ones; ``raw`` (N,) bool or None: leaves taken
    as their input, unchanged (CT-RNN's words); ``schedule`` = :func:`plan` of (parent, slot) when already
    known (with the same ``raw``). One matmul per matrix run per level forward, two backward
    (:class:`_Compose`)."""
    if len(parent) == 0:
        return x[:0]
    for name, v in (("weight", weight), ("scale", scale)):
        if v is not None and v.requires_grad:
            raise ValueError(f"compose: {name} is a constant here (no gradient flows to it); pass {name}.detach()")
    schedule = plan(parent, slot, x.device, raw) if schedule is None else schedule
    if raw is not None and np.any(raw) and schedule.raw0 is None:
        raise ValueError(
            "compose: raw nodes given with a schedule planned without them: plan(parent, slot, device, raw)"
        )
    order, sizes = schedule.order, [lv.size for lv in schedule.levels]
    return _Compose.apply(
        x, W, schedule, rows, _factors(weight, order, sizes), _factors(scale, order, sizes), schedule.raw0, roots_only
    )


def compose_reference(
    x: torch.Tensor,
    parent: np.ndarray,
    slot: np.ndarray,
    W: torch.Tensor,
    weight: torch.Tensor | None = None,
    scale: torch.Tensor | None = None,
    raw: np.ndarray | None = None,
) -> torch.Tensor:
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
                memo[i] = torch.tanh(s * (1.0 if scale is None else scale[i]))
        return memo[i]

    return torch.stack([node(i) for i in range(len(parent))]) if len(parent) else base


def hinge_all_negatives(
    v_batch: torch.Tensor,
    y_batch: torch.Tensor,
    v_all: torch.Tensor,
    y_all: torch.Tensor,
    image_batch: torch.Tensor,
    image_of_sentence: torch.Tensor,
    margin: float,
    image_ids: torch.Tensor | None = None,
    sentence_weight: float = 1.0,
    image_weight: float = 1.0,
) -> torch.Tensor:
    """Eq. 5 over all negatives, mean over the b pairs (module docstring).

    ``v_batch`` (b, h) images of the pairs, ``y_batch`` (b, h) their sentences; ``v_all`` (N, h)
    every training image, ``y_all`` (M, h) every training sentence; ``image_batch`` (b,) positions
    of the pairs' images in ``v_all``; ``image_of_sentence`` (M,) image position of each sentence.

    Sampled negatives (``systems.socher.negatives``): ``v_all`` and ``y_all`` hold only the drawn images and
    sentences, ``image_of_sentence`` the image position of each drawn sentence, ``image_ids`` (N',) the
    positions of the drawn images (default: ``v_all`` is every image, in order), and the sum over sentences
    is multiplied by ``sentence_weight`` (M / n), the sum over images by ``image_weight`` (N / n): the same
    exclusions (a sentence of the pair's image, the pair's image), an unbiased estimate of the full sums."""
    pos = (v_batch * y_batch).sum(1, keepdim=True)  # (b, 1)
    to_sent = torch.relu(margin - pos + v_batch @ y_all.T)  # (b, M): sentences as negatives
    to_sent = to_sent.masked_fill(image_of_sentence[None, :] == image_batch[:, None], 0.0)
    to_img = torch.relu(margin - pos + y_batch @ v_all.T)  # (b, N): images as negatives
    ids = torch.arange(v_all.shape[0], device=v_all.device) if image_ids is None else image_ids
    to_img = to_img.masked_fill(ids[None, :] == image_batch[:, None], 0.0)
    s, i = to_sent.sum(), to_img.sum()
    if sentence_weight != 1.0 or image_weight != 1.0:
        s, i = s * sentence_weight, i * image_weight
    return (s + i) / v_batch.shape[0]


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
