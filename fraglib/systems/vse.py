"""Peri's (2018) retrieval systems: the VSE baseline (VSE0 / VSE++, cosine or order-violation
similarity) and region–word attention, the retrieval half of STT-ATT (docs/systems.md).

**Sentences** (the ``tokens`` view): learned word embeddings → a 1-layer GRU (:class:`TokenGRU`) →
the final state (global similarities) or every output (attention) → one linear map to D. PyTorch's GRU
applies the reset gate after the recurrent matrix, TensorFlow's GRUCell (Peri's) before it; immaterial.
Padded positions never reach the recurrence (packed sequences).

**Images**: the image's rows in its view, standardised on the training split, one linear map to D —
for ``cosine`` / ``order`` the mean of the rows (``images: fullframe`` = Peri's global descriptor),
for ``attention`` every row is a region (``top36``: 36 proposals by our detector's score + the full
frame, the analogue of Peri's "proposals by objectness"; ``grid``; ``groundtruth``).

**Pooling** (global similarities only): ``image_pooling`` mean (Peri; the mean row, then the map) | max | gpo
and ``text_pooling`` last (Peri; the GRU's final state) | mean | max | gpo — max, mean and gpo over the mapped rows
(regions) or the mapped GRU outputs (words) of each item; ``gpo`` is VSE∞'s Generalized Pooling Operator
(:class:`fraglib.systems.gpo.GPO`, one per side, ``gpo_pe_dim`` / ``gpo_hidden`` = 32 / 32 as the authors').

**Similarity** (all on L2-normalised vectors):

* ``cosine``: ``v̂ · ĉ`` (Peri Eq. 8);
* ``order``: ``−‖max(0, ĉ − v̂)‖²`` on ``|·|`` of the unit vectors (Eq. 9 with its square, the caption
  as the anchor; VSE++'s ``use_abs``; :func:`fraglib.systems.objectives.order_scores`);
* ``attention`` (Eqs. 13–17, SCAN's image-to-text form): ``s_ij = v̂_i · ê_j`` for region i and word j,
  ``α_ij = softmax_j(λ s_ij)`` over the caption's words, ``a_i = Σ_j α_ij ê_j``,
  ``R_i = v̂_i · a_i / ‖a_i‖``, ``S(I, T) = mean_i R_i``. ``clipped_l2norm`` adds SCAN's normalisation
  (LeakyReLU 0.1, L2 over the regions) before the softmax. No D-vector per (image, caption, region)
  is formed: ``v̂_i · a_i = Σ_j α_ij s_ij`` and ``‖a_i‖² = α_iᵀ G α_i`` with G the caption's word Gram
  matrix; the score matrix is computed in tiles of at most ``max_elems`` entries (:func:`attention_scores`).

**Loss**: Eq. 7 summed over the batch (:func:`fraglib.systems.objectives.contrastive_hinge`) — the
sum over negatives (``negatives: sum``, VSE0) or the hardest (VSE++), after ``warmup_epochs`` of the
sum: from random initialisation on our small data sets the hardest-negative loss alone collapses
(every score alike, cost → 2Bα, image search at chance). Captions of one image that meet in a batch
(``train.distinct_images: false``, as VSE++ draws batches) are not negatives when ``mask_same_image``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from fraglib.core.batches import IMAGE_VIEWS, Rows, Views, mean_rows
from fraglib.core.config import ConfigError, check_choice, check_range
from fraglib.core.device import to_device
from fraglib.systems.base import (
    System,
    add_input_buffers,
    check_finetune,
    fill_input_buffers,
    image_map,
    standardized_linear,
)
from fraglib.systems.cnn import tuned_cnn
from fraglib.systems.gpo import GPO
from fraglib.systems.gru import packed_gru
from fraglib.systems.objectives import contrastive_hinge, hinge_diagnostics, order_scores

SIMILARITIES = ("cosine", "order", "attention")
IMAGE_POOLING = ("mean", "max", "gpo")
TEXT_POOLING = ("last", "mean", "max", "gpo")


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.vse``. Defaults: Peri's sizes (word 300, GRU 1024, D 1024), VSE++'s margin 0.2
    (Peri's order runs: 0.05), SCAN's λ = 4."""

    images: str = "fullframe"  # fullframe | rcnn | groundtruth | top36 | grid (attention: the regions)
    similarity: str = "cosine"  # cosine (Eq. 8) | order (Eq. 9, squared) | attention (Eqs. 13-17)
    negatives: str = "hardest"  # hardest (VSE++) | sum (VSE0)
    warmup_epochs: int = 0  # hardest: the sum over negatives for the first epochs (0 = Peri)
    margin: float = 0.2  # α of Eq. 7
    mask_same_image: bool = True  # captions of the batch's same image are not negatives
    embed_dim: int = 1024  # D
    word_dim: int = 300
    hidden: int = 1024  # GRU state
    dropout: float = 0.0  # on word embeddings and the GRU outputs
    word_init: str = "random"  # random (Peri) | glove (word_dim must be 50, the GloVe table's)
    lambda_att: float = 4.0  # attention: λ of Eq. 15 (SCAN's i-t AVG)
    clipped_l2norm: bool = False  # attention: SCAN's normalisation before the softmax (not in the thesis)
    max_elems: int = 1 << 24  # attention: tile bound of the (images, captions, regions, words) tensors
    finetune: int = 0  # > 0: the CNN's last N blocks train with the system (pixels, no cache)
    finetune_lr_scale: float = 0.1  # their learning rate, × train.lr
    image_pooling: str = "mean"  # cosine/order: mean (Peri) | max | gpo (VSE∞) of the image's mapped rows
    text_pooling: str = "last"  # cosine/order: last (the GRU's final state, Peri) | mean | max | gpo of its outputs
    gpo_pe_dim: int = 32  # gpo: positional-encoding size of the weight generator (VSE∞: 32; even)
    gpo_hidden: int = 32  # gpo: its bidirectional GRU's state per direction (VSE∞: 32)
    SECTION: ClassVar[str] = "systems.vse"  # error messages name it (a subclass: its own)
    TEXT_ONLY: ClassVar[bool] = False  # may the image view be 'none'? (STT's paraphraser)

    def validate(self) -> "Config":
        p = self.SECTION
        check_choice(f"{p}.images", self.images, IMAGE_VIEWS)
        check_choice(f"{p}.similarity", self.similarity, SIMILARITIES)
        check_choice(f"{p}.negatives", self.negatives, ("hardest", "sum"))
        check_range(f"{p}.warmup_epochs", self.warmup_epochs, 0, 10_000, int)
        check_range(f"{p}.margin", self.margin, 0.0, 1e3, float)
        check_choice(f"{p}.mask_same_image", self.mask_same_image, (True, False))
        for k in ("embed_dim", "word_dim", "hidden"):
            check_range(f"{p}.{k}", getattr(self, k), 1, 100_000, int)
        check_range(f"{p}.dropout", self.dropout, 0.0, 0.95, float)
        check_choice(f"{p}.word_init", self.word_init, ("random", "glove"))
        check_range(f"{p}.lambda_att", self.lambda_att, 1e-3, 1e3, float)
        check_choice(f"{p}.clipped_l2norm", self.clipped_l2norm, (True, False))
        check_range(f"{p}.max_elems", self.max_elems, 1, 1 << 40, int)
        check_finetune(p, self)
        check_choice(f"{p}.image_pooling", self.image_pooling, IMAGE_POOLING)
        check_choice(f"{p}.text_pooling", self.text_pooling, TEXT_POOLING)
        check_range(f"{p}.gpo_pe_dim", self.gpo_pe_dim, 2, 4096, int)
        check_range(f"{p}.gpo_hidden", self.gpo_hidden, 1, 4096, int)
        if self.gpo_pe_dim % 2:
            raise ConfigError(f"{p}.gpo_pe_dim={self.gpo_pe_dim}: must be even (sine/cosine pairs)")
        if self.similarity == "attention" and (self.image_pooling, self.text_pooling) != ("mean", "last"):
            raise ConfigError(
                f"{p}.image_pooling={self.image_pooling!r}, text_pooling={self.text_pooling!r}: attention keeps "
                "every region and word (no pooling); pooling applies to cosine and order"
            )
        if self.images == "none" and not self.TEXT_ONLY:
            raise ConfigError(
                f"{p}.images='none': a retrieval system needs an image view with image information "
                f"({', '.join(IMAGE_VIEWS[:-1])})"
            )
        return self


class TokenGRU(nn.Module):
    """The sentence encoder: embedding (n_vocab, word_dim), U(±0.1) as in VSE++, and GRU(word_dim → hidden), dropout on
    the embeddings and the outputs."""

    def __init__(self, n_vocab: int, word_dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(n_vocab, word_dim)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        self.gru = nn.GRU(word_dim, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)

    @torch.no_grad()
    def init_from_glove(self, train_rows: dict[str, torch.Tensor], words: torch.Tensor) -> None:
        """Copy the GloVe vector of every vocabulary word found in the training rows (``rel`` vocabulary
        ids, ``w1`` rows of ``words``; an all-zero row = not in GloVe); ``<unk>`` stays random."""
        if words.shape[1] != self.embed.weight.shape[1]:
            raise ValueError(
                f"word_init=glove needs word_dim = {words.shape[1]} (the GloVe table's), "
                f"got {self.embed.weight.shape[1]}"
            )
        rel, w1 = train_rows["rel"], train_rows["w1"]
        ok = (rel > 0) & (words[w1].abs().sum(1) > 0)
        self.embed.weight[rel[ok]] = words[w1[ok]].to(self.embed.weight.dtype)

    def forward(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(outputs (m, L, hidden) zero past each caption's end, final states (m, hidden), lengths (m,)).
        A caption without tokens is read as one ``<unk>`` (its scores are -inf in evaluation anyway)."""
        owner = rows.cpu("owner")
        tok, mask = padded(rows.data["rel"], rows.owner, rows.n, owner)
        lengths = mask.sum(1)
        x = self.drop(self.embed(tok))
        packed = pack_padded_sequence(
            x, torch.bincount(owner, minlength=rows.n).clamp(min=1), batch_first=True, enforce_sorted=False
        )
        out, h = packed_gru(self.gru, packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tok.shape[1])
        return self.drop(out), self.drop(h[-1]), lengths


def padded(
    x: torch.Tensor, owner: torch.Tensor, n: int, owner_cpu: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``x`` (R, ...) of n items (``owner`` sorted) → ((n, Rmax, ...) zero-padded, (n, Rmax) bool mask);
    e.g. a caption's (R,) token ids → (n, Lmax) padded ids. ``owner_cpu``: the owners on the CPU
    (:meth:`~fraglib.core.batches.Rows.cpu`): the items' sizes are counted there, so the host never waits
    for the device."""
    counts = torch.bincount(owner if owner_cpu is None else owner_cpu, minlength=n)
    width = max(int(counts.max()) if len(owner) else 1, 1)
    counts = to_device(counts, x.device)
    pos = torch.arange(len(owner), device=x.device) - (torch.cumsum(counts, 0) - counts)[owner]
    out = x.new_zeros((n, width) + tuple(x.shape[1:]))
    out[owner, pos] = x
    return out, torch.arange(width, device=x.device)[None, :] < counts[:, None]


def attention_scores(
    V: torch.Tensor,
    vmask: torch.Tensor,
    E: torch.Tensor,
    emask: torch.Tensor,
    lam: float,
    clipped: bool = False,
    max_elems: int = 1 << 24,
) -> torch.Tensor:
    """(n, m) S(I, T) of Eqs. 13–17 (module docstring). ``V`` (n, R, D) unit regions with ``vmask``
    (n, R); ``E`` (m, L, D) unit words with ``emask`` (m, L), zero past each caption's end; every image
    and caption has at least one real row. Without ``clipped``: the fused :class:`AttentionScores`
    (tiles of at most ``max_elems`` (regions × words) entries, backward in closed form); with it:
    :func:`attention_scores_reference` (autograd)."""
    if clipped:
        return attention_scores_reference(V, vmask, E, emask, lam, True, max_elems)
    return AttentionScores.apply(V, vmask, E, emask, float(lam), int(max_elems))


CAPTIONS_PER_TILE = 32  # CPU: captions of one tile, grouped by length (their padding is the tile's longest)
TILE_ELEMS = 1 << 19  # CPU: (captions × words × regions) entries of one tile: a few MB, cache-sized
GPU_CAPTIONS_PER_TILE = 256  # GPU: a training batch is one tile, bounded by max_elems alone (launches, not cache)
KEEP_ELEMS = 1 << 27  # training: the tiles' terms are kept for the backward up to this many entries


def tile_shape(device: torch.device) -> tuple[int, int]:
    """(captions, entries) at most in one tile of :class:`AttentionScores` on ``device``: cache-sized tiles on
    a CPU; on a GPU, whose step is bound by kernel launches (about 55 per tile, forward and backward), tiles as
    large as ``max_elems`` allows. The tiling changes only how sums are split (equal to float rounding)."""
    return (GPU_CAPTIONS_PER_TILE, 1 << 62) if device.type == "cuda" else (CAPTIONS_PER_TILE, TILE_ELEMS)


def _tiles(vmask: torch.Tensor, emask: torch.Tensor, max_elems: int):
    """The tiles of :class:`AttentionScores`: (caption positions (c,), their longest length Lb, image
    ranges [(a, b)]); captions sorted by length so that a tile pads to nearly its own lengths."""
    n, R = vmask.shape
    lengths = emask.sum(1)
    order = torch.argsort(lengths, stable=True)
    captions, elems = tile_shape(vmask.device)
    per = max(1, min(captions, len(order)))
    for c0 in range(0, len(order), per):
        idx = order[c0 : c0 + per]
        Lb = max(int(lengths[idx].max()), 1)
        bn = max(1, min(elems, max_elems) // (len(idx) * Lb * R))
        yield idx, Lb, [(a, min(a + bn, n)) for a in range(0, n, bn)]


def _tile_terms(Vf: torch.Tensor, Eb: torch.Tensor, mb: torch.Tensor, lam: float):
    """One tile's region–word cosines ``s`` (c, Lb, r), unnormalised attention ``e`` (c, Lb, r) =
    exp(λ s − shift) on real words, 0 on padding, ``Ge`` = G e with G the captions' word Gram matrices
    (c, Lb, Lb), and per (caption, region) ``p`` = Σ_j e_j s_j and ``q`` = eᵀ G e (c, r). Then
    R_i = p / √q: the softmax's normaliser cancels (α = e / Σe), so it is never formed."""
    c, Lb, D = Eb.shape
    ct = torch.promote_types(Vf.dtype, torch.float32)  # fp32 elementwise work under autocast
    s = (Eb.reshape(c * Lb, D) @ Vf.T).to(ct).view(c, Lb, -1)
    if lam <= 40.0:  # |s| ≤ 1 (unit vectors): exp(λ(s − 1)) ≥ e^-80 never underflows
        e = torch.exp(s * lam - lam)
    else:  # the largest real word per region as the shift
        e = torch.exp((s - s.masked_fill(~mb[..., None], float("-inf")).amax(1, keepdim=True)) * lam)
    e.mul_(mb[..., None])
    G = torch.bmm(Eb, Eb.transpose(1, 2)).to(ct)
    Ge = torch.bmm(G, e)
    return s, e, Ge, (e * s).sum(1), (e * Ge).sum(1)


TINY = 1e-30


class AttentionScores(torch.autograd.Function):
    """The fused form of :func:`attention_scores_reference` (clipped = False): the same S(I, T) in tiles
    of ≤ 32 length-sorted captions × as many images as fill :data:`TILE_ELEMS`, keeping only (n, m)
    scores (and, when a gradient is wanted, each tile's s, e, Ge, p, q up to :data:`KEEP_ELEMS` entries;
    beyond that the backward recomputes them); the backward applies the closed-form gradient (docs/systems.md,
    "Region–word attention"):

    with rel = p / √q and dS → d rel (the region weights 1/|regions|),
    ``dp = d rel / √q``, ``dq = −½ d rel · rel / q``, ``ds_j = e_j (dp (1 + λ s_j) + 2 λ dq (G e)_j)``,
    ``dG = Σ_regions dq e eᵀ``; then ``dV = dsᵀ E``, ``dE = ds V + 2 dG E``."""

    @staticmethod
    def forward(ctx, V, vmask, E, emask, lam, max_elems):
        n, R, D = V.shape
        ct = torch.promote_types(V.dtype, torch.float32)
        w = vmask.to(ct) / vmask.sum(1, keepdim=True).clamp_min(1).to(ct)  # (n, R) region weights
        out = V.new_zeros((n, E.shape[0]), dtype=ct)
        keep = any(ctx.needs_input_grad) and 3 * n * R * E.shape[0] * E.shape[1] <= KEEP_ELEMS
        kept = []
        for idx, Lb, blocks in _tiles(vmask, emask, max_elems):
            Eb, mb = E[idx, :Lb], emask[idx, :Lb]
            for a, b in blocks:
                terms = _tile_terms(V[a:b].reshape(-1, D), Eb, mb, lam)
                p, q = terms[3], terms[4]
                out[a:b, idx] = ((p / q.sqrt().clamp_min(TINY)).view(len(idx), b - a, R) * w[a:b]).sum(-1).T
                if keep:
                    kept.append(terms)
        ctx.save_for_backward(V, vmask, E, emask)
        ctx.lam, ctx.max_elems, ctx.kept = lam, max_elems, kept
        return out

    @staticmethod
    def backward(ctx, dS):
        V, vmask, E, emask = ctx.saved_tensors
        lam, kept = ctx.lam, iter(ctx.kept)
        n, R, D = V.shape
        ct = torch.promote_types(V.dtype, torch.float32)
        w = vmask.to(ct) / vmask.sum(1, keepdim=True).clamp_min(1).to(ct)
        dV = torch.zeros(V.shape, dtype=ct, device=V.device)
        dE = torch.zeros(E.shape, dtype=ct, device=E.device)
        dS = dS.to(ct)
        for idx, Lb, blocks in _tiles(vmask, emask, ctx.max_elems):
            Eb, mb = E[idx, :Lb], emask[idx, :Lb]
            c = len(idx)
            dEb = torch.zeros((c, Lb, D), dtype=ct, device=E.device)
            for a, b in blocks:
                Vf = V[a:b].reshape(-1, D)
                s, e, Ge, p, q = next(kept) if ctx.kept else _tile_terms(Vf, Eb, mb, lam)
                sq = q.sqrt().clamp_min(TINY)
                drel = (dS[a:b, idx].T[:, :, None] * w[a:b]).reshape(c, -1)  # (c, r)
                dp = drel / sq
                dq = -0.5 * drel * (p / sq) / q.clamp_min(TINY)
                ds = s.mul_(lam).add_(1.0).mul_(dp[:, None]).add_(Ge.mul_(dq[:, None] * (2 * lam))).mul_(e)
                dG = torch.bmm(e * dq[:, None], e.transpose(1, 2))  # (c, Lb, Lb)
                ds2 = ds.view(c * Lb, -1)
                dV[a:b] += (ds2.T @ Eb.reshape(c * Lb, D).to(ct)).view(b - a, R, D)
                dEb += (ds2 @ Vf.to(ct)).view(c, Lb, D) + 2 * torch.bmm(dG, Eb.to(ct))
            dE[idx, :Lb] += dEb
        ctx.kept = []
        return dV.to(V.dtype), None, dE.to(E.dtype), None, None, None


def attention_scores_reference(
    V: torch.Tensor,
    vmask: torch.Tensor,
    E: torch.Tensor,
    emask: torch.Tensor,
    lam: float,
    clipped: bool = False,
    max_elems: int = 1 << 24,
) -> torch.Tensor:
    """:func:`attention_scores` by autograd over plain tensor algebra: the softmax formed, ``‖a_i‖² =
    α_iᵀ G α_i``, tiles of whole captions (the exactness reference of :class:`AttentionScores`, and the
    ``clipped`` path)."""
    n, R, D = V.shape
    m, L, _ = E.shape
    step = max(1, max_elems // max(1, n * R * L))
    flat = V.reshape(n * R, D)
    cols = []
    for a in range(0, m, step):
        e, em = E[a : a + step], emask[a : a + step]
        k = e.shape[0]
        s = (flat @ e.reshape(k * L, D).T).reshape(n, R, k, L).transpose(1, 2)  # (n, k, R, L)
        z = s
        if clipped:
            z = nn.functional.leaky_relu(s, 0.1) * vmask[:, None, :, None]
            z = z / z.norm(dim=2, keepdim=True).clamp_min(1e-8)
        alpha = torch.softmax((lam * z).masked_fill(~em[None, :, None, :], float("-inf")), dim=-1)
        num = (alpha * s).sum(-1)  # v̂_i · a_i
        gram = e @ e.transpose(1, 2)  # (k, L, L)
        norm2 = ((alpha @ gram[None]) * alpha).sum(-1)  # ‖a_i‖²
        rel = num / norm2.clamp_min(1e-12).sqrt()
        cols.append((rel * vmask[:, None]).sum(-1) / vmask.sum(1, keepdim=True))
    return torch.cat(cols, dim=1) if cols else V.new_zeros((n, 0))


class VseSystem(System):
    """``dims``: n_relations (= vocabulary size of the tokens view), n_words, word_dim (GloVe), img_dim.
    Encodings: images ``(vectors, mask, index)`` — (n, D) unit vectors and mask None for the global
    similarities, (n, R, D) unit regions and their (n, R) mask for attention; ``index`` (n,) the images'
    split positions (the loss's same-image mask). Sentences: (m, D) unit vectors, or for attention
    ``((m, L, D) unit word vectors, (m, L) mask)``."""

    NAME = "vse"
    Config = Config

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, "tokens", cfg.finetune > 0)

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.SENTENCE_SPACE = cfg.similarity != "attention"  # one vector per sentence
        add_input_buffers(self, dims)
        self.text = TokenGRU(dims["n_relations"], cfg.word_dim, cfg.hidden, cfg.dropout)
        self.txt = nn.Linear(cfg.hidden, cfg.embed_dim)
        self.img = image_map(dims["img_dim"], cfg.embed_dim)
        self.cnn = tuned_cnn(cfg, dims)
        if cfg.image_pooling == "gpo":  # built last: the other modules' initialisation is unchanged
            self.img_gpo = GPO(cfg.gpo_pe_dim, cfg.gpo_hidden)
        if cfg.text_pooling == "gpo":
            self.txt_gpo = GPO(cfg.gpo_pe_dim, cfg.gpo_hidden)

    def prepare(self, train: Any) -> None:
        """Standardisation of the image descriptors and, for ``word_init: glove``, the embedding rows."""
        fill_input_buffers(self, train)
        if self.cfg.word_init == "glove":
            self.text.init_from_glove(train.sentences.data, self.words)

    def use_training_split(self, train: Any) -> None:
        """The training images' groups (``train.image_group``, or none) for the loss's diagnostics."""
        group = getattr(train, "image_group", None)
        self._group = None if group is None else torch.as_tensor(group, device=self.img_mean.device)

    def _unit(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.normalize(x, dim=-1)
        return x.abs() if self.cfg.similarity == "order" else x

    def encode_images(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        x = self.image_rows(rows)
        index = to_device(torch.as_tensor(rows.index), x.device)
        if self.cfg.similarity == "attention":
            V, mask = padded(
                self._unit(standardized_linear(self.img, x, self.img_mean, self.img_std)),
                rows.owner,
                rows.n,
                rows.cpu("owner"),
            )
            return V, mask, index
        if self.cfg.image_pooling == "mean":
            x = (x - self.img_mean) / self.img_std
            return self._unit(self.img(mean_rows(x, rows.owner, rows.n))), None, index
        owner = rows.cpu("owner")
        V, _ = padded(standardized_linear(self.img, x, self.img_mean, self.img_std), rows.owner, rows.n, owner)
        return self._unit(self._pool(self.cfg.image_pooling, V, self._lengths(rows), "img_gpo")), None, index

    @staticmethod
    def _lengths(rows: Rows) -> torch.Tensor:
        """(n,) rows per item on the CPU, at least 1 (an item without rows pools its zero padding row)."""
        return torch.bincount(rows.cpu("owner"), minlength=rows.n).clamp(min=1)

    def _pool(self, how: str, X: torch.Tensor, lengths: torch.Tensor, gpo: str) -> torch.Tensor:
        """(n, D) pooled rows of ``X`` (n, L, D), the first ``lengths`` (n,) rows of each item (CPU, ≥ 1):
        their mean, their per-dimension max, or the GPO module named ``gpo``."""
        if how == "gpo":
            return getattr(self, gpo)(X, lengths)[0]
        n = to_device(lengths, X.device)
        real = (torch.arange(X.shape[1], device=X.device)[None, :] < n[:, None])[..., None]
        if how == "max":
            return X.masked_fill(~real, float("-inf")).amax(1)
        return (X * real).sum(1) / n[:, None].to(X.dtype)

    def _caption_vectors(self, rows: Rows, out: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
        """(m, D) the captions' vectors before normalisation (global similarities): the mapped final state
        (``text_pooling: last``) or the pooled mapped outputs of :class:`TokenGRU` ``out``."""
        if self.cfg.text_pooling == "last":
            return self.txt(last)
        return self._pool(self.cfg.text_pooling, self.txt(out), self._lengths(rows), "txt_gpo")

    def encode_sentences(self, rows: Rows) -> Any:
        out, last, lengths = self.text(rows)
        if self.cfg.similarity != "attention":
            return self._unit(self._caption_vectors(rows, out, last))
        E = self._unit(self.txt(out))
        mask = torch.arange(E.shape[1], device=E.device)[None, :] < lengths.clamp(min=1)[:, None]
        return E * mask[..., None], mask

    def scores(self, images: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor], sentences: Any) -> torch.Tensor:
        v, vmask = images[0], images[1]
        if self.cfg.similarity == "cosine":
            return v @ sentences.T
        if self.cfg.similarity == "order":
            return order_scores(v, sentences)
        if not vmask.any(1).all():  # an image without rows: keep its mean defined (scored -inf later)
            vmask = vmask.clone()
            vmask[:, 0] = True
        return attention_scores(
            v, vmask, sentences[0], sentences[1], self.cfg.lambda_att, self.cfg.clipped_l2norm, self.cfg.max_elems
        )

    def hardest(self, epoch: int) -> bool:
        """Whether Eq. 7 takes the hardest negative at ``epoch`` (after ``warmup_epochs`` of the sum)."""
        return self.cfg.negatives == "hardest" and epoch >= self.cfg.warmup_epochs

    def phase(self, epoch: int) -> str:
        return "hardest" if self.hardest(epoch) else "sum"

    def loss(
        self, images: tuple[torch.Tensor, ...], sentences: Any, epoch: int
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 7 on the batch; pairs sharing an image are masked when ``mask_same_image`` and counted either
        way; the collapse diagnostics of :func:`~fraglib.systems.objectives.hinge_diagnostics` (the image
        groups: the training split's categories, where the data has them) are logged with it."""
        index = images[-1]
        same = (index[:, None] == index[None, :]) & ~torch.eye(len(index), dtype=torch.bool, device=index.device)
        mask = same if self.cfg.mask_same_image else None
        S = self.scores(images, sentences)
        cost = contrastive_hinge(S, self.cfg.margin, self.hardest(epoch), mask)
        group = getattr(self, "_group", None)
        return cost, {
            "L_sim": float(cost.detach()),
            "same_image_pairs": float(same.sum()) / 2,
            **hinge_diagnostics(S.detach(), self.cfg.margin, mask, None if group is None else group[index]),
        }

    def sentence_scores(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Cosines of the sentence vectors (the sentence-similarity task; not for attention)."""
        return nn.functional.normalize(a, dim=1) @ nn.functional.normalize(b, dim=1).T
