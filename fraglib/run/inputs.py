"""Inputs of the systems: one dataset's splits as tensors, in the views a system asks for.

The only reader of data files for training and evaluation (docs/formats.md describes the files):
``dataset.json``, ``fragments/<sentence view>.npz`` and ``features/<image view>.npz``
(``fullframe`` = the whole-image rows of ``rcnn.npz``; ``none`` = no file: one constant row per image,
for text-only data such as Flickr8K without its photographs). Word ids are remapped to a compact table
holding only the GloVe rows the fragment file uses, in sorted order (:func:`compact_words`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.batches import Rows, Views
from fraglib.core.device import to_device

SPLITS = ("train", "val", "test")


@dataclasses.dataclass
class Ragged:
    """Items with a variable number of rows: ``data[key]`` (R, ...) tensors, item n owns rows
    ``off[n]:off[n+1]``; ``items[key]`` (N, ...) per-item tensors."""

    data: dict[str, torch.Tensor]
    off: np.ndarray
    items: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    host: dict[str, torch.Tensor] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        """``host``: CPU copies of the integer columns of data held on another device, taken once, so that a
        batch's index bookkeeping (:meth:`Rows.cpu`) never waits for that device."""
        self.host = {k: v.cpu() for k, v in self.data.items() if v.device.type != "cpu" and not v.is_floating_point()}

    @property
    def n(self) -> int:
        return len(self.off) - 1

    def counts(self) -> np.ndarray:
        return np.diff(self.off)

    def take(self, items: np.ndarray) -> Rows:
        """The rows of ``items`` (positions), owner = position in ``items``."""
        items = np.asarray(items, np.int64)
        starts, stops = self.off[items], self.off[items + 1]
        rows = (
            np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(items) else np.zeros(0, np.int64)
        ).astype(np.int64)
        owner = torch.from_numpy(np.repeat(np.arange(len(items)), stops - starts))
        dev = next(iter(self.data.values())).device
        rows_t = torch.from_numpy(rows)
        r = to_device(rows_t, dev)
        per_item = {k: v.index_select(0, to_device(torch.from_numpy(items), v.device)) for k, v in self.items.items()}
        data = {k: v.index_select(0, r) for k, v in self.data.items()}  # a row copy: 4x faster than v[r] on CPU
        host = (
            {"owner": owner, **{k: v.index_select(0, rows_t) for k, v in self.host.items()}}
            if dev.type != "cpu"
            else {}
        )
        return Rows(data, to_device(owner, dev), len(items), items, per_item, host)


@dataclasses.dataclass
class Split:
    """One split: ``images`` and ``sentences`` in the system's views, ``sentence_image`` (n_sent,)
    the image position of each sentence, ``sentids``, the compact ``words`` table (n_words, 50), and
    ``image_group`` (n_images,) int: each image's category id where the data set has categories
    (Pascal1K; ids from the sorted category names), else None. Read by training diagnostics only.
    ``galleries`` (n_images,) int: each image's gallery where the data set has them (the synthetic test split:
    ``synthetic.gallery``), else None: an image and its sentences are ranked only among their gallery's
    (:func:`fraglib.run.evaluate.score_matrix`). ``row_moments``: see :meth:`image_moments`."""

    name: str
    images: Ragged
    sentences: Ragged
    sentence_image: np.ndarray
    sentids: np.ndarray
    words: torch.Tensor
    image_group: np.ndarray | None = None
    galleries: np.ndarray | None = None
    row_moments: tuple[torch.Tensor, torch.Tensor] | None = None

    def image_moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) (img_dim,) of the split's image rows: a system's standardisation. Those of the rows
        before pooling (``row_moments``, kept by :func:`pool_images`)."""
        if self.row_moments is not None:
            return self.row_moments
        x = self.images.data["x"]
        return x.mean(0), x.std(0)

    @property
    def n_images(self) -> int:
        return self.images.n

    @property
    def n_sentences(self) -> int:
        return self.sentences.n

    def known_word_sentences(self) -> np.ndarray:
        """(n_sent,) bool: some fragment of the sentence has a word whose vector is not zero (in the dictionary)."""
        known = (self.words != 0).any(dim=1)
        rows = self.sentences.data
        hit = (known[rows["w1"]] | known[rows["w2"]]).cpu().numpy()
        owner = np.repeat(np.arange(self.sentences.n), self.sentences.counts())
        return np.bincount(owner, weights=hit, minlength=self.sentences.n) > 0

    def usable_sentences(self) -> np.ndarray:
        """(n_sent,) bool: the sentence and its image both have rows (only those are trained on)."""
        return (self.sentences.counts() > 0) & (self.images.counts()[self.sentence_image] > 0)


def pool_images(split: Split) -> Split:
    """``split`` with each image's rows replaced by their mean, one row (an image without rows keeps none),
    for views with ``pooled``: the mean is taken once here instead of in every batch, by the same
    ``mean_rows`` over the same rows, so the floats are those a batch would compute. The statistics of
    the rows stay in ``row_moments``."""
    from fraglib.core.batches import mean_rows

    imgs = split.images
    if set(imgs.data) != {"x"} or imgs.items:
        raise ValueError(
            f"pool_images: split {split.name} has image inputs besides descriptors "
            f"({sorted(set(imgs.data) | set(imgs.items))}); pooling would drop them"
        )
    x, counts = imgs.data["x"], imgs.counts()
    owner = torch.from_numpy(np.repeat(np.arange(imgs.n), counts)).to(x.device)
    has = torch.from_numpy(counts > 0).to(x.device)
    off = np.concatenate([[0], np.cumsum(counts > 0)]).astype(np.int64)
    pooled = Ragged({"x": mean_rows(x, owner, imgs.n)[has]}, off)
    return dataclasses.replace(split, images=pooled, row_moments=split.image_moments())


def compact_words(w1: np.ndarray, w2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(used GloVe rows, sorted; w1 and w2 as rows of that compact table). A row -1 (a tree node
    out of the dictionary) becomes ``len(used)``: the caller appends a zero vector there."""
    used = np.unique(np.concatenate([w1, w2]))
    used = used[used >= 0]
    m = lambda w: np.where(w < 0, len(used), np.searchsorted(used, w)).astype(np.int64)  # noqa: E731
    return used, m(w1), m(w2)


@dataclasses.dataclass(frozen=True)
class DataPaths:
    """Where one dataset's files are, as one object: ``dataset`` holds ``dataset.json`` and ``fragments/``,
    ``features`` the feature caches (None: ``<dataset>/features``). A study of several data splits names them
    with ``{seed}`` (Pascal1K: ``data/pascal1k/split{seed}``); :meth:`for_seed` fills it, the one place that does."""

    dataset: str | Path
    features: str | Path | None = None

    @property
    def per_seed(self) -> bool:
        """True when the paths name one data split per seed (``{seed}``)."""
        return "{seed}" in str(self.dataset) or "{seed}" in str(self.features or "")

    def for_seed(self, seed: int) -> "DataPaths":
        """These paths with ``{seed}`` filled (unchanged without it)."""
        fill = lambda p: str(p).format(seed=seed) if p is not None and "{seed}" in str(p) else p  # noqa: E731
        return DataPaths(fill(self.dataset), fill(self.features))

    def files(self, views: Views, sentences_file: str | Path | None = None) -> dict[str, Path]:
        """The files a run with ``views`` reads (the checkpoint fingerprints them); ``sentences_file`` replaces
        ``fragments/<view>.npz`` (e.g. captions re-encoded with another dataset's vocabulary)."""
        d = Path(self.dataset)
        files = {
            "dataset": d / "dataset.json",
            "sentences": Path(sentences_file) if sentences_file else d / "fragments" / f"{views.sentences}.npz",
        }
        if views.images != "none":
            det = "rcnn" if views.images == "fullframe" else views.images
            files["images"] = Path(self.features or d / "features") / f"{det}.npz"
        return files


def constant_images(ds: Any) -> Any:
    """The image view ``none``: one row of value 1 per image (a system sees no image information)."""
    from fraglib.data.cache import FeatureCache

    n = len(ds.images)
    return FeatureCache(
        np.ones((n, 1), np.float32),
        np.zeros((n, 4), np.float32),
        np.ones(n, np.float32),
        np.ones(n, bool),
        np.arange(n + 1, dtype=np.int64),
        np.array([im["imgid"] for im in ds.images]),
        np.array([im["filename"] for im in ds.images]),
        np.array([""] * n),
        {"detector": "none", "cnn": None},
    )


def image_cache(files: dict[str, Path], ds: Any, views: Views) -> Any:
    """The ``FeatureCache`` of ``views`` for dataset ``ds`` (files from :meth:`DataPaths.files`), its features a
    stream (:meth:`FeatureCache.subset` reads one split's rows: a reader never holds the whole file)."""
    from fraglib.data.cache import FeatureCache

    cache = FeatureCache.load(files["images"], ds, stream=True) if "images" in files else constant_images(ds)
    if views.images == "fullframe":
        return cache.fullframe()
    return cache.top(views.detections) if views.detections else cache


def load_splits(
    paths: DataPaths,
    views: Views,
    device: torch.device,
    sentences_file: str | Path | None = None,
    names: tuple[str, ...] = SPLITS,
) -> tuple[dict[str, Split], dict[str, int], dict[str, Any]]:
    """(splits ``names`` of train/val/test — ``restval`` images join train —, sizes for building a system
    (n_words, word_dim, n_relations, img_dim), provenance info); ``sentences_file`` as in :meth:`DataPaths.files`.
    A split not in ``names`` is never built (a search reads no test split); the sizes are the same whichever
    are built (the word table covers the fragment file's words: GloVe vectors, no training signal)."""
    from fraglib.data import read_karpathy_json
    from fraglib.text.fragments import Fragments
    from fraglib.text.vectors import glove_table

    files = paths.files(views, sentences_file)
    ds = read_karpathy_json(files["dataset"])
    frags = Fragments.load(files["sentences"])
    if list(frags.sentid) != [s["sentid"] for s in ds.sentences]:
        raise ValueError(
            f"{files['sentences']}: sentence order differs from {files['dataset']} (re-run the fragments stage)"
        )
    cache = image_cache(files, ds, views)
    used, w1, w2 = compact_words(frags.w1, frags.w2)
    table = glove_table()[used]
    if (frags.w1 < 0).any() or (frags.w2 < 0).any():
        table = np.concatenate([table, np.zeros((1, table.shape[1]), table.dtype)])
    words = torch.from_numpy(np.ascontiguousarray(table)).to(device)
    row_of = {im["imgid"]: n for n, im in enumerate(ds.images)}
    cats = [im.get("category") for im in ds.images]
    cat_id = {c: i for i, c in enumerate(sorted({c for c in cats if c}))} if all(cats) else None
    splits = {}
    for split in names:
        imgs = [
            n
            for n, im in enumerate(ds.images)
            if im["split"] == split or (split == "train" and im["split"] == "restval")
        ]
        pos = {n: i for i, n in enumerate(imgs)}
        sents = [j for j, s in enumerate(ds.sentences) if row_of[s["imgid"]] in pos]
        sub = cache.subset(imgs)
        rows = (
            np.concatenate([np.arange(frags.offsets[j], frags.offsets[j + 1]) for j in sents])
            if sents
            else np.zeros(0, np.int64)
        )
        counts = np.array([frags.offsets[j + 1] - frags.offsets[j] for j in sents], np.int64)
        t = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
        img_rows = Ragged({"x": t(sub.features)}, sub.offsets)
        if views.pixels:
            img_rows = pixel_rows(sub, ds, imgs, device)
        splits[split] = Split(
            split,
            img_rows,
            Ragged(
                {
                    "rel": t(frags.rel[rows].astype(np.int64)),
                    "w1": t(w1[rows]),
                    "w2": t(w2[rows]),
                    **{k: t(c[rows].astype(np.int64)) for k, c in frags.columns.items()},
                },
                np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            ),
            np.array([pos[row_of[ds.sentences[j]["imgid"]]] for j in sents], np.int64),
            np.array([ds.sentences[j]["sentid"] for j in sents], np.int64),
            words,
            np.array([cat_id[cats[n]] for n in imgs], np.int64) if cat_id else None,
            _galleries([ds.images[n] for n in imgs]),
        )
        if views.pooled:
            splits[split] = pool_images(splits[split])
    dims = {
        "n_words": int(words.shape[0]),
        "word_dim": int(words.shape[1]),
        "n_relations": len(frags.relations),
        "img_dim": int(cache.features.shape[1]),
    }
    if views.pixels:  # the CNN of the cache, trained with the system
        dims["cnn_variant"] = int(cache.meta["settings"]["cnn_variant"])
    if "rank" in frags.columns:  # tree views: children per side, from the data (text only)
        dims["max_rank"] = int(frags.columns["rank"].max(initial=0)) + 1
    info = {
        "dataset": ds.name,
        "relations": frags.relations,
        "sentences": frags.mode,
        "images": views.images,
        "cnn": cache.meta.get("cnn"),
        "words_used": len(used),
    }
    return splits, dims, info


def _galleries(images: list[dict[str, Any]]) -> np.ndarray | None:
    """(n_images,) int galleries of a split's images, or None where none names one."""
    named = sum("gallery" in im for im in images)
    if not named:
        return None
    if named < len(images):
        raise ValueError(
            f"{len(images) - named} of the {len(images)} images of split {images[0].get('split')!r} (e.g. "
            f"{next(im['filename'] for im in images if 'gallery' not in im)}) name no gallery while the others "
            "do; give every image of the split one, or none"
        )
    return np.array([im["gallery"] for im in images], np.int64)


def pixel_rows(cache: Any, ds: Any, rows: list[int], device: torch.device) -> Ragged:
    """A cache's rows with what a CNN trained with the system needs: ``box`` (R, 4) px and ``full`` (R,)
    per row; ``pixels`` (n, H, W, 3) uint8 (each image resized as the features stage did, zero-padded to
    the largest), ``hw`` (n, 2) and ``scale`` (n,) per image. Held in memory as uint8."""
    from fraglib.vision.rcnn import load_image, resize_longer

    side = int(cache.meta["settings"]["image_size"])
    small, scales = [], []
    for n in rows:
        arr, _ = load_image(ds.image_path(n))
        s, sc = resize_longer(arr, side)
        small.append(s)
        scales.append(sc)
    H, W = max((a.shape[0] for a in small), default=1), max((a.shape[1] for a in small), default=1)
    px = np.zeros((len(small), H, W, 3), np.uint8)
    for i, a in enumerate(small):
        px[i, : a.shape[0], : a.shape[1]] = a
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return Ragged(
        {"x": t(cache.features), "box": t(cache.boxes), "full": t(cache.is_full)},
        cache.offsets,
        {
            "pixels": t(px),
            "hw": t(np.array([a.shape[:2] for a in small], np.int64).reshape(-1, 2)),
            "scale": t(np.array(scales, np.float32)),
        },
    )


def make_batches(split: Split, batch_size: int, seed: int, epoch: int, distinct: bool = True) -> list[np.ndarray]:
    """Shuffled sentence positions in batches of ``batch_size``, with no image twice in a batch when
    ``distinct`` (else plain consecutive slices of the permutation, as VSE++ draws them). Sentences
    without rows, or whose image has none, are not trained on; the order depends only on (seed, epoch)."""
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(np.nonzero(split.usable_sentences())[0])
    if not distinct:
        return [perm[a : a + batch_size] for a in range(0, len(perm), batch_size) if len(perm) - a >= 2]
    pool, image = perm.tolist(), split.sentence_image
    batches = []
    while pool:
        batch, seen, rest = [], set(), []
        for at, j in enumerate(pool):
            k = int(image[j])
            if k not in seen:
                batch.append(j)
                seen.add(k)
                if len(batch) == batch_size:  # full: the rest of the pool keeps its order (one slice, not a
                    rest.extend(pool[at + 1 :])  # Python loop over it: an epoch's batching is linear, not O(M²/b))
                    break
            else:
                rest.append(j)
        if len(batch) < 2:
            break  # a last pair alone carries no ranking signal
        batches.append(np.array(batch, np.int64))
        pool = rest
    return batches
