"""The data boundary: what the readers (:mod:`fraglib.run.inputs`) hand the systems, and the names of the views.

Below both the readers and the systems (neither defines the other's types): a system declares the views it
reads (:class:`Views`) and receives batches of items (:class:`Rows`); the readers build them from the files
that the data, text and vision stages write (the file formats: docs/formats.md).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

IMAGE_VIEWS = (
    "rcnn",
    "groundtruth",
    "fullframe",  # detections + full frame | VOC/synthetic boxes | whole image
    "top36",
    "grid",  # 36 proposals + full frame | 6 x 6 cells + full frame
    "none",
)  # text only: one constant row per image (no information)
SENTENCE_VIEWS = (
    "dependency",
    "bow",
    "bigram",  # fragment files written by the fragments stage
    "tree_basic",
    "tree_collapsed",  # one tree per caption (fraglib.text.trees)
    "tokens",
)  # one row per token, train-split vocabulary ids
IMAGE_SIGNAL_VIEWS = IMAGE_VIEWS[:-1]  # views that carry image information: what a retrieval system needs
FRAGMENT_VIEWS = SENTENCE_VIEWS[:3]  # sentence views made of fragments (the fragment model's input)


@dataclasses.dataclass(frozen=True)
class Views:
    """Inputs a system reads: ``images`` in :data:`IMAGE_VIEWS`, ``sentences`` in :data:`SENTENCE_VIEWS`;
    ``pixels``: also each image's pixels and its rows' boxes (a system that trains its CNN);
    ``detections`` > 0: the first that many detections per image (the detector's ranking) and the full frame;
    ``pooled``: each image's rows only as their mean, one row (:func:`fraglib.run.inputs.pool_images`), for a
    system whose first step on an image is that mean (``mean_rows`` then gives it back unchanged)."""

    images: str
    sentences: str
    pixels: bool = False
    detections: int = 0
    pooled: bool = False


@dataclasses.dataclass
class Rows:
    """A batch of n items with a variable number of rows each (CSR): ``data[key]`` (R, ...) tensors,
    ``owner`` (R,) int64 in [0, n), ``index`` (n,) the items' positions in their split; ``items[key]``
    (n, ...) per-item tensors (the pixels of a view with ``pixels``); ``host``: CPU copies of ``owner`` and
    of integer columns where the data live on another device (read through :meth:`cpu`)."""

    data: dict[str, torch.Tensor]
    owner: torch.Tensor
    n: int
    index: np.ndarray
    items: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    host: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)

    def cpu(self, key: str) -> torch.Tensor:
        """``owner`` (key "owner") or the integer column ``data[key]`` on the CPU, for index bookkeeping
        that would otherwise make the host wait for the device: the loader's copy where it kept one, else
        the tensor itself moved (on a CPU: the same tensor, no copy)."""
        if key in self.host:
            return self.host[key]
        return (self.owner if key == "owner" else self.data[key]).cpu()


def mean_rows(x: torch.Tensor, owner: torch.Tensor, n: int) -> torch.Tensor:
    """(n, D) mean of the rows of ``x`` (R, D) owned by each of n items (0 for an item without rows)."""
    cnt = torch.bincount(owner, minlength=n).clamp_min(1).to(x.dtype)
    return x.new_zeros((n, x.shape[1])).index_add_(0, owner, x) / cnt[:, None]
