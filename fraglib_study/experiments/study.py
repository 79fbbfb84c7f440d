"""One run over several seeds (a DVC ``foreach`` stage per run of ``params.yaml: runs``).

    python -m fraglib_study study --run full --dataset-dir data/synthetic --out runs/synthetic/full
    python -m fraglib_study study --run full --dataset pascal1k --dataset-dir "data/pascal1k/split{seed}" \
        --features-dir data/pascal1k/features --out runs/pascal1k/full

The run's settings follow :func:`fraglib.run.train.resolve_run` (with ``--dataset``, that section's
``train`` and ``systems`` layers apply). Seeds: ``study.seeds``, or with ``--dataset`` that
dataset's ``splits`` (one data split per seed; ``{seed}`` in ``--dataset-dir``; the split seed is
also the training seed); ``runs.<run>.seeds`` limits a run to a subset of them. ``runs.<run>.replicates``
(default ``study.replicates``, else 1) trains each seed R times: replicate r of seed s trains with
training seed ``s + 1000 r`` on the same data, in ``seeds/seed<s>`` (r = 0) or ``seeds/seed<s>r<r>``;
training noise is then measured within a split (:mod:`fraglib_study.report.uncertainty`). With ``--folds`` (the k-fold
protocol of ``<dataset>.folds``, ``--dataset-dir`` holding ``{seed}`` for ``fold{seed}``) the seeds are the folds
0 … k − 1, each trained as many times as the run trains a split (its replicates: so a CI over the folds has a
training level where the run has one), and the summary's metrics are over the pooled test queries of its training
runs (every image tested once per training run, in its own fold by its own fold's model). Every seed trains in its own process, a task of a Dask
cluster (:mod:`~fraglib_study.experiments.schedule`; one at a time, in the command's process; ``study.jobs`` at a time, one
thread each — under ``torchrun`` one seed after another, each on all processes, rank 0 writing: on a CPU two small single-threaded runs beat one two-threaded run; the seeds of a
last, incomplete round get the idle cores, see :func:`seed_threads`) and writes
``seeds/seed<N>/`` (metrics, per-query ranks, history, checkpoints). A seed whose checkpoint was
written for other settings or inputs trains from scratch. The run's summary goes to
``metrics.json`` (mean and sd over seeds, per-seed values; a DVC metric; nothing
timing-dependent, so a re-run gives identical bytes on one machine) and ``history.csv``. While it runs it prints on
stderr (:mod:`fraglib.core.progress`) the units it will train, each unit's epoch lines and a line per finished unit with
the time so far and an ETA (the mean unit time so far, ``study.jobs`` units a round).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fraglib.core.config import ConfigError
from fraglib.core.outputs import command, resumes, unit_key, write_bytes, write_text
from fraglib.core.progress import Progress
from fraglib.metrics import hubness
from fraglib.metrics.retrieval import DIRECTIONS, METRICS, recall_table
from fraglib.run.evaluate import eval_config
from fraglib.run.inputs import DataPaths
from fraglib.run.train import resolve_run, train
from fraglib_study.experiments.schedule import ENV
from fraglib_study.params import dataset_folds
from fraglib_study.schema import read_checked


def study_seeds(params: dict[str, Any], dataset: str | None = None, run: str | None = None) -> list[int]:
    """``<dataset>.splits`` or ``study.seeds``: a non-empty list without duplicates; with ``run``, those
    of them in ``runs.<run>.seeds`` when given (in the study's order: an expensive run on fewer seeds
    or splits, paired with the others on those; a seed the study does not have is skipped, so a run
    limited to Pascal1K's splits 0–1 trains seed 0 of a one-seed synthetic study; none in common is an error)."""
    where = f"{dataset}.splits" if dataset else "study.seeds"
    seeds = (params.get(dataset) or {}).get("splits") if dataset else (params.get("study") or {}).get("seeds")
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(f"{where}: expected a non-empty list of seeds, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"{where}={seeds}: duplicate seeds")
    own = ((params.get("runs") or {}).get(run) or {}).get("seeds") if run else None
    if own is not None:
        if not isinstance(own, list) or not set(own) & set(seeds) or len(set(own)) != len(own):
            raise ConfigError(
                f"runs.{run}.seeds={own!r}: expected a list without duplicates sharing a seed with {where}={seeds}"
            )
        seeds = [s for s in seeds if s in own]
    return [int(s) for s in seeds]


REPLICATE_STRIDE = 1000  # replicate r of seed s trains with seed s + 1000 r


def study_replicates(
    params: dict[str, Any], run: str | None = None, dataset: str | None = None, folds: bool = False
) -> int:
    """``runs.<run>.replicates``, else ``<dataset>.replicates`` (a dataset's study) or ``study.replicates``
    (the synthetic study), else 1: training runs per seed (split); with ``folds`` at least
    ``<dataset>.fold_replicates`` (default 1: every claim run trains twice per fold, docs/analysis_plan.md)."""
    where = f"{dataset}.replicates" if dataset else "study.replicates"
    r = (params.get(dataset or "study") or {}).get("replicates", 1)
    own = ((params.get("runs") or {}).get(run) or {}).get("replicates") if run else None
    if own is not None:
        where, r = f"runs.{run}.replicates", own
    least = (params.get(dataset) or {}).get("fold_replicates", 1) if folds and dataset else 1
    for key, v in ((where, r), (f"{dataset}.fold_replicates", least)):
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v < REPLICATE_STRIDE:
            raise ConfigError(f"{key}={v!r}: expected an integer in [1, {REPLICATE_STRIDE - 1}]")
    return max(r, least)


def study_jobs(params: dict[str, Any]) -> int:
    """``study.jobs`` (default 2): seeds trained at once, a positive integer."""
    jobs = (params.get("study") or {}).get("jobs", 2)
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ConfigError(f"study.jobs={jobs!r}: expected a positive integer (seeds trained at once, e.g. 2)")
    return jobs


def fold_head(params: dict[str, Any], dataset: str | None) -> dict[str, Any]:
    """The summary keys of a k-fold run of ``dataset`` (:func:`fraglib_study.params.dataset_folds`): protocol, folds,
    partition. ConfigError without a dataset."""
    if not dataset:
        raise ConfigError("--folds: the k-fold protocol needs --dataset (its <dataset>.folds and .partition)")
    k, partition = dataset_folds(params, dataset)
    return {"protocol": "folds", "folds": k, "partition": partition}


def pool_fold_metrics(summary: dict[str, Any], out: Path) -> None:
    """Replace the per-direction means of a k-fold run's ``summary`` by the metrics of the pooled test queries
    (each training run's ranks, ``out/seeds/seed<unit>/ranks.json``, end to end: with replicates every query counts
    once per training run)."""
    ranks = [json.loads((out / "seeds" / f"seed{u}" / "ranks.json").read_text()) for u in summary["per_seed"]]
    for d in DIRECTIONS + (("similarity",) if "similarity" in summary else ()):
        pooled = recall_table(np.concatenate([np.asarray(r[d]) for r in ranks]))
        summary[d] = {m: pooled[m] for m in METRICS}


def kept_result(folder: Path, spec: Any, ec: Any, checkpoint_dir: Path | None) -> dict[str, Any] | None:
    """The finished result of one training unit in ``folder`` (its ``metrics.json``) to keep instead of training it
    again, or None: only where its checkpoint is not here (``checkpoint_dir`` holds no last.pt or best.pt: the
    models did not travel, the results in git did) and it records this run's system, trainer and evaluation
    settings. Its inputs cannot be checked without the checkpoint: ``--keep-results`` is for the inputs it was made
    from (adding a replicate to a run trained on another machine)."""
    f = folder / "metrics.json"
    if checkpoint_dir is None or any((checkpoint_dir / n).exists() for n in ("last.pt", "best.pt")) or not f.exists():
        return None
    m = json.loads(f.read_text())
    return m if not moved_settings(m, spec, ec) and "test" in m else None


def moved_settings(recorded: dict[str, Any], spec: Any, ec: Any) -> list[str]:
    """The settings sections (``system_config``, ``train_config``, ``eval_config``) in which a unit's ``metrics.json``
    (``recorded``) differs from what ``spec`` (:func:`resolve_run`) and ``ec`` (:func:`eval_config`) say today; a
    key the record lacks (added to the code since) counts as its default now; a record older than ``eval_config``
    holds the evaluation settings in ``train_config``."""
    import dataclasses

    if "eval_config" not in recorded and isinstance(recorded.get("train_config"), dict):
        fields = {f.name for f in dataclasses.fields(ec)}
        tc = recorded["train_config"]
        recorded = {
            **recorded,
            "train_config": {k: v for k, v in tc.items() if k not in fields},
            "eval_config": {k: v for k, v in tc.items() if k in fields},
        }

    def same(rec: Any, now: Any) -> bool:
        full = dataclasses.asdict(type(now)())
        return isinstance(rec, dict) and {**full, **rec} == dataclasses.asdict(now)

    now = (("system_config", spec.system_config), ("train_config", spec.train_config), ("eval_config", ec))
    return [k for k, v in now if not same(recorded.get(k), v)]


def settled(argv: list[str], params: dict[str, Any]) -> list[str]:
    """Why the results a ``study`` command (its arguments ``argv``) committed are not what ``params`` make today,
    read without training: [] when its ``--out`` holds exactly the units it plans, each recording the system,
    trainer and evaluation settings ``params`` resolve to (:func:`moved_settings`), and a k-fold run's summary the
    same folds and partition. ``python -m fraglib_study lockstep record`` asks it before re-recording a training
    stage whose settings changed in ``params.yaml`` (another run's entry, a section's new key at its default)."""
    args = parser().parse_args(argv)
    spec = resolve_run(params, args.run, args.dataset)
    ec = eval_config(params)
    out = Path(args.out)
    if args.folds:
        head = fold_head(params, args.dataset)
        seeds = list(range(head["folds"]))
    else:
        head, seeds = {}, study_seeds(params, args.dataset, args.run)
    if args.seeds:
        seeds = [int(x) for x in args.seeds.split(",")]
    units = {
        unit_key(s, r): s + REPLICATE_STRIDE * r
        for s in seeds
        for r in range(study_replicates(params, args.run, args.dataset, args.folds))
    }
    held = {p.name.removeprefix("seed") for p in (out / "seeds").glob("seed*") if (p / "metrics.json").is_file()}
    why = [f"{out}: unit seed{k} planned, not committed" for k in sorted(set(units) - held)]
    why += [f"{out}: unit seed{k} committed, not planned" for k in sorted(held - set(units))]
    for k in sorted(set(units) & held):
        recorded = json.loads((out / "seeds" / f"seed{k}" / "metrics.json").read_text())
        why += [f"{out}/seeds/seed{k}: {m} differs" for m in moved_settings(recorded, spec.with_seed(units[k]), ec)]
    summary = json.loads((out / "metrics.json").read_text()) if (out / "metrics.json").is_file() else None
    if summary is None:
        return [*why, f"{out}/metrics.json: no summary of the units"]
    why += [f"{out}/metrics.json: {k} {summary.get(k)!r}, now {v!r}" for k, v in {**head, "seeds": seeds}.items()
            if summary.get(k) != v]  # fmt: skip
    if set(summary.get("per_seed") or {}) != set(units):
        why.append(f"{out}/metrics.json: summarises units {sorted(summary.get('per_seed') or {})}, not {sorted(units)}")
    return why


def settles(key: str) -> bool:
    """Whether :func:`settled` reads the ``params.yaml`` key ``key`` (a stage's declared setting): what resolves a
    unit's system, trainer and evaluation settings, and which units a run has. Any other changed setting (e.g.
    ``study.jobs``: threads per unit, hence the arithmetic) is re-run, not re-recorded."""
    parts = key.split(".")
    return parts[0] in ("train", "evaluation", "systems", "runs") or parts[-1] in (
        "train",
        "systems",
        "replicates",
        "fold_replicates",
        "splits",
        "seeds",
        "folds",
        "partition",
    )


def _run_seed(args: tuple[DataPaths, Any, Any, int, int, str, int, str | None, bool, str]) -> tuple[dict, float, bool]:
    """One unit (in a worker process when several train at once): its metrics, its seconds and whether it was kept
    rather than trained (those two for the progress lines only); ``args``'s last item names the unit in its epoch
    lines (``seed 3r1``, ``fold 3r1``)."""
    paths, spec, ec, seed, replicate, out, threads, models_dir, keep, name = args
    t0 = time.monotonic()  # printing only: the progress lines' ETA
    torch.set_num_threads(threads)
    key = unit_key(seed, replicate)
    seeded = spec.with_seed(seed + REPLICATE_STRIDE * replicate)
    if keep:
        m = kept_result(
            Path(out) / "seeds" / f"seed{key}", seeded, ec, Path(models_dir) / f"seed{key}" if models_dir else None
        )
        if m is not None:
            print(f"[{spec.run} seed {key}] kept: its result is here with this run's settings, its checkpoint is not")
            return m, time.monotonic() - t0, True
    m = train(
        paths.for_seed(seed),
        Path(out) / "seeds" / f"seed{key}",
        seeded,
        ec,
        device=None,
        restart=True,
        checkpoint_dir=Path(models_dir) / f"seed{key}" if models_dir else None,
        label=f"{spec.run} {name}",
    )
    return m, time.monotonic() - t0, False


def unit_main() -> None:
    """A unit's fresh process (:func:`fraglib_study.experiments.schedule.unit_process`): ``argv[1]`` the pickled
    :func:`_run_seed` argument, ``argv[2]`` where its pickled result goes."""
    import pickle

    from fraglib.core.distributed import die_with_parent

    die_with_parent()
    out = _run_seed(pickle.loads(Path(sys.argv[1]).read_bytes()))
    write_bytes(sys.argv[2], pickle.dumps(out))


def unit_line(name: str, m: dict[str, Any], kept: bool) -> str:
    """What a study's progress line says of a finished unit: its name, trained or kept, its test R@1."""
    t = m.get("test") or {}
    scores = ", ".join(f"{d} R@1 {t[d]['r1']:.1f}" for d in DIRECTIONS if d in t)
    return f"{name} {'kept' if kept else 'trained'}" + (f", test {scores}" if scores else "")


def seed_threads(n_seeds: int, jobs: int, cores: int) -> list[int]:
    """Threads of each seed's process: the cores shared by ``jobs`` concurrent seeds, except that
    the seeds of a last, incomplete round share all cores among themselves (5 seeds on 2 cores:
    1, 1, 1, 1, 2) — fixed by position, so a re-run repeats every seed's arithmetic exactly."""
    j = max(1, min(jobs, n_seeds))
    full = n_seeds // j * j
    tail = n_seeds - full
    return [max(1, cores // j) if i < full else max(1, cores // tail) for i in range(n_seeds)]


def summarise(head: dict[str, Any], keys: list[str], groups: list[int], tests: list[dict[str, Any]]) -> dict[str, Any]:
    """A run's ``metrics.json`` summary: ``head`` (run, system, seeds, ...) + per direction the mean and
    sd over units of each metric, ``per_seed``; ``units`` / ``groups`` / ``replicates`` when a seed has
    more than one unit (``keys``: unit names; ``tests``: each unit's test metrics)."""
    dirs = DIRECTIONS + (("similarity",) if all("similarity" in t for t in tests) else ())
    per_seed = {k: {d: t[d] for d in dirs} for k, t in zip(keys, tests)}
    summary = dict(head)
    if len(keys) > len(head["seeds"]):
        summary.update(units=keys, groups=groups, replicates=len(keys) // len(head["seeds"]))
    for d in dirs:
        summary[d] = {m: float(np.mean([per_seed[k][d][m] for k in keys])) for m in METRICS}
        summary[f"{d}_sd"] = {
            m: float(np.std([per_seed[k][d][m] for k in keys], ddof=1)) if len(keys) > 1 else 0.0 for m in METRICS
        }
    summary["per_seed"] = per_seed
    return summary


@dataclass
class Plan:
    """A run's training units, planned (:func:`plan_study`) before any trains: ``work[i]`` is unit i's argument to
    :func:`_run_seed` (its ``threads``: ``threads[i]``); ``names`` say it in progress lines (``seed 0r1``)."""

    run: str
    spec: Any
    paths: DataPaths
    out: Path
    seeds: list[int]
    units: list[tuple[int, int]]
    keys: list[str]
    names: list[str]
    work: list[tuple]
    threads: list[int]
    head: dict[str, Any]
    folds: bool
    jobs: int

    def seconds(self, i: int) -> float:
        """Unit i's expected seconds (its last timing.json, else its epochs): its place in a queue."""
        from fraglib_study.experiments.schedule import recorded_seconds

        return recorded_seconds(self.out / "seeds" / f"seed{self.keys[i]}", int(self.spec.train_config.epochs))


def plan_study(
    paths: DataPaths,
    run: str,
    params: dict[str, Any],
    out: str | Path,
    dataset: str | None = None,
    seeds: list[int] | None = None,
    models_dir: str | None = None,
    folds: bool = False,
    keep: bool = False,
) -> Plan:
    """Run ``run``'s units (every seed × replicate) and their threads, checked before any trains; creates ``out``.
    ``paths`` may hold ``{seed}``; ``keep``: a unit's finished result without its checkpoint is kept
    (:func:`kept_result`); ``models_dir``: checkpoints in ``<models_dir>/seed<N>/`` (a DVC output) instead of beside
    the results (git); ``folds``: the k-fold protocol (module docstring; ``seeds`` default: every fold)."""
    spec = resolve_run(params, run, dataset)  # fails before any work
    ec = eval_config(params)
    head = fold_head(params, dataset) if folds else {}
    if folds and not paths.per_seed:
        raise ConfigError(f"--folds: --dataset-dir {paths.dataset} needs {{seed}} (one folder per fold)")
    default = list(range(head["folds"])) if folds else study_seeds(params, dataset, run)
    seeds = seeds if seeds is not None else default
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ConfigError(f"seeds {seeds}: expected a non-empty list without duplicates")
    jobs = study_jobs(params)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # under torchrun: the seeds one after another, each on all processes
        jobs = 1
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    units = [(s, r) for s in seeds for r in range(study_replicates(params, run, dataset, folds))]
    keys = [unit_key(s, r) for s, r in units]
    names = [f"{'fold' if folds else 'seed'} {k}" for k in keys]
    threads = seed_threads(len(units), jobs, torch.get_num_threads())
    work = [
        (paths, spec, ec, s, r, str(out), t, models_dir, keep, name) for (s, r), t, name in zip(units, threads, names)
    ]
    return Plan(run, spec, paths, out, seeds, units, keys, names, work, threads, head, folds, jobs)


def run_study(*args: Any, scheduler: str | None = None, **kwargs: Any) -> dict[str, Any]:
    """Train a run's every unit and summarise (arguments as :func:`plan_study`). Several units at once go to a Dask
    cluster (:mod:`fraglib_study.experiments.schedule`; ``scheduler``: its address, default a local one); one at a
    time they train in this process."""
    plan = plan_study(*args, **kwargs)
    run = plan.run
    n = len(plan.units)
    parallel = min(plan.jobs, n)
    shown = int(os.environ.get("RANK", "0")) == 0  # printing only: one process speaks under torchrun
    if shown:
        sys.stderr.write(
            f"[{run}] {n} training unit{'s' if n != 1 else ''} ({', '.join(plan.names)}), {parallel} at a time\n"
        )
    lines = Progress(run, n, "unit", parallel=parallel)
    done: dict[int, dict[str, Any]] = {}

    def finished(i: int, unit: tuple[dict, float, bool]) -> None:
        done[i], seconds, kept = unit
        if shown:
            lines.step(unit_line(plan.names[i], done[i], kept), seconds=seconds, timed=not kept)

    alone = int(os.environ.get("WORLD_SIZE", "1")) > 1  # under torchrun every rank trains each unit in this process
    if not alone and (parallel > 1 or scheduler or os.environ.get(ENV)):
        from fraglib_study.experiments import schedule

        with schedule.cluster(scheduler, max(plan.jobs, torch.get_num_threads())) as client:
            units = [(i, w, t, plan.seconds(i)) for i, (w, t) in enumerate(zip(plan.work, plan.threads))]
            for i, unit, error in schedule.wait(
                schedule.submit_all(client, units)
            ):  # as they finish; kept in the units' order below
                if error is not None:
                    raise error
                finished(i, unit)
    else:
        for i, w in enumerate(plan.work):
            finished(i, _run_seed(w))
    return finish_study(plan, [done[i] for i in range(n)])


def finish_study(plan: Plan, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's summary from its units' ``results`` (in ``plan.units``' order): ``metrics.json`` and ``history.csv``
    in ``plan.out``; returns the summary ({} on a torchrun rank other than 0, which summarises nothing)."""
    if "test" not in results[0]:  # not rank 0: rank 0 summarises
        return {}
    out, keys, spec, units = plan.out, plan.keys, plan.spec, plan.units
    # units on one test set share queries: the splits when the data is split per seed, else all one group
    groups = [s if plan.paths.per_seed else 0 for s, _ in units]
    summary = summarise(
        {"run": plan.run, "system": spec.system, "seeds": plan.seeds, "overrides": spec.overrides, **plan.head},
        keys,
        groups,
        [r["test"] for r in results],
    )
    if plan.folds:
        pool_fold_metrics(summary, out)
    if all("hubness" in r["test"] for r in results):  # mean over units (per unit: seeds/seed<N>/metrics.json)
        summary["hubness"] = hubness.average([r["test"]["hubness"] for r in results])
    summary["best_epoch"] = {k: r["best_epoch"] for k, r in zip(keys, results)}
    write_text(out / "metrics.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    lines = []
    for s in keys:
        h = (out / "seeds" / f"seed{s}" / "history.csv").read_text().splitlines()
        if not h or not h[0]:
            continue
        if not lines:
            lines.append("seed," + h[0])
        lines += [f"{s},{row}" for row in h[1:]]
    write_text(out / "history.csv", "\n".join(lines) + "\n" if lines else "seed,epoch\n")
    return summary


def parser() -> argparse.ArgumentParser:
    """The command's arguments (a DVC stage's ``study`` command is read with it by ``python -m fraglib_study pool``)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--run",
        "--run-name",
        dest="run",
        required=True,
        help="a name under params.yaml `runs` (under torchrun spell it --run-name: torchrun takes --run as its --run-path)",
    )
    ap.add_argument("--dataset-dir", required=True, help="may hold {seed} (one split per seed)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dataset", help="dataset section (its train/systems layers and its splits apply)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--features-dir", help="default <dataset-dir>/features")
    ap.add_argument("--seeds", help="comma-separated seeds (default study.seeds or <dataset>.splits)")
    ap.add_argument(
        "--folds",
        action="store_true",
        help="the k-fold protocol of <dataset>.folds: seeds 0 … k − 1, each trained as many times as a split "
        "(runs.<run>.replicates), metrics over the pooled test queries",
    )
    ap.add_argument(
        "--models-dir",
        help="checkpoints under <models-dir>/seed<N>/ (a DVC output) instead of beside "
        "the per-seed results in <out>/seeds/ (kept in git)",
    )
    ap.add_argument(
        "--keep-results",
        action="store_true",
        help="keep a unit whose result is here with this run's settings and whose checkpoint is not (its inputs are "
        "not re-checked: for adding replicates to results made on another machine from the same inputs)",
    )
    ap.add_argument(
        "--scheduler",
        help=f"a Dask scheduler's address (tcp://HOST:8786; default ${ENV}, else a local cluster when units train at "
        "once): docs/scale.md",
    )
    return ap


def study_arguments(
    argv: list[str] | None, params: dict[str, Any] | None = None
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """``argv`` parsed, and :func:`plan_study`'s arguments from it (``params``: default read from ``--params``,
    checked); claims the run's folders for this command's writes (each unit resumes from its checkpoint)."""
    ap = parser()
    args = ap.parse_args(argv)
    try:
        seeds = [int(x) for x in args.seeds.split(",")] if args.seeds else None
    except ValueError:
        ap.error(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 0,1,2")
    resumes(args.out, *([args.models_dir] if args.models_dir else []))
    call = dict(
        paths=DataPaths(args.dataset_dir, args.features_dir),
        run=args.run,
        params=read_checked(args.params) if params is None else params,
        out=args.out,
        dataset=args.dataset,
        seeds=seeds,
        models_dir=args.models_dir,
        folds=args.folds,
        keep=args.keep_results,
    )
    return args, call


@command
def main(argv: list[str] | None = None) -> None:
    args, call = study_arguments(argv)
    s = run_study(**call, scheduler=args.scheduler)
    print(
        f"{args.run}: annotation R@1 {s['annotation']['r1']:.1f} ± {s['annotation_sd']['r1']:.1f}, "
        f"search R@1 {s['search']['r1']:.1f} ± {s['search_sd']['r1']:.1f} over seeds {s['seeds']}"
    )
