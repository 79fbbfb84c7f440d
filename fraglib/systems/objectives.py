"""The objectives of the paper (docs/method.md, "Objectives") as pure, vectorised functions.

Inputs for a batch of B image–sentence pairs (pair k = image k with sentence k):

* ``V``: (Nv, h) image-fragment embeddings, ``v_owner``: (Nv,) int64 in [0, B) — the pair of each;
* ``S``: (Ns, h) sentence-fragment embeddings, ``s_owner``: (Ns,) int64 in [0, B);
* fragment scores ``M = V @ S.T`` (Nv, Ns).

**Fragment alignment, dense (C_0).** ``y_ij = +1`` when fragments i and j belong to the same pair,
else -1; ``C_0 = sum_j [ 1/P_j sum_{i: y=+1} max(0, 1 - M_ij) + 1/N_j sum_{i: y=-1} max(0, 1 + M_ij) ]``
where P_j / N_j count the positive / negative entries of column j (the authors' per-sentence-
fragment normalisation; ``normalize=False`` gives the plain sum of the paper's equation).

**Fragment alignment, MIL (C_F).** Inside the positive bag of column j (the fragments of its own
image) the labels are latent: ``y_ij = sign(M_ij)`` (+1 when M_ij > 0, else -1), and when no entry
of the bag is positive the highest-scoring one is set to +1 (mi-SVM heuristic); outside the bag
y = -1. Labels are constants (no gradient flows through them). Same hinge and normalisation.

**Global ranking (C_G).** ``S_kl`` scores image k against sentence l:

* ``accumulate="sum"`` (paper): ``S_kl = sum_{i in g_k} sum_{j in g_l} max(0, M_ij) / (|g_k| (|g_l| + n))``;
* ``accumulate="max"`` (released-code variant): ``S_kl = sum_{j in g_l} max_{i in g_k} max(0, M_ij) / (|g_l| + n)``;

``C_G = sum_k [ sum_{l != k} max(0, S_kl - S_kk + Δ) + sum_{l != k} max(0, S_lk - S_kk + Δ) ]``.
(The paper's sums run over all l; the l = k terms add the constant 2BΔ and no gradient, so they are
left out here.) ``hardest``: each sum over l keeps only its largest term (VSE++, Faghri et al. 2018).

**Normalised fragments** (``cosine_scale`` c > 0 of the fragment system): both fragment embeddings are
scaled to length sqrt(c), so ``M_ij = c cos(v_i, s_j)`` and every objective above is unchanged in form.
Its meaning is kept: the hinges of C_0 / C_F are met at cos ≥ 1/c (positive) and cos ≤ −1/c (negative),
a margin of 2/c in cosine between the two; the MIL label sign(M) = sign(cos); and
``0 ≤ S_kl ≤ c |g_l| / (|g_l| + n) < c``, so Δ = 1 asks for a gap of 1/c of the largest possible score.
With raw inner products the same hinges are met by growing the norms, which α ||θ||² alone limits.

**Total.** ``C = w_F C_F + β C_G + α ||θ||²`` with ``C_0`` in place of ``C_F`` while ``dense``; any
term switches off with a zero weight (``fragment_weight``, ``beta``).
"""

from __future__ import annotations

import warnings

import torch

from fraglib.core.device import to_device


def fragment_scores(V: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """(Nv, Ns) inner products ``v_i · s_j``."""
    return V @ S.T


def bag_entries(
    v_owner: torch.Tensor,
    s_owner: torch.Tensor,
    n: int | None = None,
    sizes: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(E,) row and column indices of the entries of M whose two fragments share a pair (the
    positive bags), grouped by pair; every other entry of M is a negative of both objectives. ``n``: the
    number of pairs (default: read off the owners); ``sizes``: each pair's (image, sentence) fragment
    counts on the CPU, (n,) each (:meth:`~fraglib.core.batches.Rows.cpu`), so that no size is read back
    from the device (on a GPU each read waits for it)."""
    if n is None:
        n = int(max(v_owner.max().item(), s_owner.max().item())) + 1 if len(v_owner) and len(s_owner) else 0
    dev = v_owner.device
    rv, rs = torch.argsort(v_owner, stable=True), torch.argsort(s_owner, stable=True)
    if sizes is None:
        cv, cs = torch.bincount(v_owner, minlength=n), torch.bincount(s_owner, minlength=n)
        total = None
    else:
        total = int((sizes[0] * sizes[1]).sum())
        cv, cs = (to_device(c, dev) for c in sizes)
    per = cv * cs  # entries of each pair's block
    pair = torch.repeat_interleave(torch.arange(n, device=dev), per, output_size=total)
    t = torch.arange(len(pair), device=dev) - (torch.cumsum(per, 0) - per)[pair]
    start_v, start_s = torch.cumsum(cv, 0) - cv, torch.cumsum(cs, 0) - cs
    return rv[start_v[pair] + t // cs[pair]], rs[start_s[pair] + t % cs[pair]]


def counts(index: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """(n,) how often each value of ``index`` (R,) in [0, n) occurs, as ``dtype``: ``bincount`` without its
    read of the largest value (on a GPU, a wait for the device); exact for counts below 2^24 in float32."""
    return torch.zeros(n, dtype=dtype, device=index.device).index_add_(
        0, index, torch.ones(len(index), dtype=dtype, device=index.device)
    )


def _alignment(
    M: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, positive: torch.Tensor | None, normalize: bool
) -> torch.Tensor:
    """sum_ij w_ij max(0, 1 - y_ij M_ij) with y = +1 exactly at the bag entries (rows, cols) where
    ``positive`` (None: at all of them), -1 elsewhere; w = 1/#pos or 1/#neg of column j (``normalize``), else 1.

    Computed as every entry's negative hinge plus a correction at the few positive entries, so the
    full (Nv, Ns) matrix sees only a handful of elementwise passes (forward and backward)."""
    if positive is not None:
        rows, cols = rows[positive], cols[positive]
    c, Mp = cols, M[rows, cols]
    if normalize:
        n_pos = counts(c, M.shape[1], M.dtype)
        w_neg = 1.0 / (M.shape[0] - n_pos).clamp_min(1)
        w_pos = 1.0 / n_pos.clamp_min(1)
    else:
        w_neg = w_pos = M.new_ones(M.shape[1])
    neg = (torch.relu(M + 1.0).sum(dim=0) * w_neg).sum()
    return neg - (torch.relu(Mp + 1.0) * w_neg[c]).sum() + (torch.relu(1.0 - Mp) * w_pos[c]).sum()


def dense_alignment(
    M: torch.Tensor,
    v_owner: torch.Tensor,
    s_owner: torch.Tensor,
    normalize: bool = True,
    bags: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """C_0: every fragment pair of a corresponding image–sentence pair is a positive. ``bags``: the
    owners' :func:`bag_entries` when already at hand."""
    rows, cols = bags if bags is not None else bag_entries(v_owner, s_owner)
    return _alignment(M, rows, cols, None, normalize)


@torch.no_grad()
def mil_bag_labels(M: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """(E,) bool: the bag entries (rows, cols) labelled +1 by mi-SVM — M > 0, and in a column whose
    bag has no positive entry its highest-scoring one (the first such row on ties)."""
    Mb = M[rows, cols]
    pos = Mb > 0
    n_pos = torch.zeros(M.shape[1], dtype=torch.long, device=M.device).index_add_(0, cols, pos.long())
    empty = n_pos[cols] == 0  # no test of empty.any(): on a GPU it would wait for the device
    with warnings.catch_warnings():  # index_reduce is marked beta; its amax / amin are tested
        warnings.simplefilter("ignore", UserWarning)
        best = M.new_full((M.shape[1],), float("-inf")).index_reduce_(0, cols, Mb, "amax")
        cand = empty & (Mb == best[cols])
        big = torch.iinfo(torch.long).max  # neutral for amin: the rows of non-candidates never win
        first = torch.full((M.shape[1],), big, dtype=torch.long, device=M.device).index_reduce_(
            0, cols, torch.where(cand, rows, big), "amin"
        )
    return pos | (cand & (rows == first[cols]))


@torch.no_grad()
def mil_labels(M: torch.Tensor, v_owner: torch.Tensor, s_owner: torch.Tensor) -> torch.Tensor:
    """(Nv, Ns) labels in {-1, +1}: sign inside the positive bag, at least one +1 per bag, -1 outside."""
    rows, cols = bag_entries(v_owner, s_owner)
    y = torch.full_like(M, -1.0)
    y[rows, cols] = torch.where(mil_bag_labels(M, rows, cols), 1.0, -1.0).to(M.dtype)
    return y


def mil_alignment(
    M: torch.Tensor,
    v_owner: torch.Tensor,
    s_owner: torch.Tensor,
    normalize: bool = True,
    bags: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """C_F: the MIL fragment objective (labels from :func:`mil_bag_labels`, held fixed); ``bags`` as in
    :func:`dense_alignment`."""
    rows, cols = bags if bags is not None else bag_entries(v_owner, s_owner)
    return _alignment(M, rows, cols, mil_bag_labels(M, rows, cols), normalize)


def pair_scores(
    M: torch.Tensor,
    v_owner: torch.Tensor,
    s_owner: torch.Tensor,
    n_images: int,
    n_sentences: int,
    smooth: float = 5.0,
    accumulate: str = "sum",
    inplace: bool = False,
) -> torch.Tensor:
    """(n_images, n_sentences) image–sentence scores ``S_kl`` from fragment scores ``M``.

    ``v_owner`` maps fragment rows to images, ``s_owner`` columns to sentences. An image or a
    sentence with no fragment scores 0 against everything (evaluation sets sentences without
    fragments to -inf itself).
    """
    R = torch.clamp(M, min=0.0)
    n_s = counts(s_owner, n_sentences, M.dtype)
    if accumulate == "sum":
        per_img = M.new_zeros((n_images, M.shape[1])).index_add_(0, v_owner, R)  # (K, Ns)
        n_v = counts(v_owner, n_images, M.dtype).clamp_min(1)
        per_img = per_img / n_v[:, None]
    elif accumulate == "max":
        with warnings.catch_warnings():  # index_reduce is marked beta; its amax and gradient are tested
            warnings.simplefilter("ignore", UserWarning)
            per_img = M.new_zeros((n_images, M.shape[1])).index_reduce_(
                0, v_owner, R, "amax", include_self=True
            )  # R >= 0: 0 is neutral
    else:
        raise ValueError(f"accumulate={accumulate!r}: allowed sum, max")
    S = M.new_zeros((n_images, n_sentences)).index_add_(1, s_owner, per_img)
    return S / (n_s + smooth)[None, :]


def total_cost(
    V: torch.Tensor,
    S: torch.Tensor,
    v_owner: torch.Tensor,
    s_owner: torch.Tensor,
    *,
    dense: bool,
    fragment_weight: float = 1.0,
    beta: float = 1.0,
    margin: float = 1.0,
    smooth: float = 5.0,
    accumulate: str = "sum",
    normalize: bool = True,
    hardest: bool = False,
    reg: torch.Tensor | None = None,
    alpha: float = 0.0,
    n: int | None = None,
    bags: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``fragment_weight * (C_0 if dense else C_F) + beta * C_G + alpha * reg``; returns (cost, parts), the
    parts as detached 0-d tensors (read when logged: on a GPU a read waits for the device). ``n``: the
    number of pairs (default: read off the owners); ``bags``: their :func:`bag_entries`, when at hand."""
    M = fragment_scores(V, S)
    B = (
        n
        if n is not None
        else (int(max(v_owner.max().item(), s_owner.max().item())) + 1 if len(v_owner) and len(s_owner) else 0)
    )
    if B == 0 or not len(v_owner) or not len(s_owner):
        raise ValueError("total_cost: a batch needs image and sentence fragments")
    cost = M.new_zeros(())
    parts: dict[str, torch.Tensor] = {}
    if fragment_weight:
        cf = (dense_alignment if dense else mil_alignment)(M, v_owner, s_owner, normalize, bags)
        cost = cost + fragment_weight * cf
        parts["C_0" if dense else "C_F"] = cf.detach()
    if beta:
        cg = contrastive_hinge(pair_scores(M, v_owner, s_owner, B, B, smooth, accumulate), margin, hardest)
        cost = cost + beta * cg
        parts["C_G"] = cg.detach()
    if alpha and reg is not None:
        cost = cost + alpha * reg
        parts["reg"] = reg.detach()
    return cost, parts


# ----------------------------------------------------------------------------- Peri 2018 / VSE++ (docs/systems.md)
def contrastive_hinge(
    S: torch.Tensor, margin: float, hardest: bool = False, same: torch.Tensor | None = None
) -> torch.Tensor:
    """Eq. 7 of Peri (2018), VSE++'s loss, summed over the batch. ``S`` (B, B): image b (row) against
    sentence b' (column), pairs on the diagonal. Caption retrieval hinges ``[α − S_bb + S_bb']_+`` (row
    b) and image retrieval hinges ``[α − S_bb + S_b'b]_+`` (column b) over the negatives b' ≠ b, summed
    (``hardest=False``, VSE0) or only the largest of each (VSE++). ``same`` (B, B) bool marks pairs
    b ≠ b' sharing an image: not negatives (masked) when given."""
    d = S.diagonal()
    off = torch.eye(S.shape[0], dtype=torch.bool, device=S.device)
    if same is not None:
        off = off | same
    cap = (margin - d[:, None] + S).clamp(min=0).masked_fill(off, 0.0)  # row b: captions b' for image b
    img = (margin - d[None, :] + S).clamp(min=0).masked_fill(off, 0.0)  # column b: images b' for caption b
    if hardest:
        return cap.amax(dim=1).sum() + img.amax(dim=0).sum()
    return cap.sum() + img.sum()


@torch.no_grad()
def hinge_diagnostics(
    S: torch.Tensor, margin: float, same: torch.Tensor | None = None, group: torch.Tensor | None = None
) -> dict[str, float]:
    """Why a hardest-negative loss collapses, measured on one batch of Eq. 7 (``S``, ``margin``, ``same``
    as in :func:`contrastive_hinge`): ``violating`` the share of negative terms (both directions) within
    the margin of their positive, in [0, 1] (near 1 at the collapse: every score alike); with ``group``
    (B,) int labels of the pairs' images (Pascal1K's category), ``hardest_same_group`` the share of the 2B
    hardest negatives (each image's hardest caption, each caption's hardest image) whose image is in
    the positive's group, and ``same_group_negatives`` that share among all negatives (its chance level)."""
    B = S.shape[0]
    off = torch.eye(B, dtype=torch.bool, device=S.device)
    if same is not None:
        off = off | same
    d = S.diagonal()
    neg = ~off
    n_neg = max(int(neg.sum()), 1)
    cap = (margin - d[:, None] + S > 0) & neg
    img = (margin - d[None, :] + S > 0) & neg
    out = {"violating": float(cap.sum() + img.sum()) / (2 * n_neg)}
    if group is not None and B > 1:
        sg = group[:, None] == group[None, :]
        masked = S.masked_fill(off, float("-inf"))
        has = neg.any(1)
        hc = masked.argmax(1)  # row b: its hardest caption (of image hc)
        hi = masked.argmax(0)  # column b: its hardest image
        hits = (sg[torch.arange(B, device=S.device), hc] & has).sum() + (
            sg[hi, torch.arange(B, device=S.device)] & neg.any(0)
        ).sum()
        out["hardest_same_group"] = float(hits) / max(int(has.sum() + neg.any(0).sum()), 1)
        out["same_group_negatives"] = float((sg & neg).sum()) / n_neg
    return out


def order_scores(images: torch.Tensor, sentences: torch.Tensor, max_elems: int = 1 << 24) -> torch.Tensor:
    """(n, m) order-violation similarity ``S(i, c) = −‖max(0, c − i)‖²`` (Vendrov et al. 2016; Peri
    Eq. 9 with its square) of ``images`` (n, D) and ``sentences`` (m, D), both already |L2-normalised|:
    zero when the caption lies below the image in every coordinate. Computed in column tiles of at most
    ``max_elems`` (n × tile × D) elements."""
    n, dim = images.shape
    step = max(1, max_elems // max(1, n * dim))
    return (
        torch.cat(
            [
                -(sentences[None, a : a + step] - images[:, None]).clamp(min=0).pow(2).sum(-1)
                for a in range(0, sentences.shape[0], step)
            ],
            dim=1,
        )
        if len(sentences)
        else images.new_zeros((n, 0))
    )
