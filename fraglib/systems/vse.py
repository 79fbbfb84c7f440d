"""Peri's (2018) VSE baseline: VSE0 / VSE++ with cosine or order-violation similarity (docs/systems.md).

Image: the CNN descriptor (``images: fullframe``, Peri's global pool; ``rcnn``: the mean of the
detections), standardised on the training split, one linear map to D. Sentence: learned word
embeddings → 1-layer GRU (:class:`fraglib.systems.gru.TokenGRU`) → the final state → one linear map
to D. Both L2-normalised; for ``similarity: order`` also the element-wise absolute value (VSE++'s
``use_abs``). Scores: ``v̂ · ĉ`` (Peri Eq. 8) or ``−‖max(0, ĉ − v̂)‖²`` (Eq. 9, caption as the anchor;
:func:`fraglib.systems.objectives.order_scores`). Loss: Eq. 7 summed over the batch,
:func:`fraglib.systems.objectives.contrastive_hinge` — the hardest negative (VSE++) or the sum over
negatives (VSE0); captions of the same image are not negatives when ``mask_same_image`` (they only
meet in one batch when ``train.distinct_images`` is false).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from fraglib.config import check_choice, check_range
from fraglib.systems.base import (IMAGE_VIEWS, Rows, System, Views, add_input_buffers, fill_input_buffers,
                                  image_map, mean_rows)
from fraglib.systems.gru import TokenGRU
from fraglib.systems.objectives import contrastive_hinge, order_scores


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.vse``. Defaults: Peri's configuration (margin 0.2 for cosine; Peri's order runs use 0.05)."""

    images: str = "fullframe"      # fullframe (a global descriptor, as Peri) | rcnn (mean of detections) | groundtruth
    similarity: str = "cosine"     # cosine (Eq. 8) | order (Eq. 9, squared)
    negatives: str = "hardest"     # hardest (VSE++) | sum (VSE0)
    margin: float = 0.2            # α of Eq. 7
    mask_same_image: bool = True   # captions of the batch's same image are not negatives
    embed_dim: int = 1024          # D
    word_dim: int = 300
    hidden: int = 1024             # GRU state
    dropout: float = 0.0           # on word embeddings and the GRU output
    word_init: str = "random"      # random (Peri) | glove (word_dim must be 50, the GloVe table's)

    def validate(self) -> "Config":
        validate_text_side(self, "systems.vse")
        check_choice("systems.vse.similarity", self.similarity, ("cosine", "order"))
        return self


def validate_text_side(cfg: Any, p: str) -> None:
    """Checks shared by Peri's systems (images, negatives, margin, sizes, dropout, word_init)."""
    check_choice(f"{p}.images", cfg.images, IMAGE_VIEWS)
    check_choice(f"{p}.negatives", cfg.negatives, ("hardest", "sum"))
    check_range(f"{p}.margin", cfg.margin, 0.0, 1e3, float)
    check_choice(f"{p}.mask_same_image", cfg.mask_same_image, (True, False))
    for k in ("embed_dim", "word_dim", "hidden"):
        check_range(f"{p}.{k}", getattr(cfg, k), 1, 100_000, int)
    check_range(f"{p}.dropout", cfg.dropout, 0.0, 0.95, float)
    check_choice(f"{p}.word_init", cfg.word_init, ("random", "glove"))


def peri_hinge(cfg: Any, S: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 7 on a batch's (B, B) scores; ``index`` (B,) the images' split positions: pairs sharing an
    image are masked when ``cfg.mask_same_image`` and counted in ``parts`` either way."""
    same = (index[:, None] == index[None, :]) & ~torch.eye(len(index), dtype=torch.bool, device=index.device)
    cost = contrastive_hinge(S, cfg.margin, cfg.negatives == "hardest", same if cfg.mask_same_image else None)
    return cost, {"L_sim": float(cost.detach()), "same_image_pairs": float(same.sum()) / 2}


class VseSystem(System):
    """``dims``: n_relations (= vocabulary size of the tokens view), n_words, word_dim (GloVe), img_dim."""

    NAME = "vse"
    Config = Config
    SENTENCE_SPACE = True

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, "tokens")

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        add_input_buffers(self, dims)
        self.text = TokenGRU(dims["n_relations"], cfg.word_dim, cfg.hidden, cfg.dropout)
        self.txt = nn.Linear(cfg.hidden, cfg.embed_dim)
        self.img = image_map(dims["img_dim"], cfg.embed_dim)

    def prepare(self, train: Any) -> None:
        """Standardisation of the image descriptors and, for ``word_init: glove``, the embedding rows."""
        fill_input_buffers(self, train)
        if self.cfg.word_init == "glove":
            self.text.init_from_glove(train.sentences.data, self.words)

    def _unit(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.normalize(x, dim=1)
        return x.abs() if self.cfg.similarity == "order" else x

    def encode_images(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
        """((n, D) unit image vectors, (n,) their split positions)."""
        x = (mean_rows(rows.data["x"], rows.owner, rows.n) - self.img_mean) / self.img_std
        return self._unit(self.img(x)), torch.as_tensor(rows.index, device=x.device)

    def encode_sentences(self, rows: Rows) -> torch.Tensor:
        """(m, D) unit sentence vectors from the GRU's final state."""
        return self._unit(self.txt(self.text(rows)[1]))

    def scores(self, images: tuple[torch.Tensor, torch.Tensor], sentences: torch.Tensor) -> torch.Tensor:
        v = images[0]
        return order_scores(v, sentences) if self.cfg.similarity == "order" else v @ sentences.T

    def loss(self, images: tuple[torch.Tensor, ...], sentences: Any,
             epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 7 on the batch; the image encoding's last entry is the images' split positions."""
        return peri_hinge(self.cfg, self.scores(images, sentences), images[-1])

    def sentence_scores(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Cosines of the sentence vectors (the sentence-similarity task)."""
        return nn.functional.normalize(a, dim=1) @ nn.functional.normalize(b, dim=1).T
