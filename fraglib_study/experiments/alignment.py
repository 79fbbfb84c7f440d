"""Analyses of the fragment system only (docs/method.md): which box each sentence fragment picks.

* :func:`alignment_accuracy` — on the synthetic benchmark, how often a mention's fragments
  (triplets headed by its noun) score highest on a box overlapping the mentioned object;
* :func:`fragment_boxes` — the best box of each fragment of one caption (the paper's Figure 4; :func:`align`);
* :func:`triplet_search` — image regions that score highest for a hand-written triplet (Figure 5).

Every function takes a trained ``FragmentSystem`` (see :func:`fraglib.run.evaluate.load_trained`) and
reads the fragment and feature files of its own views. Word ids go through
:func:`fraglib.run.inputs.compact_words`, the same mapping the system was trained with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.run.inputs import DataPaths, compact_words, image_cache


def glove_words() -> list[str]:
    """GloVe row -> word."""
    from fraglib.text.vectors import load_glove

    index, table = load_glove()
    words = [""] * table.shape[0]
    for w, i in index.items():
        words[i] = w
    return words


class FragmentView:
    """The test split of a fragment run as files: ``images`` (dataset rows), ``cache`` (their
    features and boxes), ``dataset``, ``frags`` (all captions' fragments) and the compact word ids."""

    def __init__(self, system, paths: DataPaths) -> None:
        from fraglib.data import read_karpathy_json
        from fraglib.text.fragments import Fragments

        views = system.views(system.cfg)
        files = paths.files(views)
        self.system = system
        self.dataset = read_karpathy_json(files["dataset"])
        self.frags = Fragments.load(files["sentences"])
        cache = image_cache(files, self.dataset, views)
        rows = [n for n, im in enumerate(self.dataset.images) if im["split"] == "test"]
        self.image_rows = rows
        self.images = [self.dataset.images[n] for n in rows]
        self.cache = cache.subset(rows)
        self.used, self.w1, self.w2 = compact_words(self.frags.w1, self.frags.w2)
        self.sentence_index = {s["sentid"]: j for j, s in enumerate(self.dataset.sentences)}

    @torch.no_grad()
    def image_fragments(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(embeddings (R, h), boxes (R, 4)) of test image ``k``."""
        r = self.cache.rows(k)
        return self.system.embed_images(torch.from_numpy(self.cache.features[r])).numpy(), self.cache.boxes[r]

    @torch.no_grad()
    def sentence_fragments(self, sentid: int) -> tuple[np.ndarray, list[tuple[str, int, int]]]:
        """(embeddings (F, h), [(relation, GloVe w1, GloVe w2)]) of one caption."""
        j = self.sentence_index[sentid]
        a, b = int(self.frags.offsets[j]), int(self.frags.offsets[j + 1])
        t = lambda x: torch.from_numpy(np.asarray(x, np.int64))  # noqa: E731
        emb = self.system.embed_sentences(t(self.frags.rel[a:b]), t(self.w1[a:b]), t(self.w2[a:b])).numpy()
        return emb, [
            (self.frags.relations[x], int(u), int(v))
            for x, u, v in zip(self.frags.rel[a:b], self.frags.w1[a:b], self.frags.w2[a:b])
        ]


def align(V: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best (F,) int, score (F,)): for each sentence fragment of ``S`` (F, h) the image fragment of ``V`` (R, h)
    it scores highest with, and that inner product; empty when either side has no fragment."""
    if not len(V) or not len(S):
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    M = V @ S.T
    best = M.argmax(axis=0)
    return best, M[best, np.arange(M.shape[1])]


def fragment_boxes(view: FragmentView, k: int, sentid: int, vocab: list[str], top: int = 6):
    """(boxes, labels) — for each fragment of caption ``sentid`` (at most ``top``), the box of test
    image ``k`` it scores highest with, labelled ``rel(w1, w2) score``."""
    V, boxes = view.image_fragments(k)
    S, words = view.sentence_fragments(sentid)
    best, score = align(V, S)
    return (
        [boxes[b] for b in best][:top],
        [f"{r}({vocab[u]}, {vocab[v]}) {s:.2f}" for (r, u, v), s in zip(words, score)][:top],
    )


def triplet_search(view: FragmentView, relation: str, w1: str, w2: str, vocab_index: dict[str, int], top: int = 6):
    """[(test image position, box, score)] of the ``top`` detections (not full frames) that score
    highest for the triplet, or a string saying why the system cannot express it."""
    frags = view.frags
    if relation not in frags.relations:
        return f"{relation}({w1}, {w2}): relation not in this run's inventory ({view.system.cfg.sentences} fragments)"
    ids = [vocab_index.get(w) for w in (w1, w2)]
    if any(i is None or i not in set(view.used.tolist()) for i in ids):
        return f"{relation}({w1}, {w2}): a word outside this run's word table"
    t = lambda x: torch.tensor([x])  # noqa: E731
    with torch.no_grad():
        s = view.system.embed_sentences(
            t(frags.relations.index(relation)),
            t(int(np.searchsorted(view.used, ids[0]))),
            t(int(np.searchsorted(view.used, ids[1]))),
        ).numpy()[0]
        V = view.system.embed_images(torch.from_numpy(view.cache.features)).numpy()
    sc = V @ s
    sc[view.cache.is_full] = -np.inf
    owner = np.repeat(np.arange(len(view.images)), np.diff(view.cache.offsets))
    return [(int(owner[i]), view.cache.boxes[i], float(sc[i])) for i in np.argsort(-sc)[:top]]


def mention_triplets(
    frag_words: list[tuple[str, str, str]], obj: dict[str, Any], caption_shapes: list[str]
) -> list[int]:
    """Indices of the caption's fragments that belong to one noun-phrase mention: those whose
    head word is the mention's shape noun (e.g. ``amod(circle, red)``, ``det(circle, a)``).
    Empty when the caption names that shape twice (ambiguous without token positions)."""
    shape = obj["shape"]
    if caption_shapes.count(shape) != 1:
        return []
    return [i for i, (_, h, _) in enumerate(frag_words) if h == shape]


def alignment_accuracy(seed_dir: str | Path, dataset_dir: str | Path, truth_file: str | Path) -> dict[str, float]:
    """How often a mention's fragments score highest on a box that overlaps the mentioned object
    (IoU >= 0.5), over the test split; with the chance level (a uniformly random image fragment)
    and the number of fragments counted. NaN for runs without boxes (full frame) — the caller
    passes only fragment-system runs."""
    from fraglib.run.evaluate import load_trained
    from fraglib.vision.rcnn import box_iou

    paths = DataPaths(dataset_dir)
    system, _, _ = load_trained(seed_dir, paths)
    nan = {"accuracy": float("nan"), "chance": float("nan"), "fragments": 0}
    if system.cfg.images == "fullframe":
        return nan
    view = FragmentView(system, paths)
    truth = {r["imgid"]: r for r in json.loads(Path(truth_file).read_text())["images"]}
    vocab = glove_words()
    hits, chance, n = 0, 0.0, 0
    for k, im in enumerate(view.images):
        V, boxes = view.image_fragments(k)
        if not len(V):
            continue
        rec = truth[im["imgid"]]
        for cap in rec["captions"]:
            S, words = view.sentence_fragments(cap["sentid"])
            named = [(r, vocab[u], vocab[v]) for r, u, v in words]
            shapes = [rec["objects"][m["object"]]["shape"] for m in cap["mentions"]]
            used: dict[int, dict[str, Any]] = {}
            for m in cap["mentions"]:
                obj = rec["objects"][m["object"]]
                for f in mention_triplets(named, obj, shapes):
                    used[f] = obj
            if not used:
                continue
            idx = np.array(sorted(used))
            best = (V @ S[idx].T).argmax(axis=0)
            for j, f in enumerate(idx):
                iou = box_iou(np.array([used[f]["box"]]), boxes)[0]
                hits += bool(iou[best[j]] >= 0.5)
                chance += float((iou >= 0.5).mean())
                n += 1
    return {"accuracy": hits / n if n else float("nan"), "chance": chance / n if n else float("nan"), "fragments": n}
