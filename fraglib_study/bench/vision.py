"""Benchmarks of the vision side: detection + region descriptors, and the detector's recall on Pascal1K."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from fraglib_study.bench.common import entry


def bench_features(n_images: int = 100) -> list[dict[str, Any]]:
    """Detection + 20 region descriptors per image, Pascal1K settings (image_size 512, proposals at
    300 px), on the first ``n_images`` Pascal1K images when ../shared/data is present (else the
    synthetic benchmark's), in a fresh process so the peak memory is its own."""
    import subprocess
    import sys

    pascal = Path(os.environ.get("FRAGLIB_PASCAL1K", "../shared/data/pascal1k"))
    with tempfile.TemporaryDirectory() as tmp:
        if (pascal / "sentences.json").exists():
            from fraglib.data import write_karpathy_json
            from fraglib.data.readers.pascal1k import read_pascal1k

            write_karpathy_json(
                read_pascal1k(pascal), Path(tmp) / "dataset.json", image_root=pascal.resolve() / "images"
            )
            ddir, corpus, sets = tmp, "pascal1k", ["--set", "image_size=512", "--set", "proposal_size=300"]
        else:
            ddir, corpus, sets = "data/synthetic", "synthetic", []
        subprocess.run(
            [
                sys.executable,
                "-m",
                "fraglib.vision",
                "features",
                "--dataset-dir",
                ddir,
                "--out-dir",
                f"{tmp}/f",
                "--limit",
                str(n_images),
                *sets,
            ],
            check=True,
            capture_output=True,
        )
        st = json.loads((Path(tmp) / "f" / "features_stats.json").read_text())
    med = st["seconds_per_image_median"]
    return [
        entry(
            "features_s_per_image",
            round(st["wall_seconds_per_image"], 3),
            "s/image",
            corpus=corpus,
            images=n_images,
            cnn=st["cnn"],
            device=st["device"],
            median_split_s={k: round(v, 4) for k, v in med.items()},
            note="wall time per image, proposals in a worker process overlapping the CNN; "
            "median_split_s: per-image medians of each part (they overlap, so they do not sum to the wall time)",
            images_per_s=round(1 / st["wall_seconds_per_image"], 2),
            paper_rcnn_s_per_image_k40=25,
        ),
        entry(
            "features_peak_mem_mb",
            round(st["peak_rss_mb"] + st["peak_rss_workers_mb"], 0),
            "MB",
            corpus=corpus,
            main_mb=round(st["peak_rss_mb"], 0),
            workers_mb=round(st["peak_rss_workers_mb"], 0),
        ),
    ]


def bench_feature_parts(n_images: int = 60, sizes: tuple[int, ...] = (160, 128)) -> list[dict[str, Any]]:
    """Where the features stage's CPU goes (issue #80, item 4), on the first ``n_images`` synthetic images: CPU seconds
    per image of selective search at ``vision.proposal_size`` and at the smaller ``sizes`` (a setting change: other
    proposals, so every number moves), and of the backbone pass at one and at two torch threads (the stage runs it
    on the cores its proposal workers leave, one on two cores; the bits differ between the two, see README
    "Reproducibility"). Medians over the images, after two passes of warm-up."""
    import statistics
    import time

    import torch
    import yaml

    from fraglib.data import read_karpathy_json
    from fraglib.vision.rcnn import Backbone, VisionConfig, load_image, resize_longer, selective_search

    cfg = VisionConfig(**yaml.safe_load(Path("params.yaml").read_text())["vision"])
    ds = read_karpathy_json("data/synthetic/dataset.json")
    arrs = [load_image(ds.image_path(n))[0] for n in range(min(n_images, len(ds.images)))]

    def per_image(fn, items) -> float:
        times = []
        for x in items:
            t = time.process_time()
            fn(x)
            times.append(time.process_time() - t)
        return round(statistics.median(times), 4)

    proposals = {}
    for size in (cfg.proposal_size, *sizes):
        counts: list[int] = []
        search = lambda a: counts.append(len(selective_search(a, size, cfg.min_box, cfg.max_proposals)))  # noqa: E731
        for a in arrs[:2]:
            search(a)  # warm-up
        proposals[size] = (per_image(search, arrs), statistics.median(counts[2:]))
    backbone = Backbone(cfg.cnn_variant).to(memory_format=torch.channels_last)
    xs = [Backbone.to_input(resize_longer(a, cfg.image_size)[0], torch.device("cpu")) for a in arrs]
    threads, cnn = torch.get_num_threads(), {}
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            for x in xs[:2]:
                backbone.feature_map(x)
            cnn[n] = per_image(backbone.feature_map, xs)  # CPU seconds: over both threads at 2
    finally:
        torch.set_num_threads(threads)
    base = proposals[cfg.proposal_size][0]
    return [
        entry(
            "features_cpu_parts",
            round(base + cnn[1], 4),
            "CPU s/image",
            corpus="synthetic",
            images=len(arrs),
            proposals_cpu_s={str(k): v[0] for k, v in proposals.items()},
            proposals_per_image={str(k): v[1] for k, v in proposals.items()},
            proposals_share=round(base / (base + cnn[1]), 3),
            backbone_cpu_s_1_thread=cnn[1],
            backbone_cpu_s_2_threads=cnn[2],
            proposal_size=cfg.proposal_size,
            image_size=cfg.image_size,
            note="value: selective search at vision.proposal_size + the backbone at one thread, CPU seconds per "
            "image (medians); proposals_cpu_s at smaller proposal sizes: a setting change, every number would move",
        )
    ]


def bench_rcnn_recall() -> list[dict[str, Any]]:
    """Recall at IoU >= 0.5 of the cached Pascal1K `rcnn` top-19 boxes against the non-difficult VOC
    objects: on the images that are a test image of some study split (never seen by the learned
    objectness), and overall. Needs the Pascal1K study's features and splits."""
    import yaml

    from fraglib.data import read_karpathy_json
    from fraglib.data.cache import FeatureCache
    from fraglib.data.voc import voc_truth
    from fraglib.vision.rcnn import recall_at_iou

    params = yaml.safe_load(Path("params.yaml").read_text())["pascal1k"]
    ds = read_karpathy_json("data/pascal1k/dataset.json")
    cache = FeatureCache.load("data/pascal1k/features/rcnn.npz", ds)
    truth = voc_truth(Path(params["root"]) / "annotations", ds.images)
    held = set()
    for s in params["splits"]:
        held |= {
            im["filename"]
            for im in read_karpathy_json(f"data/pascal1k/split{s}/dataset.json").images
            if im["split"] == "test"
        }
    det = lambda n: cache.boxes[cache.rows(n)][~cache.is_full[cache.rows(n)]]
    sel = [n for n, im in enumerate(ds.images) if im["filename"] in held]
    r_held = recall_at_iou([det(n) for n in sel], [truth[int(ds.images[n]["imgid"])] for n in sel])
    r_all = recall_at_iou([det(n) for n in range(len(ds.images))], [truth[int(im["imgid"])] for im in ds.images])
    # the study's own per-image cost of detection: the regions stage (proposals + CNN) + features
    import numpy as np

    regions = json.loads(str(np.load("data/pascal1k/regions.npz")["meta"]))
    feats = json.loads(Path("data/pascal1k/features/features_stats.json").read_text())
    cost = regions["wall_seconds_per_image"] + feats["wall_seconds_per_image"]
    return [
        entry(
            "rcnn_recall_at_19",
            round(100 * r_held, 1),
            "percent",
            overall_percent=round(100 * r_all, 1),
            held_out_images=len(sel),
            score=cache.meta["settings"]["score"],
            nms_iou=cache.meta["settings"]["nms_iou"],
            study_s_per_image=round(cost, 3),
            study_s_per_image_split={
                "regions (proposals + CNN)": round(regions["wall_seconds_per_image"], 3),
                "features (scores, NMS, descriptors)": round(feats["wall_seconds_per_image"], 3),
            },
            note="IoU >= 0.5, non-difficult VOC objects; value = images never used to train the objectness; "
            "study_s_per_image: wall time per image of the Pascal1K regions + features stages",
        )
    ]
