"""Figures drawn straight from a trained run's checkpoint and its data: the tests' reference for what the committed
figure data draw (fraglib_study.report.figure_data writes them, fraglib_study.report.galleries reads them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fraglib.data import read_karpathy_json
from fraglib.run.evaluate import load_trained, score_matrix
from fraglib.run.inputs import DataPaths
from fraglib.vision.rcnn import load_image
from fraglib_study.experiments.caption_record import read_record
from fraglib_study.report.galleries import gallery_panels, top_sentences


def retrieval_panels(
    seed_dir: str | Path, dataset_dir: str | Path, features_dir: str | Path | None, n: int, seed: int, k: int = 5
) -> list[dict[str, Any]]:
    """For ``n`` test images drawn with ``seed``: the top-``k`` sentences of any trained run, and
    for a fragment-system run with boxes the best box of each fragment of the top sentence."""

    system, ck, split = load_trained(seed_dir, DataPaths(dataset_dir, features_dir))
    S = score_matrix(system, split).numpy()
    view = None
    if ck["system"] == "fragment" and system.cfg.images != "fullframe":
        from fraglib_study.experiments.alignment import FragmentView, fragment_boxes, glove_words

        view, vocab = FragmentView(system, DataPaths(dataset_dir, features_dir)), glove_words()

    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    test_rows = [r for r, im in enumerate(ds.images) if im["split"] == "test"]
    raw = {s["sentid"]: s["raw"] for s in ds.sentences}
    pick = sorted(
        np.random.default_rng(seed).choice(split.n_images, size=min(n, split.n_images), replace=False).tolist()
    )
    panels = []
    for img in pick:
        top = top_sentences(S, split.sentence_image, img, k)
        p = {
            "image": load_image(ds.image_path(test_rows[img]))[0],
            "title": ds.images[test_rows[img]]["filename"],
            "lines": [f"{'✓' if ok else '✗'} {r + 1}. {raw[int(split.sentids[j])]}" for r, (j, ok) in enumerate(top)],
        }
        if view is not None and top:
            p["boxes"], p["labels"] = fragment_boxes(view, img, int(split.sentids[top[0][0]]), vocab)
        panels.append(p)
    return panels


def caption_gallery(
    run_dir: str | Path,
    seed: int,
    dataset_dir: str | Path,
    features_dir: str | Path | None = None,
    n_good: int = 2,
    n_bad: int = 2,
    k: int = 3,
) -> list[dict[str, Any]]:
    """Panels (:func:`fraglib_study.report.plots.retrieval_figure`) in the layout of Peri's figures from the run's checkpoint
    and the data (:func:`gallery_panels`, with the top-``k`` retrieved captions)."""

    rec = read_record(Path(run_dir) / "captions" / f"seed{seed}.json")
    system, ck, split = load_trained(Path(run_dir) / "seeds" / f"seed{seed}", DataPaths(dataset_dir, features_dir))
    S = score_matrix(system, split).numpy()
    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    rows = [r for r, im in enumerate(ds.images) if im["split"] == rec["split"]]

    def picture(i: int) -> tuple[np.ndarray, str]:
        return load_image(ds.image_path(rows[i]))[0], ds.images[rows[i]]["filename"]

    return gallery_panels(rec, picture, split.sentence_image, S, n_good, n_bad, k)


def triplet_crops(
    seed_dir: str | Path, dataset_dir: str | Path, features_dir: str | Path | None, queries: str, top: int = 6
) -> list[tuple[str, list[tuple[np.ndarray, str]] | str]]:
    """For each query ``"rel w1 w2"`` of ``queries`` (";"-separated): (title, [(crop, score label)])
    from :func:`triplet_search`, or (title, reason) when the run cannot express it."""
    from fraglib_study.experiments.alignment import FragmentView, glove_words, triplet_search

    paths = DataPaths(dataset_dir, features_dir)
    system, _, _ = load_trained(seed_dir, paths)
    view = FragmentView(system, paths)
    index = {w: i for i, w in enumerate(glove_words())}
    out = []
    for q in [t.split() for t in queries.split(";") if t.strip()]:
        if len(q) != 3:
            out.append((" ".join(q), "expected 'relation word1 word2'"))
            continue
        hits = triplet_search(view, *q, index, top)
        if isinstance(hits, str):
            out.append((f"{q[0]}({q[1]}, {q[2]})", hits))
            continue
        crops = []
        for k, box, score in hits:
            img = load_image(view.dataset.image_path(view.image_rows[k]))[0]
            x0, y0, x1, y1 = np.round(box).astype(int)
            crops.append((img[max(0, y0) : max(y0 + 1, y1), max(0, x0) : max(x0 + 1, x1)], f"{score:.2f}"))
        out.append((f"{q[0]}({q[1]}, {q[2]})", crops))
    return out
