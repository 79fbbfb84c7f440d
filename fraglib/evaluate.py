"""Bidirectional retrieval evaluation over a precomputed image x sentence score matrix (docs/evaluation.md).

The interface follows SCAN's: scores first, then ranks, so any model (or a random one) is
evaluated by the same code. ``sentence_image[j]`` is the row of sentence j's image — explicit
indices, any number of sentences per image.

Ranks are 1-based and **pessimistic on ties**: a competitor scoring the same as the correct item
is counted as ranked above it. Hence a sentence with no fragment (-inf against every image, as in
the authors' code) ranks last, and a constant score matrix gives every query the worst rank.
**NaN and +inf are refused** (:func:`check_scores`, a :class:`ScoreError` naming the matrix): every
comparison with NaN is false, so a diverged model's NaN scores would otherwise rank every correct item
first; -inf alone means "no score" and ranks last.

* image annotation (image -> sentences): rank of the best-ranked of the image's sentences,
  ``1 + #{non-matching sentences j : S[k, j] >= max_{j' of k} S[k, j']}``;
* image search (sentence -> images): ``1 + #{other images k' : S[k', j] >= S[k_j, j]}``;
* sentence similarity (systems with a sentence space, Socher et al. 2014): each sentence ranks
  the other sentences; rank of the best-ranked one of the same image (:func:`similarity_ranks`).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

KS = (1, 5, 10)


class ScoreError(ValueError):
    """A score matrix that cannot be ranked: NaN or +inf entries, or a shape that does not match its index."""


def _largest(blk: torch.Tensor, worst: torch.Tensor) -> torch.Tensor:
    """The running largest score, left on the device (no host wait): NaN if any entry so far is NaN (``amax``
    and ``maximum`` propagate it), +inf if any is +inf — one reduction per tile screens for both."""
    return torch.maximum(worst, blk.amax()) if blk.numel() else worst


def check_scores(S: torch.Tensor, what: str = "scores", worst: torch.Tensor | None = None) -> None:
    """Refuse a score matrix holding NaN or +inf: ScoreError naming ``what``, the count and the first entry;
    -inf is allowed (an item without fragments: ranked last). ``worst``: the ranking loop's own running
    :func:`_largest`, read once here, so a GPU waits once per matrix, not per tile."""
    S = S.detach()
    v = float(_largest(S, torch.tensor(float("-inf"), device=S.device)) if worst is None else worst.detach())
    if math.isnan(v) or v == math.inf:
        bad = torch.isnan(S) | (S == math.inf)
        i, j = (int(x) for x in torch.nonzero(bad)[0])
        raise ScoreError(f"{what}: {int(bad.sum())} of {S.numel()} scores are NaN or +inf (first at [{i}, {j}]: "
                         f"{float(S[i, j])}); a diverged or damaged model cannot be ranked")


def _matrix(scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores as a 2-D tensor, the sentence -> image index on its device), shapes checked."""
    S = torch.as_tensor(scores).detach()
    si = torch.as_tensor(np.asarray(sentence_image), dtype=torch.long, device=S.device)
    if S.dim() != 2 or si.dim() != 1 or si.shape[0] != S.shape[1]:
        raise ScoreError(f"{what}: a (n_images, n_sentences) matrix with one image index per sentence is needed, "
                         f"got scores {tuple(S.shape)} and {tuple(si.shape)} indices")
    if si.numel() and (int(si.min()) < 0 or int(si.max()) >= S.shape[0]):
        raise ScoreError(f"{what}: sentence image indices must lie in [0, {S.shape[0]}), got "
                         f"[{int(si.min())}, {int(si.max())}]")
    return S, si


def annotation_ranks(scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, chunk: int = 256,
                     what: str = "scores") -> np.ndarray:
    """(n_images,) rank of each image's best-ranked ground-truth sentence. Images without any
    sentence get rank 0 (excluded by :func:`recall_table`). ``what`` names the matrix in errors."""
    S, si = _matrix(scores, sentence_image, what)
    n_img = S.shape[0]
    ranks = np.zeros(n_img, np.int64)
    worst = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    for a in range(0, n_img, chunk):
        blk = S[a:a + chunk]
        worst = _largest(blk, worst)
        rows = torch.arange(a, a + blk.shape[0], device=S.device)
        gt = si[None, :] == rows[:, None]                                  # (c, Ns)
        best = torch.where(gt, blk, torch.full_like(blk, float("-inf"))).amax(dim=1)
        has = gt.any(dim=1)
        worse_or_tied = ((blk >= best[:, None]) & ~gt).sum(dim=1)
        r = (1 + worse_or_tied).cpu().numpy()
        r[~has.cpu().numpy()] = 0
        ranks[a:a + blk.shape[0]] = r
    check_scores(S, what, worst)
    return ranks


def search_ranks(scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, chunk: int = 256,
                 what: str = "scores") -> np.ndarray:
    """(n_sentences,) rank of each sentence's image among all images."""
    S, si = _matrix(scores, sentence_image, what)
    own = S[si, torch.arange(S.shape[1], device=S.device)]                 # (Ns,)
    count = torch.zeros(S.shape[1], dtype=torch.long, device=S.device)
    worst = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    for a in range(0, S.shape[0], chunk):
        blk = S[a:a + chunk]
        worst = _largest(blk, worst)
        rows = torch.arange(a, a + blk.shape[0], device=S.device)
        other = rows[:, None] != si[None, :]
        count += ((blk >= own[None, :]) & other).sum(dim=0)
    check_scores(S, what, worst)
    return (1 + count).cpu().numpy()


def similarity_ranks(sim: np.ndarray | torch.Tensor, sentence_image: np.ndarray, chunk: int = 256,
                     what: str = "sentence similarities") -> np.ndarray:
    """(n_sentences,) sentence similarity (Socher et al. 2014, Table 1 left): each sentence queries
    all *other* sentences by ``sim`` (n_s, n_s); rank of the best-ranked sentence of the same image
    (pessimistic on ties). A sentence whose image has no other sentence gets rank 0 (excluded)."""
    S = torch.as_tensor(sim).detach()
    si = torch.as_tensor(np.asarray(sentence_image), dtype=torch.long, device=S.device)
    if S.dim() != 2 or S.shape[0] != S.shape[1] or si.shape != (S.shape[0],):
        raise ScoreError(f"{what}: a square (n_sentences, n_sentences) matrix with one image index per sentence "
                         f"is needed, got {tuple(S.shape)} and {tuple(si.shape)} indices")
    n = S.shape[0]
    ranks = np.zeros(n, np.int64)
    worst = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    for a in range(0, n, chunk):
        blk = S[a:a + chunk]
        worst = _largest(blk, worst)
        rows = torch.arange(a, a + blk.shape[0], device=S.device)
        cols = torch.arange(n, device=S.device)
        self_ = rows[:, None] == cols[None, :]
        gt = (si[rows][:, None] == si[None, :]) & ~self_
        best = torch.where(gt, blk, torch.full_like(blk, float("-inf"))).amax(dim=1)
        r = (1 + ((blk >= best[:, None]) & ~gt & ~self_).sum(dim=1)).cpu().numpy()
        r[~gt.any(dim=1).cpu().numpy()] = 0
        ranks[a:a + blk.shape[0]] = r
    check_scores(S, what, worst)
    return ranks


def recall_table(ranks: np.ndarray) -> dict[str, float]:
    """R@1/5/10 (% of queries with rank <= K), median and mean rank; rank-0 entries are ignored."""
    r = np.asarray(ranks)
    r = r[r > 0]
    out = {f"r{k}": float(100.0 * np.mean(r <= k)) for k in KS}
    out["median_rank"] = float(np.median(r))
    out["mean_rank"] = float(np.mean(r))
    return out


def median_rank_vsepp(ranks: np.ndarray) -> float:
    """VSE++'s (and Peri's) median rank ``floor(median(rank − 1)) + 1``: an integer, which differs from
    the median of 1-based ranks when the query count is even and the middle pair differ."""
    r = np.asarray(ranks)
    r = r[r > 0]
    return float(np.floor(np.median(r - 1)) + 1)


def bootstrap_ci(ranks: np.ndarray, n_boot: int = 1000, seed: int = 0, level: float = 0.95) -> dict[str, list[float]]:
    """Percentile bootstrap CIs of every :func:`recall_table` entry, resampling queries."""
    if n_boot < 1:
        raise ValueError(f"bootstrap: n_boot must be at least 1, got {n_boot}")
    r = np.asarray(ranks)
    r = r[r > 0]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(r), size=(n_boot, len(r)))
    samples = r[idx]
    stats = {f"r{k}": 100.0 * (samples <= k).mean(axis=1) for k in KS}
    stats["median_rank"] = np.median(samples, axis=1)
    stats["mean_rank"] = samples.mean(axis=1)
    lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    return {k: [float(np.percentile(v, lo)), float(np.percentile(v, hi))] for k, v in stats.items()}


def hodosh_columns(sentence_image: np.ndarray, sentids: np.ndarray) -> np.ndarray:
    """Column indices keeping only the first sentence (lowest sentid) of each image."""
    first: dict[int, int] = {}
    for j, (k, sid) in enumerate(zip(sentence_image, sentids)):
        if int(k) not in first or sid < sentids[first[int(k)]]:
            first[int(k)] = j
    return np.array(sorted(first.values()), np.int64)


def evaluate_scores(scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, n_boot: int = 1000,
                    seed: int = 0, what: str = "scores") -> dict[str, Any]:
    """Both directions: metrics, bootstrap CIs and the per-query ranks (for error analysis); ``what``
    names the matrix (run and split) in a :class:`ScoreError`."""
    a = annotation_ranks(scores, sentence_image, what=what)
    s = search_ranks(scores, sentence_image, what=what)
    return {"annotation": recall_table(a), "search": recall_table(s),
            "annotation_ci": bootstrap_ci(a, n_boot, seed), "search_ci": bootstrap_ci(s, n_boot, seed + 1),
            "ranks": {"annotation": a.tolist(), "search": s.tolist()}}


def rsum(metrics: dict[str, Any]) -> float:
    """Model-selection criterion: R@1 + R@5 + R@10 of both directions."""
    return sum(metrics[d][f"r{k}"] for d in ("annotation", "search") for k in KS)


def random_scores(n_images: int, n_sentences: int, seed: int = 0) -> np.ndarray:
    """The random-ranking baseline: i.i.d. uniform scores."""
    return np.random.default_rng(seed).random((n_images, n_sentences))


# ----------------------------------------------------------------------------- from a system to ranks
@torch.no_grad()
def score_matrix(system, split, chunk: int = 64, sent_chunk: int = 4096, image_items: np.ndarray | None = None,
                 sentences=None, sentence_items: np.ndarray | None = None) -> torch.Tensor:
    """(n_images, n_sentences) float32 scores of ``system`` on ``split`` (:class:`fraglib.inputs.Split`),
    in tiles: images encoded once in tiles of ``chunk`` (kept), sentences in tiles of ``sent_chunk``,
    each pair of tiles scored apart. Peak memory ≈ all image encodings + one sentence tile's encoding +
    one tile pair's scoring intermediates + the float32 output on the CPU (COCO 5K: 5,000 x 25,000 =
    0.5 GB; measured per system by ``python -m fraglib.bench coco_eval``). Images or sentences without rows
    in the system's views score -inf (they rank last). ``image_items`` / ``sentence_items`` (positions)
    score only those items; ``sentences`` (another split's :class:`fraglib.inputs.Ragged`) replaces the
    split's sentences (a hubness bank: :func:`hubness_banks`)."""
    system.eval()
    items = np.arange(split.n_images) if image_items is None else np.asarray(image_items, np.int64)
    sent = split.sentences if sentences is None else sentences
    cols = np.arange(sent.n) if sentence_items is None else np.asarray(sentence_items, np.int64)
    return _score_tiles(system, split.images, items, list(_encoded(system.encode_images, split.images, items, chunk)),
                        sent, cols, _encoded(system.encode_sentences, sent, cols, sent_chunk))


def _encoded(encode, rows, items: np.ndarray, size: int) -> Iterator[tuple[int, Any]]:
    """``(start, encode(rows.take(items[start:start + size])))`` tile by tile, lazily."""
    return ((a, encode(rows.take(items[a:a + size]))) for a in range(0, len(items), size))


def _score_tiles(system, images, items: np.ndarray, image_tiles: list[tuple[int, Any]], sentences, cols: np.ndarray,
                 sentence_tiles: Iterable[tuple[int, Any]]) -> torch.Tensor:
    """(len(items), len(cols)) float32 scores of every image tile against every sentence tile (each
    sentence tile encoded once, when reached); items without rows in ``images`` / ``sentences`` -inf."""
    out = torch.empty((len(items), len(cols)))
    for b, sents in sentence_tiles:
        for a, enc in image_tiles:
            s = system.scores(enc, sents).float().cpu()
            out[a:a + s.shape[0], b:b + s.shape[1]] = s
    out[:, torch.from_numpy(sentences.counts()[cols] == 0)] = float("-inf")
    out[torch.from_numpy(images.counts()[items] == 0), :] = float("-inf")
    return out


def bank_items(train, n_bank: int = 5000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the training images and sentences with rows, at most ``n_bank`` of each (a sorted
    draw of ``seed``): the queries of the inductive hubness banks."""
    def pick(ok: np.ndarray) -> np.ndarray:
        idx = np.flatnonzero(ok)
        if len(idx) > n_bank:
            idx = np.sort(np.random.default_rng(seed).choice(idx, n_bank, replace=False))
        return idx

    return pick(train.images.counts() > 0), pick(train.usable_sentences())


@torch.no_grad()
def hubness_banks(system, splits: dict[str, Any], train, n_bank: int = 5000, chunk: int = 64, seed: int = 0,
                  sent_chunk: int = 4096) -> dict[str, dict[str, torch.Tensor]]:
    """The inductive banks of each split of ``splits`` (name -> split; docs/evaluation.md "Hubness"),
    query x candidate: ``annotation`` (training images x the split's sentences), ``search`` (training
    sentences x the split's images). Only training items with rows; at most ``n_bank`` of each, a fixed
    draw of ``seed`` (:func:`bank_items`). The training items are encoded once for all splits, in the
    tiles of :func:`score_matrix`, so each bank equals the matrix it would score."""
    system.eval()
    imgs, sents = bank_items(train, n_bank, seed)
    train_imgs = list(_encoded(system.encode_images, train.images, imgs, chunk))
    train_sents = list(_encoded(system.encode_sentences, train.sentences, sents, sent_chunk))
    banks = {}
    for name, split in splits.items():
        cols, items = np.arange(split.sentences.n), np.arange(split.n_images)
        banks[name] = {
            "annotation": _score_tiles(system, train.images, imgs, train_imgs, split.sentences, cols,
                                       _encoded(system.encode_sentences, split.sentences, cols, sent_chunk)),
            "search": _score_tiles(system, split.images, items, list(_encoded(system.encode_images, split.images, items, chunk)),
                                   train.sentences, sents, train_sents).T.contiguous()}
    return banks


def evaluate_hubness(system, splits: dict[str, Any], test_scores: torch.Tensor, k: int = 10, n_bank: int = 5000,
                     chunk: int = 64) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hubness of the test matrix and the corrected test metrics (:func:`fraglib.hubness.evaluate`): the
    validation matrix and both splits' inductive banks scored here. (summary, per-query lists)."""
    from fraglib import hubness

    val = splits["val"]
    banks = hubness_banks(system, {name: splits[name] for name in ("val", "test")}, splits["train"], n_bank, chunk)
    return hubness.evaluate(test_scores, splits["test"].sentence_image, score_matrix(system, val, chunk),
                            val.sentence_image, banks, k)


def fold_metrics(scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, folds: int = 5,
                 what: str = "scores") -> dict[str, Any]:
    """The COCO literature's "1K" protocol: the images cut into ``folds`` consecutive equal folds (5K test:
    five folds of 1,000), each fold's sentences ranked against its images only; R@K and ranks averaged
    over the folds (``per_fold`` keeps each). The full matrix is the "5K" protocol (:func:`evaluate_scores`)."""
    S = torch.as_tensor(scores)
    si = np.asarray(sentence_image)
    n = S.shape[0]
    if folds < 2 or n % folds:
        raise ValueError(f"fold_metrics: {n} images do not cut into {folds} equal folds")
    size, per = n // folds, []
    for f in range(folds):
        cols = np.nonzero((si >= f * size) & (si < (f + 1) * size))[0]
        sub = S[f * size:(f + 1) * size][:, torch.from_numpy(cols)]
        w = f"{what} (fold {f + 1} of {folds})"
        per.append({"annotation": recall_table(annotation_ranks(sub, si[cols] - f * size, what=w)),
                    "search": recall_table(search_ranks(sub, si[cols] - f * size, what=w))})
    mean = {d: {k: float(np.mean([p[d][k] for p in per])) for k in per[0][d]} for d in ("annotation", "search")}
    return {**mean, "folds": folds, "fold_images": size, "per_fold": per}


@torch.no_grad()
def similarity_hubness(sim: torch.Tensor) -> dict[str, float]:
    """Hubness of the sentence-similarity task (:func:`fraglib.hubness.hubness_stats` with k = 1): each
    sentence queries the *other* sentences by ``sim`` (n_s, n_s); N₁ of a sentence = the queries it is
    the nearest neighbour of (pessimistic on ties)."""
    from fraglib import hubness

    S = torch.as_tensor(sim).clone().float()
    S.fill_diagonal_(float("-inf"))
    return hubness.hubness_stats(hubness.k_occurrence(S, 1), 1)


def similarity_matrix(system, split) -> torch.Tensor | None:
    """(n_sentences, n_sentences) sentence–sentence scores of a system with a sentence space
    (``SENTENCE_SPACE``), else None. Sentences without rows score -inf."""
    import numpy as np

    if not getattr(system, "SENTENCE_SPACE", False):
        return None
    system.eval()
    enc = system.encode_sentences(split.sentences.take(np.arange(split.n_sentences)))
    sim = system.sentence_scores(enc, enc).float().cpu()
    empty = torch.from_numpy(split.sentences.counts() == 0)
    sim[:, empty] = float("-inf")
    return sim


def load_trained(seed_dir: str | Path, dataset_dir: str | Path | None = None, features_dir: str | Path | None = None,
                 split: str | None = "test", sentences_file: str | Path | None = None, images: str | None = None):
    """(system, checkpoint, split) of a trained seed: the system rebuilt from ``best.pt`` alone, the
    split (None: a dict of all three) read in the system's own views (default: the data it was trained on); ``sentences_file``
    replaces the sentence view's file, ``images`` the image view (``none``: text only). The split's
    word / relation ids must be the checkpoint's (other data: re-encode them, ``fraglib.text.build.run_tokens``)."""
    import dataclasses

    from fraglib.checkpoint import best_of, load_system
    from fraglib.inputs import load_splits

    system, ck = load_system(best_of(seed_dir))
    info = ck["info"]
    views = system.views(system.cfg)
    views = dataclasses.replace(views, images=images) if images else views
    splits, _, got = load_splits(dataset_dir or info["dataset_dir"], views, torch.device("cpu"),
                                 features_dir or info.get("features_dir"), sentences_file)
    if got["relations"] != info["relations"]:
        raise ValueError(f"{seed_dir}: the sentences of {dataset_dir or info['dataset_dir']} are encoded with another "
                         f"vocabulary ({len(got['relations'])} ids, the model's {len(info['relations'])}); re-encode "
                         "them in the model's: `python -m fraglib.captions … --parse-file <their parse>`")
    return system, ck, splits if split is None else splits[split]


def evaluate_run(seed_dir, split: str = "test", dataset_dir=None, features_dir=None, n_boot: int | None = None,
                 folds: int = 0, hubness: bool | None = None) -> dict[str, Any]:
    """Re-score a trained run from its ``best.pt`` alone (the data are read only to be scored):
    metrics of ``split`` as the trainer computes them; ``folds`` > 1 adds the fold protocol
    (:func:`fold_metrics`, key ``folds``); ``hubness`` (test only; default: as the run was trained,
    ``train.hubness``) adds :func:`evaluate_hubness` (key ``hubness``; with a sentence space, also
    ``hubness.similarity``: :func:`similarity_hubness`)."""
    system, ck, splits = load_trained(seed_dir, dataset_dir, features_dir, None)
    sp, tc = splits[split], ck["train_config"]
    S = score_matrix(system, sp, tc["eval_chunk"])
    what = f"{seed_dir}: {split} scores of best.pt"
    m = evaluate_scores(S, sp.sentence_image, n_boot or tc["n_boot"], tc["seed"], what)
    if (tc.get("hubness", False) if hubness is None else hubness) and split == "test":
        m["hubness"], m["ranks"]["hubness"] = evaluate_hubness(system, splits, S, tc.get("hub_k", 10),
                                                               tc.get("hub_bank", 5000), tc["eval_chunk"])
        sim = similarity_matrix(system, sp)
        if sim is not None:
            m["hubness"]["similarity"] = similarity_hubness(sim)
    if folds > 1:
        m["folds"] = fold_metrics(S, sp.sentence_image, folds, what)
    return m


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Re-score a trained run from its checkpoint: "
                                             "python -m fraglib.evaluate RUN/seeds/seed0 --split test")
    ap.add_argument("seed_dir", help="a folder holding best.pt (e.g. runs/synthetic/full/seeds/seed0)")
    ap.add_argument("--split", default="test", choices=("train", "val", "test"))
    ap.add_argument("--dataset-dir", help="default: the one the run was trained on")
    ap.add_argument("--features-dir", help="default: the one the run was trained on")
    ap.add_argument("--out", help="write the metrics (with per-query ranks) as JSON here")
    ap.add_argument("--folds", type=int, default=0, help="also the fold protocol (COCO 1K: --folds 5 on the 5K test)")
    ap.add_argument("--hubness", action=argparse.BooleanOptionalAction, default=None,
                    help="hubness and its corrections (test only; default: as the run was trained; docs/evaluation.md)")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = ap.parse_args(argv)
    if args.out:
        from fraglib.outputs import claim_cli

        claim_cli(ap, [Path(args.out)], [Path(args.out)], args.overwrite, "fraglib.evaluate --out")
    if args.hubness and args.split != "test":
        ap.error("--hubness: test split only (its parameters are chosen on val)")
    m = evaluate_run(args.seed_dir, args.split, args.dataset_dir, args.features_dir, folds=args.folds, hubness=args.hubness)
    if args.out:
        from fraglib.outputs import write_text

        write_text(args.out, json.dumps(m, indent=1, sort_keys=True))
    for label, res in ((f"{args.split}", m), (f"{args.split} {args.folds}-fold mean", m.get("folds"))):
        for d in ("annotation", "search") if res else ():
            t = res[d]
            print(f"{label} {d}: " + " ".join(f"R@{k} {t[f'r{k}']:.1f}" for k in KS)
                  + f" median r {t['median_rank']:.1f} mean r {t['mean_rank']:.1f}")


if __name__ == "__main__":
    main()
