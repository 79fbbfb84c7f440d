"""The image-fragment feature cache: the file the features stage writes (:mod:`fraglib.vision.features`) and the
readers load (:mod:`fraglib.run.inputs`, :mod:`fraglib.data.precomp`). Below both: a format, no extractor.

**Format** — one uncompressed ``.npz`` per detector (NumPy's own container: no extra dependency,
several named arrays in one file, exact float32 round trip, readable from any language with a zip
and .npy reader):

=============  =================  ==============================================================
key            dtype, shape       meaning
=============  =================  ==============================================================
features       float32 (R, 1280)  fragment descriptors (pooled penultimate activation)
boxes          float32 (R, 4)     ``[x0, y0, x1, y1]`` px in the original image
scores         float32 (R,)       detector score (the full-image row: +inf)
is_full        bool (R,)          the full-image fragment of its image
offsets        int64 (N+1,)       image ``n`` owns rows ``offsets[n]:offsets[n+1]``
imgids         int64 (N,)         dataset ``imgid`` of each image, in dataset order
filenames      str (N,)           file name of each image
status         str (N,)           '' or why the image was skipped (missing, corrupt, too_small)
meta           str ()             JSON: detector, CNN, settings, timings
=============  =================  ==============================================================

A skipped image keeps its place with zero rows, so rows never shift; it ranks last in evaluation.
:meth:`FeatureCache.load` refuses a cache whose ``imgids``/``filenames`` differ from the dataset's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.data.dataset import Chunks, Dataset, nonfinite_rows, npz_chunks, open_npz, save_npz


@dataclasses.dataclass
class FeatureCache:
    """Fragments of N images (see the module docstring for every field). ``features`` may be
    :class:`~fraglib.data.dataset.Chunks` (a stream too large to hold: ``load(..., stream=True)``): such a cache
    is checked and saved block by block, :meth:`top` keeps it a stream and :meth:`subset` reads only the rows of
    its images, so a reader holds what it uses, never the whole file."""

    features: np.ndarray | Chunks
    boxes: np.ndarray
    scores: np.ndarray
    is_full: np.ndarray
    offsets: np.ndarray
    imgids: np.ndarray
    filenames: np.ndarray
    status: np.ndarray
    meta: dict[str, Any]

    def save(self, path: str | Path) -> None:
        """Write the ``.npz`` file ``path`` atomically."""
        save_npz(
            path,
            features=self.features,
            boxes=self.boxes,
            scores=self.scores,
            is_full=self.is_full,
            offsets=self.offsets,
            imgids=self.imgids,
            filenames=self.filenames,
            status=self.status,
            meta=np.array(json.dumps(self.meta, sort_keys=True)),
        )

    @classmethod
    def load(cls, path: str | Path, dataset: Dataset | None = None, stream: bool = False) -> "FeatureCache":
        """Load; with ``dataset``, check that the cache's image order is the dataset's. ``stream``: the
        features as :class:`~fraglib.data.dataset.Chunks` read from the file when iterated."""
        z, meta = open_npz(path, "feature cache not found (run the features stage)")
        c = cls(
            npz_chunks(path, "features") if stream else z["features"],
            z["boxes"],
            z["scores"],
            z["is_full"],
            z["offsets"],
            z["imgids"],
            z["filenames"],
            z["status"],
            meta,
        )
        if dataset is not None:
            c.check(dataset, path)
        return c

    def check(self, dataset: Dataset, name: Any = "feature cache") -> None:
        want_ids = [im["imgid"] for im in dataset.images]
        want_files = [im["filename"] for im in dataset.images]
        if len(want_ids) != len(self.imgids):
            raise ValueError(f"{name}: {len(self.imgids)} images, dataset {dataset.name} has {len(want_ids)}")
        for n, (a, b, fa, fb) in enumerate(zip(self.imgids, want_ids, self.filenames, want_files)):
            if int(a) != int(b) or str(fa) != str(fb):
                raise ValueError(
                    f"{name}: row order differs from dataset {dataset.name} at image {n}: "
                    f"cache has {fa} (imgid {a}), dataset has {fb} (imgid {b})"
                )
        bad = nonfinite_rows(self.features)
        if len(bad):
            img = int(np.searchsorted(self.offsets, bad[0], side="right") - 1)
            raise ValueError(
                f"{name}: {len(bad)} feature row(s) hold NaN or Inf (first in image "
                f"{self.filenames[img]}); re-run the features stage"
            )

    def rows(self, n: int) -> slice:
        return slice(int(self.offsets[n]), int(self.offsets[n + 1]))

    def fullframe(self) -> "FeatureCache":
        """The same images with only their full-image fragment (the ``fullframe`` detector)."""
        return self.top(0, "fullframe")

    def top(self, k: int, detector: str | None = None) -> "FeatureCache":
        """The same images with their full-image fragment and their first ``k`` other rows (the
        detector's ranking: NMS survivors by score, then the best suppressed boxes — ``nms_top_k``);
        ``detector`` renames the view in ``meta``."""
        keep = self.is_full.copy()
        for n in range(len(self.imgids)):
            r = np.arange(self.offsets[n], self.offsets[n + 1])
            keep[r[~self.is_full[r]][:k]] = True
        counts = np.array([keep[self.rows(n)].sum() for n in range(len(self.imgids))])
        return FeatureCache(
            self.features.select(np.flatnonzero(keep)) if isinstance(self.features, Chunks) else self.features[keep],
            self.boxes[keep],
            self.scores[keep],
            self.is_full[keep],
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            self.imgids,
            self.filenames,
            self.status,
            {**self.meta, "detector": detector or self.meta.get("detector"), **({} if detector else {"detections": k})},
        )

    def subset(self, rows: list[int]) -> "FeatureCache":
        """Images ``rows`` (positions in this cache), e.g. one split; its features an array (read from a stream)."""
        sl = [self.rows(n) for n in rows]
        idx = np.concatenate([np.arange(s.start, s.stop) for s in sl]) if sl else np.zeros(0, np.int64)
        counts = [s.stop - s.start for s in sl]
        return FeatureCache(
            self.features.take(idx) if isinstance(self.features, Chunks) else self.features[idx],
            self.boxes[idx],
            self.scores[idx],
            self.is_full[idx],
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            self.imgids[rows],
            self.filenames[rows],
            self.status[rows],
            self.meta,
        )


def cache_family(out_dir: str | Path) -> list[Path]:
    """Every file a feature folder may hold (one cache per detector view, then the stats): the family that
    :func:`fraglib.core.outputs.claim` replaces as a whole."""
    return [Path(out_dir) / f"{d}.npz" for d in ("rcnn", "groundtruth", "top36", "grid")] + [
        Path(out_dir) / "features_stats.json"
    ]
