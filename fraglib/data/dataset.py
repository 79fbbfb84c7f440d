"""Datasets in one internal form, read from Karpathy's ``dataset.json`` format (docs/formats.md).

Like neuraltalk's data provider: one small object per dataset holding images, sentences and the
explicit sentence -> image index that every evaluation uses (never a positional 5-per-image rule).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, Callable, ContextManager, Iterator

import numpy as np

from fraglib.core.config import check_choice
from fraglib.core.outputs import atomic, write_text

SPLITS = ("train", "val", "test")


@dataclasses.dataclass
class Dataset:
    """Images and sentences of one dataset (or one split of it).

    ``images``: list of ``{"imgid", "filename", "split"}``; ``sentences``: list of
    ``{"sentid", "imgid", "raw", "tokens"}``; ``sentence_image[j]`` is the row in ``images`` of
    sentence ``j``'s image (int64, shape ``(n_sentences,)``).
    """

    name: str
    image_dir: Path
    images: list[dict[str, Any]]
    sentences: list[dict[str, Any]]

    def __post_init__(self) -> None:
        row = {im["imgid"]: r for r, im in enumerate(self.images)}
        missing = [s["sentid"] for s in self.sentences if s["imgid"] not in row]
        if missing:
            raise ValueError(f"{self.name}: sentences {missing[:5]} refer to images not in the dataset")
        self.sentence_image = np.array([row[s["imgid"]] for s in self.sentences], dtype=np.int64)

    def split(self, split: str) -> "Dataset":
        """The images of ``split`` and their sentences."""
        check_choice("split", split, SPLITS)
        images = [im for im in self.images if im["split"] == split or (split == "train" and im["split"] == "restval")]
        keep = {im["imgid"] for im in images}
        return Dataset(
            f"{self.name}/{split}", self.image_dir, images, [s for s in self.sentences if s["imgid"] in keep]
        )

    def image_path(self, row: int) -> Path:
        """The file of image ``row`` in ``image_dir``. A name that leads outside that folder, by ``..``, an
        absolute path or a link resolving elsewhere, is a ValueError naming the image: never read."""
        im, folder = self.images[row], Path(self.image_dir)
        path = folder / im["filename"]
        if not path.resolve().is_relative_to(folder.resolve()):
            raise ValueError(
                f"dataset {self.name}: image row {row} (imgid {im['imgid']}), file name "
                f"{im['filename']!r}: it is {path.resolve()}, outside the image folder {folder}; not "
                "read (put the image itself in the folder, or fix the file name)"
            )
        return path

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self.images)} images, {len(self.sentences)} sentences)"


class NpzArrays:
    """Read-only view of an opened ``.npz``: ``z[key]``, ``key in z``, ``z.files``. A damaged
    member (truncated file, flipped bit: the ZIP CRC check fails) raises ValueError naming the file,
    the array and the stage to re-run, never a bare ``BadZipFile``."""

    def __init__(self, z: Any, path: Path, missing: str) -> None:
        self._z, self.path, self._missing, self.files = z, path, missing, list(z.files)

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.files:
            raise ValueError(
                f"{self.path}: no array {key!r} (has {', '.join(self.files)}); "
                f"not the file expected here ({self._missing})"
            )
        try:
            return self._z[key]
        except (zipfile.BadZipFile, ValueError, OSError, EOFError, zlib.error) as exc:
            raise ValueError(
                f"{self.path}: array {key!r} is damaged ({exc}); delete the file and re-run "
                f"what writes it ({self._missing})"
            ) from None


def open_npz(path: str | Path, missing: str) -> tuple[NpzArrays, dict[str, Any]]:
    """(arrays, meta) of one of fraglib's ``.npz`` files (features, regions, objectness, fragments):
    the lazily read archive (no pickles) and its JSON ``meta`` ({} when it has none). A missing file
    raises FileNotFoundError, an unreadable one ValueError, each naming the file, with ``missing``
    saying what writes it."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: {missing}")
    if path.is_file() and not zipfile.is_zipfile(path):  # np.load would advise loading it as a pickle
        raise ValueError(
            f"{path}: not a readable .npz archive (not a complete zip file: cut short, or another "
            f"kind of file); delete it and re-run what writes it ({missing})"
        )
    try:
        z = NpzArrays(np.load(path, allow_pickle=False), path, missing)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise ValueError(
            f"{path}: not a readable .npz archive ({exc}); delete it and re-run what writes it ({missing})"
        ) from None
    if "meta" not in z:
        return z, {}
    try:
        return z, json.loads(str(z["meta"]))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: its 'meta' is not valid JSON ({exc}); re-run what writes it ({missing})") from None


BLOCK_BYTES = 64 << 20  # about this many bytes per block a stream reads or writes


@dataclasses.dataclass(frozen=True)
class Chunks:
    """An array too large to hold, as its ``shape``, ``dtype`` and ``blocks``: a function returning a fresh
    iterator over row blocks ``(r_i, *shape[1:])`` whose rows, stacked, are the array (Σ r_i = shape[0]).
    Iterating it twice reads it twice; :func:`save_npz` writes one block at a time."""

    shape: tuple[int, ...]
    dtype: np.dtype
    blocks: Callable[[], Iterator[np.ndarray]]

    def __iter__(self) -> Iterator[np.ndarray]:
        return self.blocks()

    def map(self, fn: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...], dtype: Any) -> "Chunks":
        """The array whose blocks are ``fn`` of this one's (``fn`` acts on each block alone)."""
        return Chunks(tuple(shape), np.dtype(dtype), lambda: map(fn, self.blocks()))

    def select(self, rows: np.ndarray) -> "Chunks":
        """The rows ``rows`` (increasing positions) of this array, still a stream: nothing is read until it is."""
        rows = np.asarray(rows, np.int64)
        if len(rows) and (np.any(np.diff(rows) <= 0) or rows[0] < 0 or rows[-1] >= self.shape[0]):
            raise ValueError(f"select: rows must increase within 0..{self.shape[0] - 1}")

        def blocks() -> Iterator[np.ndarray]:
            start = 0
            for block in self.blocks():
                a, b = np.searchsorted(rows, [start, start + len(block)])
                yield block[rows[a:b] - start]
                start += len(block)

        return Chunks((len(rows), *self.shape[1:]), self.dtype, blocks)

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``a[rows]`` of the array ``a`` this streams (any order, repeats allowed), read in one pass: the resident
        memory is the result and one block, never the whole array."""
        rows = np.asarray(rows, np.int64)
        out = np.empty((len(rows), *self.shape[1:]), self.dtype)
        order = np.argsort(rows, kind="stable")
        wanted = rows[order]
        start = 0
        for block in self.blocks():
            a, b = np.searchsorted(wanted, [start, start + len(block)])
            out[order[a:b]] = block[wanted[a:b] - start]
            start += len(block)
        if start != self.shape[0]:
            raise ValueError(f"stream of {self.shape[0]} rows gave {start}")
        return out


def nonfinite_rows(a: np.ndarray | Chunks) -> np.ndarray:
    """Indices of the rows of ``a`` (N, ...) holding a NaN or an Inf, block by block for :class:`Chunks`."""
    found, start = [], 0
    for block in [a] if isinstance(a, np.ndarray) else a:
        found.append(start + np.flatnonzero(~np.isfinite(block.reshape(len(block), -1)).all(axis=1)))
        start += len(block)
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def read_rows(f: BinaryIO, shape: tuple[int, ...], dtype: Any, name: Any) -> Iterator[np.ndarray]:
    """Row blocks of the C-order array ``shape`` of ``dtype`` whose bytes follow in ``f`` from where it
    stands, by plain reads of about :data:`BLOCK_BYTES` (no memory map: the reader's resident memory stays
    one block whatever the array's size). Fewer bytes than the shape needs is a ValueError naming ``name``."""
    dtype = np.dtype(dtype)
    row = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
    per = max(1, BLOCK_BYTES // max(row, 1))
    for a in range(0, shape[0], per):
        n = min(per, shape[0] - a)
        data = f.read(n * row)
        if len(data) != n * row:
            raise ValueError(f"{name}: cut short (it ends within rows {a}..{a + n} of {shape[0]})")
        yield np.frombuffer(data, dtype).reshape((n, *shape[1:]))


def npy_chunks(open_stream: Callable[[], ContextManager[BinaryIO]], name: Any) -> Chunks:
    """The array of a ``.npy`` stream as :class:`Chunks` read by :func:`read_rows`; ``open_stream`` opens
    the stream afresh at its start (a file, or an ``.npz`` member: :func:`npz_chunks`). A Fortran-order
    array (not in row blocks) is a ValueError naming ``name``."""
    with open_stream() as f:
        shape, fortran, dtype = _npy_header(f)
    if fortran and len(shape) > 1:
        raise ValueError(f"{name}: a Fortran-order array; expected C order (np.save(np.ascontiguousarray(x)))")

    def blocks() -> Iterator[np.ndarray]:
        with open_stream() as f:
            _npy_header(f)
            yield from read_rows(f, shape, dtype, name)

    return Chunks(tuple(shape), dtype, blocks)


def npz_chunks(path: str | Path, key: str) -> Chunks:
    """Array ``key`` of the ``.npz`` file ``path`` as :class:`Chunks` (:func:`npy_chunks`)."""

    @contextlib.contextmanager
    def member() -> Iterator[BinaryIO]:
        with zipfile.ZipFile(path) as z, z.open(f"{key}.npy") as f:
            yield f

    return npy_chunks(member, f"{path}: array {key!r}")


def _npy_header(f: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    fmt = np.lib.format
    version = fmt.read_magic(f)
    return (fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0)(f)


def write_npy(f: BinaryIO, a: Chunks, name: str) -> None:
    """``a`` as a ``.npy`` stream into ``f``, block by block: the bytes ``np.save`` writes of the stacked
    array. Blocks of another dtype or row shape, or too few or too many rows, are a ValueError naming ``name``."""
    fmt = np.lib.format
    header = fmt.header_data_from_array_1_0(np.empty((0, *a.shape[1:]), a.dtype))
    fmt.write_array_header_1_0(f, {**header, "shape": tuple(a.shape)})
    rows = 0
    for block in a:
        if block.dtype != a.dtype or block.shape[1:] != tuple(a.shape[1:]):
            raise ValueError(f"{name}: a block of {block.dtype} {block.shape}; expected {a.dtype} (r, *{a.shape[1:]})")
        rows += len(block)
        if rows > a.shape[0]:
            break
        f.write(np.ascontiguousarray(block).tobytes())
    if rows != a.shape[0]:
        raise ValueError(
            f"{name}: the blocks hold {rows}{'+' if rows > a.shape[0] else ''} rows; expected {a.shape[0]}"
        )


def save_npz(path: str | Path, **arrays: Any) -> None:
    """Write ``arrays`` as the uncompressed ``.npz`` file ``path`` atomically (:func:`fraglib.core.outputs.atomic`),
    under the name as given (``np.savez`` on a name would add ``.npz`` to one without it). An array given
    as :class:`Chunks` is written one block at a time, never whole in memory; the file is the one
    ``np.savez`` writes of the stacked arrays."""
    with atomic(path) as tmp, tmp.open("wb") as f:
        if not any(isinstance(a, Chunks) for a in arrays.values()):
            np.savez(f, **arrays)
            return
        with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
            for key, a in arrays.items():  # as np.savez does, member by member
                with z.open(f"{key}.npy", "w", force_zip64=True) as member:
                    if isinstance(a, Chunks):
                        write_npy(member, a, f"{path}: array {key!r}")
                    else:
                        np.lib.format.write_array(member, np.asanyarray(a), allow_pickle=False)


def _inside(name: str) -> bool:
    """Whether file name ``name`` stays in the folder it is joined to, as written (links are
    :meth:`Dataset.image_path`'s check)."""
    return not PurePosixPath(name).is_absolute() and ".." not in PurePosixPath(name).parts


def _gallery(im: dict[str, Any], path: Any, n: int) -> int:
    """An image's ``gallery``: a non-negative integer; test images of one gallery are ranked among each other
    only (docs/formats.md)."""
    g = im["gallery"]
    if not isinstance(g, int) or isinstance(g, bool) or g < 0:
        raise ValueError(f"{path}: images[{n}].gallery={g!r}: expected a non-negative integer")
    return g


def read_json(path: Path, missing: str) -> Any:
    """The JSON value in ``path``: FileNotFoundError ``"<path>: <missing>"`` without the file, ValueError naming it
    when it is not JSON (or not UTF-8)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: {missing}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None


def read_karpathy_json(path: str | Path, image_dir: str | Path | None = None) -> Dataset:
    """Read a Karpathy-format ``dataset.json`` (ours, or Karpathy's ``dataset_{flickr8k,flickr30k,coco}.json``);
    images are looked up in ``image_dir`` (default: ``image_root`` of the file, else ``images/`` beside it),
    under ``filepath/filename`` when an image has a ``filepath`` (COCO: ``val2014/COCO_val2014_….jpg``)."""
    path = Path(path)
    data = read_json(path, "dataset file not found")
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise ValueError(f"{path}: expected an object with an 'images' list (Karpathy's format)")
    images, sentences = [], []
    for n, im in enumerate(data["images"]):
        if not isinstance(im, dict) or not isinstance(im.get("sentences", []), list):
            raise ValueError(f"{path}: images[{n}]: expected an object with a 'sentences' list")
        missing = [k for k in ("imgid", "filename", "sentences") if k not in im]
        if missing:
            raise ValueError(f"{path}: images[{n}] has no {', '.join(missing)}")
        if not isinstance(im["imgid"], int) or isinstance(im["imgid"], bool):
            raise ValueError(f"{path}: images[{n}].imgid={im['imgid']!r}: expected an integer")
        split = im.get("split", "train")
        if split not in SPLITS + ("restval",):
            raise ValueError(f"{path}: image {im.get('filename')} has unknown split {split!r}")
        name = f"{im['filepath']}/{im['filename']}" if im.get("filepath") else im["filename"]  # COCO: train2014/...
        if isinstance(name, str) and not _inside(name):
            raise ValueError(
                f"{path}: images[{n}] (imgid {im['imgid']}): file name {name!r} leads outside the "
                "image folder; expected a name relative to it (no '..', not absolute)"
            )
        images.append(
            {
                "imgid": im["imgid"],
                "filename": name,
                "split": split,
                **({"category": im["category"]} if "category" in im else {}),
                **({"gallery": _gallery(im, path, n)} if "gallery" in im else {}),
            }
        )
        for k, s in enumerate(im["sentences"]):
            if not isinstance(s, dict) or "sentid" not in s or "raw" not in s or not isinstance(s["sentid"], int):
                raise ValueError(f"{path}: images[{n}].sentences[{k}] needs an integer sentid and a raw caption")
            if not isinstance(s["raw"], str):
                raise ValueError(f"{path}: images[{n}].sentences[{k}].raw={s['raw']!r}: expected the caption's text")
            if not isinstance(s.get("tokens", []), list) or not all(isinstance(t, str) for t in s.get("tokens", [])):
                raise ValueError(f"{path}: images[{n}].sentences[{k}].tokens: expected a list of strings")
            sentences.append(
                {"sentid": s["sentid"], "imgid": im["imgid"], "raw": s["raw"], "tokens": list(s.get("tokens", []))}
            )
    for key, rows in (("imgid", images), ("sentid", sentences)):
        seen: set[int] = set()
        dup = sorted({r[key] for r in rows if r[key] in seen or seen.add(r[key])})
        if dup:
            raise ValueError(
                f"{path}: duplicate {key} {', '.join(map(str, dup[:10]))}"
                + (f" (+{len(dup) - 10} more)" if len(dup) > 10 else "")
            )
    if image_dir is None:
        image_dir = data.get("image_root") or path.parent / "images"
    return Dataset(data.get("dataset", path.stem), Path(image_dir), images, sentences)


def write_karpathy_json(ds: Dataset, path: str | Path, image_root: str | Path | None = None) -> None:
    """Write ``ds`` in Karpathy's format (plus ``image_root``, the folder its filenames live in)."""
    by_img: dict[Any, list[dict[str, Any]]] = {}
    for s in ds.sentences:
        by_img.setdefault(s["imgid"], []).append(s)
    images = [
        {
            **{k: v for k, v in im.items() if k not in ("sentids", "sentences")},
            "sentids": [s["sentid"] for s in by_img.get(im["imgid"], [])],
            "sentences": [dict(s) for s in by_img.get(im["imgid"], [])],
        }
        for im in ds.images
    ]
    out = {"dataset": ds.name, "images": images}
    if image_root is not None:
        out["image_root"] = str(image_root)
    write_text(path, json.dumps(out, indent=1, sort_keys=True) + "\n")


def stratified_split(categories: list[str], seed: int, n_val: int = 5, n_test: int = 5) -> list[str]:
    """Split labels per item: within each category (sorted by position), ``n_val`` val and
    ``n_test`` test items drawn with ``seed``, the rest train (Pascal1K: 40/5/5 per class)."""
    rng = np.random.default_rng(seed)
    split = ["train"] * len(categories)
    for cat in sorted(set(categories)):
        idx = [i for i, c in enumerate(categories) if c == cat]
        if len(idx) < n_val + n_test + 1:
            raise ValueError(f"category {cat!r} has {len(idx)} images, fewer than val+test+1={n_val + n_test + 1}")
        pick = rng.permutation(idx)
        for i in pick[:n_val]:
            split[i] = "val"
        for i in pick[n_val : n_val + n_test]:
            split[i] = "test"
    return split


def stratified_folds(categories: list[str], folds: int, seed: int) -> list[int]:
    """The fold (0 … ``folds`` − 1) of each item: within each category (sorted by position) a permutation drawn
    with ``seed`` dealt out in equal shares (Pascal1K, ten folds: 5 images of each category per fold). A category
    whose size is not a multiple of ``folds`` is refused: the folds' galleries would differ in size."""
    if not isinstance(folds, int) or folds < 3:
        raise ValueError(f"folds={folds!r}: expected an integer of at least 3 (a test, a val and a train fold)")
    rng = np.random.default_rng(seed)
    fold = [0] * len(categories)
    for cat in sorted(set(categories)):
        idx = [i for i, c in enumerate(categories) if c == cat]
        if len(idx) % folds:
            raise ValueError(f"category {cat!r} has {len(idx)} images, not a multiple of folds={folds}")
        for j, i in enumerate(rng.permutation(idx)):
            fold[int(i)] = j % folds
    return fold


def fold_split(fold_of: list[int], fold: int, folds: int) -> list[str]:
    """Split labels of fold ``fold``'s data folder: its fold the test set, the next (mod ``folds``) the
    validation set, the others the training set; so every item is tested once and validates once."""
    if not 0 <= fold < folds:
        raise ValueError(f"fold={fold}: expected 0 ≤ fold < folds={folds}")
    return ["test" if f == fold else "val" if f == (fold + 1) % folds else "train" for f in fold_of]


def tokenize(raw: str) -> list[str]:
    """Karpathy-style tokens: lower-cased alphanumeric runs."""
    return re.findall(r"[a-z0-9]+", raw.lower())
