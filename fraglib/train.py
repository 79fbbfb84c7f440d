"""Training and evaluation of one model variant (DESIGN.md §1.4), resumable and deterministic.

    python -m fraglib.train --dataset-dir data/synthetic --out runs/synthetic/full/seed0 [--set key=value ...]

SGD with momentum (the paper; `optimizer: adam` for the tuned DeViSE baseline) over batches of ``batch_size`` image–sentence pairs, no image twice in a batch;
dense C_0 for the first ``dense_epochs`` epochs, then MIL C_F; learning rate × ``lr_drop`` for the
last ``lr_drop_epochs`` epochs. After every epoch: validation (R@K sum, both directions) and a
checkpoint holding the model, the optimizer, the epoch, the history and the whole configuration,
so a killed run resumes from ``last.pt`` and ends exactly as an uninterrupted one (batch order
depends only on (seed, epoch)). The best validation epoch is kept as ``best.pt`` and evaluated on
the test split at the end. Outputs in ``--out``: ``metrics.json`` (test metrics with bootstrap
CIs), ``ranks.json`` (per-query test ranks), ``history.csv`` (per-epoch curves), checkpoints.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.config import ConfigError, check_choice, check_range, load_with_overrides
from fraglib.data import read_karpathy_json
from fraglib.evaluate import evaluate_scores, random_scores, rsum
from fraglib.features import FeatureCache
from fraglib.fragments import Fragments
from fraglib.model import FragmentModel
from fraglib.objectives import global_ranking, pair_scores, total_cost

DETECTORS = ("rcnn", "groundtruth", "fullframe")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """``params.yaml`` section ``train`` (a variant overrides some keys)."""

    seed: int = 0
    fragment_mode: str = "dependency"   # dependency | bow | bigram
    detector: str = "rcnn"              # rcnn | groundtruth | fullframe
    devise: bool = False                # the DeViSE baseline (global objective on mean vectors)
    random: bool = False                # the random-ranking baseline (no training)
    similarity: str = "dot"             # dot | cosine (DeViSE only: image·sentence on L2-normalised embeddings)
    optimizer: str = "sgd"              # sgd (paper; momentum) | adam (lr ~1e-4..1e-3)
    embed_dim: int = 1000
    epochs: int = 20
    dense_epochs: int = 10              # C_0 for these epochs, then C_F (MIL); >= epochs: never MIL
    batch_size: int = 100               # image–sentence pairs
    lr: float = 1e-3
    momentum: float = 0.9
    lr_drop: float = 0.1
    lr_drop_epochs: int = 2
    fragment_weight: float = 1.0        # 0: global objective only
    beta: float = 1.0                   # weight of C_G; 0: fragment objective only
    alpha: float = 1e-5                 # weight of ||θ||²
    margin: float = 1.0                 # Δ of C_G
    smooth: float = 5.0                 # n of S_kl
    accumulate: str = "sum"             # sum | max
    normalize: bool = True              # per-sentence-fragment normalisation of C_0 / C_F
    grad_clip: float = 0.0              # max global gradient norm; 0 = off
    eval_chunk: int = 64                # images per score-matrix chunk (memory ~ chunk x 20 x sentence fragments x 4 B)
    n_boot: int = 1000                  # bootstrap resamples for CIs

    def validate(self) -> "TrainConfig":
        p = "train"
        check_range(f"{p}.seed", self.seed, 0, 2**31 - 1, int)
        check_choice(f"{p}.fragment_mode", self.fragment_mode, ("dependency", "bow", "bigram"))
        check_choice(f"{p}.detector", self.detector, DETECTORS)
        check_choice(f"{p}.accumulate", self.accumulate, ("sum", "max"))
        check_choice(f"{p}.similarity", self.similarity, ("dot", "cosine"))
        check_choice(f"{p}.optimizer", self.optimizer, ("sgd", "adam"))
        if self.similarity == "cosine" and not self.devise:
            raise ConfigError("train.similarity: cosine applies to the DeViSE baseline only (the fragment "
                              "model's objectives are defined on inner products, DESIGN.md §1.3)")
        check_range(f"{p}.embed_dim", self.embed_dim, 1, 100_000, int)
        check_range(f"{p}.epochs", self.epochs, 0, 10_000, int)
        check_range(f"{p}.dense_epochs", self.dense_epochs, 0, 10_000, int)
        check_range(f"{p}.batch_size", self.batch_size, 2, 100_000, int)
        check_range(f"{p}.lr", self.lr, 0.0, 100.0, float)
        check_range(f"{p}.momentum", self.momentum, 0.0, 1.0, float)
        check_range(f"{p}.lr_drop", self.lr_drop, 0.0, 1.0, float)
        check_range(f"{p}.lr_drop_epochs", self.lr_drop_epochs, 0, 10_000, int)
        for name in ("fragment_weight", "beta", "alpha", "margin", "smooth", "grad_clip"):
            check_range(f"{p}.{name}", getattr(self, name), 0.0, 1e6, float)
        check_range(f"{p}.eval_chunk", self.eval_chunk, 1, 1_000_000, int)
        check_range(f"{p}.n_boot", self.n_boot, 10, 1_000_000, int)
        if not self.devise and not self.random and self.fragment_weight == 0 and self.beta == 0:
            raise ConfigError("train.fragment_weight and train.beta are both 0: nothing to train")
        return self


# ----------------------------------------------------------------------------- data
@dataclasses.dataclass
class SplitData:
    """One split, as tensors. Images: CSR rows of ``img_x``; sentences: CSR rows of fragments."""

    name: str
    img_x: torch.Tensor          # (R, D) descriptors
    img_off: np.ndarray          # (n_img + 1,)
    frag_rel: torch.Tensor       # (F,)
    frag_w1: torch.Tensor        # (F,) rows of the model's word table
    frag_w2: torch.Tensor
    sent_off: np.ndarray         # (n_sent + 1,)
    sentence_image: np.ndarray   # (n_sent,) image row of each sentence
    sentids: np.ndarray

    @property
    def n_images(self) -> int:
        return len(self.img_off) - 1

    @property
    def n_sentences(self) -> int:
        return len(self.sent_off) - 1

    def image_rows(self, imgs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Descriptor rows of images ``imgs`` and the position (0..len-1) owning each row."""
        starts, stops = self.img_off[imgs], self.img_off[imgs + 1]
        counts = stops - starts
        rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(imgs) else np.zeros(0, np.int64)
        return rows.astype(np.int64), np.repeat(np.arange(len(imgs)), counts)

    def sentence_rows(self, sents: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts, stops = self.sent_off[sents], self.sent_off[sents + 1]
        counts = stops - starts
        rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, stops)]) if len(sents) else np.zeros(0, np.int64)
        return rows.astype(np.int64), np.repeat(np.arange(len(sents)), counts)


def load_data(dataset_dir: str | Path, cfg: TrainConfig, device: torch.device, features_dir: str | Path | None = None
              ) -> tuple[dict[str, SplitData], torch.Tensor, int, dict[str, Any]]:
    """Splits, the compact word table (only rows the fragments use; GloVe copied once, in part),
    the number of relation types, and provenance info. Features are read from ``features_dir``
    (default ``<dataset_dir>/features``)."""
    from fraglib.vectors import load_glove

    d = Path(dataset_dir)
    ds = read_karpathy_json(d / "dataset.json")
    frags = Fragments.load(d / "fragments" / f"{'bow' if cfg.devise else cfg.fragment_mode}.npz")
    if list(frags.sentid) != [s["sentid"] for s in ds.sentences]:
        raise ValueError(f"{d}/fragments: sentence order differs from dataset.json (re-run the fragments stage)")
    det = "rcnn" if cfg.detector == "fullframe" else cfg.detector
    cache = FeatureCache.load(Path(features_dir or d / "features") / f"{det}.npz", ds)
    if cfg.detector == "fullframe":
        cache = cache.fullframe()
    used = np.unique(np.concatenate([frags.w1, frags.w2]))
    _, table = load_glove()
    words = torch.from_numpy(np.ascontiguousarray(table[used]))            # only the rows we need
    remap = {int(w): i for i, w in enumerate(used)}
    w1 = np.array([remap[int(w)] for w in frags.w1], np.int64)
    w2 = np.array([remap[int(w)] for w in frags.w2], np.int64)
    row_of = {im["imgid"]: n for n, im in enumerate(ds.images)}
    splits = {}
    for split in ("train", "val", "test"):
        imgs = [n for n, im in enumerate(ds.images) if im["split"] == split or (split == "train" and im["split"] == "restval")]
        pos = {n: i for i, n in enumerate(imgs)}
        sents = [j for j, s in enumerate(ds.sentences) if row_of[s["imgid"]] in pos]
        sub = cache.subset(imgs)
        rows = np.concatenate([np.arange(frags.offsets[j], frags.offsets[j + 1]) for j in sents]) if sents else np.zeros(0, np.int64)
        counts = np.array([frags.offsets[j + 1] - frags.offsets[j] for j in sents], np.int64)
        splits[split] = SplitData(
            split, torch.from_numpy(sub.features).to(device), sub.offsets,
            torch.from_numpy(frags.rel[rows].astype(np.int64)).to(device),
            torch.from_numpy(w1[rows]).to(device), torch.from_numpy(w2[rows]).to(device),
            np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
            np.array([pos[row_of[ds.sentences[j]["imgid"]]] for j in sents], np.int64),
            np.array([ds.sentences[j]["sentid"] for j in sents], np.int64))
    info = {"dataset": ds.name, "relations": frags.relations, "fragment_mode": frags.mode, "detector": cfg.detector,
            "cnn": cache.meta.get("cnn"), "words_used": len(used)}
    return splits, words.to(device), len(frags.relations), info


def make_batches(data: SplitData, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Shuffled sentence indices in batches of ``batch_size`` with no image twice in a batch.
    Sentences without fragments, or whose image has none, are not trained on."""
    rng = np.random.default_rng([seed, epoch])
    has_s = np.diff(data.sent_off) > 0
    has_i = np.diff(data.img_off)[data.sentence_image] > 0
    pool = list(rng.permutation(np.nonzero(has_s & has_i)[0]))
    batches = []
    while pool:
        batch, seen, rest = [], set(), []
        for j in pool:
            k = int(data.sentence_image[j])
            if len(batch) < batch_size and k not in seen:
                batch.append(j)
                seen.add(k)
            else:
                rest.append(j)
        if len(batch) < 2:
            break  # a last pair alone carries no ranking signal
        batches.append(np.array(batch, np.int64))
        pool = rest
    return batches


# ----------------------------------------------------------------------------- model + cost
def mean_rows(x: torch.Tensor, owner: torch.Tensor, n: int) -> torch.Tensor:
    """(n, D) mean of the rows of ``x`` owned by each of n images (DeViSE's single image vector)."""
    cnt = torch.bincount(owner, minlength=n).clamp_min(1).to(x.dtype)
    return x.new_zeros((n, x.shape[1])).index_add_(0, owner, x) / cnt[:, None]


def batch_cost(model: FragmentModel, data: SplitData, batch: np.ndarray, cfg: TrainConfig, dense: bool) -> tuple[torch.Tensor, dict[str, float]]:
    """Cost of one batch of pairs (sentences ``batch`` with their images): the objective terms
    divided by the number of pairs B, plus ``alpha`` ||θ||²."""
    dev = data.img_x.device
    imgs = data.sentence_image[batch]
    irows, v_owner = data.image_rows(imgs)
    srows, s_owner = data.sentence_rows(batch)
    x = data.img_x[torch.from_numpy(irows).to(dev)]
    vo = torch.from_numpy(v_owner).to(dev)
    so = torch.from_numpy(s_owner).to(dev)
    sr = torch.from_numpy(srows).to(dev)
    B = len(batch)
    parts: dict[str, float] = {}
    if cfg.devise:
        V = model.embed_images(mean_rows(x, vo, B))
        S = model.embed_devise_sentences(data.frag_w1[sr], so, B)
        cg = global_ranking(devise_scores(V, S, cfg.similarity), cfg.margin)
        parts["C_G"] = float(cg.detach())
        cost = cfg.beta * cg if cfg.beta else cg
    else:
        V = model.embed_images(x)
        S = model.embed_sentences(data.frag_rel[sr], data.frag_w1[sr], data.frag_w2[sr])
        cost, parts = total_cost(V, S, vo, so, dense=dense, fragment_weight=cfg.fragment_weight, beta=cfg.beta,
                                 margin=cfg.margin, smooth=cfg.smooth, accumulate=cfg.accumulate,
                                 normalize=cfg.normalize)
    cost = cost / B  # per pair: the learning rate does not depend on the batch size
    if cfg.alpha:
        reg = model.regularizer()
        parts["reg"] = float(reg.detach())
        cost = cost + cfg.alpha * reg
    return cost, parts


def devise_scores(V: torch.Tensor, S: torch.Tensor, similarity: str = "dot") -> torch.Tensor:
    """(n_img, n_sent) DeViSE scores of image vectors V (n_img, h) and sentence vectors S (n_sent, h):
    inner products, or cosines when ``similarity == "cosine"``."""
    if similarity == "cosine":
        V, S = torch.nn.functional.normalize(V, dim=1), torch.nn.functional.normalize(S, dim=1)
    return V @ S.T


@torch.no_grad()
def score_matrix(model: FragmentModel | None, data: SplitData, cfg: TrainConfig) -> torch.Tensor:
    """(n_images, n_sentences) scores, computed in chunks of ``eval_chunk`` images; sentences or
    images without fragments score -inf."""
    if cfg.random or model is None:
        return torch.from_numpy(random_scores(data.n_images, data.n_sentences, cfg.seed))
    model.eval()
    dev = data.img_x.device
    all_s = np.arange(data.n_sentences)
    srows, s_owner = data.sentence_rows(all_s)
    so = torch.from_numpy(s_owner).to(dev)
    sr = torch.from_numpy(srows).to(dev)
    if cfg.devise:
        S = model.embed_devise_sentences(data.frag_w1[sr], so, data.n_sentences)
    else:
        S = model.embed_sentences(data.frag_rel[sr], data.frag_w1[sr], data.frag_w2[sr])
    blocks = []
    for a in range(0, data.n_images, cfg.eval_chunk):
        imgs = np.arange(a, min(a + cfg.eval_chunk, data.n_images))
        irows, v_owner = data.image_rows(imgs)
        x = data.img_x[torch.from_numpy(irows).to(dev)]
        vo = torch.from_numpy(v_owner).to(dev)
        if cfg.devise:
            blk = devise_scores(model.embed_images(mean_rows(x, vo, len(imgs))), S, cfg.similarity)
        else:
            M = model.embed_images(x) @ S.T
            blk = pair_scores(M, vo, so, len(imgs), data.n_sentences, cfg.smooth, cfg.accumulate, inplace=True)
        blocks.append(blk.float().cpu())
    scores = torch.cat(blocks)
    no_s = torch.from_numpy(np.diff(data.sent_off) == 0)
    no_i = torch.from_numpy(np.diff(data.img_off) == 0)
    scores[:, no_s] = float("-inf")
    scores[no_i, :] = float("-inf")
    return scores


def evaluate_split(model: FragmentModel | None, data: SplitData, cfg: TrainConfig, n_boot: int | None = None) -> dict[str, Any]:
    return evaluate_scores(score_matrix(model, data, cfg), data.sentence_image, n_boot or cfg.n_boot, cfg.seed)


# ----------------------------------------------------------------------------- the loop
def _lr_at(cfg: TrainConfig, epoch: int) -> float:
    return cfg.lr * (cfg.lr_drop if epoch >= cfg.epochs - cfg.lr_drop_epochs else 1.0)


def _save(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)  # atomic: a kill never leaves a half-written checkpoint


def train(dataset_dir: str | Path, out_dir: str | Path, cfg: TrainConfig, device: torch.device | None = None,
          progress: bool = True, stop_after: int | None = None, features_dir: str | Path | None = None) -> dict[str, Any]:
    """Train (or resume) and evaluate; returns the test metrics. ``stop_after`` ends the process's
    work after that many epochs (used to test resumption)."""
    from tqdm.auto import tqdm

    from fraglib.device import select_device

    cfg.validate()
    device = device or select_device()[0]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    splits, words, n_rel, info = load_data(dataset_dir, cfg, device, features_dir)
    if cfg.random:
        test = evaluate_split(None, splits["test"], cfg)
        return _finish(out, cfg, info, test, None, [], 0.0)
    tr = splits["train"]
    mean, std = tr.img_x.mean(0), tr.img_x.std(0)
    model = FragmentModel(words, n_rel, mean, std, cfg.embed_dim, cfg.devise).to(device)
    opt = (torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum) if cfg.optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=cfg.lr))
    history: list[dict[str, Any]] = []
    start, best_rsum, t_train = 0, -1.0, 0.0
    last = out / "last.pt"
    if last.exists():
        ck = torch.load(last, map_location=device, weights_only=False)
        if ck["config"] != dataclasses.asdict(cfg):
            raise ValueError(f"{last}: checkpoint was written with another configuration; delete {out} to restart")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        start, history, best_rsum, t_train = ck["epoch"], ck["history"], ck["best_rsum"], ck.get("train_seconds", 0.0)
    done = 0
    for epoch in range(start, cfg.epochs):
        if stop_after is not None and done >= stop_after:
            return {"stopped_at_epoch": epoch}
        t0 = time.perf_counter()
        model.train()
        for g in opt.param_groups:
            g["lr"] = _lr_at(cfg, epoch)
        dense = epoch < cfg.dense_epochs
        sums: dict[str, float] = {}
        batches = make_batches(tr, cfg.batch_size, cfg.seed, epoch)
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{cfg.epochs} ({'C_0' if dense else 'C_F'})", disable=not progress,
                   leave=False, mininterval=2)
        for batch in bar:
            cost, parts = batch_cost(model, tr, batch, cfg, dense)
            if not torch.isfinite(cost):
                raise FloatingPointError(f"epoch {epoch + 1}: cost is {cost.item()} (lower train.lr, now {cfg.lr})")
            opt.zero_grad(set_to_none=True)
            cost.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v
            sums["cost"] = sums.get("cost", 0.0) + float(cost.detach())
            bar.set_postfix({k: f"{v:.3g}" for k, v in parts.items()})
        t_train += time.perf_counter() - t0
        val = evaluate_split(model, splits["val"], cfg, n_boot=10)
        row = {"epoch": epoch + 1, "lr": _lr_at(cfg, epoch), "phase": "dense" if dense else "mil",
               **{f"train_{k}": v / max(len(batches), 1) for k, v in sums.items()},
               "val_rsum": rsum(val), **{f"val_{d}_r{k}": val[d][f"r{k}"] for d in ("annotation", "search") for k in (1, 5, 10)}}
        history.append(row)
        if progress:
            print(f"epoch {epoch + 1}/{cfg.epochs}: cost {row['train_cost']:.4g}, val R-sum {row['val_rsum']:.1f}", flush=True)
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch + 1, "history": history,
                 "config": dataclasses.asdict(cfg), "info": info, "best_rsum": best_rsum, "train_seconds": t_train}
        if row["val_rsum"] > best_rsum:
            best_rsum = state["best_rsum"] = row["val_rsum"]
            _save(out / "best.pt", state)
        _save(last, state)
        done += 1
    best = torch.load(out / "best.pt", map_location=device, weights_only=False) if (out / "best.pt").exists() else None
    if best is not None:
        model.load_state_dict(best["model"])
    test = evaluate_split(model, splits["test"], cfg)
    return _finish(out, cfg, info, test, best["epoch"] if best else None, history, t_train)


def _finish(out: Path, cfg: TrainConfig, info: dict[str, Any], test: dict[str, Any], best_epoch: int | None,
            history: list[dict[str, Any]], t_train: float) -> dict[str, Any]:
    ranks = test.pop("ranks")
    metrics = {"test": test, "best_epoch": best_epoch, "train_seconds": t_train, "config": dataclasses.asdict(cfg),
               "info": info, "val_rsum_best": max((h["val_rsum"] for h in history), default=None)}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, sort_keys=True) + "\n")
    (out / "ranks.json").write_text(json.dumps(ranks) + "\n")
    keys = sorted({k for h in history for k in h}, key=lambda k: (k != "epoch", k))
    lines = [",".join(keys)] + [",".join(str(h.get(k, "")) for k in keys) for h in history]
    (out / "history.csv").write_text("\n".join(lines) + "\n")
    return metrics


def config_from(params: str | Path, overrides: list[str]) -> TrainConfig:
    """``train`` section of ``params`` with ``key=value`` overrides."""
    return load_with_overrides(params, "train", TrainConfig, overrides)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a train parameter")
    args = ap.parse_args(argv)
    cfg = config_from(args.params, args.set)
    m = train(args.dataset_dir, args.out, cfg, features_dir=args.features_dir)
    t = m["test"]
    print("test: annotation " + " ".join(f"R@{k} {t['annotation'][f'r{k}']:.1f}" for k in (1, 5, 10))
          + f" med {t['annotation']['median_rank']:.0f} | search "
          + " ".join(f"R@{k} {t['search'][f'r{k}']:.1f}" for k in (1, 5, 10)) + f" med {t['search']['median_rank']:.0f}")


if __name__ == "__main__":
    main()
