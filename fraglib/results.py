"""Reading an ablation study back: tables with uncertainty, paired differences, alignment accuracy.

Uncertainty has two sources and both are shown: seed-to-seed spread (mean ± sd over seeds) and
test-query sampling (95% percentile bootstrap over the test queries; each resample draws the same
queries for every seed and averages the metric over seeds). Paired differences between two
variants resample the same queries for both, seed s of one paired with seed s of the other.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.evaluate import KS

DIRECTIONS = ("annotation", "search")
LABELS = {
    "full": "Our model: full (fragment MIL + global)", "fragment_only": "Our model: fragment objective only",
    "global_only": "Our model: global objective only", "no_mil": "Our model: fragment + global, no MIL",
    "fullframe": "Our model: images full frame only", "bow": "Our model: sentences BOW",
    "bigram": "Our model: sentences bigrams", "devise": "DeViSE (our implementation)", "random": "Random ranking",
    "oracle_boxes": "Our model: degraded true boxes (oracle)",
}
PAPER_ROWS = {"random": "random", "devise": "devise", "fragment_only": "fragment_only", "global_only": "global_only",
              "no_mil": "fragment_global", "fullframe": "fullframe_only", "bow": "bow", "bigram": "bigrams",
              "full": "full_model"}


def load_variant(run_dir: str | Path) -> dict[str, Any]:
    """Summary and per-seed per-query ranks (arrays, seeds x queries) of one variant."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "metrics.json").read_text())
    ranks = {d: [] for d in DIRECTIONS}
    for s in summary["seeds"]:
        r = json.loads((run_dir / "seeds" / f"seed{s}" / "ranks.json").read_text())
        for d in DIRECTIONS:
            ranks[d].append(np.asarray(r[d]))
    summary["ranks"] = {d: np.stack(v) for d, v in ranks.items()}
    return summary


def _metric(r: np.ndarray, name: str) -> np.ndarray:
    """Metric over the last axis of a (..., queries) rank array."""
    if name.startswith("r"):
        return 100.0 * (r <= int(name[1:])).mean(axis=-1)
    return np.median(r, axis=-1) if name == "median_rank" else r.mean(axis=-1)


def bootstrap_seed_mean(ranks: np.ndarray, name: str, n_boot: int = 1000, seed: int = 0) -> tuple[float, float]:
    """95% CI of the seed-averaged metric, resampling test queries (same draw for every seed)."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, ranks.shape[1], size=(n_boot, ranks.shape[1]))
    vals = _metric(ranks[:, idx], name).mean(axis=0)          # (n_boot,)
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def paired_difference(a: np.ndarray, b: np.ndarray, name: str, n_boot: int = 1000, seed: int = 0) -> dict[str, float]:
    """Mean over seeds of metric(a) - metric(b) with a 95% paired-bootstrap CI over queries."""
    if a.shape != b.shape:
        raise ValueError(f"paired difference needs the same seeds and queries: {a.shape} vs {b.shape}")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.shape[1], size=(n_boot, a.shape[1]))
    d = (_metric(a[:, idx], name) - _metric(b[:, idx], name)).mean(axis=0)
    point = float((_metric(a, name) - _metric(b, name)).mean())
    lo, hi = float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))
    return {"diff": point, "lo": lo, "hi": hi, "excludes_zero": bool(lo > 0 or hi < 0)}


def results_table(study: dict[str, dict[str, Any]], rank: str = "median_rank", n_boot: int = 1000) -> pd.DataFrame:
    """Rows = variants; columns = (direction, metric) as 'mean ± sd [lo, hi]' strings."""
    rows = {}
    for v, s in study.items():
        row = {}
        for d in DIRECTIONS:
            for m in [f"r{k}" for k in KS] + [rank]:
                lo, hi = bootstrap_seed_mean(s["ranks"][d], m, n_boot)
                row[(d, m.replace("_rank", " r").replace("r1", "R@1").replace("r5", "R@5").replace("r10", "R@10"))] = \
                    f"{s[d][m]:.1f} ± {s[d + '_sd'][m]:.1f} [{lo:.1f}, {hi:.1f}]"
        rows[LABELS.get(v, v)] = row
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df


def published_table(dataset: str = "flickr8k") -> pd.DataFrame:
    """The paper's rows for ``dataset`` (Karpathy et al. 2014), same layout, numbers as printed."""
    from fraglib.reference import published

    t = published()["karpathy2014_defrag"][dataset]
    rank = "med r" if t["rank"] == "median" else "mean r"
    rows = {}
    for name, r in t["rows"].items():
        rows[f"paper: {name}"] = {(d, m): r[d][k] for d in DIRECTIONS
                                  for m, k in (("R@1", "r1"), ("R@5", "r5"), ("R@10", "r10"), (rank, "rank"))}
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df


def differences_from(study: dict[str, dict[str, Any]], base: str = "full", n_boot: int = 1000) -> pd.DataFrame:
    """Paired-bootstrap difference (variant - base) of R@1/5/10 both ways, with CIs."""
    rows = []
    for v, s in study.items():
        if v == base:
            continue
        for d in DIRECTIONS:
            for m in [f"r{k}" for k in KS]:
                r = paired_difference(s["ranks"][d], study[base]["ranks"][d], m, n_boot)
                rows.append({"variant": LABELS.get(v, v), "direction": d, "metric": m.replace("r", "R@"), **r})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- alignment vs ground truth
def mention_triplets(frag_words: list[tuple[str, str, str]], obj: dict[str, Any], caption_shapes: list[str]) -> list[int]:
    """Indices of the caption's fragments that belong to one noun-phrase mention: those whose
    head word is the mention's shape noun (e.g. ``amod(circle, red)``, ``det(circle, a)``).
    Empty when the caption names that shape twice (ambiguous without token positions)."""
    shape = obj["shape"]
    if caption_shapes.count(shape) != 1:
        return []
    return [i for i, (_, h, _) in enumerate(frag_words) if h == shape]


def load_model(seed_dir: str | Path, dataset_dir: str | Path, features_dir: str | Path | None = None):
    """(model, config, splits) rebuilt from a run's ``best.pt`` alone (its configuration is inside)."""
    import torch

    from fraglib.model import FragmentModel
    from fraglib.train import TrainConfig, load_data

    ck = torch.load(Path(seed_dir) / "best.pt", map_location="cpu", weights_only=False)
    cfg = TrainConfig(**ck["config"])
    splits, words, n_rel, _ = load_data(dataset_dir, cfg, torch.device("cpu"), features_dir)
    tr = splits["train"]
    model = FragmentModel(words, n_rel, tr.img_x.mean(0), tr.img_x.std(0), cfg.embed_dim, cfg.devise)
    model.load_state_dict(ck["model"])
    model.eval()
    return model, cfg, splits


def glove_words() -> list[str]:
    """GloVe row -> word."""
    from fraglib.vectors import load_glove

    index, table = load_glove()
    words = [""] * table.shape[0]
    for w, i in index.items():
        words[i] = w
    return words


def test_fragments(dataset_dir: str | Path, cfg, features_dir: str | Path | None = None) -> tuple[list[dict[str, Any]], Any, Any]:
    """Test images (dataset rows), their feature cache and the test sentences' fragments as words."""
    from fraglib.data import read_karpathy_json
    from fraglib.features import FeatureCache
    from fraglib.fragments import Fragments

    d = Path(dataset_dir)
    ds = read_karpathy_json(d / "dataset.json")
    frags = Fragments.load(d / "fragments" / f"{'bow' if cfg.devise else cfg.fragment_mode}.npz")
    det = "rcnn" if cfg.detector == "fullframe" else cfg.detector
    cache = FeatureCache.load(Path(features_dir or d / "features") / f"{det}.npz", ds)
    if cfg.detector == "fullframe":
        cache = cache.fullframe()
    rows = [n for n, im in enumerate(ds.images) if im["split"] == "test"]
    return [ds.images[n] for n in rows], cache.subset(rows), (ds, frags)


def embed_glove_fragments(model, frags, rows: np.ndarray):
    """Sentence-fragment embeddings of rows ``rows`` of a Fragments file (GloVe word ids are mapped
    to the model's compact word table, which holds the fragment file's words in sorted order)."""
    import torch

    used = np.unique(np.concatenate([frags.w1, frags.w2]))
    w1 = np.searchsorted(used, frags.w1[rows])
    w2 = np.searchsorted(used, frags.w2[rows])
    to = lambda a: torch.from_numpy(np.asarray(a, np.int64))
    return model.embed_sentences(to(frags.rel[rows]), to(w1), to(w2))


def alignment_accuracy(seed_dir: str | Path, dataset_dir: str | Path, truth_file: str | Path) -> dict[str, float]:
    """How often a mention's fragments (triplets headed by its noun) score highest on a box that
    overlaps the mentioned object (IoU >= 0.5), over the test split; with the chance level (a
    uniformly random image fragment) and the number of fragments counted."""
    import torch

    from fraglib.vision import box_iou

    if not (Path(seed_dir) / "best.pt").exists():  # random ranking: nothing was trained
        return {"accuracy": float("nan"), "chance": float("nan"), "fragments": 0}
    model, cfg, _ = load_model(seed_dir, dataset_dir)
    if cfg.devise or cfg.random or cfg.detector == "fullframe":
        return {"accuracy": float("nan"), "chance": float("nan"), "fragments": 0}
    images, cache, (ds, frags) = test_fragments(dataset_dir, cfg)
    truth = {r["imgid"]: r for r in json.loads(Path(truth_file).read_text())["images"]}
    vocab = glove_words()
    by_sentid = {s["sentid"]: j for j, s in enumerate(ds.sentences)}
    hits, chance, n = 0, 0.0, 0
    with torch.no_grad():
        for n_img, im in enumerate(images):
            r = cache.rows(n_img)
            if r.stop == r.start:
                continue
            V = model.embed_images(torch.from_numpy(cache.features[r]))
            boxes = cache.boxes[r]
            rec = truth[im["imgid"]]
            for cap in rec["captions"]:
                j = by_sentid[cap["sentid"]]
                a, b = int(frags.offsets[j]), int(frags.offsets[j + 1])
                words = [(frags.relations[x], vocab[w1], vocab[w2])
                         for x, w1, w2 in zip(frags.rel[a:b], frags.w1[a:b], frags.w2[a:b])]
                shapes = [rec["objects"][m["object"]]["shape"] for m in cap["mentions"]]
                used: dict[int, dict[str, Any]] = {}
                for m in cap["mentions"]:
                    obj = rec["objects"][m["object"]]
                    for f in mention_triplets(words, obj, shapes):
                        used[f] = obj
                if not used:
                    continue
                idx = np.array(sorted(used))
                best = (V @ embed_glove_fragments(model, frags, a + idx).T).argmax(dim=0).numpy()
                for k, f in enumerate(idx):
                    iou = box_iou(np.array([used[f]["box"]]), boxes)[0]
                    hits += bool(iou[best[k]] >= 0.5)
                    chance += float((iou >= 0.5).mean())
                    n += 1
    return {"accuracy": hits / n if n else float("nan"), "chance": chance / n if n else float("nan"), "fragments": n}


# ----------------------------------------------------------------------------- where a model wins or loses
LENGTH_BINS = (0, 8, 10, 12, 15, 1000)   # caption length in tokens: <=8, 9-10, 11-12, 13-15, >15
LENGTH_NAMES = [f"<= {LENGTH_BINS[1]} words"] + [f"{a + 1}-{b} words" for a, b in zip(LENGTH_BINS[1:-2], LENGTH_BINS[2:-1])] \
    + [f"> {LENGTH_BINS[-2]} words"]


def test_groups(dataset_dir: str | Path) -> dict[str, np.ndarray]:
    """Per-query group labels of one split's test queries, in the order of ``ranks.json``:
    ``annotation_category`` (one per test image; its dataset ``category`` or "-"),
    ``search_category`` (one per test sentence: its image's category) and ``search_length``
    (one per test sentence: token-count bin, e.g. "9-10 words")."""
    from fraglib.data import read_karpathy_json

    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    test = [im for im in ds.images if im["split"] == "test"]
    cat = {im["imgid"]: im.get("category", "-") for im in test}
    sents = [s for s in ds.sentences if s["imgid"] in cat]
    lengths = np.array([len(s["tokens"]) for s in sents])
    bins = np.clip(np.searchsorted(np.array(LENGTH_BINS), lengths, side="left") - 1, 0, len(LENGTH_NAMES) - 1)
    return {"annotation_category": np.array([cat[im["imgid"]] for im in test]),
            "search_category": np.array([cat[s["imgid"]] for s in sents]),
            "search_length": np.array([LENGTH_NAMES[b] for b in bins])}


def breakdown(study: dict[str, dict[str, Any]], dataset_dir: str, variants: list[str], metric: str = "r5") -> pd.DataFrame:
    """``metric`` of each variant per group of test queries (image category for annotation and
    search, caption length for search), averaged over seeds (= splits; ``dataset_dir`` may hold
    ``{seed}``). Long format: variant, direction, by, group, value, queries (per split, mean)."""
    rows = []
    for v in variants:
        s = study[v]
        for k, seed in enumerate(s["seeds"]):
            groups = test_groups(str(dataset_dir).format(seed=seed))
            for key, labels in groups.items():
                d, by = key.split("_")
                r = s["ranks"][d][k]
                if len(r) != len(labels):
                    raise ValueError(f"{v} seed {seed}: {len(r)} {d} ranks but {len(labels)} test queries in {dataset_dir}")
                for g in np.unique(labels):
                    m = labels == g
                    rows.append({"variant": LABELS.get(v, v), "direction": d, "by": by, "group": g,
                                 "seed": seed, "value": float(_metric(r[m], metric)), "queries": int(m.sum())})
    df = pd.DataFrame(rows)
    return df.groupby(["variant", "direction", "by", "group"], as_index=False).agg(value=("value", "mean"), queries=("queries", "mean"))
