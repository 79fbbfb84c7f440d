"""The system protocol: what every compared system implements (docs/systems.md).

A *system* is one ``torch.nn.Module`` subclass in ``fraglib/systems/<name>.py`` with a frozen
``Config`` dataclass beside it. The trainer (``fraglib.run.train``) and the evaluator
(``fraglib.run.evaluate.score_matrix``) know systems only through these members:

=====================================  ======================================================================
``NAME``, ``Config``                   registry name (= module name) and its checked settings (``systems.<NAME>``)
``views(cfg) -> Views``                which inputs it reads: an image view and a sentence view
``__init__(cfg, dims, seed)``          build from sizes read off the data (``dims``, stored in checkpoints as
                                       ``model_args``) — never from the data itself
``prepare(train)``                     constants taken from the training split (word table, standardisation);
                                       called once before training from scratch, never on reload
``encode_images(rows) -> enc``         ``rows``: :class:`Rows` of n images (on a GPU, count sizes on the batch's CPU
                                       copies, ``rows.cpu("owner")``: a read from the device makes the host wait)
``encode_sentences(rows) -> enc``      ``rows``: :class:`Rows` of m sentences
``scores(img_enc, sent_enc)``          (n, m) image–sentence scores: the one function both the loss and the
                                       evaluator use
``loss(img_enc, sent_enc, epoch)``     (cost, parts) for n = m corresponding pairs (pair k = image k, sentence k),
                                       the system's own regulariser included; ``parts`` are floats or detached
                                       0-d tensors for the log (the trainer sums them where they are and reads
                                       the sums once per epoch: on a GPU each read waits for the device)
``phase(epoch) -> str``                a label of the training phase (history column ``phase``)
``begin_epoch(epoch)``                 called before each training epoch's first step (no gradient): a closed-form
                                       step of an alternation (Socher's Table 2 ridge ``W_I``); default none
``use_training_split(train)``          called before the first epoch (also on resume): a system whose loss ranks
                                       against the whole training split (Socher's Eq. 5) keeps it; default none
``join(encs) -> enc``                  the encoding of consecutive item lists encoded apart, as if encoded together
                                       (data-parallel training, :mod:`fraglib.core.distributed`); the default joins
                                       tensors, arrays, tuples and dataclasses item-wise (:func:`join_parts`)
``TRAINABLE``                          False for systems without parameters (never stepped)
``lr_groups() -> [(scale, params)]``   the parameters with their learning-rate multipliers (of ``train.lr`` and
                                       its schedule); default one group at 1
``SENTENCE_SPACE``, ``sentence_scores``  True for systems embedding sentences in one space (may depend on
                                       the settings: an instance attribute then); then
                                       ``sentence_scores(a, b)`` (m_a, m_b) ranks sentences against sentences
                                       (the sentence-similarity task of Socher et al.)
``fit(train)``                         a closed-form system (kCCA, ``TRAINABLE = False``) fits here, once,
                                       instead of being stepped; default none
``image_rows(rows) -> (R, img_dim)``   the descriptors of image rows: the cached ``x``, or those of the CNN
                                       the system fine-tunes (``self.cnn``, :mod:`fraglib.systems.cnn`)
``GENERATES``, ``decode``,             True for systems that generate sentences (STT): ``image_vectors`` /
``caption_nll``, ``image_vectors``,    ``sentence_vectors`` give the decoder's inputs, ``decode`` the words
``sentence_vectors``                   (beam search), ``caption_nll`` the per-sentence loss
                                       (:mod:`fraglib_study.experiments.captions` scores them with pycocoevalcap)
``cfg``                                the system's checked ``Config`` (``self.cfg``, set in ``__init__``)
=====================================  ======================================================================

This table is the protocol's one description (docs/systems.md and docs/adding_a_system.md point here).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from fraglib.core.batches import Rows, Views


class System(nn.Module):
    """Base class of every system (see the module docstring for the protocol)."""

    NAME: ClassVar[str] = ""
    Config: ClassVar[type] = object
    TRAINABLE: ClassVar[bool] = True
    SENTENCE_SPACE: ClassVar[bool] = False
    GENERATES: ClassVar[bool] = False

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

    def begin_epoch(self, epoch: int) -> None:
        """A closed-form update before ``epoch``'s steps (default: none)."""

    def lr_groups(self) -> list[tuple[float, list[nn.Parameter]]]:
        """(learning-rate multiplier, parameters) groups for the optimizer: all at 1, except the trained
        blocks of a fine-tuned CNN (``self.cnn``) at ``cfg.finetune_lr_scale`` (its frozen blocks: none)."""
        cnn = getattr(self, "cnn", None)
        if cnn is None:
            return [(1.0, list(self.parameters()))]
        ids = {id(p) for p in cnn.parameters()}
        return [
            (1.0, [p for p in self.parameters() if id(p) not in ids]),
            (self.cfg.finetune_lr_scale, [p for p in cnn.parameters() if p.requires_grad]),
        ]

    def image_rows(self, rows: Rows) -> torch.Tensor:
        """(R, img_dim) descriptors of image rows: the cached ``x``, or the fine-tuned CNN's (``self.cnn``)."""
        cnn = getattr(self, "cnn", None)
        return rows.data["x"] if cnn is None else cnn(rows)

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

    def join(self, encs: list[Any]) -> Any:
        """The encoding of the items of ``encs`` (encodings of consecutive item lists), in order."""
        return join_parts(encs)


def join_parts(parts: list[Any]) -> Any:
    """Item-wise concatenation of same-structured encodings: tensors along dim 0, zero-padded in the
    other dims to the widest (padded encodings keep their meaning: the mask pads with False); numpy
    arrays along axis 0; tuples, lists and dataclasses field by field; None stays None. Any other
    leaf (an int count, a closure) is refused: the system overrides ``join``."""
    first = parts[0]
    if first is None:
        return None
    if isinstance(first, torch.Tensor):
        big = tuple(max(p.shape[d] for p in parts) for d in range(1, first.dim()))
        if all(p.shape[1:] == big for p in parts):
            return torch.cat(parts)
        out, a = first.new_zeros((sum(p.shape[0] for p in parts),) + big), 0
        for p in parts:
            out[(slice(a, a + p.shape[0]),) + tuple(slice(0, n) for n in p.shape[1:])] = p
            a += p.shape[0]
        return out
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, (tuple, list)):
        return type(first)(join_parts([p[i] for p in parts]) for i in range(len(first)))
    if dataclasses.is_dataclass(first):
        return dataclasses.replace(
            first, **{f.name: join_parts([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(first)}
        )
    raise TypeError(f"join_parts: no item-wise join for {type(first).__name__}; the system must override join")


# ----------------------------------------------------------------------------- helpers shared by systems
def image_map(img_dim: int, embed_dim: int) -> nn.Linear:
    """Linear map of standardised CNN descriptors, weights U(±1/sqrt(img_dim)), zero bias."""
    lin = nn.Linear(img_dim, embed_dim)
    nn.init.uniform_(lin.weight, -1.0 / math.sqrt(img_dim), 1.0 / math.sqrt(img_dim))
    nn.init.zeros_(lin.bias)
    return lin


def check_finetune(section: str, cfg: Any) -> None:
    from fraglib.core.config import ConfigError, check_range

    check_range(f"{section}.finetune", cfg.finetune, 0, 64, int)
    check_range(f"{section}.finetune_lr_scale", cfg.finetune_lr_scale, 0.0, 100.0, float)
    if cfg.finetune and cfg.images == "none":
        raise ConfigError(f"{section}.finetune={cfg.finetune} with images none: there is no CNN to train")


def add_input_buffers(module: nn.Module, dims: dict[str, int]) -> None:
    """Register the buffers of systems reading GloVe rows and CNN descriptors: ``words``
    (n_words, word_dim), ``img_mean`` and ``img_std`` (img_dim,); filled by :func:`fill_input_buffers`."""
    module.register_buffer("words", torch.zeros(dims["n_words"], dims["word_dim"]))
    module.register_buffer("img_mean", torch.zeros(dims["img_dim"]))
    module.register_buffer("img_std", torch.ones(dims["img_dim"]))


def fill_input_buffers(module: nn.Module, train: Any) -> None:
    """The compact word table and the descriptor standardisation (training-split rows, before any pooling)."""
    mean, std = train.image_moments()
    module.words.copy_(train.words)
    module.img_mean.copy_(mean)
    module.img_std.copy_(std.clamp_min(1e-6))


def standardized_linear(lin: nn.Linear, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``lin((x - mean) / std)`` for rows ``x`` (R, d) → (R, out), the constant standardisation folded into
    the weights (``W / std``, ``b - (W / std) mean``): one matmul on the raw rows instead of two passes
    over them; equal up to float rounding."""
    w = lin.weight / std
    return torch.addmm(lin.bias - w @ mean, x, w.T)
