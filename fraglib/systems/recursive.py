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
    parents' positions in that level)]."""

    size: int
    n_child: int
    groups: list[tuple[int, int]]
    to_target: torch.Tensor
    targets: list[tuple[int, int, torch.Tensor]]


@dataclasses.dataclass
class Plan:
    """The schedule of one forest for :func:`compose`, built once per structure (:func:`plan`): the
    levels, ``order`` (N,) the node ids level after level in level order (one gather puts every input in
    place; each level is then a contiguous run), ``where`` (N, 2) = (level, position in level) of
    every node, and ``root_order`` (R,): the roots, which end their levels, taken level after level,
    permuted into node-id order."""

    levels: list[Level]
    order: torch.Tensor
    where: np.ndarray
    root_order: torch.Tensor


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
                         [(int(T), int(c), t(where[par[perm][tl[perm] == T], 1])) for T, c in zip(Ts, tcounts)]))
    roots = np.concatenate([idx[parent[idx] < 0] for idx in lv]) if lv else np.zeros(0, np.int64)
    return Plan(out, t(np.concatenate(lv) if lv else np.zeros(0, np.int64)), where, t(np.argsort(roots, kind="stable")))


def compose(x: torch.Tensor, parent: np.ndarray, slot: np.ndarray, W: torch.Tensor,
            weight: torch.Tensor | None = None, scale: torch.Tensor | None = None,
            raw: np.ndarray | None = None, f: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
            schedule: Plan | None = None, roots_only: bool = False) -> torch.Tensor:
    """Node vectors of a forest (module docstring), level by level: (N, n), or with ``roots_only`` the
    (R, n) vectors of the roots (``parent == -1``) in node-id order.

    ``x`` (N, n) node inputs ``base``;
    ``parent``, ``slot`` (N,) int (slot ignored at roots); ``W`` (K, n, n); ``weight``, ``scale``
    (N,) or None for ones; ``raw`` (N,) bool or None; ``schedule`` = :func:`plan` of (parent, slot)
    when already known. The inputs are gathered once into level order and split into per-level views
    (whose backward is one concatenation), each matrix is taken once (``unbind``), a level's children
    are consecutive runs per matrix, and each level keeps its own small accumulator: no gradient of a
    full-size tensor is formed per level or per matrix. Each level is split into its children (the
    messages' input) and its roots (the output's, when ``roots_only``); the leaves' level receives no
    message, so it has no accumulator."""
    if x.shape[0] == 0:
        return x
    schedule = plan(parent, slot, x.device) if schedule is None else schedule
    order = schedule.order
    sizes = [lv.size for lv in schedule.levels]
    base = x.index_select(0, order).split(sizes)
    n = base[0].shape[1]
    per_level = lambda v: v.index_select(0, order).split(sizes)  # noqa: E731
    scales = per_level(scale) if scale is not None else None
    weights = per_level(weight) if weight is not None else None
    raws = per_level(torch.from_numpy(raw).to(x.device)) if raw is not None else None
    Wt = W.transpose(1, 2).contiguous().unbind(0)
    acc = [None] + [x.new_zeros((size, n)) for size in sizes[1:]]           # level 0: leaves, no message
    parts = []
    for L, lv in enumerate(schedule.levels):
        pre = base[L] if acc[L] is None else base[L] + acc[L]
        if scales is not None:
            pre = pre * scales[L][:, None]
        h = f(pre)
        if raws is not None:
            h = torch.where(raws[L][:, None], base[L], h)
        hc, hr = h.split([lv.n_child, lv.size - lv.n_child])
        parts.append(hr if roots_only else h)
        if not lv.n_child:
            continue
        if weights is not None:
            hc = hc * weights[L][:lv.n_child, None]
        msg = [piece @ Wt[k] for (k, _), piece in zip(lv.groups, hc.split([c for _, c in lv.groups]))]
        msg = (msg[0] if len(msg) == 1 else torch.cat(msg)).index_select(0, lv.to_target)
        for (T, _, target), m in zip(lv.targets, msg.split([c for _, c, _ in lv.targets])):
            acc[T].index_add_(0, target, m)
    if roots_only:
        return torch.cat(parts).index_select(0, schedule.root_order)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    w = schedule.where
    return torch.cat(parts).index_select(0, torch.from_numpy(starts[w[:, 0]] + w[:, 1]).to(x.device))


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
