"""Hyperparameter search on the validation split only (never the test split).

    python -m fraglib.search --dataset-dir data/synthetic --out studies/search/synthetic.csv
    python -m fraglib.search --dataset-dir "data/pascal1k/split{seed}" --splits 0 1 \
        --features-dir data/pascal1k/features --set devise=true --set fragment_weight=0 --out studies/search/pascal1k_devise.csv

Random search: ``--trials`` configurations drawn (seeded) from :data:`SPACE` on top of params.yaml's
``train`` section, each trained for ``--epochs`` epochs; the criterion is the best validation
R@K sum (R@1+5+10, both directions) over those epochs — averaged over ``--splits`` when
``--dataset-dir`` holds ``{seed}`` (each split trains with seed = split). ``--set`` fixes keys for
every trial (e.g. the DeViSE variant), so each compared system gets its own search. Trials run in ``--jobs`` processes of one
thread each. The table (one row per trial, sorted by the criterion) is written as CSV and rendered
by ``notebooks/search_report.ipynb``; the chosen values are copied into params.yaml by hand, so
the choice stays visible in the history of that file.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.config import from_dict, parse_overrides, read_params

SPACE: dict[str, list[Any]] = {
    "lr": [0.003, 0.01, 0.03],
    "margin": [0.1, 0.3, 1.0],
    "embed_dim": [128, 256, 512],
    "alpha": [1e-6, 1e-5, 1e-4],
    "beta": [0.5, 1.0, 2.0],
}


def draw(trials: int, seed: int, space: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    """``trials`` distinct configurations from ``space`` (default :data:`SPACE`; seeded)."""
    space = space or SPACE
    rng = np.random.default_rng(seed)
    seen, out = set(), []
    while len(out) < trials and len(seen) < np.prod([len(v) for v in space.values()]):
        c = {k: v[int(rng.integers(len(v)))] for k, v in space.items()}
        key = tuple(c.values())
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def _trial(args: tuple[str, list[int], str | None, dict[str, Any], dict[str, Any]]) -> dict[str, Any]:
    import torch

    from fraglib.train import TrainConfig, train

    torch.set_num_threads(1)
    dataset_dir, splits, features_dir, base, over = args
    vals, epochs, secs = [], [], 0.0
    for split in splits:
        cfg = from_dict("train", {**base, **over, **({"seed": split} if "{seed}" in dataset_dir else {})}, TrainConfig)
        with tempfile.TemporaryDirectory() as tmp:
            m = train(dataset_dir.format(seed=split), tmp, cfg, device=torch.device("cpu"), progress=False,
                      features_dir=features_dir)
        vals.append(m["val_rsum_best"])
        epochs.append(m["best_epoch"])
        secs += m["train_seconds"]
    return {**over, "val_rsum_best": round(float(np.mean(vals)), 2), "best_epoch": float(np.mean(epochs)),
            "train_seconds": round(secs, 1)}


def search(dataset_dir: str, base: dict[str, Any], trials: int, epochs: int, seed: int, jobs: int,
           splits: list[int] | None = None, features_dir: str | None = None,
           space: dict[str, list[Any]] | None = None) -> list[dict[str, Any]]:
    base = {**base, "epochs": epochs, "dense_epochs": epochs // 2, "n_boot": 10}
    configs = draw(trials, seed, space)
    splits = splits if "{seed}" in dataset_dir and splits else [0]
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        rows = list(ex.map(_trial, [(dataset_dir, splits, features_dir, base, c) for c in configs]))
    return sorted(rows, key=lambda r: -r["val_rsum_best"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--out", required=True, help="CSV table")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument("--splits", type=int, nargs="*", help="split seeds whose validation sets are averaged ({seed} in --dataset-dir)")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="fix a train key in every trial")
    ap.add_argument("--space", help='JSON {"key": [values, ...]} replacing the default search space')
    args = ap.parse_args(argv)
    space = json.loads(args.space) if args.space else SPACE
    base = dict(read_params(args.params).get("train") or {})
    base.update(parse_overrides(args.set))
    rows = search(args.dataset_dir, base, args.trials, args.epochs, args.seed, args.jobs, args.splits, args.features_dir, space)
    keys = list(rows[0])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(",".join(keys) + "\n" + "".join(",".join(str(r[k]) for k in keys) + "\n" for r in rows))
    out.with_suffix(".json").write_text(json.dumps({"dataset_dir": args.dataset_dir, "trials": args.trials,
                                                    "epochs": args.epochs, "seed": args.seed, "space": space,
                                                    "splits": args.splits, "features_dir": args.features_dir,
                                                    "base": base}, indent=1) + "\n")
    print(f"best: {rows[0]}")


if __name__ == "__main__":
    main()
