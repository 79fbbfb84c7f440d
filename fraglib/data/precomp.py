"""The precomputed-feature layout of VSE++ and SCAN: ``{split}_ims.npy`` + ``{split}_caps.txt`` (docs/formats.md).

    python -m fraglib.data precomp --root data/coco_precomp --out data/coco [--splits train,dev,testall]

``{split}_ims.npy``: (N, D) one global descriptor per image (VSE++), or (N, R, D) R region descriptors
(SCAN's bottom-up features). ``{split}_caps.txt``: one caption per line, the captions of image k on
lines k·c … k·c + c − 1 with c = lines / N (5 in both releases; c = 1 when the file repeats the image
row per caption). Split names: ``train`` → train, ``dev`` → val, ``test`` and ``testall`` (COCO's 5K)
→ test (one of them). Written: ``dataset.json`` (image filenames ``<split>/<row>``: there are no
pictures) and the feature cache the systems read — global descriptors as ``features/rcnn.npz``, one
whole-image row per image (views ``fullframe`` and ``rcnn``); regions as ``features/top36.npz`` and
``features/rcnn.npz``, the R regions plus a whole-image row that is their mean (SCAN's features have
no whole-image descriptor; views ``top36``, ``rcnn``, ``fullframe``). Nothing is held whole: the
``.npy`` files are read in blocks (:func:`fraglib.data.dataset.npy_chunks`, plain reads, no map) once to
check them and once to write the cache block by block, so the import of SCAN's COCO regions (123,287 ×
36 × 2,048 float16, ≈ 18 GB; ≈ 37 GB as a float32 cache, which ``top36.npz`` and ``rcnn.npz`` share by a hard
link) holds a few hundred MB whatever the size.

The cache is float32 whatever the file's type: float64 (or integer) features are rounded to float32, and a file
holding finite values beyond float32's range (±3.4e38, which would become inf in the cache) is refused, naming
the file, the range and the first rows, before anything is written.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.core.outputs import atomic
from fraglib.data.dataset import Chunks, Dataset, nonfinite_rows, npy_chunks, tokenize

SPLIT_OF = {"train": "train", "dev": "val", "test": "test", "testall": "test"}


EXPECTED = "expected image features saved with numpy.save: a float16/float32 array (N, D) or (N, R, D)"


def load_features(path: Path) -> Chunks:
    """The array of a ``{split}_ims.npy`` file as :class:`~fraglib.data.dataset.Chunks` (read when
    iterated). Its header is read first: a file that is not a .npy array, or one whose dtype is not numbers
    (text, Python objects: pickles), is refused without loading it (ValueError naming the file and its dtype)."""
    try:
        ims = npy_chunks(lambda: path.open("rb"), path)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc}); {EXPECTED}") from None
    dtype = ims.dtype
    if dtype.kind in "fiu":
        return ims
    held = " (it holds Python objects)" if dtype.hasobject else ""
    raise ValueError(f"{path}: dtype {dtype}: not a plain numeric array{held}, so it is not loaded; {EXPECTED}")


def read_precomp(root: str | Path, splits: list[str]) -> tuple[Dataset, Chunks, np.ndarray]:
    """(dataset, features (rows, D) float32 as :class:`~fraglib.data.dataset.Chunks`, rows per image
    (n_images,)) of the splits named; every file is checked here (one pass over the arrays)."""
    root = Path(root)
    unknown = [s for s in splits if s not in SPLIT_OF]
    if unknown:
        raise ValueError(f"precomp split {unknown[0]!r}: expected {', '.join(SPLIT_OF)}")
    if len({SPLIT_OF[s] for s in splits}) != len(splits):
        raise ValueError(f"precomp splits {splits}: two of them are the same split (test and testall?)")
    images: list[dict[str, Any]] = []
    sentences: list[dict[str, Any]] = []
    feats, counts, dims, ndims, first = [], [], {}, set(), ""
    for s in splits:
        ims_file, caps_file = root / f"{s}_ims.npy", root / f"{s}_caps.txt"
        for f in (ims_file, caps_file):
            if not f.exists():
                raise FileNotFoundError(f"{f}: not found (the precomp layout has {s}_ims.npy and {s}_caps.txt)")
        ims = load_features(ims_file)
        ndim = len(ims.shape)
        if ndim not in (2, 3) or ims.shape[0] == 0:
            raise ValueError(f"{ims_file}: shape {ims.shape}; expected (N, D) or (N, R, D) with N > 0")
        if ndims and ndim not in ndims:
            raise ValueError(
                f"{ims_file}: shape {ims.shape} ({'regions' if ndim == 3 else 'one descriptor'} per "
                f"image) but {first}: {'regions' if 3 in ndims else 'one descriptor'} per image; "
                "every split must have the same layout"
            )
        ndims.add(ndim)
        first = first or ims_file.name
        try:
            caps = caps_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as exc:
            raise ValueError(f"{caps_file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
        blank = len(caps)
        while caps and not caps[-1].strip():
            caps.pop()
        if len(caps) < blank:  # counted and reported, never dropped unsaid (a blank caption elsewhere is an error)
            print(
                f"fraglib.data precomp: {caps_file}: {blank - len(caps)} blank line(s) at its end skipped",
                file=sys.stderr,
            )
        if len(caps) % ims.shape[0]:
            raise ValueError(
                f"{caps_file}: {len(caps)} captions for {ims.shape[0]} images in {ims_file.name} "
                "(expected a whole number per image)"
            )
        per = len(caps) // ims.shape[0]
        empty = [n + 1 for n, c in enumerate(caps) if not c.strip()]
        if empty:
            raise ValueError(f"{caps_file}: empty caption on line(s) {', '.join(map(str, empty[:5]))}")
        dims.setdefault(ims.shape[-1], ims_file.name)
        for k in range(ims.shape[0]):
            imgid = len(images)
            images.append({"imgid": imgid, "filename": f"{s}/{k}", "split": SPLIT_OF[s]})
            for c in caps[k * per : (k + 1) * per]:
                sentences.append({"sentid": len(sentences), "imgid": imgid, "raw": c.strip(), "tokens": tokenize(c)})
        rows, beyond = _bad_rows(ims)
        if len(rows):
            raise ValueError(
                f"{ims_file}: {len(rows)} image row(s) hold NaN or Inf (first: row "
                f"{', '.join(map(str, rows[:5]))}); the features are unusable"
            )
        if len(beyond):
            raise ValueError(
                f"{ims_file}: {len(beyond)} image row(s) hold {ims.dtype} values beyond float32's range "
                f"(±{F32_MAX:.4g}; first: row {', '.join(map(str, beyond[:5]))}): the feature cache is float32 and "
                "would hold inf; rescale the features"
            )
        per_image = ims.shape[1] + 1 if ndim == 3 else 1  # regions + their mean as the whole-image row
        counts.append(np.full(ims.shape[0], per_image, np.int64))
        feats.append(ims.map(_cache_rows, (ims.shape[0] * per_image, ims.shape[-1]), np.float32))
    if len(dims) > 1:
        raise ValueError(
            f"{root}: the splits' descriptors differ in size: " + ", ".join(f"{f} has {d}" for d, f in dims.items())
        )
    stream = Chunks(
        (sum(f.shape[0] for f in feats), feats[0].shape[1]),
        np.dtype(np.float32),
        lambda: itertools.chain.from_iterable(feats),
    )
    return Dataset(f"precomp:{root.name}", root, images, sentences), stream, np.concatenate(counts)


F32_MAX = float(np.finfo(np.float32).max)


def _bad_rows(ims: Chunks) -> tuple[np.ndarray, np.ndarray]:
    """(rows holding NaN or Inf, rows holding finite values beyond float32's range), in one pass: the cache is
    float32, so a float64 feature of 1e300 is refused by name here rather than written as inf (float16/32 and
    integer files cannot hold such values: the plain NaN/Inf check)."""
    if not (ims.dtype.kind == "f" and ims.dtype.itemsize > 4):
        return nonfinite_rows(ims), np.zeros(0, np.int64)
    nonfinite, beyond, start = [], [], 0
    for block in ims:
        flat = block.reshape(len(block), -1)
        finite = np.isfinite(flat)
        nonfinite.append(start + np.flatnonzero(~finite.all(axis=1)))
        beyond.append(start + np.flatnonzero((np.abs(np.where(finite, flat, 0)) > F32_MAX).any(axis=1)))
        start += len(block)
    return np.concatenate(nonfinite), np.concatenate(beyond)


def _cache_rows(block: np.ndarray) -> np.ndarray:
    """A block of ``{split}_ims.npy`` (n, D) or (n, R, D) as the cache's float32 rows: (n, D), or (n·(R+1), D)
    with each image's regions then their mean (in float32, as always; in float64 where that overflows: regions
    near float32's largest value, whose mean float32 still holds)."""
    x = block.astype(np.float32)
    if x.ndim == 3:
        with np.errstate(over="ignore"):  # an overflow is redone in float64 below
            mean = x.mean(axis=1, keepdims=True)
        if not np.isfinite(mean).all():
            mean = block.astype(np.float64).mean(axis=1, keepdims=True).astype(np.float32)
        x = np.concatenate([x, mean], axis=1)
    return x.reshape(-1, x.shape[-1])


def cache_paths(counts: np.ndarray, out: str | Path) -> list[Path]:
    """The caches :func:`write_cache` writes: ``rcnn.npz``, and ``top36.npz`` when images have regions."""
    d = Path(out) / "features"
    return [d / "rcnn.npz"] + ([d / "top36.npz"] if bool((counts > 1).any()) else [])


def write_cache(ds: Dataset, features: np.ndarray | Chunks, counts: np.ndarray, out: str | Path) -> list[Path]:
    """The feature cache(s) of :func:`read_precomp`'s output under ``out/features`` (streamed when
    ``features`` is :class:`~fraglib.data.dataset.Chunks`; ``top36.npz`` is ``rcnn.npz`` under another name: a hard
    link to the same bytes, a copy where the file system has no links; COCO's regions: 37 GB on disk once, not twice)."""
    from fraglib.data.cache import FeatureCache

    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    is_full = np.zeros(features.shape[0], bool)
    is_full[offsets[1:] - 1] = True  # the last row of each image: global, or the regions' mean
    regions = bool((counts > 1).any())
    cache = FeatureCache(
        features,
        np.zeros((features.shape[0], 4), np.float32),
        np.ones(features.shape[0], np.float32),
        is_full,
        offsets,
        np.array([im["imgid"] for im in ds.images]),
        np.array([im["filename"] for im in ds.images]),
        np.array([""] * len(ds.images)),
        {
            "detector": "precomp",
            "cnn": f"precomp ({'regions' if regions else 'global'}, {features.shape[1]}-d)",
            "source": str(ds.image_dir),
        },
    )
    paths = cache_paths(counts, out)
    cache.save(paths[0])
    for p in paths[1:]:  # the same cache under another view's name
        with atomic(p) as tmp:
            try:
                os.link(paths[0], tmp)
            except OSError:  # no hard links here (some network or FUSE file systems)
                shutil.copyfile(paths[0], tmp)
    return paths
