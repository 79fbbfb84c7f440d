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

(ℓ(i) = nodes in the subtree of i, Eq. 4.) :func:`compose` runs it level by level — one matmul per
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


def compose(base: torch.Tensor, parent: np.ndarray, slot: np.ndarray, W: torch.Tensor,
            weight: torch.Tensor | None = None, scale: torch.Tensor | None = None,
            raw: np.ndarray | None = None, f: Callable[[torch.Tensor], torch.Tensor] = torch.tanh,
            schedule: list[np.ndarray] | None = None) -> torch.Tensor:
    """(N, n) node vectors of a forest (module docstring), level by level.

    ``base`` (N, n); ``parent``, ``slot`` (N,) int (slot ignored at roots); ``W`` (K, n, n);
    ``weight``, ``scale`` (N,) or None for ones; ``raw`` (N,) bool or None; ``schedule`` =
    :func:`levels` of ``parent`` when already known."""
    N = base.shape[0]
    dev = base.device
    schedule = levels(parent) if schedule is None else schedule
    acc = torch.zeros_like(base)
    parts, order = [], []
    for idx_np in schedule:
        idx = torch.from_numpy(idx_np).to(dev)
        pre = base[idx] + acc[idx]
        if scale is not None:
            pre = pre * scale[idx, None]
        h = f(pre)
        if raw is not None and raw[idx_np].any():
            h = torch.where(torch.from_numpy(raw[idx_np]).to(dev)[:, None], base[idx], h)
        parts.append(h)
        order.append(idx_np)
        child = parent[idx_np] >= 0
        if not child.any():
            continue
        hc = h[torch.from_numpy(child).to(dev)]
        if weight is not None:
            hc = hc * weight[idx[torch.from_numpy(child).to(dev)], None]
        sl, par = slot[idx_np][child], parent[idx_np][child]
        msgs, targets = [], []
        for k in np.unique(sl):                                     # one matmul per matrix per level
            sel = np.nonzero(sl == k)[0]
            msgs.append(hc[torch.from_numpy(sel).to(dev)] @ W[int(k)].T)
            targets.append(par[sel])
        acc = acc.index_add(0, torch.from_numpy(np.concatenate(targets)).to(dev), torch.cat(msgs))
    perm = np.concatenate(order)
    inv = torch.from_numpy(np.argsort(perm)).to(dev)
    return torch.cat(parts)[inv] if N else base


def compose_reference(base: torch.Tensor, parent: np.ndarray, slot: np.ndarray, W: torch.Tensor,
                      weight: torch.Tensor | None = None, scale: torch.Tensor | None = None,
                      raw: np.ndarray | None = None, f: Callable[[torch.Tensor], torch.Tensor] = torch.tanh) -> torch.Tensor:
    """The same as :func:`compose` by plain recursion, one node at a time (tests only)."""
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
