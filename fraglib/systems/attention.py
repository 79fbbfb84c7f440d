"""Region–word attention: the retrieval half of Peri's STT-ATT (SCAN's image-to-text form; docs/systems.md).

Regions ``v_i`` (an image's rows in its view — our detections, the VOC boxes, ... — standardised and
mapped to D) and words ``e_j`` (the GRU outputs of :class:`fraglib.systems.gru.TokenGRU` mapped to D),
both L2-normalised. For image I and caption T (Peri Eqs. 13–17):

    s_ij = v̂_i · ê_j                                   (13)  cosine, region i, word j
    α_ij = softmax_j(λ s_ij)                            (15)  over the caption's words, per region
    a_i  = Σ_j α_ij ê_j                                 (14)
    R_i  = v̂_i · a_i / ‖a_i‖                           (17)
    S(I, T) = mean_i R_i                                (16)  over the image's regions

With ``clipped_l2norm`` (SCAN's, not the thesis's) the softmax reads ``s'`` = LeakyReLU_0.1(s),
L2-normalised over the regions of each word. No D-sized tensor per (image, caption, region) is formed:
``v̂_i · a_i = Σ_j α_ij s_ij`` and ``‖a_i‖² = α_iᵀ G α_i`` with G the caption's word Gram matrix, so the
cost is one (n·R) × (m·L) × D matrix product plus O(n m R L²); the score matrix is computed in tiles
of at most ``max_elems`` (image, caption, region, word) entries. Loss: Eq. 7 as in the VSE baseline.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from fraglib.config import check_choice, check_range
from fraglib.systems.base import Rows
from fraglib.systems.vse import VseSystem, validate_text_side


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.attention``."""

    images: str = "top36"          # regions: top36 (36 proposals + the full frame) | grid (6 x 6 + full) | groundtruth | rcnn
    lambda_att: float = 4.0        # λ of Eq. 15 (SCAN i-t AVG)
    clipped_l2norm: bool = False   # SCAN's normalisation of s before the softmax
    negatives: str = "hardest"
    margin: float = 0.2            # SCAN's (the thesis gives none for this similarity)
    mask_same_image: bool = True
    embed_dim: int = 1024
    word_dim: int = 300
    hidden: int = 1024
    dropout: float = 0.0
    word_init: str = "random"
    max_elems: int = 1 << 24       # tile bound of the (images, captions, regions, words) tensors

    def validate(self) -> "Config":
        p = "systems.attention"
        validate_text_side(self, p)
        check_range(f"{p}.lambda_att", self.lambda_att, 1e-3, 1e3, float)
        check_choice(f"{p}.clipped_l2norm", self.clipped_l2norm, (True, False))
        check_range(f"{p}.max_elems", self.max_elems, 1, 1 << 40, int)
        return self


def padded(x: torch.Tensor, owner: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``x`` (R, D) of n items (``owner`` sorted) → ((n, Rmax, D) zero-padded, (n, Rmax) bool mask)."""
    counts = torch.bincount(owner, minlength=n)
    pos = torch.arange(len(owner), device=x.device) - (torch.cumsum(counts, 0) - counts)[owner]
    out = x.new_zeros((n, max(int(counts.max()) if len(owner) else 1, 1), x.shape[1]))
    mask = torch.zeros(out.shape[:2], dtype=torch.bool, device=x.device)
    out[owner, pos] = x
    mask[owner, pos] = True
    return out, mask


def attention_scores(V: torch.Tensor, vmask: torch.Tensor, E: torch.Tensor, emask: torch.Tensor, lam: float,
                     clipped: bool = False, max_elems: int = 1 << 24) -> torch.Tensor:
    """(n, m) S(I, T) of Eqs. 13–17 (module docstring). ``V`` (n, R, D) unit regions with ``vmask``
    (n, R); ``E`` (m, L, D) unit words with ``emask`` (m, L); every image and caption has at least
    one real row."""
    n, R, D = V.shape
    m, L, _ = E.shape
    step = max(1, max_elems // max(1, n * R * L))
    flat = V.reshape(n * R, D)
    cols = []
    for a in range(0, m, step):
        e, em = E[a:a + step], emask[a:a + step]
        k = e.shape[0]
        s = (flat @ e.reshape(k * L, D).T).reshape(n, R, k, L).transpose(1, 2)       # (n, k, R, L)
        z = s
        if clipped:
            z = nn.functional.leaky_relu(s, 0.1) * vmask[:, None, :, None]
            z = z / z.norm(dim=2, keepdim=True).clamp_min(1e-8)
        alpha = torch.softmax((lam * z).masked_fill(~em[None, :, None, :], float("-inf")), dim=-1)
        num = (alpha * s).sum(-1)                                                    # v̂_i · a_i
        gram = e @ e.transpose(1, 2)                                                 # (k, L, L)
        norm2 = ((alpha @ gram[None]) * alpha).sum(-1)                               # ‖a_i‖²
        rel = num / norm2.clamp_min(1e-12).sqrt()
        cols.append((rel * vmask[:, None]).sum(-1) / vmask.sum(1, keepdim=True))
    return torch.cat(cols, dim=1) if cols else V.new_zeros((n, 0))


class AttentionSystem(VseSystem):
    """``dims`` as :class:`fraglib.systems.vse.VseSystem`, whose parts (GRU, maps, loss) it shares;
    it differs in keeping every region and every word."""

    NAME = "attention"
    Config = Config
    SENTENCE_SPACE = False

    def encode_images(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """((n, R, D) unit region vectors, (n, R) mask, (n,) split positions)."""
        v = nn.functional.normalize(self.img((rows.data["x"] - self.img_mean) / self.img_std), dim=1)
        V, mask = padded(v, rows.owner, rows.n)
        return V, mask, torch.as_tensor(rows.index, device=v.device)

    def encode_sentences(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
        """((m, L, D) unit word vectors, (m, L) mask of real words; an empty caption keeps one)."""
        out, _, lengths = self.text(rows)
        E = nn.functional.normalize(self.txt(out), dim=2)
        mask = torch.arange(E.shape[1], device=E.device)[None, :] < lengths.clamp(min=1)[:, None]
        return E * mask[..., None], mask

    def scores(self, images: tuple[torch.Tensor, ...], sentences: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        V, vmask = images[0], images[1]
        if not vmask.any(1).all():              # an image without rows: keep its mean defined (scored -inf later)
            vmask = vmask.clone()
            vmask[:, 0] = True
        return attention_scores(V, vmask, sentences[0], sentences[1], self.cfg.lambda_att, self.cfg.clipped_l2norm,
                                self.cfg.max_elems)
