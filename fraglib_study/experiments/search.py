"""Hyperparameter search on the validation split only (never the test split).

    python -m fraglib_study search --run full --dataset-dir data/synthetic --set dense_epochs=4 --out studies/search/synthetic.csv
    python -m fraglib_study search --run devise --dataset pascal1k --dataset-dir "data/pascal1k/split{seed}" --splits 0 1 \
        --features-dir data/pascal1k/features --out studies/search/pascal1k_devise.csv

Random search for one run (``runs.<name>``): ``--trials`` configurations drawn (seeded) from
:data:`SPACE` (or ``--space``) on top of the run's settings (:func:`fraglib.run.train.resolve_run`;
with ``--dataset``, that section's layers apply), each trained for ``--epochs`` epochs; ``--set``
fixes more keys for every trial; the space key ``features_dir`` searches detector settings as feature
caches extracted with other ``vision`` settings (``python -m fraglib.vision features --set ...``). The
criterion is the best validation R@K sum (R@1+5+10, both directions) over those epochs — averaged
over ``--splits`` when ``--dataset-dir`` holds ``{seed}`` (each split trains with seed = split). Trials run in ``--jobs`` processes of one thread each. The
table (one row per trial, sorted by the criterion) is written as CSV and shown in the training
report; the chosen values are copied into params.yaml by hand, so the choice stays visible in the
history of that file.

``--configs`` runs exactly the given configurations (one step past the edges of an earlier space).
**Two stages** (successive halving over splits): ``--rescore TABLE --top N --splits ...`` trains the
``N`` best rows of an earlier table again, with that table's run, fixed keys, epochs and folders, on
other splits, and ranks them by the mean over all splits (the table's and the new ones, weighted by
their number) — a search over every split's validation set at a fraction of the cost.

Every finished trial is appended to ``<out>.partial.jsonl`` at once; a search killed part-way and
started again with the same command trains only the trials missing from it (the journal is removed
when the table is written). The journal's first line records what its rows were trained with (the
run's settings, ``--set``, ``--epochs``, folders, splits, searched keys, each split's
``dataset.json``): a search with other settings refuses it rather than count its rows as done.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.core.config import parse_overrides
from fraglib.core.distributed import worker_pool
from fraglib.core.outputs import appending, claim_cli, command, remove, resumes, write_text
from fraglib.run.inputs import DataPaths
from fraglib_study.schema import read_checked

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


def _trial(args: tuple[DataPaths, list[int], Any, dict[str, Any]]) -> dict[str, Any]:
    import time

    import torch

    from fraglib.run.train import train

    torch.set_num_threads(1)
    paths, splits, spec, over = args
    vals, epochs, t0 = [], [], time.perf_counter()
    for split in splits:
        s = spec.with_seed(split) if paths.per_seed else spec
        with tempfile.TemporaryDirectory() as tmp:
            m = train(paths.for_seed(split), tmp, s, device=torch.device("cpu"), progress=False)
        vals.append(m["val_rsum_best"])
        epochs.append(m["best_epoch"])
    return {
        **over,
        "val_rsum_best": round(float(np.mean(vals)), 2),
        "best_epoch": float(np.mean(epochs)),
        "seconds": round(time.perf_counter() - t0, 1),
        "val_rsum_splits": " ".join(f"{v:.1f}" for v in vals),
    }


JOURNAL = "fraglib_study.experiments.search journal 1"  # the first line of a journal: {"journal": JOURNAL, settings...}


class JournalError(ValueError):
    """A search journal that is damaged or was written by a search with other settings."""


def journal_head(
    params: dict[str, Any],
    run: str,
    dataset: str | None,
    fixed: dict[str, Any],
    epochs: int,
    paths: DataPaths,
    splits: list[int],
    keys: list[str],
) -> dict[str, Any]:
    """What a journal's rows were trained with (its first line, as JSON): the run, its resolved settings
    besides the ``fixed`` and searched ``keys`` and ``epochs``, the folders, split seeds, ``keys`` and the
    sha256 of each split's ``dataset.json`` (a missing one is an error naming it)."""
    from fraglib.run.checkpoint import fingerprint
    from fraglib.run.train import resolve_run

    spec = resolve_run(params, run, dataset, {**fixed, "epochs": epochs})
    settings = {**dataclasses.asdict(spec.train_config), **dataclasses.asdict(spec.system_config)}
    head = {
        "journal": JOURNAL,
        "run": run,
        "dataset": dataset,
        "epochs": epochs,
        "fixed": fixed,
        "settings": {k: v for k, v in settings.items() if k not in {*fixed, *keys, "epochs"}},
        "dataset_dir": paths.dataset,
        "splits": splits,
        "features_dir": paths.features,
        "keys": sorted(keys),
        "data": fingerprint({f"split {s}": Path(paths.for_seed(s).dataset) / "dataset.json" for s in splits}),
    }
    return json.loads(json.dumps(head, default=str))


def _flat(d: dict[str, Any]) -> dict[str, Any]:
    """``{"fixed": {"lr": 1}, "run": "x"}`` -> ``{"fixed.lr": 1, "run": "x"}`` (one level down)."""
    out = {}
    for k, v in d.items():
        out.update({f"{k}.{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v})
    return out


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"key: X in the journal, Y now"`` for each entry that differs (mappings compared one level down)."""
    old, new = _flat(old), _flat(new)
    return [
        f"{k}: {old.get(k, '(absent)')!r} in the journal, {new.get(k, '(absent)')!r} now"
        for k in dict.fromkeys([*old, *new])
        if old.get(k, "(absent)") != new.get(k, "(absent)")
    ]


def read_journal(journal: Path, head: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The rows of ``journal`` (None when it holds no header yet: missing or empty). Its header must
    equal ``head`` (:func:`journal_head`), else a JournalError naming the file and what differs. A torn
    last line (no newline: a kill cut it) is dropped with a note and cut from the file; damage anywhere
    else is a JournalError naming the file and line."""
    if not journal.exists():
        return None
    *lines, tail = journal.read_text(encoding="utf-8").split("\n")
    if tail:
        print(
            f"{journal}: line {len(lines) + 1} was cut short (the search was killed while writing it); "
            "dropped, its trial trains again"
        )
        write_text(journal, "".join(line + "\n" for line in lines))
    if not lines:
        return None
    parsed = []
    for n, line in enumerate(lines, 1):
        try:
            parsed.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise JournalError(
                f"{journal}: line {n} is damaged ({exc}); delete the journal (its trials train again)"
            ) from None
    first, *rows = parsed
    if not isinstance(first, dict) or first.get("journal") != JOURNAL:
        raise JournalError(
            f"{journal}: line 1 is not a fraglib_study.experiments.search journal header (an older version's journal, "
            "or not a journal); delete it (its trials train again)"
        )
    diffs = _differences(first, head)
    if diffs:
        raise JournalError(
            f"{journal}: its trials were trained with other settings than this search's "
            f"({'; '.join(diffs[:4])}{'; ...' if len(diffs) > 4 else ''}), so they cannot count as done. "
            "Delete it to train every trial with these settings, or run the search with the journal's."
        )
    for n, r in enumerate(rows, 2):
        if not isinstance(r, dict) or not {*head["keys"], "val_rsum_best"} <= set(r):
            raise JournalError(
                f"{journal}: line {n} is not a trial row (the searched keys {', '.join(head['keys'])} "
                "and val_rsum_best); delete the journal (its trials train again)"
            )
    return rows


def search(
    paths: DataPaths,
    params: dict[str, Any],
    run: str,
    trials: int,
    epochs: int,
    seed: int,
    jobs: int,
    splits: list[int] | None = None,
    space: dict[str, list[Any]] | None = None,
    dataset: str | None = None,
    fixed: dict[str, Any] | None = None,
    configs: list[dict[str, Any]] | None = None,
    journal: Path | None = None,
) -> list[dict[str, Any]]:
    """Rows (trial settings + criterion), best first; ``configs`` replaces the ``trials`` drawn. Each
    finished row is appended to ``journal`` (JSON lines after a header, :func:`read_journal`); rows
    already there are not trained again."""
    from fraglib.run.train import resolve_run

    configs = draw(trials, seed, space) if configs is None else configs
    fixed = dict(fixed or {})
    specs = [
        resolve_run(
            params, run, dataset, {**fixed, "epochs": epochs, **{k: v for k, v in c.items() if k != "features_dir"}}
        )
        for c in configs
    ]  # every trial checked first
    splits = splits if paths.per_seed and splits else [0]
    key = lambda c: json.dumps({k: c[k] for k in configs[0]}, sort_keys=True)  # noqa: E731
    done, head = {}, ""  # head: the journal's first line while still to write
    if journal is not None:
        head = json.dumps(journal_head(params, run, dataset, fixed, epochs, paths, splits, list(configs[0]))) + "\n"
        rows = read_journal(journal, json.loads(head))
        if rows is not None:
            head = ""
            done = {key(r): r for r in rows if key(r) in map(key, configs)}
            print(f"{journal}: {len(done)} of {len(configs)} trials already done")
    todo = [(s, c) for s, c in zip(specs, configs) if key(c) not in done]
    with worker_pool(jobs) as ex:
        trial_paths = lambda c: DataPaths(paths.dataset, c.get("features_dir", paths.features))  # noqa: E731
        futures = [ex.submit(_trial, (trial_paths(c), splits, s, c)) for s, c in todo]
        for f in as_completed(futures):
            row = f.result()
            done[key(row)] = row
            if journal is not None:
                with appending(journal) as fh:
                    fh.write(head + json.dumps(row) + "\n")
                head = ""
    return sorted((done[key(c)] for c in configs), key=lambda r: -r["val_rsum_best"])


META_KEYS = ("run", "dataset", "dataset_dir", "epochs", "features_dir", "space", "fixed", "splits")


def top_rows(table: Path, top: int) -> tuple[dict[str, Any], list[dict[str, Any]], list[float]]:
    """The settings (JSON) of an earlier table, its ``top`` best configurations and their criteria; a
    missing, cut or edited table or settings file is an error naming it and what is wrong."""
    meta_file = table.with_suffix(".json")
    if not table.is_file() or not meta_file.is_file():
        raise FileNotFoundError(f"--rescore: {table} and {meta_file} (written by this tool) are both needed")
    redo = "write both again with the first stage's command (--overwrite)"
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"--rescore: {meta_file} (the settings of {table}) is not JSON ({exc}): cut short? {redo}"
        ) from None
    missing = [k for k in META_KEYS if k not in meta] if isinstance(meta, dict) else list(META_KEYS)
    if missing or not isinstance(meta["space"], dict):
        raise ValueError(
            f"--rescore: {meta_file} (the settings of {table}) lacks {', '.join(missing) or 'a space mapping'} "
            f"(an older version's, or edited); {redo}"
        )
    head, *lines = table.read_text().splitlines() or [""]
    keys = head.split(",")
    missing = [k for k in [*meta["space"], "val_rsum_best"] if k not in keys]
    if missing or not lines:
        what = f"its header {head!r} lacks the column(s) {', '.join(missing)}" if missing else "it has no rows"
        raise ValueError(f"--rescore: {table}: {what} (cut short?); {redo}")
    configs, crit = [], []
    for n, line in enumerate(lines[:top], 2):
        try:  # map the CSV text back to the space's value (its type included)
            row = dict(zip(keys, line.split(","), strict=True))
            configs.append({k: next(v for v in vals if str(v) == row[k]) for k, vals in meta["space"].items()})
            crit.append(float(row["val_rsum_best"]))
        except (KeyError, StopIteration, ValueError):
            raise ValueError(
                f"--rescore: {table} line {n} ({line!r}) does not match its header or the space of {meta_file}; {redo}"
            ) from None
    return meta, configs, crit


def json_arg(ap: argparse.ArgumentParser, flag: str, text: str) -> Any:
    """The JSON value of a command-line flag, or a usage error naming the flag and the parse error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        ap.error(f"{flag} {text!r}: not JSON ({e})")


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", help="the run (params.yaml `runs`) whose settings are searched")
    ap.add_argument("--dataset", help="dataset section whose train/systems layers apply, e.g. pascal1k")
    ap.add_argument("--dataset-dir")
    ap.add_argument("--out", required=True, help="CSV table")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--trials", type=int, default=12)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument(
        "--splits", type=int, nargs="*", help="split seeds whose validation sets are averaged ({seed} in --dataset-dir)"
    )
    ap.add_argument("--features-dir", help="default <dataset-dir>/features")
    ap.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="fix a trainer or system key in every trial"
    )
    ap.add_argument("--space", help='JSON {"key": [values, ...]} replacing the default search space')
    ap.add_argument(
        "--configs",
        help='JSON [{"key": value, ...}, ...]: exactly these trials instead of drawn ones '
        "(e.g. one step past the edges of an earlier space)",
    )
    ap.add_argument(
        "--rescore",
        type=Path,
        metavar="TABLE",
        help="second stage: the --top best rows of this earlier "
        "table (its run, keys, epochs, folders) on --splits, ranked over all splits",
    )
    ap.add_argument("--top", type=int, default=4, help="rows of --rescore trained again")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out table (and its .json)")
    args = ap.parse_args(argv)
    if not args.rescore and not (args.run and args.dataset_dir):
        ap.error("--run and --dataset-dir are required (unless --rescore supplies them)")
    for name in ("trials", "epochs", "jobs", "top"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.splits and args.dataset_dir and "{seed}" not in args.dataset_dir:
        ap.error(
            f"--splits {' '.join(map(str, args.splits))}: --dataset-dir {args.dataset_dir!r} has no {{seed}} "
            "to put each split in (e.g. data/pascal1k/split{seed})"
        )
    out = Path(args.out)
    # before any training: no work is lost to a refusal
    claim_cli(
        ap,
        [out, out.with_suffix(".json")],
        [out, out.with_suffix(".json")],
        args.overwrite,
        "fraglib_study.experiments.search --out",
    )
    resumes(
        out.with_suffix(".partial.jsonl")
    )  # its journal: a killed search resumes from it, a finished one removes it
    configs, prev = None, None
    if args.rescore:
        if not args.splits:
            ap.error("--rescore needs --splits (the new splits)")
        try:
            meta, configs, crit = top_rows(args.rescore, args.top)
        except (FileNotFoundError, ValueError) as exc:
            ap.error(str(exc))
        prev = {"table": str(args.rescore), "top": args.top, "splits": meta["splits"] or [0], "criteria": crit}
        if set(prev["splits"]) & set(args.splits):
            raise ValueError(f"--rescore: splits {sorted(set(prev['splits']) & set(args.splits))} were already scored")
        args.run, args.dataset, args.dataset_dir = meta["run"], meta["dataset"], meta["dataset_dir"]
        args.epochs, args.features_dir = meta["epochs"], meta["features_dir"]
        space, fixed = meta["space"], {**meta["fixed"], **parse_overrides(args.set)}
        args.trials = len(configs)
    elif args.configs:
        configs = json_arg(ap, "--configs", args.configs)
        if not isinstance(configs, list) or not configs or not all(isinstance(c, dict) and c for c in configs):
            raise ValueError("--configs: a non-empty JSON list of non-empty objects, e.g. '[{\"lr\": 0.01}]'")
        space = {k: list(dict.fromkeys(c[k] for c in configs if k in c)) for c in configs for k in c}
        configs = [{k: c.get(k) for k in space} for c in configs]
        if any(v is None for c in configs for v in c.values()):
            raise ValueError("--configs: every configuration must set the same keys (put shared values in --set)")
        fixed, args.trials = parse_overrides(args.set), len(configs)
    else:
        space = json_arg(ap, "--space", args.space) if args.space else SPACE
        if not isinstance(space, dict) or not space or not all(isinstance(v, list) and v for v in space.values()):
            ap.error(
                f"--space {args.space}: a non-empty JSON object of non-empty lists, e.g. '{{\"lr\": [0.01, 0.03]}}'"
            )
        fixed = parse_overrides(args.set)
    try:
        rows = search(
            DataPaths(args.dataset_dir, args.features_dir),
            read_checked(args.params),
            args.run,
            args.trials,
            args.epochs,
            args.seed,
            args.jobs,
            args.splits,
            space,
            args.dataset,
            fixed,
            configs,
            journal=out.with_suffix(".partial.jsonl"),
        )
    except JournalError as exc:  # raised before any trial trains
        ap.error(str(exc))
    if prev:  # weight each stage's mean by its number of splits
        n0, n1 = len(prev["splits"]), len(args.splits)
        by_key = {json.dumps(c, sort_keys=True): v for c, v in zip(configs, prev["criteria"])}
        for r in rows:
            r["val_rsum_prev"] = by_key[json.dumps({k: r[k] for k in space}, sort_keys=True)]
            r["val_rsum_all"] = round((n0 * r["val_rsum_prev"] + n1 * r["val_rsum_best"]) / (n0 + n1), 2)
        rows.sort(key=lambda r: -r["val_rsum_all"])
    keys = list(rows[0])
    write_text(out, ",".join(keys) + "\n" + "".join(",".join(str(r[k]) for k in keys) + "\n" for r in rows))
    write_text(
        out.with_suffix(".json"),
        json.dumps(
            {
                "dataset_dir": args.dataset_dir,
                "trials": args.trials,
                "epochs": args.epochs,
                "seed": args.seed,
                "space": space,
                "splits": args.splits,
                "features_dir": args.features_dir,
                "run": args.run,
                "dataset": args.dataset,
                "fixed": fixed,
                "rescore": prev,
            },
            indent=1,
        )
        + "\n",
    )
    remove(out.with_suffix(".partial.jsonl"))
    print(f"best: {rows[0]}")
