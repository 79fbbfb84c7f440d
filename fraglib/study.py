"""One ablation variant over several seeds (a DVC ``foreach`` stage per variant).

    python -m fraglib.study --dataset-dir data/synthetic --variant full --out runs/synthetic/full

The variant's overrides (``params.yaml`` ``variants.<name>``) are applied on top of the ``train``
section; a dataset may add its own layer (``--overrides-param pascal1k.train``: a mapping with
``all`` for every variant and ``<variant>`` for one, applied as train ← all ← variant ← <variant>,
e.g. values searched on that dataset's validation splits); every seed of ``study.seeds`` trains in its own process (``study.jobs`` at a time, one
thread each: on a CPU two small single-threaded runs beat one two-threaded run; the seeds of a last,
incomplete round get the idle cores, see :func:`seed_threads`). Each seed writes
``seeds/seed<N>/`` (metrics, per-query ranks, history, checkpoints; a killed run resumes). The variant's
summary goes to ``metrics.json`` (mean and sd over seeds, per-seed values; a DVC metric) and
``history.csv`` (all seeds, a DVC plot). Nothing timing-dependent is written into ``metrics.json``,
so a re-run with the same seeds gives identical bytes on a CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.config import ConfigError, from_dict, read_params
from fraglib.evaluate import KS

DIRECTIONS = ("annotation", "search")
METRICS = tuple(f"r{k}" for k in KS) + ("median_rank", "mean_rank")


def variant_config(params: dict[str, Any], variant: str, seed: int, dataset_overrides: dict[str, Any] | None = None):
    from fraglib.train import TrainConfig

    variants = params.get("variants") or {}
    if variant not in variants:
        raise ConfigError(f"variants.{variant}: unknown variant, allowed: {', '.join(variants)}")
    extra = dataset_overrides or {}
    unknown = set(extra) - set(variants) - {"all"}
    if unknown:
        raise ConfigError(f"dataset overrides: {', '.join(sorted(unknown))} is neither 'all' nor a variant")
    layers = [params.get("train") or {}, extra.get("all") or {}, variants[variant] or {}, extra.get(variant) or {}]
    values = {k: v for layer in layers for k, v in layer.items()}
    return from_dict(f"variants.{variant}", {**values, "seed": seed}, TrainConfig)


def _run_seed(args: tuple[str, str, dict[str, Any], int, str, int, str | None, dict | None]) -> dict[str, Any]:
    from fraglib.train import train

    dataset_dir, variant, params, seed, out, threads, features_dir, extra = args
    dataset_dir = dataset_dir.format(seed=seed)
    torch.set_num_threads(threads)
    cfg = variant_config(params, variant, seed, extra)
    d = Path(out) / "seeds" / f"seed{seed}"
    last = d / "last.pt"
    if last.exists():
        ck = torch.load(last, map_location="cpu", weights_only=False)
        if ck["config"] != dataclasses.asdict(cfg):
            print(f"[{variant} seed {seed}] configuration changed: restarting from scratch", flush=True)
            shutil.rmtree(d)
    m = train(dataset_dir, d, cfg, device=None, progress=False, features_dir=features_dir)
    print(f"[{variant} seed {seed}] test annotation R@1 {m['test']['annotation']['r1']:.1f}, "
          f"search R@1 {m['test']['search']['r1']:.1f}", flush=True)
    return m


def seed_threads(n_seeds: int, jobs: int, cores: int) -> list[int]:
    """Threads of each seed's process: the cores shared by ``jobs`` concurrent seeds, except that
    the seeds of a last, incomplete round share all cores among themselves (5 seeds on 2 cores:
    1, 1, 1, 1, 2) — fixed by position, so a re-run repeats every seed's arithmetic exactly."""
    j = max(1, min(jobs, n_seeds))
    full = n_seeds // j * j
    tail = n_seeds - full
    return [max(1, cores // j) if i < full else max(1, cores // tail) for i in range(n_seeds)]


def run_variant(dataset_dir: str, variant: str, params: dict[str, Any], out: str | Path,
                features_dir: str | None = None, seeds: list[int] | None = None,
                dataset_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train ``variant`` for every seed; ``dataset_dir`` may hold ``{seed}`` (one data split per
    seed, as in the Pascal1K study, where the seed is the split seed). ``dataset_overrides``: see
    the module docstring."""
    study = params.get("study") or {}
    seeds = [int(s) for s in (seeds if seeds is not None else study.get("seeds", [0, 1, 2]))]
    if not seeds:
        raise ConfigError("study.seeds: empty list, give at least one seed")
    jobs = int(study.get("jobs", 2))
    for s in seeds:
        variant_config(params, variant, s, dataset_overrides).validate()  # fail before any work
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    work = [(dataset_dir, variant, params, s, str(out), t, features_dir, dataset_overrides)
            for s, t in zip(seeds, seed_threads(len(seeds), jobs, torch.get_num_threads()))]
    if jobs > 1 and len(seeds) > 1:
        import multiprocessing as mp

        with ProcessPoolExecutor(max_workers=min(jobs, len(seeds)), mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(_run_seed, work))
    else:
        results = [_run_seed(w) for w in work]
    per_seed = {str(s): {d: r["test"][d] for d in DIRECTIONS} for s, r in zip(seeds, results)}
    cfg0 = dataclasses.asdict(variant_config(params, variant, seeds[0], dataset_overrides))
    base = dataclasses.asdict(variant_config({"train": params.get("train") or {}, "variants": {variant: {}}}, variant, seeds[0]))
    summary: dict[str, Any] = {"variant": variant, "seeds": seeds,
                               "overrides": {k: v for k, v in cfg0.items() if v != base[k]}}
    for d in DIRECTIONS:
        summary[d] = {m: float(np.mean([per_seed[str(s)][d][m] for s in seeds])) for m in METRICS}
        summary[f"{d}_sd"] = {m: float(np.std([per_seed[str(s)][d][m] for s in seeds], ddof=1)) if len(seeds) > 1 else 0.0
                              for m in METRICS}
    summary["per_seed"] = per_seed
    summary["best_epoch"] = {str(s): r["best_epoch"] for s, r in zip(seeds, results)}
    (out / "metrics.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    lines = []
    for s in seeds:
        h = (out / "seeds" / f"seed{s}" / "history.csv").read_text().splitlines()
        if not h:
            continue
        if not lines:
            lines.append("seed," + h[0])
        lines += [f"{s},{row}" for row in h[1:]]
    (out / "history.csv").write_text("\n".join(lines) + "\n" if lines else "seed,epoch\n")
    return summary


def _dotted(params: dict[str, Any], key: str, where: str) -> Any:
    node: Any = params
    for k in key.split("."):
        if not isinstance(node, dict) or k not in node:
            raise ConfigError(f"{key}: not found in {where}")
        node = node[k]
    return node


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--variant", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features")
    ap.add_argument("--seeds", help="comma-separated seeds (default study.seeds)")
    ap.add_argument("--seeds-param", help="dotted params.yaml key holding the seed list, e.g. pascal1k.splits")
    ap.add_argument("--overrides-param", help="dotted params.yaml key holding dataset train overrides, e.g. pascal1k.train")
    args = ap.parse_args(argv)
    params = read_params(args.params)
    seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
    if args.seeds_param:
        seeds = [int(x) for x in _dotted(params, args.seeds_param, args.params)]
    extra = _dotted(params, args.overrides_param, args.params) if args.overrides_param else None
    s = run_variant(args.dataset_dir, args.variant, params, args.out, args.features_dir, seeds, extra)
    print(f"{args.variant}: annotation R@1 {s['annotation']['r1']:.1f} ± {s['annotation_sd']['r1']:.1f}, "
          f"search R@1 {s['search']['r1']:.1f} ± {s['search_sd']['r1']:.1f} over seeds {s['seeds']}")


if __name__ == "__main__":
    main()
