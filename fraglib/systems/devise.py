"""The DeViSE-style global baseline of the paper's tables (docs/systems.md).

One vector per sentence — the mean of its L2-normalised GloVe vectors, mapped linearly — and one
per image — the mean of its detections' CNN descriptors (``images: rcnn``, as the paper describes
it) or the full frame (``images: fullframe``), standardised and mapped linearly. Scores are inner
products (``similarity: dot``) or cosines; the loss is the global ranking objective C_G
(:func:`fraglib.systems.objectives.contrastive_hinge`) with margin Δ:

    cost = β C_G / B + α (||W_s||² + ||W_m||²)

(β only weighs the ranking term against the regulariser; with SGD it also scales the step.)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from fraglib.core.batches import IMAGE_SIGNAL_VIEWS, Rows, Views, mean_rows
from fraglib.core.config import check_choice, check_range
from fraglib.systems.base import System, add_input_buffers, fill_input_buffers, image_map
from fraglib.systems.objectives import contrastive_hinge


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.devise``."""

    images: str = "rcnn"  # rcnn: mean of the detections (paper) | fullframe | groundtruth
    similarity: str = "dot"  # dot | cosine (on L2-normalised vectors)
    embed_dim: int = 1000
    margin: float = 1.0  # Δ of C_G
    beta: float = 1.0  # weight of C_G against the regulariser
    alpha: float = 1e-5  # weight of ||θ||² (weight matrices)

    def validate(self) -> "Config":
        p = "systems.devise"
        check_choice(f"{p}.images", self.images, IMAGE_SIGNAL_VIEWS)
        check_choice(f"{p}.similarity", self.similarity, ("dot", "cosine"))
        check_range(f"{p}.embed_dim", self.embed_dim, 1, 100_000, int)
        check_range(f"{p}.margin", self.margin, 0.0, 1e6, float)
        check_range(f"{p}.beta", self.beta, 1e-12, 1e6, float)
        check_range(f"{p}.alpha", self.alpha, 0.0, 1e6, float)
        return self


class DeviseSystem(System):
    """``dims``: n_words, word_dim, img_dim. Sentences are read from the BOW view (one row per word)."""

    NAME = "devise"
    Config = Config

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, "bow", pooled=True)

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        wd, img_dim = dims["word_dim"], dims["img_dim"]
        add_input_buffers(self, dims)
        bound = 1.0 / math.sqrt(wd)
        self.W_s = nn.Parameter(torch.empty(cfg.embed_dim, wd).uniform_(-bound, bound))
        self.b_s = nn.Parameter(torch.zeros(cfg.embed_dim))
        self.img = image_map(img_dim, cfg.embed_dim)

    def prepare(self, train: Any) -> None:
        fill_input_buffers(self, train)

    def encode_images(self, rows: Rows) -> torch.Tensor:
        """(n, h): the mean of each image's descriptors, standardised, mapped."""
        return self.img((mean_rows(rows.data["x"], rows.owner, rows.n) - self.img_mean) / self.img_std)

    def encode_sentences(self, rows: Rows) -> torch.Tensor:
        """(m, h): the mean of each sentence's L2-normalised word vectors, mapped."""
        e = nn.functional.normalize(self.words[rows.data["w1"]], dim=1)
        return mean_rows(e, rows.owner, rows.n) @ self.W_s.T + self.b_s

    def scores(self, images: torch.Tensor, sentences: torch.Tensor) -> torch.Tensor:
        if self.cfg.similarity == "cosine":
            images, sentences = nn.functional.normalize(images, dim=1), nn.functional.normalize(sentences, dim=1)
        return images @ sentences.T

    def loss(self, images: torch.Tensor, sentences: torch.Tensor, epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        cg = contrastive_hinge(self.scores(images, sentences), self.cfg.margin)
        parts = {"C_G": float(cg.detach())}
        cost = self.cfg.beta * cg / images.shape[0]
        if self.cfg.alpha:
            reg = (self.W_s**2).sum() + (self.img.weight**2).sum()
            parts["reg"] = float(reg.detach())
            cost = cost + self.cfg.alpha * reg
        return cost, parts
