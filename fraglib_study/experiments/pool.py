"""Train the training stages of DVC pipelines that are not up to date together: every unit of every such stage on
one Dask cluster, longest first (issue #80).

    python -m fraglib_study pool dvc.yaml:train_synthetic          # what `make` runs before `dvc repro`
    python -m fraglib_study pool studies/pascal1k/dvc.yaml:train_folds --scheduler tcp://HEAD:8786   # a cluster

1. The targets' stages (DVC addresses; a ``foreach`` group names all its items): each must run
   ``python -m fraglib_study study`` from the repository's root (else an error naming it, before any work).
2. The stages they depend on are brought up to date first (``dvc repro`` of them, its output as it comes).
3. Of the targets, the stages DVC does not find up to date (``dvc status``) are planned as their commands would plan
   them (:func:`fraglib_study.experiments.study.plan_study`: the same units, seeds and threads, so the same
   arithmetic) and all their units submitted at once (:mod:`fraglib_study.experiments.schedule`).
4. A stage whose units have all finished is summarised as its command would (``metrics.json``, ``history.csv``) and
   recorded by ``dvc commit`` (its dependencies, parameters and outputs as they are now: what ``dvc repro`` records
   after running its command). ``dvc repro`` then finds it up to date.

A failed unit fails its stage only (not committed: DVC still lists it as changed); the other stages go on, and the
command ends with exit status 1 naming the failed stages. DVC's run cache is not consulted: a stage it could restore
from there trains again. The stages' lines for ``make``'s timeline (:mod:`fraglib_study.bench.timeline`): one
``Running stage 'pool TARGET…'`` line before the training and DVC's lock line after the last commit.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from fraglib.core.config import ConfigError
from fraglib.core.outputs import command
from fraglib.core.progress import Progress

STUDY = ["python", "-m", "fraglib_study", "study"]


def dvc(*args: str, capture: bool = False) -> str:
    """Run ``dvc ARGS`` (the one beside this Python, else on PATH) from the current folder; its stdout when
    ``capture``. CalledProcessError when it fails."""
    exe = Path(sys.executable).with_name("dvc")
    cmd = [str(exe) if exe.exists() else "dvc", *args]
    done = subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE if capture else None)
    return done.stdout if capture else ""


def study_argv(stage: Any) -> list[str]:
    """The arguments of a stage's ``python -m fraglib_study study`` command. ConfigError naming the stage when its
    command is another, or it runs from another folder than the repository's root."""
    cmd = stage.cmd if isinstance(stage.cmd, str) else None
    words = shlex.split(cmd) if cmd else []
    if words[: len(STUDY)] != STUDY:
        raise ConfigError(
            f"{stage.addressing}: its command is not `{' '.join(STUDY)} ...` (the pool trains only those)"
        )
    if Path(stage.wdir).resolve() != Path.cwd().resolve():
        raise ConfigError(
            f"{stage.addressing}: it runs in {stage.wdir}, not in the repository's root (run the pool there)"
        )
    return words[len(STUDY) :]


def collect(targets: list[str]) -> tuple[list[Any], list[str]]:
    """The targets' stages (each a study command: :func:`study_argv`) and the addresses of the other stages they
    depend on directly."""
    from dvc.repo import Repo

    repo = Repo(".")
    stages = [s for t in targets for s in repo.stage.collect(t)]
    if not stages:
        raise ConfigError(f"{' '.join(targets)}: no DVC stage")
    for s in stages:
        study_argv(s)
    graph = repo.index.graph  # an edge runs from a stage to a stage it depends on
    chosen = {s.addressing for s in stages}
    upstream = sorted({d.addressing for s in stages for d in graph.successors(s)} - chosen)
    return stages, upstream


def stale(addresses: list[str]) -> list[str]:
    """Those of ``addresses`` that ``dvc status`` does not find up to date, in their order."""
    changed = json.loads(dvc("status", "--json", *addresses, capture=True) or "{}")
    return [a for a in addresses if a in changed]


def train_stages(stages: list[Any], scheduler: str | None, label: str = "pool") -> list[str]:
    """Train ``stages`` (study commands) on one cluster and commit each as it completes; the failed ones' addresses.
    ``label``: the stage name of its line for make's timeline."""
    import torch

    from fraglib_study.experiments import schedule
    from fraglib_study.experiments.study import finish_study, plan_study, study_arguments, unit_line

    plans = {}
    for s in stages:  # every stage checked and planned before any unit trains
        _, call = study_arguments(study_argv(s))
        plans[s.addressing] = plan_study(**call)
    queue = [(a, i) for a, p in plans.items() for i in range(len(p.units))]
    slots = max(max(p.jobs for p in plans.values()), torch.get_num_threads())
    print(f"Running stage '{label}':", flush=True)
    sys.stderr.write(f"[pool] {len(queue)} training units of {len(plans)} stages\n")
    lines = Progress("pool", len(queue), "unit", parallel=slots)
    results: dict[str, dict[int, Any]] = {a: {} for a in plans}
    failed: list[str] = []
    with schedule.cluster(scheduler, slots) as client:
        futures = {
            schedule.submit(client, plans[a].work[i], plans[a].threads[i], plans[a].seconds(i)): (a, i)
            for a, i in queue
        }
        for (a, i), unit, error in schedule.wait(futures):
            p = plans[a]
            if error is not None:
                sys.stderr.write(f"[pool] {a} {p.names[i]} failed: {error}\n")
                if a not in failed:
                    failed.append(a)
                continue
            m, seconds, kept = unit
            results[a][i] = m
            lines.step(f"{p.run} " + unit_line(p.names[i], m, kept), seconds=seconds, timed=not kept)
            if len(results[a]) == len(p.units) and a not in failed:
                try:
                    finish_study(p, [results[a][k] for k in range(len(p.units))])
                    dvc("commit", "--force", "--quiet", a)
                except (OSError, ValueError, subprocess.CalledProcessError) as exc:
                    sys.stderr.write(f"[pool] {a}: its summary or commit failed: {exc}\n")
                    failed.append(a)
    return failed


@command
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("targets", nargs="+", help="DVC stages or foreach groups (dvc.yaml:train_synthetic)")
    ap.add_argument("--scheduler", help="a Dask scheduler's address (default $FRAGLIB_DASK_SCHEDULER, else local)")
    ap.add_argument("--dry", action="store_true", help="say which stages would train, train none")
    args = ap.parse_args(argv)
    stages, upstream = collect(args.targets)
    if upstream and not args.dry:
        dvc("repro", *upstream)
    todo = stale([s.addressing for s in stages])
    print(f"[pool] {len(todo)} of {len(stages)} stages not up to date: {' '.join(todo) or '-'}", file=sys.stderr)
    if args.dry or not todo:
        return 0
    chosen = [s for s in stages if s.addressing in todo]
    failed = train_stages(chosen, args.scheduler, f"pool {' '.join(args.targets)}")
    for lock in sorted({str(Path(s.dvcfile.relpath).with_suffix(".lock")) for s in chosen}):
        print(f"Updating lock file '{lock}'", flush=True)  # the end of the pool's stage in make's timeline
    if failed:
        print(f"[pool] failed: {' '.join(failed)} (not committed)", file=sys.stderr)
        return 1
    return 0
