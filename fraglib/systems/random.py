"""The random-ranking baseline: i.i.d. uniform scores, nothing to train (docs/systems.md).

The score of image k against sentence j (their positions in the split) is a hash of
``(seed, k, j)`` mapped to [0, 1): independent of how the evaluator tiles the matrix.
Images or sentences without rows in the chosen views still rank last, as for every system.
Sentences ranked against sentences (Socher et al.'s sentence similarity) get their own stream,
``(seed + 2**32, j, l)``, so adding that task left the image–sentence draws unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from fraglib.core.batches import IMAGE_VIEWS, SENTENCE_VIEWS, Rows, Views
from fraglib.core.config import check_choice
from fraglib.systems.base import System

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.random``: only which items count as rankable."""

    images: str = "rcnn"
    sentences: str = "dependency"

    def validate(self) -> "Config":
        check_choice("systems.random.images", self.images, IMAGE_VIEWS)
        check_choice("systems.random.sentences", self.sentences, SENTENCE_VIEWS)
        return self


def uniform_hash(seed: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(len(rows), len(cols)) floats in [0, 1): splitmix64 of (seed, row, col)."""
    with np.errstate(over="ignore"):
        z = (
            np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
            + rows.astype(np.uint64)[:, None] * np.uint64(0xD1B54A32D192ED03)
            + cols.astype(np.uint64)[None, :] * np.uint64(0x8CB92BA72F3D8DD7)
        )
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


class RandomSystem(System):
    NAME = "random"
    Config = Config
    TRAINABLE = False
    SENTENCE_SPACE = True

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, cfg.sentences)

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg, self.seed = cfg, seed

    def encode_images(self, rows: Rows) -> np.ndarray:
        return np.asarray(rows.index)

    def encode_sentences(self, rows: Rows) -> np.ndarray:
        return np.asarray(rows.index)

    def scores(self, images: np.ndarray, sentences: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(uniform_hash(self.seed, images, sentences))

    def sentence_scores(self, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(uniform_hash(self.seed + 2**32, a, b))

    def loss(self, images, sentences, epoch):
        raise RuntimeError("the random system has nothing to train")
