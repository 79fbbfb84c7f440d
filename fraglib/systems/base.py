"""The system protocol: what every compared system implements (docs/systems.md).

A *system* is one ``torch.nn.Module`` subclass in ``fraglib/systems/<name>.py`` with a frozen
``Config`` dataclass beside it. The trainer (``fraglib.train``) and the evaluator
(``fraglib.evaluate.score_matrix``) know systems only through these members:

=====================================  ======================================================================
``NAME``, ``Config``                   registry name (= module name) and its checked settings (``systems.<NAME>``)
``views(cfg) -> Views``                which inputs it reads: an image view and a sentence view
``__init__(cfg, dims, seed)``          build from sizes read off the data (``dims``, stored in checkpoints as
                                       ``model_args``) — never from the data itself
``prepare(train)``                     constants taken from the training split (word table, standardisation);
                                       called once before training from scratch, never on reload
``encode_images(rows) -> enc``         ``rows``: :class:`Rows` of n images
``encode_sentences(rows) -> enc``      ``rows``: :class:`Rows` of m sentences
``scores(img_enc, sent_enc)``          (n, m) image–sentence scores: the one function both the loss and the
                                       evaluator use
``loss(img_enc, sent_enc, epoch)``     (cost, parts) for n = m corresponding pairs (pair k = image k, sentence k),
                                       the system's own regulariser included; ``parts`` are floats for the log
``phase(epoch) -> str``                a label of the training phase (history column ``phase``)
``use_training_split(train)``          called before the first epoch (also on resume): a system whose loss ranks
                                       against the whole training split (Socher's Eq. 5) keeps it; default none
``TRAINABLE``                          False for systems without parameters (never stepped)
``lr_groups() -> [(scale, params)]``   the parameters with their learning-rate multipliers (of ``train.lr`` and
                                       its schedule); default one group at 1
``SENTENCE_SPACE``, ``sentence_scores``  True for systems embedding sentences in one space (may depend on
                                       the settings: an instance attribute then); then
                                       ``sentence_scores(a, b)`` (m_a, m_b) ranks sentences against sentences
                                       (the sentence-similarity task of Socher et al.)
=====================================  ======================================================================

A closed-form system (kCCA) overrides ``fit(train)`` and sets ``TRAINABLE = False``; the trainer calls
``fit`` once instead of stepping.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

IMAGE_VIEWS = ("rcnn", "groundtruth", "fullframe",      # detections + full frame | VOC/synthetic boxes | whole image
               "top36", "grid",                       # 36 proposals + full frame | 6 x 6 cells + full frame
               "none")                                # text only: one constant row per image (no information)
SENTENCE_VIEWS = ("dependency", "bow", "bigram",          # fragment files written by the fragments stage
                  "tree_basic", "tree_collapsed",           # one tree per caption (fraglib.text.trees)
                  "tokens")                                 # one row per token, train-split vocabulary ids


@dataclasses.dataclass(frozen=True)
class Views:
    """Inputs a system reads: ``images`` in :data:`IMAGE_VIEWS`, ``sentences`` in :data:`SENTENCE_VIEWS`."""

    images: str
    sentences: str


@dataclasses.dataclass
class Rows:
    """A batch of n items with a variable number of rows each (CSR): ``data[key]`` (R, ...) tensors,
    ``owner`` (R,) int64 in [0, n), ``index`` (n,) the items' positions in their split."""

    data: dict[str, torch.Tensor]
    owner: torch.Tensor
    n: int
    index: np.ndarray


class System(nn.Module):
    """Base class of every system (see the module docstring for the protocol)."""

    NAME: ClassVar[str] = ""
    Config: ClassVar[type] = object
    TRAINABLE: ClassVar[bool] = True
    SENTENCE_SPACE: ClassVar[bool] = False

    @staticmethod
    def views(cfg: Any) -> Views:
        raise NotImplementedError

    def prepare(self, train: Any) -> None:
        """Constants from the training split (default: none)."""

    def fit(self, train: Any) -> None:
        """Closed-form fitting on the training split (default: none)."""

    def use_training_split(self, train: Any) -> None:
        """The training split, for losses over all of it (default: not kept)."""

    def phase(self, epoch: int) -> str:
        return "train"

    def lr_groups(self) -> list[tuple[float, list[nn.Parameter]]]:
        """(learning-rate multiplier, parameters) groups for the optimizer (default: all at 1)."""
        return [(1.0, list(self.parameters()))]

    def encode_images(self, rows: Rows) -> Any:
        raise NotImplementedError

    def encode_sentences(self, rows: Rows) -> Any:
        raise NotImplementedError

    def scores(self, images: Any, sentences: Any) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, images: Any, sentences: Any, epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def sentence_scores(self, a: Any, b: Any) -> torch.Tensor:
        raise NotImplementedError(f"system {self.NAME} has no sentence space")


# ----------------------------------------------------------------------------- helpers shared by systems
def image_map(img_dim: int, embed_dim: int) -> nn.Linear:
    """Linear map of standardised CNN descriptors, weights U(±1/sqrt(img_dim)), zero bias."""
    lin = nn.Linear(img_dim, embed_dim)
    nn.init.uniform_(lin.weight, -1.0 / math.sqrt(img_dim), 1.0 / math.sqrt(img_dim))
    nn.init.zeros_(lin.bias)
    return lin


def add_input_buffers(module: nn.Module, dims: dict[str, int]) -> None:
    """Register the buffers of systems reading GloVe rows and CNN descriptors: ``words``
    (n_words, word_dim), ``img_mean`` and ``img_std`` (img_dim,); filled by :func:`fill_input_buffers`."""
    module.register_buffer("words", torch.zeros(dims["n_words"], dims["word_dim"]))
    module.register_buffer("img_mean", torch.zeros(dims["img_dim"]))
    module.register_buffer("img_std", torch.ones(dims["img_dim"]))


def fill_input_buffers(module: nn.Module, train: Any) -> None:
    """The compact word table and the descriptor standardisation (training-split rows)."""
    x = train.images.data["x"]
    module.words.copy_(train.words)
    module.img_mean.copy_(x.mean(0))
    module.img_std.copy_(x.std(0).clamp_min(1e-6))


def mean_rows(x: torch.Tensor, owner: torch.Tensor, n: int) -> torch.Tensor:
    """(n, D) mean of the rows of ``x`` (R, D) owned by each of n items (0 for an item without rows)."""
    cnt = torch.bincount(owner, minlength=n).clamp_min(1).to(x.dtype)
    return x.new_zeros((n, x.shape[1])).index_add_(0, owner, x) / cnt[:, None]
