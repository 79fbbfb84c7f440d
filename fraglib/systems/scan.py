"""SCAN: Stacked Cross Attention (Lee, Chen, Hua, Hu and He, ECCV 2018), checked against the authors' code
(github kuanghuei/SCAN, ``model.py``; docs/systems.md "SCAN").

**Images** (an image view, SCAN's 36 bottom-up regions ↔ ``top36``): the image's rows, standardised on the
training split, one linear map to D (SCAN's Xavier-uniform ``fc``), L2-normalised: regions ``v_i``.
**Sentences** (the ``tokens`` view): learned word embeddings U(±0.1) → a GRU with D states (``bi_gru``: both
directions, their outputs averaged, as SCAN) → every output L2-normalised: words ``e_j``. No further map.

**Similarity** S(I, T) of an image (regions ``v_1..v_k``) and a caption (words ``e_1..e_n``), in one of two
directions (``cross_attn``). With ``s_ij = v_i · e_j`` (cosines: unit vectors):

* ``t2i`` (the paper's text-image formulation; the query is each word, the context the regions):
  ``s̄_ij`` = s normalised over the *words* (``raw_feature_norm``, below), ``α_ij = softmax_i(λ1 s̄_ij)``
  over the regions, ``a_j = Σ_i α_ij v_i``, ``R_j = cos(e_j, a_j)``, then S = pool_j R_j over the words;
* ``i2t`` (image-text; query each region, context the words): ``s̄`` normalised over the *regions*,
  ``α_ij = softmax_j(λ1 s̄_ij)``, ``a_i = Σ_j α_ij e_j``, ``R_i = cos(v_i, a_i)``, S = pool_i R_i;
* ``both``: the mean of the two scores on the same embeddings (the paper's "t-i + i-t" averages the
  scores of two separately trained models; this is the one-model analogue).

``raw_feature_norm`` (SCAN's names; normalised over the query elements for each context element, as in
the paper's s̄ and SCAN's ``func_attention``): ``clipped_l2norm`` LeakyReLU(0.1) then ``x / (‖x‖₂ + ε)``
(SCAN's default; the paper writes ``[·]+``, a plain ReLU: ``relu_l2norm``), ``l2norm``, ``softmax``
(over the query elements), ``clipped`` (LeakyReLU only) and ``no_norm``. SCAN's ``l1norm`` and
``clipped_l1norm`` call an undefined ``l1norm_d`` in its code and are not offered. The pooling ``agg_func``
(SCAN's names): ``Mean`` (the paper's AVG), ``LogSumExp`` (LSE: ``log(Σ exp(λ2 R)) / λ2``), ``Max``,
``Sum``. Cosines and norms use SCAN's ε forms exactly (``l2norm``: ``x / (‖x‖ + 1e-8)``;
``cosine_similarity``: ``x·y / max(‖x‖ ‖y‖, 1e-8)``), so the scores equal SCAN's to float rounding.

**Vectorised**: no D-vector per (image, caption, query element) is formed: ``q · a = Σ_c α_c (q · c)`` and
``‖a‖² = αᵀ G α`` with G the Gram matrix of the context (an image's regions, a caption's words); captions
are scored in length-sorted tiles of at most ``max_elems`` (images × regions × captions × words) entries,
each tile padded to its own longest caption; the gradient is autograd's (:func:`xattn_scores`).

**Loss**: SCAN's ``ContrastiveLoss``, summed over both directions: the summed hinge or the hardest negative
(``max_violation``) = :func:`fraglib.systems.objectives.contrastive_hinge` (VSE++'s Eq., the same
function the VSE system uses), after ``warmup_epochs`` of the sum; captions of the batch's same image
are not negatives when ``mask_same_image`` (SCAN's batches never hold an image twice).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import torch
from torch import nn

from fraglib.core.batches import IMAGE_VIEWS, Rows, Views
from fraglib.core.config import ConfigError, check_choice, check_range
from fraglib.core.device import to_device
from fraglib.systems.base import System, standardized_linear
from fraglib.systems.objectives import contrastive_hinge, hinge_diagnostics
from fraglib.systems.vse import TokenGRU, padded

CROSS_ATTN = ("t2i", "i2t", "both")
RAW_FEATURE_NORMS = ("clipped_l2norm", "l2norm", "softmax", "clipped", "no_norm", "relu_l2norm")
AGG_FUNCS = ("Mean", "LogSumExp", "Max", "Sum")
EPS = 1e-8  # SCAN's ε: l2norm's ‖x‖ + ε and cosine_similarity's max(‖x‖ ‖y‖, ε)
TINY = 1e-30  # ‖a‖² floor before the square root (a finite gradient; below SCAN's ε it changes nothing)
CPU_TILE_ELEMS = 1 << 20  # CPU: entries of one tile at most (4 MB a tensor, cache-sized): a training step of
# batch 128 on one thread 2.9x (i2t) / 2.7x (t2i) faster than one 2^24 tile, 2^18 slower again (2026-11-29)


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.scan``. SCAN's command-line names where it has one (``train.py``); defaults:
    SCAN's published recipe (``--max_violation --bi_gru``, D 1024, word 300, margin 0.2), t→i AVG with
    λ1 = 9 and ``clipped_l2norm``, i→t λ1 = 4 (its README's Flickr30K / COCO i-t AVG), LSE λ2 = 6.
    The trainer keys of SCAN's recipe (Adam, lr 2e-4, batch 128, clip 2, 30 epochs with lr / 10 after 15)
    belong in the run's ``params.yaml`` section, not here."""

    images: str = "top36"  # image view whose rows are the regions (SCAN: 36 bottom-up-attention regions)
    cross_attn: str = "t2i"  # SCAN's --cross_attn: t2i (words attend to regions) | i2t | both (mean of the two)
    agg_func: str = "Mean"  # SCAN's --agg_func: Mean (AVG) | LogSumExp (LSE) | Max | Sum, pooling R over the queries
    lambda_softmax_t2i: float = 9.0  # λ1 (unitless inverse temperature on s̄) for t2i: SCAN's --lambda_softmax
    lambda_softmax_i2t: float = 4.0  # λ1 for i2t (SCAN's README: 4 for i-t)
    lambda_lse: float = 6.0  # λ2 of LogSumExp pooling: SCAN's --lambda_lse (t-i LSE 6; its i-t LSE runs: 5 / 20)
    raw_feature_norm: str = "clipped_l2norm"  # SCAN's --raw_feature_norm (module docstring), over the queries
    max_violation: bool = True  # SCAN's --max_violation: hardest negative (VSE++) | false: summed hinge
    warmup_epochs: int = 0  # max_violation: the summed hinge for the first epochs (0 = SCAN)
    margin: float = 0.2  # SCAN's --margin α of the hinge, in score units (cosines: [-1, 1])
    mask_same_image: bool = True  # captions of the batch's same image are not negatives
    embed_dim: int = 1024  # SCAN's --embed_size D: regions and word states (GRU hidden = D)
    word_dim: int = 300  # SCAN's --word_dim
    bi_gru: bool = True  # SCAN's --bi_gru: bidirectional GRU, the two directions' outputs averaged
    dropout: float = 0.0  # on word embeddings and GRU outputs (SCAN: none)
    max_elems: int = 1 << 24  # tile bound: (images × regions × captions × words) entries scored at once
    SECTION: ClassVar[str] = "systems.scan"

    def validate(self) -> "Config":
        p = self.SECTION
        check_choice(f"{p}.images", self.images, IMAGE_VIEWS[:-1])  # 'none' has no regions
        check_choice(f"{p}.cross_attn", self.cross_attn, CROSS_ATTN)
        check_choice(f"{p}.agg_func", self.agg_func, AGG_FUNCS)
        check_range(f"{p}.lambda_softmax_t2i", self.lambda_softmax_t2i, 1e-3, 1e3, float)
        check_range(f"{p}.lambda_softmax_i2t", self.lambda_softmax_i2t, 1e-3, 1e3, float)
        check_range(f"{p}.lambda_lse", self.lambda_lse, 1e-3, 1e3, float)
        check_choice(f"{p}.raw_feature_norm", self.raw_feature_norm, RAW_FEATURE_NORMS)
        check_choice(f"{p}.max_violation", self.max_violation, (True, False))
        check_range(f"{p}.warmup_epochs", self.warmup_epochs, 0, 10_000, int)
        check_range(f"{p}.margin", self.margin, 0.0, 1e3, float)
        check_choice(f"{p}.mask_same_image", self.mask_same_image, (True, False))
        check_range(f"{p}.embed_dim", self.embed_dim, 1, 100_000, int)
        check_range(f"{p}.word_dim", self.word_dim, 1, 100_000, int)
        check_choice(f"{p}.bi_gru", self.bi_gru, (True, False))
        check_range(f"{p}.dropout", self.dropout, 0.0, 0.95, float)
        check_range(f"{p}.max_elems", self.max_elems, 1, 1 << 40, int)
        if self.images == "none":
            raise ConfigError(f"{p}.images='none': SCAN attends over image regions")
        return self


# ----------------------------------------------------------------------------- the math (pure functions)
def raw_feature_norm(s: torch.Tensor, qmask: torch.Tensor, norm: str) -> torch.Tensor:
    """SCAN's normalisation of the raw similarities ``s`` (..., Q, C) (query × context) over the query
    elements (dim -2) for each context element, before the attention softmax; ``qmask`` (..., Q) bool marks
    real queries (padding takes no part). ``l2norm``-type: ``x / (‖x‖₂ + ε)`` as SCAN's ``l2norm``."""
    if norm == "no_norm":
        return s
    if norm == "clipped":
        return nn.functional.leaky_relu(s, 0.1)
    qm = qmask[..., None]
    if norm == "softmax":
        return torch.softmax(s.masked_fill(~qm, float("-inf")), dim=-2)
    if norm == "l2norm":
        x = s * qm
    elif norm == "clipped_l2norm":
        x = nn.functional.leaky_relu(s, 0.1) * qm
    elif norm == "relu_l2norm":
        x = s.clamp_min(0) * qm
    else:
        raise ValueError(f"unknown raw_feature_norm {norm!r}, known: {', '.join(RAW_FEATURE_NORMS)}")
    return x / (torch.linalg.vector_norm(x, dim=-2, keepdim=True) + EPS)  # its gradient at 0 is 0, not NaN


def aggregate(r: torch.Tensor, qmask: torch.Tensor, agg_func: str, lambda_lse: float) -> torch.Tensor:
    """Pool the per-query relevances ``r`` (..., Q) over the real queries ``qmask`` (..., Q): SCAN's
    ``agg_func`` (``LogSumExp``: ``log Σ exp(λ2 r) / λ2``, computed stably)."""
    if agg_func == "Mean":
        return (r * qmask).sum(-1) / qmask.sum(-1)
    if agg_func == "Sum":
        return (r * qmask).sum(-1)
    if agg_func == "Max":
        return r.masked_fill(~qmask, float("-inf")).amax(-1)
    if agg_func == "LogSumExp":
        return torch.logsumexp((r * lambda_lse).masked_fill(~qmask, float("-inf")), dim=-1) / lambda_lse
    raise ValueError(f"unknown agg_func {agg_func!r}, known: {', '.join(AGG_FUNCS)}")


def _attend(s, qmask, cmask, gram, gram_spec, qnorm, lam, norm, agg_func, lambda_lse):
    """One tile: ``s`` (n, k, Q, C) query–context dot products → (n, k) scores. ``gram`` the context's Gram
    matrices contracted by ``gram_spec``; ``qnorm`` the query norms (broadcast to (n, k, Q))."""
    z = raw_feature_norm(s, qmask, norm)
    alpha = torch.softmax((z * lam).masked_fill(~cmask[..., None, :], float("-inf")), dim=-1)  # over the context
    num = (alpha * s).sum(-1)  # q · a
    a2 = (torch.einsum(gram_spec, alpha, gram) * alpha).sum(-1)  # ‖a‖² = αᵀ G α
    r = num / (qnorm * a2.clamp_min(TINY).sqrt()).clamp_min(EPS)  # SCAN's cosine_similarity
    return aggregate(r, qmask, agg_func, lambda_lse)


def xattn_scores(
    V: torch.Tensor,
    vmask: torch.Tensor,
    E: torch.Tensor,
    emask: torch.Tensor,
    direction: str = "t2i",
    lambda_softmax: float = 9.0,
    norm: str = "clipped_l2norm",
    agg_func: str = "Mean",
    lambda_lse: float = 6.0,
    max_elems: int = 1 << 24,
) -> torch.Tensor:
    """(n, m) SCAN scores S(image, caption) in one ``direction`` (``t2i`` = SCAN's ``xattn_score_t2i``,
    ``i2t`` = its ``xattn_score_i2t``), with softmax temperature ``lambda_softmax`` (λ1), ``norm`` (SCAN's
    ``raw_feature_norm``), ``agg_func`` and ``lambda_lse`` (λ2). ``V`` (n, R, D) regions with ``vmask``
    (n, R) bool; ``E`` (m, L, D) words with ``emask`` (m, L) bool; every image and caption has at least one
    real row; the vectors need not be unit (the cosines divide by their norms). Captions are scored in
    length-sorted tiles of at most ``max_elems`` (n·R·k·L_tile) entries (on a CPU also at most
    :data:`CPU_TILE_ELEMS`, cache-sized), padded to the tile's longest; the result does not depend on the
    tiling beyond float rounding."""
    if direction not in ("t2i", "i2t"):
        raise ValueError(f"direction must be t2i or i2t, got {direction!r}")
    n, R, D = V.shape
    m, L, _ = E.shape
    if m == 0 or n == 0:
        return V.new_zeros((n, m))
    ct = torch.promote_types(V.dtype, torch.float32)  # fp32 elementwise work under autocast
    lengths = emask.sum(1).cpu()  # one host read per call
    order = torch.argsort(lengths, stable=True)
    limit = max_elems if V.device.type == "cuda" else min(max_elems, CPU_TILE_ELEMS)
    step = max(1, limit // max(1, n * R * L))
    flat = V.reshape(n * R, D)
    if direction == "t2i":
        vgram = torch.bmm(V, V.transpose(1, 2)).to(ct)  # (n, R, R) regions' Gram
        enorm = torch.linalg.vector_norm(E.to(ct), dim=-1)  # (m, L) query norms
    else:
        vnorm = torch.linalg.vector_norm(V.to(ct), dim=-1)[:, None]  # (n, 1, R) query norms
    cols = []
    for a in range(0, m, step):
        idx_cpu = order[a : a + step]
        Lb = max(int(lengths[idx_cpu].max()), 1)
        idx = to_device(idx_cpu, E.device)
        Ec, em = E[idx, :Lb], emask[idx, :Lb]
        k = len(idx)
        s = (flat @ Ec.reshape(k * Lb, D).T).to(ct).view(n, R, k, Lb).transpose(1, 2)  # (n, k, R, Lb)
        if direction == "t2i":  # queries: the words; context: the regions
            cols.append(
                _attend(
                    s.transpose(2, 3),
                    em[None],
                    vmask[:, None],
                    vgram,
                    "nkqc,ncd->nkqd",
                    enorm[idx, :Lb][None],
                    lambda_softmax,
                    norm,
                    agg_func,
                    lambda_lse,
                )
            )
        else:  # queries: the regions; context: the words
            egram = torch.bmm(Ec, Ec.transpose(1, 2)).to(ct)  # (k, Lb, Lb) words' Gram
            cols.append(
                _attend(
                    s,
                    vmask[:, None],
                    em[None],
                    egram,
                    "nkqc,kcd->nkqd",
                    vnorm,
                    lambda_softmax,
                    norm,
                    agg_func,
                    lambda_lse,
                )
            )
    S = torch.cat(cols, dim=1)
    return S[:, to_device(torch.argsort(order), S.device)]


def scan_scores(
    V: torch.Tensor, vmask: torch.Tensor, E: torch.Tensor, emask: torch.Tensor, cfg: Config
) -> torch.Tensor:
    """(n, m) scores of ``cfg.cross_attn`` (``both``: the mean of t2i and i2t) with ``cfg``'s settings."""
    kw = dict(norm=cfg.raw_feature_norm, agg_func=cfg.agg_func, lambda_lse=cfg.lambda_lse, max_elems=cfg.max_elems)
    t2i = lambda: xattn_scores(V, vmask, E, emask, "t2i", cfg.lambda_softmax_t2i, **kw)
    i2t = lambda: xattn_scores(V, vmask, E, emask, "i2t", cfg.lambda_softmax_i2t, **kw)
    if cfg.cross_attn == "t2i":
        return t2i()
    if cfg.cross_attn == "i2t":
        return i2t()
    return (t2i() + i2t()) / 2


# ----------------------------------------------------------------------------- the system
class ScanText(TokenGRU):
    """SCAN's ``EncoderText``: embedding (n_vocab, word_dim) U(±0.1), GRU(word_dim → D) (``bi_gru``: both
    directions, outputs averaged), dropout on the embeddings and the outputs. Padded positions never reach
    the recurrence (packed sequences, :class:`fraglib.systems.vse.TokenGRU`)."""

    def __init__(self, n_vocab: int, word_dim: int, embed_dim: int, dropout: float, bi_gru: bool) -> None:
        super().__init__(n_vocab, word_dim, embed_dim, dropout)
        self.bi_gru = bi_gru
        if bi_gru:
            self.gru = nn.GRU(word_dim, embed_dim, batch_first=True, bidirectional=True)

    def forward(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(word states (m, L, D) zero past each caption's end, final states, lengths (m,))."""
        out, last, lengths = super().forward(rows)
        if self.bi_gru:
            H = out.shape[-1] // 2
            out = (out[..., :H] + out[..., H:]) / 2
        return out, last, lengths


class ScanSystem(System):
    """``dims``: n_relations (= vocabulary size of the tokens view), img_dim. Encodings: images ``(V, vmask,
    index)`` — (n, R, D) unit regions, (n, R) bool mask, (n,) the images' split positions (the loss's
    same-image mask); sentences ``(E, emask)`` — (m, L, D) unit word states zero past the end, (m, L) mask."""

    NAME = "scan"
    Config = Config

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, "tokens")

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.text = ScanText(dims["n_relations"], cfg.word_dim, cfg.embed_dim, cfg.dropout, cfg.bi_gru)
        self.img = nn.Linear(dims["img_dim"], cfg.embed_dim)
        r = math.sqrt(6.0) / math.sqrt(dims["img_dim"] + cfg.embed_dim)  # SCAN's Xavier-uniform fc
        nn.init.uniform_(self.img.weight, -r, r)
        nn.init.zeros_(self.img.bias)
        self.register_buffer("img_mean", torch.zeros(dims["img_dim"]))
        self.register_buffer("img_std", torch.ones(dims["img_dim"]))

    def prepare(self, train: Any) -> None:
        """The standardisation of the image rows (training split, before any pooling)."""
        mean, std = train.image_moments()
        self.img_mean.copy_(mean)
        self.img_std.copy_(std.clamp_min(1e-6))

    def use_training_split(self, train: Any) -> None:
        """The training images' groups (``train.image_group``, or none) for the loss's diagnostics."""
        group = getattr(train, "image_group", None)
        self._group = None if group is None else torch.as_tensor(group, device=self.img_mean.device)

    def encode_images(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.image_rows(rows)
        index = to_device(torch.as_tensor(rows.index), x.device)
        regions = nn.functional.normalize(standardized_linear(self.img, x, self.img_mean, self.img_std), dim=-1)
        V, mask = padded(regions, rows.owner, rows.n, rows.cpu("owner"))
        return V, mask, index

    def encode_sentences(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
        out, _, lengths = self.text(rows)
        E = nn.functional.normalize(out, dim=-1)
        mask = torch.arange(E.shape[1], device=E.device)[None, :] < lengths.clamp(min=1)[:, None]
        return E * mask[..., None], mask

    def scores(self, images: tuple[torch.Tensor, ...], sentences: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        V, vmask = images[0], images[1]
        if not vmask.any(1).all():  # an image without rows: keep its scores defined (scored -inf later)
            vmask = vmask.clone()
            vmask[:, 0] = True
        return scan_scores(V, vmask, sentences[0], sentences[1], self.cfg)

    def hardest(self, epoch: int) -> bool:
        """Whether the hinge takes the hardest negative at ``epoch`` (after ``warmup_epochs`` of the sum)."""
        return self.cfg.max_violation and epoch >= self.cfg.warmup_epochs

    def phase(self, epoch: int) -> str:
        return "hardest" if self.hardest(epoch) else "sum"

    def loss(
        self, images: tuple[torch.Tensor, ...], sentences: tuple[torch.Tensor, torch.Tensor], epoch: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """SCAN's ``ContrastiveLoss`` on the batch (pair b = image b, caption b); pairs sharing an image are
        masked when ``mask_same_image``; the collapse diagnostics of
        :func:`~fraglib.systems.objectives.hinge_diagnostics` are logged with it."""
        index = images[-1]
        same = (index[:, None] == index[None, :]) & ~torch.eye(len(index), dtype=torch.bool, device=index.device)
        mask = same if self.cfg.mask_same_image else None
        S = self.scores(images, sentences)
        cost = contrastive_hinge(S, self.cfg.margin, self.hardest(epoch), mask)
        group = getattr(self, "_group", None)
        return cost, {
            "L_sim": cost.detach(),
            "same_image_pairs": float(same.sum()) / 2,
            **hinge_diagnostics(S.detach(), self.cfg.margin, mask, None if group is None else group[index]),
        }
