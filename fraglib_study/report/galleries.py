"""The pictures of the results pages from their figure data (:mod:`fraglib_study.report.figure_data`, the only
source): retrieval galleries, the thumbnails and queries, the triplet crops."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np


def top_sentences(scores: np.ndarray, sentence_image: np.ndarray, image: int, k: int = 5) -> list[tuple[int, bool]]:
    """The ``k`` best-scoring sentences (positions) of test image ``image``, each with whether it is
    one of the image's own."""
    order = np.argsort(-scores[image], kind="stable")[:k]
    return [(int(j), bool(sentence_image[j] == image)) for j in order]


def gallery_panels(
    rec: dict[str, Any],
    picture,
    sentence_image: np.ndarray,
    S: np.ndarray | None = None,
    n_good: int = 2,
    n_bad: int = 2,
    k: int = 3,
) -> list[dict[str, Any]]:
    """Panels in the layout of Peri's figures from a captions record (``captions/seed<seed>.json``): a test image
    (``picture(i)`` -> (array, title)), its generated caption, two paraphrases (of its first two captions), with
    the scores ``S`` (n_images, n_sentences) the top-``k`` retrieved captions (✓ = its own), and the ground truth.
    Chosen by rule: the ``n_good`` images with the highest and the ``n_bad`` with the lowest CIDEr-D of their
    caption (ties: lower index). ``sentence_image``: each test sentence's image position."""
    scored = sorted((c for c in rec["captioning"] if c["cider"] is not None), key=lambda c: (-c["cider"], c["image"]))
    pick = [(c, "good") for c in scored[:n_good]] + [
        (c, "bad") for c in scored[::-1][:n_bad] if c not in scored[:n_good]
    ]
    sentence_image = np.asarray(sentence_image)
    para = {}
    for p in rec["paraphrasing"]:
        para.setdefault(int(sentence_image[p["sentence"]]), []).append(p)
    panels = []
    for c, kind in pick:
        i = c["image"]
        lines = [f"caption: {c['caption']}  (CIDEr-D {100 * c['cider']:.0f}, {kind})"]
        lines += [f"paraphrase: {p['input']} → {p['paraphrase']}" for p in para.get(i, [])[:2]]
        if S is not None:
            lines += [
                f"{'✓' if ok else '✗'} retrieved {r + 1}: {rec['paraphrasing'][j]['input']}"
                for r, (j, ok) in enumerate(top_sentences(S, sentence_image, i, k))
            ]
        lines += [f"truth: {t}" for t in c["references"]]
        image, title = picture(i)
        panels.append({"image": image, "title": title, "lines": lines})
    return panels


def read_explorer(explorer_dir: str | Path) -> dict[str, Any]:
    """The explorer's data of a study (``explorer.json``, :mod:`fraglib_study.experiments.explore`) with each test image's
    ``picture``: its thumbnail as an array. Raises FileNotFoundError naming a missing file."""
    from PIL import Image

    folder = Path(explorer_dir)
    data = json.loads((folder / "explorer.json").read_text(encoding="utf-8"))
    for im in data["images"]:
        im["picture"] = np.asarray(Image.open(folder / im["thumb"]).convert("RGB"))
    return data


def explorer_title(im: dict[str, Any]) -> str:
    """A thumbnail's title on a figure: the image id and its category."""
    return f"test image {im['id']}" + (f" ({im['category']})" if im.get("category") else "")


def explorer_gallery(run_dir: str | Path, seed: int, explorer: dict[str, Any], **kw) -> list[dict[str, Any]]:
    """:func:`gallery_panels` of a captioning run's split ``seed`` from committed files alone: its captions
    record and the explorer's thumbnails of that split (:func:`read_explorer`); no retrieved captions (they
    need the run's checkpoint), among the images the explorer shows. Raises ValueError when it shows another split."""
    from fraglib_study.experiments.caption_record import read_record

    if explorer["seed"] != seed:
        raise ValueError(f"the explorer shows split {explorer['seed']}, the gallery split {seed}")
    rec = read_record(Path(run_dir) / "captions" / f"seed{seed}.json")
    images = explorer["images"]
    sentence_image = np.array([s["image"] for s in explorer["sentences"]])
    # the figure data hold the split's first gallery (the synthetic test split's galleries are consecutive,
    # fraglib.data.synthetic): its images and sentences are the split's first positions; the gallery picks among them
    rec = {
        **rec,
        "captioning": [c for c in rec["captioning"] if c["image"] < len(images)],
        "paraphrasing": [p for p in rec["paraphrasing"] if p["sentence"] < len(sentence_image)],
    }
    return gallery_panels(rec, lambda i: (images[i]["picture"], explorer_title(images[i])), sentence_image, **kw)


def explorer_panels(
    explorer_dir: str | Path, explorer: dict[str, Any], run: str, n: int, seed: int, k: int = 5, top: int = 6
) -> list[dict[str, Any]]:
    """The paper's Figure 4 from committed files alone: for ``n`` test images drawn with ``seed`` (the draw of
    tests/figure_reference.py's checkpoint figure), ``run``'s top-``k`` sentences from the explorer's lists (✓ = the image's own) and,
    for the top one, the best box of each of its fragments (at most ``top``) with its score, from
    ``alignments_<run>.json``, on the thumbnail. Raises ValueError for a run the explorer does not hold."""
    images, sentences = explorer["images"], explorer["sentences"]
    if run not in explorer["runs"]:
        raise ValueError(f"run {run} is not in the explorer's data ({', '.join(explorer['runs'])})")
    align = None
    if run in explorer["aligned"]:
        align = json.loads((Path(explorer_dir) / f"alignments_{run}.json").read_text(encoding="utf-8"))
    pick = sorted(np.random.default_rng(seed).choice(len(images), size=min(n, len(images)), replace=False).tolist())
    panels = []
    for img in pick:
        im = images[img]
        top_k = explorer["runs"][run]["image_top"][img][:k]
        p = {
            "image": im["picture"],
            "title": explorer_title(im),
            "lines": [
                f"{'✓' if sentences[j]['image'] == img else '✗'} {r + 1}. {sentences[j]['text']}"
                for r, j in enumerate(top_k)
            ],
        }
        if align is not None and top_k:
            j = top_k[0]
            pair = align["pairs"][f"{img},{j}"]
            scale = im["picture"].shape[1] / im["w"]
            boxes = align["boxes"][img]
            p["boxes"] = [np.array(boxes[b]) * scale for b in pair[0::2]][:top]
            p["labels"] = [f"{f} {s / 10:.1f}" for f, s in zip(align["fragments"][str(j)], pair[1::2])][:top]
        panels.append(p)
    return panels


def read_triplets(folder: str | Path) -> tuple[dict[str, Any], list[tuple[str, list[tuple[np.ndarray, str]] | str]]]:
    """(``triplets.json``, [(title, [(crop, score label)]) or (title, reason)]) of a folder written by
    ``python -m fraglib_study figures``: the shape of a live triplet search (tests/figure_reference.py), from committed files
    alone. Raises FileNotFoundError naming a missing file."""
    from PIL import Image

    folder = Path(folder)
    record = json.loads((folder / "triplets.json").read_text(encoding="utf-8"))
    out = []
    for e in record["queries"]:
        if "reason" in e:
            out.append((e["query"], e["reason"]))
            continue
        crops = [(np.asarray(Image.open(folder / h["crop"]).convert("RGB")), f"{h['score']:.2f}") for h in e["hits"]]
        out.append((e["query"], crops))
    return record, out
