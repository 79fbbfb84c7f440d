"""The image-fragment feature cache: one backbone pass per image, every detector's boxes.

    python -m fraglib.vision features --dataset-dir data/synthetic [--truth data/synthetic/ground_truth.json]

writes ``<dataset-dir>/features/rcnn.npz`` (and ``groundtruth.npz`` when true boxes are given)
plus ``features_stats.json``. ``--shard i/N`` computes shard i of N (contiguous images) into
``features/shards/iofN/`` — run them as separate processes or machines — and ``--merge N`` joins them
into the caches one process writes (same arrays); under ``torchrun`` each rank takes its shard and
rank 0 merges. With ``--region-views`` also the region sets of Peri's attention model:
``top36.npz`` (the :data:`N_REGIONS` best proposals by the detector's score after the same NMS — the
analogue of "Faster R-CNN proposals by objectness") and ``grid.npz`` (the cells of a
:data:`GRID` × :data:`GRID` partition of the image, no detector), both RoI-pooled from the same map. The ``fullframe`` detector needs no file of its own: it is the
``is_full`` row of every image in either cache (:meth:`FeatureCache.fullframe`).

The file format is :mod:`fraglib.data.cache` (:class:`~fraglib.data.cache.FeatureCache`).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.config import load_with_overrides
from fraglib.core.outputs import OVERWRITE_HELP, claim, command, write_text
from fraglib.core.progress import track
from fraglib.data import Dataset, read_karpathy_json
from fraglib.data.cache import FeatureCache, cache_family
from fraglib.data.dataset import Chunks, read_rows
from fraglib.vision.rcnn import (
    Backbone,
    BadImage,
    VisionConfig,
    crop_descriptors,
    degrade_boxes,
    describe_detector,
    nms_top_k,
    proposal_scores,
    recall_at_iou,
    roi_descriptors,
)
from fraglib.vision.regions import check_images_usable, region_items

N_REGIONS = 36  # Peri's M: proposals per image for region-word attention
GRID = 6  # the grid alternative: GRID x GRID = 36 cells


def grid_boxes(w: int, h: int, g: int = GRID) -> np.ndarray:
    """(g*g, 4) float32 ``[x0, y0, x1, y1]`` cells of a g x g partition of a w x h image, row-major."""
    xs, ys = np.linspace(0, w, g + 1), np.linspace(0, h, g + 1)
    return np.array([[xs[i], ys[j], xs[i + 1], ys[j + 1]] for j in range(g) for i in range(g)], np.float32)


def _to_np(t: torch.Tensor) -> np.ndarray:
    return t.float().cpu().numpy().astype(np.float32)


def _spooled(f: Any, rows: int, dim: int) -> Chunks:
    """The (rows, dim) float32 array written to the binary file ``f``, read from its start in blocks."""

    def blocks():
        f.seek(0)
        return read_rows(f, (rows, dim), np.float32, f"features spool {f.name}")

    return Chunks((rows, dim), np.dtype(np.float32), blocks)


def extract(
    dataset: Dataset,
    cfg: VisionConfig,
    out_dir: str | Path,
    truth: dict[int, np.ndarray] | None = None,
    device: torch.device | None = None,
    progress: bool = True,
    regions: Any = None,
    overwrite: bool = False,
    region_views: bool = False,
) -> dict[str, Any]:
    """Compute the caches for ``dataset`` (rcnn, groundtruth when ``truth`` maps imgid -> true boxes,
    top36 and grid when ``region_views``) and write them with ``features_stats.json`` into
    ``out_dir``. Returns the stats.
    ``regions``: a :class:`fraglib.vision.regions.Regions` cache of the same images (no CNN pass here).
    Caches already in ``out_dir`` are an error unless ``overwrite`` (then a ``groundtruth.npz`` this
    run does not rewrite is removed rather than left stale). Descriptors are streamed to disk: the
    memory held does not grow with the number of images beyond boxes, scores and counts."""
    from fraglib.core.device import select_device

    cfg.validate()
    if regions is not None and cfg.region_features != "roi":
        raise ValueError("vision.region_features=crop needs the images: run without --regions")
    device = device or select_device()[0]
    backbone = Backbone(cfg.cnn_variant).to(device).to(memory_format=torch.channels_last)
    objectness = None
    if cfg.score == "learned":
        from fraglib.vision.objectness import Objectness

        objectness = Objectness.load(cfg.objectness_file)
    detectors = ["rcnn"] + (["groundtruth"] if truth is not None else []) + (["top36", "grid"] if region_views else [])
    out_dir = Path(out_dir)
    family = cache_family(out_dir)
    claim(family, [out_dir / f"{d}.npz" for d in detectors] + [family[-1]], overwrite, f"feature caches in {out_dir}")
    if out_dir.is_symlink() and not out_dir.exists() or out_dir.exists() and not out_dir.is_dir():
        raise NotADirectoryError(
            f"{out_dir}: not a folder (a file, or a link to a missing folder); "
            "checked before the work so that no result is lost"
        )
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:  # each detector's descriptors go to disk as they come (an unnamed file, gone when closed)
        with contextlib.ExitStack() as stack:
            spool = {d: stack.enter_context(tempfile.TemporaryFile(dir=out_dir)) for d in detectors}
            return _extract(
                dataset, cfg, out_dir, truth, device, progress, regions, region_views, backbone, objectness, spool
            )
    except BaseException:
        if made and not any(out_dir.iterdir()):
            out_dir.rmdir()  # a failed run leaves no folder it made
        raise


def _extract(dataset, cfg, out_dir, truth, device, progress, regions, region_views, backbone, objectness, spool):
    """:func:`extract`'s work (same arguments), each detector's descriptor rows (float32, backbone.dim)
    appended to the binary file ``spool[detector]`` as each image is done, the small arrays kept."""
    detectors = list(spool)
    acc: dict[str, dict[str, list]] = {d: {k: [] for k in ("boxes", "scores", "is_full", "counts")} for d in detectors}
    status = [""] * len(dataset.images)
    notes: Counter = Counter()
    times: dict[str, list[float]] = {k: [] for k in ("load", "proposals", "backbone", "scoring", "features", "total")}
    n_props = []
    t_start = time.perf_counter()
    for item in track(  # a bar on a terminal, else a line per 30 s with an ETA (printing only)
        region_items(dataset, cfg, backbone, device, regions),
        f"features {out_dir} ({backbone.name}, {device})",
        len(dataset.images),
        "image",
        enabled=progress,
    ):
        n = item["n"]
        if "error" in item:
            if cfg.on_bad_image == "error":
                raise BadImage(dataset.image_path(n), item["error"], item["detail"])
            status[n] = item["error"]
            for d in detectors:
                for k in ("boxes", "scores", "is_full"):
                    acc[d][k].append(None)
                acc[d]["counts"].append(0)
            continue
        if item["note"]:
            notes[item["note"].split(" from ")[0]] += 1
        fmap, props, scale, (w, h) = item["fmap"], item["proposals"], item["scale"], item["size"]
        full = fmap.mean(dim=(2, 3))
        t1 = time.perf_counter()
        if not len(props):
            scores = np.zeros(0)
        elif objectness is not None:
            scores = objectness.score(fmap, props, scale, w, h)
        else:
            scores = proposal_scores(backbone, roi_descriptors(fmap, props, scale), cfg.score)
        keep = nms_top_k(props, scores, cfg.nms_iou, cfg.k)
        t2 = time.perf_counter()
        chosen = {"rcnn": (props[keep], scores[keep])}
        if region_views:
            top = nms_top_k(props, scores, cfg.nms_iou, N_REGIONS)
            chosen["top36"] = (props[top], scores[top])
            chosen["grid"] = (grid_boxes(w, h), np.ones(GRID * GRID, np.float32))
        if truth is not None:
            rng = np.random.default_rng([cfg.gt_seed, int(dataset.images[n]["imgid"])])
            gt = degrade_boxes(rng, truth[int(dataset.images[n]["imgid"])], w, h, cfg)[: cfg.k]
            pad = props[keep][: max(0, cfg.k - len(gt))]
            chosen["groundtruth"] = (
                np.concatenate([gt, pad]).astype(np.float32),
                np.concatenate([np.ones(len(gt)), scores[keep][: len(pad)]]),
            )
        for d, (boxes, sc) in chosen.items():
            if cfg.region_features == "roi":
                desc = roi_descriptors(fmap, boxes, scale)
            else:
                desc = crop_descriptors(backbone, item["arr"], boxes, cfg.crop_size, device)
            spool[d].write(np.concatenate([_to_np(full), _to_np(desc)]).tobytes())
            acc[d]["boxes"].append(np.concatenate([[[0, 0, w, h]], boxes]).astype(np.float32))
            acc[d]["scores"].append(np.concatenate([[np.inf], sc]).astype(np.float32))
            acc[d]["is_full"].append(np.arange(len(boxes) + 1) == 0)
            acc[d]["counts"].append(len(boxes) + 1)
        t3 = time.perf_counter()
        n_props.append(len(props))
        pre = [item.get("t_load", 0.0), item.get("t_proposals", 0.0), item.get("t_backbone", 0.0)]
        for key, t in zip(
            ("load", "proposals", "backbone", "scoring", "features"), pre + [t2 - t1, (t3 - t2) / len(chosen)]
        ):  # features: per detector
            times[key].append(t)
        times["total"].append(sum(pre) + t3 - t1)
    wall = time.perf_counter() - t_start
    check_images_usable(status, dataset)
    dim = backbone.dim
    meta_base = {"cnn": backbone.name, "weights": backbone.weights, "dim": dim, "settings": describe_detector(cfg)}
    imgids = np.array([im["imgid"] for im in dataset.images], np.int64)
    files = np.array([im["filename"] for im in dataset.images], dtype=str)
    caches = {}
    for d in detectors:
        a = acc[d]
        cat = lambda key, shape, dt: (
            np.concatenate([x for x in a[key] if x is not None]).astype(dt)
            if any(x is not None for x in a[key])
            else np.zeros(shape, dt)
        )
        cache = FeatureCache(
            _spooled(spool[d], int(np.sum(a["counts"])), dim),
            cat("boxes", (0, 4), np.float32),
            cat("scores", (0,), np.float32),
            cat("is_full", (0,), bool),
            np.concatenate([[0], np.cumsum(a["counts"])]).astype(np.int64),
            imgids,
            files,
            np.array(status, dtype=str),
            {**meta_base, "detector": d},
        )
        cache.save(out_dir / f"{d}.npz")
        caches[d] = cache
    med = {k: float(np.median(v)) if v else 0.0 for k, v in times.items()}
    stats: dict[str, Any] = {
        "images": len(dataset.images),
        "skipped": dict(Counter(s for s in status if s)),
        "converted": dict(notes),
        "cnn": backbone.name,
        "device": str(device),
        "proposals_per_image_median": float(np.median(n_props)) if n_props else 0.0,
        "fragments_per_image_mean": {d: float(np.mean(np.diff(c.offsets))) for d, c in caches.items()},
        "seconds_per_image_median": med,
        "wall_seconds": wall,
        "wall_seconds_per_image": wall / max(len(dataset.images), 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_rss_workers_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }
    if truth is not None:
        stats.update(_recall(caches, truth))
    if regions is None:  # what a shard merge checks: these very pictures
        stats["pictures_sha256"] = pictures_digest(dataset)
    write_text(out_dir / "features_stats.json", json.dumps(stats, indent=1, sort_keys=True) + "\n")
    return stats


# ----------------------------------------------------------------------------- shards
def pictures_digest(dataset: Dataset) -> str:
    """SHA-256 over the images of ``dataset`` in order: each one's file name and the SHA-256 of its bytes
    ("missing" for an absent file). Two shards' caches are of the same pictures only if this agrees."""
    from fraglib.core.outputs import file_sha256

    h = hashlib.sha256()
    for row in range(len(dataset.images)):
        p = dataset.image_path(row)
        h.update(f"{dataset.images[row]['filename']}\0{file_sha256(p) if p.is_file() else 'missing'}\n".encode())
    return h.hexdigest()


def shard_rows(n_images: int, shard: int, n_shards: int) -> np.ndarray:
    """The dataset rows of shard ``shard`` of ``n_shards``: contiguous, sizes differing by at most one."""
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard {shard}/{n_shards}: expected 0 <= i < N")
    return np.array_split(np.arange(n_images), n_shards)[shard]


def shard_dataset(ds: Dataset, shard: int, n_shards: int) -> Dataset:
    rows = shard_rows(len(ds.images), shard, n_shards)
    images = [ds.images[r] for r in rows]
    keep = {im["imgid"] for im in images}
    return Dataset(ds.name, ds.image_dir, images, [s for s in ds.sentences if s["imgid"] in keep])


def shard_dir(out_dir: str | Path, shard: int, n_shards: int) -> Path:
    return Path(out_dir) / "shards" / f"{shard}of{n_shards}"


def merge_shards(
    dataset: Dataset,
    out_dir: str | Path,
    n_shards: int,
    truth: dict[int, np.ndarray] | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Join the caches that ``--shard i/N`` wrote under ``out_dir/shards/iofN`` into the caches one process
    writes (the same arrays: every image's arithmetic is its own), and ``features_stats.json``. Refuses a
    missing shard, a shard of other images, and shards made with other settings, naming them. The
    descriptors are streamed from the shards' files to the output, never held whole."""
    dirs = [shard_dir(out_dir, i, n_shards) for i in range(n_shards)]
    missing = [str(d) for d in dirs if not (d / "features_stats.json").exists()]
    if missing:
        raise FileNotFoundError(
            f"missing shard(s) {', '.join(missing)}: run --shard i/{n_shards} for each (they "
            "write features_stats.json last)"
        )
    for i, d in enumerate(dirs):  # a hash of the pictures, not only their names
        recorded = json.loads((d / "features_stats.json").read_text()).get("pictures_sha256")
        if recorded is not None and recorded != pictures_digest(shard_dataset(dataset, i, n_shards)):
            raise ValueError(
                f"{d}: computed from other pictures than {dataset.image_dir} holds now under the same "
                f"file names (their SHA-256 differs); re-run shard {i}/{n_shards}"
            )
    detectors = sorted(p.stem for p in dirs[0].glob("*.npz"))
    out_dir = Path(out_dir)
    claim(
        cache_family(out_dir),
        [out_dir / f"{d}.npz" for d in detectors] + [out_dir / "features_stats.json"],
        overwrite,
        f"feature caches in {out_dir}",
    )
    caches = {}
    for det in detectors:
        parts = []
        for i, d in enumerate(dirs):
            if not (d / f"{det}.npz").exists():
                raise FileNotFoundError(f"{d / f'{det}.npz'}: shard {i} lacks the {det} cache that shard 0 has")
            parts.append(FeatureCache.load(d / f"{det}.npz", shard_dataset(dataset, i, n_shards), stream=True))
            if parts[-1].meta != parts[0].meta:
                raise ValueError(
                    f"{d / f'{det}.npz'}: made with other settings than shard 0 "
                    f"({parts[-1].meta} vs {parts[0].meta}); re-run that shard"
                )
        counts = np.concatenate([np.diff(c.offsets) for c in parts])
        stream = [c.features for c in parts]
        cache = FeatureCache(
            Chunks(
                (sum(f.shape[0] for f in stream), *stream[0].shape[1:]),
                stream[0].dtype,
                lambda stream=stream: itertools.chain.from_iterable(stream),
            ),
            *(np.concatenate([getattr(c, k) for c in parts]) for k in ("boxes", "scores", "is_full")),
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            *(np.concatenate([getattr(c, k) for c in parts]) for k in ("imgids", "filenames", "status")),
            parts[0].meta,
        )
        cache.check(dataset, out_dir / f"{det}.npz")
        cache.save(out_dir / f"{det}.npz")
        caches[det] = cache
    shards = [json.loads((d / "features_stats.json").read_text()) for d in dirs]
    stats = _merged_stats(shards, caches, dataset)
    if truth is not None:
        stats.update(_recall(caches, truth))
    write_text(out_dir / "features_stats.json", json.dumps(stats, indent=1, sort_keys=True) + "\n")
    return stats


def _recall(caches: dict[str, FeatureCache], truth: dict[int, np.ndarray]) -> dict[str, float]:
    out = {}
    for d, c in caches.items():
        tb = [truth[int(i)] for i in c.imgids]
        dets = [c.boxes[c.rows(n)][~c.is_full[c.rows(n)]] for n in range(len(c.imgids))]
        out[f"recall_iou50_{d}"] = recall_at_iou(dets, tb, 0.5)
    return out


def _merged_stats(shards: list[dict[str, Any]], caches: dict[str, FeatureCache], dataset: Dataset) -> dict[str, Any]:
    """One process's stats keys from the shards': counts summed, fragments recomputed, timings per image as
    the median of the shards' medians, ``wall_seconds`` the slowest shard's (they run side by side)."""
    add = lambda key: dict(sum((Counter(s[key]) for s in shards), Counter()))  # noqa: E731
    n = sum(s["images"] for s in shards)
    return {
        "images": n,
        "skipped": add("skipped"),
        "converted": add("converted"),
        "cnn": shards[0]["cnn"],
        "device": f"{shards[0]['device']} ({len(shards)} shards)",
        "proposals_per_image_median": float(np.median([s["proposals_per_image_median"] for s in shards])),
        "fragments_per_image_mean": {d: float(np.mean(np.diff(c.offsets))) for d, c in caches.items()},
        "seconds_per_image_median": {
            k: float(np.median([s["seconds_per_image_median"][k] for s in shards]))
            for k in shards[0]["seconds_per_image_median"]
        },
        "wall_seconds": max(s["wall_seconds"] for s in shards),
        "wall_seconds_per_image": sum(s["wall_seconds"] for s in shards) / max(n, 1),
        "peak_rss_mb": max(s["peak_rss_mb"] for s in shards),
        "peak_rss_workers_mb": max(s["peak_rss_workers_mb"] for s in shards),
        "shards": len(shards),
        **({"pictures_sha256": pictures_digest(dataset)} if all("pictures_sha256" in s for s in shards) else {}),
    }


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--truth", help="synthetic ground_truth.json: also write the groundtruth detector's cache")
    ap.add_argument("--voc", help="VOC annotation folder: the groundtruth detector from real boxes (an oracle)")
    ap.add_argument("--out-dir", help="default <dataset-dir>/features")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--limit", type=int, default=0, help="only the first N images (quick looks)")
    ap.add_argument("--regions", help="a fraglib.vision.regions cache of these images: no image is read, no CNN pass")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a vision parameter")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    ap.add_argument("--region-views", action="store_true", help="also top36.npz and grid.npz (Peri's attention model)")
    ap.add_argument(
        "--shard",
        metavar="i/N",
        help="only shard i of N (into <out-dir>/shards/iofN); under torchrun: RANK/WORLD_SIZE, then rank 0 merges",
    )
    ap.add_argument("--merge", type=int, metavar="N", help="join the N shards' caches into <out-dir>")
    args = ap.parse_args(argv)
    from fraglib.data.synthetic import synthetic_truth

    cfg = load_with_overrides(args.params, "vision", VisionConfig, args.set)
    try:
        ds = read_karpathy_json(Path(args.dataset_dir) / "dataset.json")
    except (FileNotFoundError, ValueError) as exc:
        ap.error(str(exc))
    if args.limit:
        ds = Dataset(
            ds.name,
            ds.image_dir,
            ds.images[: args.limit],
            [s for s in ds.sentences if s["imgid"] in {im["imgid"] for im in ds.images[: args.limit]}],
        )
    truth = synthetic_truth(args.truth) if args.truth else None
    if args.voc:
        from fraglib.data.voc import voc_truth

        truth = voc_truth(args.voc, ds.images)
    regions = None
    if args.regions:
        from fraglib.vision.regions import Regions

        regions = Regions.load(args.regions)
    out = Path(args.out_dir or Path(args.dataset_dir) / "features")
    try:  # a refusal (fraglib.core.outputs) comes before any work
        if args.merge:
            s = merge_shards(ds, out, args.merge, truth, args.overwrite)
        elif args.shard or int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from fraglib.core import distributed

            ctx = distributed.setup(torch.device("cpu")) if not args.shard else None
            i, n = (ctx.rank, ctx.world) if ctx else _parse_shard(args.shard)
            s = extract(
                shard_dataset(ds, i, n),
                cfg,
                shard_dir(out, i, n),
                truth,
                regions=regions,
                overwrite=args.overwrite,
                region_views=args.region_views,
            )
            if ctx is not None:
                ctx.barrier()
                if ctx.main:
                    s = merge_shards(ds, out, n, truth, args.overwrite)
                distributed.teardown(ctx)
        else:
            s = extract(ds, cfg, out, truth, regions=regions, overwrite=args.overwrite, region_views=args.region_views)
    except FileExistsError as exc:
        ap.error(str(exc))
    print(
        json.dumps(
            {
                k: v
                for k, v in s.items()
                if k in ("images", "skipped", "wall_seconds_per_image", "seconds_per_image_median")
                or k.startswith("recall")
            }
        )
    )


def _parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {text!r}: expected i/N, e.g. 0/4") from None
    if not 0 <= i < n:
        raise SystemExit(f"--shard {text!r}: expected 0 <= i < N")
    return i, n
