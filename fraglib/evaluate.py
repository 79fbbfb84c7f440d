"""The one evaluation of a trained system on a split (docs/evaluation.md): score it, rank, and report.

:func:`evaluate_split` is the test evaluation of every run — the study calls it after fitting
(:func:`fraglib.train.train`), ``python -m fraglib.evaluate`` re-scores a checkpoint with it, and a search never
calls it (a trial scores validation only). Its settings are ``params.yaml: evaluation`` (:class:`EvalConfig`):
they are not part of a checkpoint's identity, so changing ``n_boot`` re-scores ``best.pt`` and never retrains.
Scores come from the system in tiles (:func:`score_matrix`); the ranking arithmetic is :mod:`fraglib.metrics`,
hubness and its corrections :mod:`fraglib.hubness`.

    python -m fraglib.evaluate runs/synthetic/full/seeds/seed0 [--split val] [--set n_boot=200] [--out m.json]
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib import hubness
from fraglib.checkpoint import best_of, fingerprint, load_system
from fraglib.config import check_choice, check_range, from_dict
from fraglib.inputs import DataPaths, load_splits
from fraglib.metrics import DIRECTIONS, KS, bootstrap_ci, evaluate_scores, fold_metrics, recall_table, similarity_ranks


# ----------------------------------------------------------------------------- from a system to ranks
@torch.no_grad()
def score_matrix(
    system,
    split,
    chunk: int = 64,
    sent_chunk: int = 4096,
    image_items: np.ndarray | None = None,
    sentences=None,
    sentence_items: np.ndarray | None = None,
) -> torch.Tensor:
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
    return _score_tiles(
        system,
        split.images,
        items,
        list(_encoded(system.encode_images, split.images, items, chunk)),
        sent,
        cols,
        _encoded(system.encode_sentences, sent, cols, sent_chunk),
    )


def _encoded(encode, rows, items: np.ndarray, size: int) -> Iterator[tuple[int, Any]]:
    """``(start, encode(rows.take(items[start:start + size])))`` tile by tile, lazily."""
    return ((a, encode(rows.take(items[a : a + size]))) for a in range(0, len(items), size))


def _score_tiles(
    system,
    images,
    items: np.ndarray,
    image_tiles: list[tuple[int, Any]],
    sentences,
    cols: np.ndarray,
    sentence_tiles: Iterable[tuple[int, Any]],
) -> torch.Tensor:
    """(len(items), len(cols)) float32 scores of every image tile against every sentence tile (each
    sentence tile encoded once, when reached); items without rows in ``images`` / ``sentences`` -inf."""
    out = torch.empty((len(items), len(cols)))
    for b, sents in sentence_tiles:
        for a, enc in image_tiles:
            s = system.scores(enc, sents).float().cpu()
            out[a : a + s.shape[0], b : b + s.shape[1]] = s
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
def hubness_banks(
    system, splits: dict[str, Any], train, n_bank: int = 5000, chunk: int = 64, seed: int = 0, sent_chunk: int = 4096
) -> dict[str, dict[str, torch.Tensor]]:
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
            "annotation": _score_tiles(
                system,
                train.images,
                imgs,
                train_imgs,
                split.sentences,
                cols,
                _encoded(system.encode_sentences, split.sentences, cols, sent_chunk),
            ),
            "search": _score_tiles(
                system,
                split.images,
                items,
                list(_encoded(system.encode_images, split.images, items, chunk)),
                train.sentences,
                sents,
                train_sents,
            ).T.contiguous(),
        }
    return banks


def evaluate_hubness(
    system, splits: dict[str, Any], test_scores: torch.Tensor, k: int = 10, n_bank: int = 5000, chunk: int = 64
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hubness of the test matrix and the corrected test metrics (:func:`fraglib.hubness.evaluate`): the
    validation matrix and both splits' inductive banks scored here. (summary, per-query lists)."""
    val = splits["val"]
    banks = hubness_banks(system, {name: splits[name] for name in ("val", "test")}, splits["train"], n_bank, chunk)
    return hubness.evaluate(
        test_scores, splits["test"].sentence_image, score_matrix(system, val, chunk), val.sentence_image, banks, k
    )


@torch.no_grad()
def similarity_hubness(sim: torch.Tensor) -> dict[str, float]:
    """Hubness of the sentence-similarity task (:func:`fraglib.hubness.hubness_stats` with k = 1): each
    sentence queries the *other* sentences by ``sim`` (n_s, n_s); N₁ of a sentence = the queries it is
    the nearest neighbour of (pessimistic on ties)."""
    S = torch.as_tensor(sim).clone().float()
    S.fill_diagonal_(float("-inf"))
    return hubness.hubness_stats(hubness.k_occurrence(S, 1), 1)


def similarity_matrix(system, split) -> torch.Tensor | None:
    """(n_sentences, n_sentences) sentence–sentence scores of a system with a sentence space
    (``SENTENCE_SPACE``), else None. Sentences without rows score -inf."""
    if not system.SENTENCE_SPACE:
        return None
    system.eval()
    enc = system.encode_sentences(split.sentences.take(np.arange(split.n_sentences)))
    sim = system.sentence_scores(enc, enc).float().cpu()
    empty = torch.from_numpy(split.sentences.counts() == 0)
    sim[:, empty] = float("-inf")
    return sim


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """``params.yaml: evaluation``: how a trained system is scored. Not part of a checkpoint's identity
    (:mod:`fraglib.checkpoint`): a change re-scores ``best.pt``, it never retrains."""

    eval_chunk: int = 64  # images per score-matrix tile (validation during fitting too)
    test_folds: int = 0  # > 1: also the fold protocol on test (COCO "1K" = 5 folds of the 5K test)
    n_boot: int = 1000  # bootstrap resamples for the test CIs
    hubness: bool = True  # also hubness and its corrections on test (fraglib.hubness; docs/evaluation.md)
    hub_k: int = 10  # k of the k-occurrence
    hub_bank: int = 5000  # at most this many training images / sentences in an inductive bank

    def validate(self) -> "EvalConfig":
        p = "evaluation"
        check_range(f"{p}.eval_chunk", self.eval_chunk, 1, 1_000_000, int)
        check_range(f"{p}.test_folds", self.test_folds, 0, 1000, int)
        check_range(f"{p}.n_boot", self.n_boot, 10, 1_000_000, int)
        check_choice(f"{p}.hubness", self.hubness, (True, False))
        check_range(f"{p}.hub_k", self.hub_k, 1, 1_000_000, int)
        check_range(f"{p}.hub_bank", self.hub_bank, 2, 10_000_000, int)
        return self


def eval_config(params: dict[str, Any], extra: dict[str, Any] | None = None) -> EvalConfig:
    """The checked :class:`EvalConfig` of a params dict's ``evaluation`` section (absent: the defaults), with
    ``extra`` keys (command-line ``--set``) on top."""
    return from_dict("evaluation", {**(params.get("evaluation") or {}), **(extra or {})}, EvalConfig)


def check_evaluable(ec: EvalConfig, test: Any, where: str) -> None:
    """Refuse settings the test split cannot be scored with (called before any training, not after it):
    the hubness needs ``hub_k`` below the split's images and sentences, the fold protocol ``test_folds`` equal
    folds of its images."""
    if ec.test_folds > 1 and test.n_images % ec.test_folds:
        raise ValueError(
            f"evaluation.test_folds={ec.test_folds}: {where}'s test split has {test.n_images} images, which do not "
            f"cut into {ec.test_folds} equal folds (set evaluation.test_folds: 0, or a divisor of {test.n_images})"
        )
    if ec.hubness and ec.hub_k >= min(test.n_images, test.n_sentences):
        raise ValueError(
            f"evaluation.hub_k={ec.hub_k}: the hubness of {where}'s test split needs k below its "
            f"{test.n_images} images and {test.n_sentences} sentences (lower evaluation.hub_k or set "
            "evaluation.hubness: false)"
        )


def evaluate_split(
    system, splits: dict[str, Any], ec: EvalConfig, seed: int, split: str = "test", what: str = "scores"
) -> dict[str, Any]:
    """The one evaluation of ``system`` on ``splits[split]``: both directions' metrics, bootstrap CIs (seeded by
    ``seed``) and per-query ranks (:func:`fraglib.metrics.evaluate_scores`); ``ec.test_folds`` > 1 adds the fold
    protocol (key ``folds``); on test, ``ec.hubness`` adds :func:`evaluate_hubness` (key ``hubness``, which reads
    the train and val splits for its banks and its parameters); a system with a sentence space adds the
    sentence-similarity task (keys ``similarity``, ``similarity_ci``, ``ranks.similarity``, and with the hubness
    ``hubness.similarity``). ``what`` names the matrix in a :class:`fraglib.metrics.ScoreError`."""
    sp = splits[split]
    S = score_matrix(system, sp, ec.eval_chunk)
    m = evaluate_scores(S, sp.sentence_image, ec.n_boot, seed, what)
    if ec.test_folds > 1:
        m["folds"] = fold_metrics(S, sp.sentence_image, ec.test_folds, what)
    if ec.hubness and split == "test":
        m["hubness"], m["ranks"]["hubness"] = evaluate_hubness(system, splits, S, ec.hub_k, ec.hub_bank, ec.eval_chunk)
    sim = similarity_matrix(system, sp)
    if sim is not None:
        r = similarity_ranks(sim, sp.sentence_image, what=f"{what} (sentence similarities)")
        m["similarity"], m["similarity_ci"] = recall_table(r), bootstrap_ci(r, ec.n_boot, seed + 2)
        m["ranks"]["similarity"] = r.tolist()
        if "hubness" in m:  # how many sentences each is the nearest of
            m["hubness"]["similarity"] = similarity_hubness(sim)
    return m


def check_inputs(ck: dict[str, Any], files: dict[str, Path], where: Any) -> None:
    """Refuse to score a checkpoint on files other than those it was trained on (``ck["fingerprint"]``: the
    SHA-256 of each input file, recorded at training): the paths a checkpoint records are where its data were,
    not a promise of what lies there now."""
    now = fingerprint(files)
    moved = [f"{role} ({files[role]})" for role in ck["fingerprint"] if now.get(role) != ck["fingerprint"][role]]
    if moved:
        raise ValueError(
            f"{where}: best.pt was trained on other data than {', '.join(moved)} now holds; pass "
            "--dataset-dir / --features-dir of the data it was trained on (or retrain)"
        )


def load_trained(
    seed_dir: str | Path,
    paths: DataPaths | None = None,
    split: str | None = "test",
    sentences_file: str | Path | None = None,
    images: str | None = None,
):
    """(system, checkpoint, split) of a trained seed: the system rebuilt from ``best.pt`` alone, the
    split (None: a dict of all three) read in the system's own views from ``paths`` (default: the data it was
    trained on, checked against the checkpoint's fingerprint: :func:`check_inputs`); ``sentences_file``
    replaces the sentence view's file, ``images`` the image view (``none``: text only). The split's
    word / relation ids must be the checkpoint's (other data: re-encode them, ``fraglib.text.build.run_tokens``)."""
    system, ck = load_system(best_of(seed_dir))
    info = ck["info"]
    views = system.views(system.cfg)
    if paths is None:
        paths = DataPaths(info["dataset_dir"], info.get("features_dir"))
        if sentences_file is None and not images:
            check_inputs(ck, paths.files(views), seed_dir)
    views = dataclasses.replace(views, images=images) if images else views
    splits, _, got = load_splits(paths, views, torch.device("cpu"), sentences_file)
    if got["relations"] != info["relations"]:
        raise ValueError(
            f"{seed_dir}: the sentences of {paths.dataset} are encoded with another "
            f"vocabulary ({len(got['relations'])} ids, the model's {len(info['relations'])}); re-encode "
            "them in the model's: `python -m fraglib.captions … --parse-file <their parse>`"
        )
    return system, ck, splits if split is None else splits[split]


def evaluate_run(
    seed_dir, ec: EvalConfig | None = None, split: str = "test", paths: DataPaths | None = None
) -> dict[str, Any]:
    """Re-score a trained run from its ``best.pt`` alone (the data are read only to be scored) by
    :func:`evaluate_split`, the study's own evaluation: the same numbers as the run's ``metrics.json`` for the
    same :class:`EvalConfig` (default: its defaults); ``paths``: other data than it was trained on."""
    system, ck, splits = load_trained(seed_dir, paths, None)
    ec = (ec or EvalConfig()).validate()
    if split == "test":
        check_evaluable(ec, splits["test"], str(seed_dir))
    return evaluate_split(
        system, splits, ec, ck["train_config"]["seed"], split, f"{seed_dir}: {split} scores of best.pt"
    )


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    from fraglib.config import parse_overrides, read_yaml
    from fraglib.outputs import claim_cli, write_text

    ap = argparse.ArgumentParser(
        description="Re-score a trained run from its checkpoint with the study's own "
        "evaluation: python -m fraglib.evaluate RUN/seeds/seed0 --split test"
    )
    ap.add_argument("seed_dir", help="a folder holding best.pt (e.g. runs/synthetic/full/seeds/seed0)")
    ap.add_argument("--split", default="test", choices=("train", "val", "test"))
    ap.add_argument("--dataset-dir", help="default: the one the run was trained on")
    ap.add_argument("--features-dir", help="with --dataset-dir (default <dataset-dir>/features)")
    ap.add_argument(
        "--params", default="params.yaml", help="its `evaluation` section applies (a missing file: defaults)"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an evaluation key, e.g. test_folds=5 (COCO 1K), n_boot=200, hubness=false",
    )
    ap.add_argument("--out", help="write the metrics (with per-query ranks) as JSON here")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    args = ap.parse_args(argv)
    if args.out:
        claim_cli(ap, [Path(args.out)], [Path(args.out)], args.overwrite, "fraglib.evaluate --out")
    ec = eval_config(read_yaml(args.params) if Path(args.params).exists() else {}, parse_overrides(args.set))
    paths = DataPaths(args.dataset_dir, args.features_dir) if args.dataset_dir else None
    m = evaluate_run(args.seed_dir, ec, args.split, paths)
    if args.out:
        write_text(args.out, json.dumps(m, indent=1, sort_keys=True))
    for label, res in ((f"{args.split}", m), (f"{args.split} {ec.test_folds}-fold mean", m.get("folds"))):
        for d in DIRECTIONS if res else ():
            t = res[d]
            print(
                f"{label} {d}: "
                + " ".join(f"R@{k} {t[f'r{k}']:.1f}" for k in KS)
                + f" median r {t['median_rank']:.1f} mean r {t['mean_rank']:.1f}"
            )


if __name__ == "__main__":
    main()
