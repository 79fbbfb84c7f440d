"""Detection recall of the image fragments, for the vision report (docs/method.md, image fragments).

Recall = share of true objects covered by at least one kept detection at IoU ≥ 0.5
(:func:`fraglib.vision.rcnn.recall_at_iou`); detections are a cache's rows that are not the
full frame, in score order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.vision.rcnn import box_iou, recall_at_iou


def detections(cache, n: int) -> np.ndarray:
    """(k, 4) boxes of image ``n`` of a feature cache, without its full-frame row."""
    r = cache.rows(n)
    return cache.boxes[r][~cache.is_full[r]]


def recall_curve(
    caches: dict[str, Any], images: list[dict[str, Any]], truth: dict[int, np.ndarray], ks: range = range(1, 20)
) -> pd.DataFrame:
    """Recall of the top-k detections for every k and detector: columns detector, k, recall."""
    tb = [truth[int(im["imgid"])] for im in images]
    rows = []
    for d, c in caches.items():
        det = [detections(c, n) for n in range(len(images))]
        rows += [{"detector": d, "k": k, "recall": recall_at_iou([x[:k] for x in det], tb, 0.5)} for k in ks]
    return pd.DataFrame(rows)


def voc_per_class(cache, images: list[dict[str, Any]], voc_dir: str | Path) -> pd.DataFrame:
    """Recall of all kept detections per VOC class (non-difficult objects): recall@19, objects."""
    from fraglib.data.voc import read_voc

    rows = []
    for n, im in enumerate(images):
        det = detections(cache, n)
        for o in read_voc(Path(voc_dir) / (Path(im["filename"]).stem + ".xml")):
            if not o["difficult"]:
                rows.append(
                    {"class": o["name"], "hit": bool(len(det)) and box_iou(np.array([o["box"]]), det).max() >= 0.5}
                )
    return (
        pd.DataFrame(rows)
        .groupby("class")["hit"]
        .agg(["mean", "size"])
        .rename(columns={"mean": "recall@19", "size": "objects"})
        .sort_values("recall@19")
    )


def heldout_rows(images: list[dict[str, Any]], heldout_dirs: str) -> tuple[list[int], list[int]]:
    """(rows of images that are a test image of some study split in ``heldout_dirs`` (comma-separated
    dataset folders), the other rows)."""
    from fraglib.data import read_karpathy_json

    held = set()
    for d in [x for x in heldout_dirs.split(",") if x]:
        held |= {im["filename"] for im in read_karpathy_json(Path(d) / "dataset.json").images if im["split"] == "test"}
    return (
        [n for n, im in enumerate(images) if im["filename"] in held],
        [n for n, im in enumerate(images) if im["filename"] not in held],
    )


def floor_and_ceiling(
    dataset,
    cache,
    truth: dict[int, np.ndarray],
    settings: dict[str, Any],
    regions_file: str = "",
    n_sample: int = 150,
    heldout_dirs: str = "",
) -> tuple[pd.Series, np.ndarray]:
    """Recall of our top 19 (all images; held-out and objectness-training images apart when
    ``heldout_dirs``), against the floor (first 19 proposals in selective-search order) and the
    ceiling (all proposals), on every image with a regions cache or on a seeded sample without
    one. Returns (the recalls, the image rows used)."""
    from fraglib.vision.rcnn import load_image, selective_search

    images = dataset.images
    tb_of = lambda ns: [truth[int(images[n]["imgid"])] for n in ns]  # noqa: E731
    if regions_file:
        from fraglib.vision.regions import Regions

        reg = Regions.load(regions_file)
        sample, where = np.arange(len(images)), reg.positions(dataset)
        props = [reg.item(where[n]).get("proposals", np.zeros((0, 4), np.float32)) for n in sample]
    else:
        sample = np.random.default_rng(0).choice(len(images), size=min(n_sample, len(images)), replace=False)
        props = [
            selective_search(
                load_image(dataset.image_path(n))[0],
                settings["proposal_size"],
                settings["min_box"],
                settings["max_proposals"],
            )
            for n in sample
        ]
    top = lambda ns: recall_at_iou([detections(cache, n) for n in ns], tb_of(ns))  # noqa: E731
    out = {}
    held, seen = heldout_rows(images, heldout_dirs)
    if held:
        out[f"rcnn top-19, held out: the {len(held)} images that are a test image of some study split"] = top(held)
        out[f"rcnn top-19, the {len(seen)} images the learned objectness was trained on"] = top(seen)
    out["rcnn top-19 (all images)"] = top(range(len(images)))
    out[f"rcnn top-19 ({len(sample)}-image sample)"] = top(sample)
    out[f"floor: first 19 proposals, selective-search order ({len(sample)} images)"] = recall_at_iou(
        [p[:19] for p in props], tb_of(sample)
    )
    out[f"ceiling: all {settings['max_proposals']} proposals ({len(sample)} images)"] = recall_at_iou(
        props, tb_of(sample)
    )
    return pd.Series(out, name="recall at IoU ≥ 0.5 (non-difficult VOC objects)"), sample


def recall_by_size(caches: dict[str, Any], truth_file: str | Path) -> pd.DataFrame:
    """Synthetic benchmark: recall of all kept detections per object size class and detector."""
    rows = []
    for d, c in caches.items():
        for n, rec in enumerate(json.loads(Path(truth_file).read_text())["images"]):
            det = detections(c, n)
            for o in rec["objects"]:
                rows.append(
                    {
                        "detector": d,
                        "size": o["size"],
                        "hit": bool(len(det)) and bool(box_iou(np.array([o["box"]]), det).max() >= 0.5),
                    }
                )
    return pd.DataFrame(rows).pivot_table(index="size", columns="detector", values="hit")
