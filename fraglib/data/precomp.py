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
no whole-image descriptor; views ``top36``, ``rcnn``, ``fullframe``). The cache is held in memory:
SCAN's COCO regions (≈ 33 GB as float32) need a machine with that much; global descriptors do not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fraglib.data.dataset import Dataset, tokenize

SPLIT_OF = {"train": "train", "dev": "val", "test": "test", "testall": "test"}


EXPECTED = "expected image features saved with numpy.save: a float16/float32 array (N, D) or (N, R, D)"


def load_features(path: Path) -> np.ndarray:
    """The memory-mapped array of a ``{split}_ims.npy`` file. Its header is read first: a file that is
    not a .npy array, or one whose dtype is not numbers (text, Python objects: pickles), is refused
    without loading it (ValueError naming the file and its dtype)."""
    fmt = np.lib.format
    try:
        with path.open("rb") as f:
            version = fmt.read_magic(f)
            dtype = (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(f)[2]
        if dtype.kind in "fiu":
            return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{path}: not a readable .npy array ({exc}); {EXPECTED}") from None
    held = " (it holds Python objects)" if dtype.hasobject else ""
    raise ValueError(f"{path}: dtype {dtype}: not a plain numeric array{held}, so it is not loaded; {EXPECTED}")


def read_precomp(root: str | Path, splits: list[str]) -> tuple[Dataset, np.ndarray, np.ndarray]:
    """(dataset, features (rows, D) float32, rows per image (n_images,)) of the splits named."""
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
        if not isinstance(ims, np.ndarray) or ims.ndim not in (2, 3) or ims.shape[0] == 0:
            raise ValueError(
                f"{ims_file}: shape {getattr(ims, 'shape', None)}; expected (N, D) or (N, R, D) with N > 0"
            )
        if ndims and ims.ndim not in ndims:
            raise ValueError(
                f"{ims_file}: shape {ims.shape} ({'regions' if ims.ndim == 3 else 'one descriptor'} per "
                f"image) but {first}: {'regions' if 3 in ndims else 'one descriptor'} per image; "
                "every split must have the same layout"
            )
        ndims.add(ims.ndim)
        first = first or ims_file.name
        caps = caps_file.read_text(encoding="utf-8").splitlines()
        while caps and not caps[-1].strip():
            caps.pop()
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
        x = np.asarray(ims, dtype=np.float32)
        bad = ~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
        if bad.any():
            rows = np.flatnonzero(bad)
            raise ValueError(
                f"{ims_file}: {len(rows)} image row(s) hold NaN or Inf (first: row "
                f"{', '.join(map(str, rows[:5]))}); the features are unusable"
            )
        if x.ndim == 3:  # regions + their mean as the whole-image row
            x = np.concatenate([x, x.mean(axis=1, keepdims=True)], axis=1)
        counts.append(np.full(x.shape[0], x.shape[1] if x.ndim == 3 else 1, np.int64))
        feats.append(x.reshape(-1, x.shape[-1]))
    if len(dims) > 1:
        raise ValueError(
            f"{root}: the splits' descriptors differ in size: " + ", ".join(f"{f} has {d}" for d, f in dims.items())
        )
    return Dataset(f"precomp:{root.name}", root, images, sentences), np.concatenate(feats), np.concatenate(counts)


def cache_paths(counts: np.ndarray, out: str | Path) -> list[Path]:
    """The caches :func:`write_cache` writes: ``rcnn.npz``, and ``top36.npz`` when images have regions."""
    d = Path(out) / "features"
    return [d / "rcnn.npz"] + ([d / "top36.npz"] if bool((counts > 1).any()) else [])


def write_cache(ds: Dataset, features: np.ndarray, counts: np.ndarray, out: str | Path) -> list[Path]:
    """The feature cache(s) of :func:`read_precomp`'s output under ``out/features``."""
    from fraglib.data.cache import FeatureCache

    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    is_full = np.zeros(len(features), bool)
    is_full[offsets[1:] - 1] = True  # the last row of each image: global, or the regions' mean
    regions = bool((counts > 1).any())
    cache = FeatureCache(
        features,
        np.zeros((len(features), 4), np.float32),
        np.ones(len(features), np.float32),
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
    for p in paths:
        cache.save(p)
    return paths
