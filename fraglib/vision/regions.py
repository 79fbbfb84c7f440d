"""Proposals and backbone feature maps of every image, computed once (real photographs).

    python -m fraglib.vision regions --dataset-dir data/pascal1k --out data/pascal1k/regions.npz \
        --set image_size=512 --set proposal_size=300

Selective search and the CNN pass are the whole cost of image fragments (~0.8 s per Pascal1K
photograph on 2 cores). The Pascal1K study needs both twice — to train the objectness score
(:mod:`fraglib.vision.objectness`) and to pick each image's detections (:mod:`fraglib.vision.features`) — so
this stage computes them once and both read this file (``--regions``): everything after it
(RoI descriptors, scores, NMS) costs milliseconds per image.

**Format** (one uncompressed ``.npz``):

==============  ===================  =========================================================
key             dtype, shape         meaning
==============  ===================  =========================================================
fmaps           float16 (M,)         every image's feature map (C, h, w), flattened, concatenated
fmap_shapes     int64 (N, 3)         (C, h, w) of image ``n``'s map (zeros: skipped image)
fmap_offsets    int64 (N+1,)         image ``n`` owns ``fmaps[fmap_offsets[n]:fmap_offsets[n+1]]``
proposals       float32 (P, 4)       selective-search boxes ``[x0, y0, x1, y1]``, original px
prop_offsets    int64 (N+1,)         image ``n`` owns ``proposals[prop_offsets[n]:...]``
sizes           int64 (N, 2)         original (width, height) px
scales          float32 (N,)         backbone-input px per original px
imgids, filenames, status            as in :mod:`fraglib.vision.features` (status '' or the skip reason)
meta            str ()               JSON: CNN, settings, timings
==============  ===================  =========================================================

float16 halves the file (~0.5 GB for Pascal1K at 512 px); RoI descriptors from it differ from
float32 ones by < 0.1% (relative), far below the effect of any setting.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from fraglib.core.config import load_with_overrides
from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command
from fraglib.data import Dataset, open_npz, read_karpathy_json, save_npz
from fraglib.vision.rcnn import (
    Backbone,
    BadImage,
    VisionConfig,
    describe_detector,
    load_image,
    resize_longer,
    selective_search,
)

KEYS = (
    "fmaps",
    "fmap_shapes",
    "fmap_offsets",
    "proposals",
    "prop_offsets",
    "sizes",
    "scales",
    "imgids",
    "filenames",
    "status",
)


class _Images(torch.utils.data.Dataset):
    """Worker side: decode the image and compute its proposals (both CPU-bound, no torch)."""

    def __init__(self, paths: list[Path], cfg: VisionConfig) -> None:
        self.paths, self.cfg = paths, cfg

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, n: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            arr, note = load_image(self.paths[n])
        except BadImage as exc:
            return {"n": n, "error": exc.reason, "detail": str(exc)}
        t1 = time.perf_counter()
        props = selective_search(arr, self.cfg.proposal_size, self.cfg.min_box, self.cfg.max_proposals)
        return {
            "n": n,
            "arr": arr,
            "note": note,
            "proposals": props,
            "t_load": t1 - t0,
            "t_proposals": time.perf_counter() - t1,
        }


def check_images_usable(status: list[str], dataset: Dataset, min_share: float = 0.5) -> None:
    """Stop (ValueError naming the folder and the reasons) when fewer than ``min_share`` of the
    images could be read: a cache of skipped images would only train and score nothing."""
    usable = sum(not s for s in status)
    if status and usable < min_share * len(status):
        reasons = ", ".join(f"{k} {v}" for k, v in Counter(s for s in status if s).most_common())
        raise ValueError(
            f"{dataset.image_dir}: only {usable} of {len(status)} images of dataset {dataset.name} "
            f"are usable ({reasons}); check the image folder — nothing was written"
        )


def _identity(x):
    return x


@contextlib.contextmanager
def image_loader(dataset: Dataset, cfg: VisionConfig) -> Iterator[torch.utils.data.DataLoader]:
    """Decoded images of ``dataset`` with their selective-search proposals, in dataset order,
    from ``cfg.num_workers`` processes (dicts of :class:`_Images`). While open, torch keeps the
    remaining cores: proposal workers and the backbone share them, and oversubscription costs
    more than it gives."""
    import os

    if dataset.images and not Path(dataset.image_dir).is_dir():
        raise FileNotFoundError(
            f"{dataset.image_dir}: image folder of dataset {dataset.name} not found "
            "(dataset.json's images are looked up there)"
        )
    threads = torch.get_num_threads()
    if cfg.num_workers:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - cfg.num_workers))
    try:
        yield torch.utils.data.DataLoader(
            _Images([dataset.image_path(n) for n in range(len(dataset.images))], cfg),
            batch_size=None,
            num_workers=cfg.num_workers,
            collate_fn=_identity,
            # spawn, not fork: a forked worker can inherit a held OpenMP/OpenCV lock and hang
            multiprocessing_context="spawn" if cfg.num_workers else None,
        )
    finally:
        torch.set_num_threads(threads)


def region_items(
    dataset: Dataset, cfg: VisionConfig, backbone: Backbone, device: torch.device, regions: Any = None
) -> Iterator[dict[str, Any]]:
    """Per image of ``dataset``, in order: ``n``, ``fmap`` (1, C, h, w) on ``device``,
    ``proposals`` (P, 4), ``size`` (w, h), ``scale``, ``arr`` (the image; not from a cache), or
    ``error``/``detail`` for an unreadable image. From a :class:`Regions` cache
    when given (no image is read), else computed (selective search in workers + one CNN pass)."""
    if regions is not None:
        regions.check(cfg)
        for n, p in enumerate(regions.positions(dataset)):
            item = {**regions.item(p), "n": n}
            if "fmap" in item:
                item["fmap"] = item["fmap"].to(device)
            yield item
        return
    with image_loader(dataset, cfg) as loader:
        for item in loader:
            if "error" not in item:
                t0 = time.perf_counter()
                small, scale = resize_longer(item["arr"], cfg.image_size)
                item["fmap"] = backbone.feature_map(Backbone.to_input(small, device))
                item.update(
                    scale=scale, size=(item["arr"].shape[1], item["arr"].shape[0]), t_backbone=time.perf_counter() - t0
                )
            yield item


class Regions:
    """The loaded cache. ``item(p)`` -> the dict :func:`region_items` yields:
    ``fmap`` (1, C, h, w) float32, ``proposals``, ``size`` (w, h), ``scale`` — or ``error``."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.a, self.meta = arrays, meta

    @classmethod
    def load(cls, path: str | Path) -> "Regions":
        z, meta = open_npz(path, "regions cache not found (run python -m fraglib.vision regions)")
        return cls({k: z[k] for k in KEYS}, meta)

    def positions(self, dataset: Dataset) -> list[int]:
        """Cache position of each image of ``dataset``; an image the cache lacks is an error."""
        where = {(int(i), str(f)): p for p, (i, f) in enumerate(zip(self.a["imgids"], self.a["filenames"]))}
        missing = [im["filename"] for im in dataset.images if (int(im["imgid"]), im["filename"]) not in where]
        if missing:
            raise ValueError(
                f"regions cache lacks {len(missing)} image(s) of dataset {dataset.name}, "
                f"e.g. {missing[:3]} (rebuild it with python -m fraglib.vision regions)"
            )
        return [where[(int(im["imgid"]), im["filename"])] for im in dataset.images]

    def check(self, cfg: VisionConfig) -> None:
        """Refuse settings that differ from those the cache was built with."""
        built = self.meta["settings"]
        for key in ("cnn_variant", "image_size", "proposal_size", "max_proposals", "min_box"):
            if built[key] != getattr(cfg, key):
                raise ValueError(
                    f"vision.{key}={getattr(cfg, key)} but the regions cache was built with "
                    f"{built[key]}: rebuild it (python -m fraglib.vision regions) or use its value"
                )

    def item(self, p: int) -> dict[str, Any]:
        a = self.a
        if a["status"][p]:
            return {"error": str(a["status"][p]), "detail": "skipped when the regions cache was built"}
        c, h, w = (int(v) for v in a["fmap_shapes"][p])
        fmap = torch.from_numpy(a["fmaps"][a["fmap_offsets"][p] : a["fmap_offsets"][p + 1]].astype(np.float32))
        return {
            "fmap": fmap.view(1, c, h, w),
            "proposals": a["proposals"][a["prop_offsets"][p] : a["prop_offsets"][p + 1]],
            "size": (int(a["sizes"][p, 0]), int(a["sizes"][p, 1])),
            "scale": float(a["scales"][p]),
            "note": "",
        }


def build(
    dataset: Dataset, cfg: VisionConfig, out: str | Path, device: torch.device | None = None, progress: bool = True
) -> dict[str, Any]:
    """Compute and write the cache of ``dataset`` (see the module docstring). Returns its meta."""
    from tqdm.auto import tqdm

    from fraglib.core.device import select_device

    cfg.validate()
    device = device or select_device()[0]
    backbone = Backbone(cfg.cnn_variant).to(device).to(memory_format=torch.channels_last)
    n_img = len(dataset.images)
    fmaps, props = [np.zeros(0, np.float16)] * n_img, [np.zeros((0, 4), np.float32)] * n_img
    shapes, sizes, scales = np.zeros((n_img, 3), np.int64), np.zeros((n_img, 2), np.int64), np.zeros(n_img, np.float32)
    status, notes, t_backbone = [""] * n_img, Counter(), []
    t0 = time.perf_counter()
    for item in tqdm(
        region_items(dataset, cfg, backbone, device),
        total=n_img,
        desc=f"regions ({backbone.name}, {device})",
        disable=not progress,
        mininterval=5,
    ):
        n = item["n"]
        if "error" in item:
            if cfg.on_bad_image == "error":
                raise BadImage(dataset.image_path(n), item["error"], item["detail"])
            status[n] = item["error"]
            continue
        if item["note"]:
            notes[item["note"].split(" from ")[0]] += 1
        fmap = item["fmap"][0].float().cpu()
        t_backbone.append(item["t_backbone"])
        fmaps[n] = fmap.contiguous().numpy().astype(np.float16).ravel()
        shapes[n], props[n], sizes[n], scales[n] = fmap.shape, item["proposals"], item["size"], item["scale"]
    wall = time.perf_counter() - t0
    check_images_usable(status, dataset)
    offsets = lambda parts: np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    meta = {
        "cnn": backbone.name,
        "weights": backbone.weights,
        "settings": describe_detector(cfg),
        "device": str(device),
        "wall_seconds": wall,
        "wall_seconds_per_image": wall / max(n_img, 1),
        "backbone_seconds_median": float(np.median(t_backbone)) if t_backbone else 0.0,
        "proposals_per_image_median": float(np.median([len(p) for p in props])) if n_img else 0.0,
        "skipped": dict(Counter(s for s in status if s)),
        "converted": dict(notes),
    }
    save_npz(
        out,
        fmaps=np.concatenate(fmaps),
        fmap_shapes=shapes,
        fmap_offsets=offsets(fmaps),
        proposals=np.concatenate(props).astype(np.float32),
        prop_offsets=offsets(props),
        sizes=sizes,
        scales=scales,
        imgids=np.array([im["imgid"] for im in dataset.images], np.int64),
        filenames=np.array([im["filename"] for im in dataset.images], dtype=str),
        status=np.array(status, dtype=str),
        meta=np.array(json.dumps(meta, sort_keys=True)),
    )
    return meta


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a vision parameter")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    claim_cli(ap, [Path(args.out)], [Path(args.out)], args.overwrite, "fraglib.vision.regions")
    cfg = load_with_overrides(args.params, "vision", VisionConfig, args.set)
    meta = build(read_karpathy_json(Path(args.dataset_dir) / "dataset.json"), cfg, args.out)
    print(json.dumps({k: meta[k] for k in ("wall_seconds_per_image", "backbone_seconds_median", "skipped")}))
