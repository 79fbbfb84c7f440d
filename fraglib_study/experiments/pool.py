"""``dvc repro`` with the stages side by side: the stages of DVC pipelines that are not up to date, on one Dask
cluster, each as soon as the stages it depends on are done (issue #80).

    python -m fraglib_study pool                     # dvc.yaml: what `make` runs before `dvc repro`
    python -m fraglib_study pool studies/pascal1k/dvc.yaml:train_folds --scheduler tcp://HEAD:8786   # a cluster

1. The targets' stages (a pipeline file names all its stages, a ``foreach`` group all its items). The stages they
   depend on outside the targets are brought up to date first (``dvc repro`` of them).
2. The stages to run: those ``dvc status`` does not find up to date and every stage after one of them (``dvc repro``
   would skip a stage whose inputs came out unchanged; the pool runs it).
3. A stage whose command is ``python -m fraglib_study study`` runs as its training units, all submitted when it is
   ready, longest first, each asking for its threads as cores (:mod:`fraglib_study.experiments.schedule`; planned as
   its command plans them, :func:`fraglib_study.experiments.study.plan_study`: the same units, seeds and threads, so
   the same arithmetic), then its summary as its command writes it. Any other stage runs its command as ``dvc repro``
   does (:func:`run_command`: its non-persistent outputs removed first, then the command in a shell in its folder)
   on the cores its dvc.yaml entry's ``meta: {cores: N}`` asks for (default all: it runs alone).
4. Each stage, as it ends and before any stage after it starts, is recorded by ``dvc commit`` (its dependencies, parameters and outputs as they are then:
   what ``dvc repro`` records after running its command); ``dvc repro`` then finds it up to date.

As with ``dvc repro`` (over a longer time), a stage records its dependencies as they are when it is committed: edit
no code or parameter it reads while the pool runs. A failed stage (a unit, its command or its summary) is not
committed (DVC still lists it as changed; a study's queued units are cancelled, its running ones finish), and the
stages after it do not run; the others go on, and the command ends with exit status 1 naming them. DVC's run cache
is not consulted: a stage it could restore from there runs again. For ``make``'s timeline
(:mod:`fraglib_study.bench.timeline`) each stage prints ``Running stage '<name>':`` when it starts and ``Finished
stage '<name>'`` when it ends (with `` (failed)`` when it failed).
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
from fraglib.core.outputs import command, remove_tree, updates
from fraglib.core.progress import Progress

STUDY = ["python", "-m", "fraglib_study", "study"]
SHELL = "$~;&|<>`"  # characters a shell reads otherwise than shlex.split


def dvc(*args: str, capture: bool = False) -> str:
    """Run ``dvc ARGS`` (the one beside this Python, else on PATH) from the current folder; its stdout when
    ``capture``. CalledProcessError when it fails."""
    exe = Path(sys.executable).with_name("dvc")
    cmd = [str(exe) if exe.exists() else "dvc", *args]
    done = subprocess.run(cmd, check=True, text=True, stdout=subprocess.PIPE if capture else None)
    return done.stdout if capture else ""


def say(text: str) -> None:
    """``text`` and its newline to stdout in one write (stages side by side print from several threads: a line of one
    never runs into another's, which make's timeline reads)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def study_argv(stage: Any, strict: bool = True) -> list[str] | None:
    """The arguments of a stage's ``python -m fraglib_study study`` command (not ``strict``: None for another command).
    ConfigError naming the stage when its command is another, holds what a shell would read otherwise than :func:`shlex.split` (``$``, ``~``, ``;``, ``&``,
    ``|``, redirections, backquotes), or runs from another folder than the repository's root."""
    cmd = stage.cmd if isinstance(stage.cmd, str) else None
    words = shlex.split(cmd) if cmd and not set(SHELL) & set(cmd) else []
    if words[: len(STUDY)] != STUDY:
        if not strict:
            return None
        raise ConfigError(
            f"{stage.addressing}: its command is not a plain `{' '.join(STUDY)} ...` (the pool trains only those)"
        )
    if Path(stage.wdir).resolve() != Path.cwd().resolve():
        raise ConfigError(
            f"{stage.addressing}: it runs in {stage.wdir}, not in the repository's root (run the pool there)"
        )
    return words[len(STUDY) :]


def collect(targets: list[str]) -> tuple[list[Any], dict[str, set[str]], list[str]]:
    """The targets' stages (a pipeline file names all its stages, a ``foreach`` group all its items), the addresses of
    the targets each depends on directly, and the addresses of the stages outside the targets they depend on."""
    from dvc.repo import Repo

    repo = Repo(".")
    stages = list({s.addressing: s for t in targets for s in repo.stage.collect(t)}.values())
    if not stages:
        raise ConfigError(f"{' '.join(targets)}: no DVC stage")
    graph = repo.index.graph  # an edge runs from a stage to a stage it depends on
    chosen = {s.addressing for s in stages}
    after = {s.addressing: {d.addressing for d in graph.successors(s)} & chosen for s in stages}
    upstream = sorted({d.addressing for s in stages for d in graph.successors(s)} - chosen)
    return stages, after, upstream


def to_run(stages: list[Any], after: dict[str, set[str]]) -> list[str]:
    """The stages ``dvc status`` does not find up to date and every stage after one of them (as ``dvc repro`` would
    run them, save that a stage after one whose outputs came out unchanged runs too), in the targets' order.
    ConfigError for a frozen or always-changed one (``dvc repro`` decides those)."""
    addresses = [s.addressing for s in stages]
    out = set(json.loads(dvc("status", "--json", *addresses, capture=True) or "{}")) & set(addresses)
    grew = True
    while grew:
        more = {a for a in addresses if after[a] & out} - out
        out |= more
        grew = bool(more)
    for s in stages:
        if s.addressing in out and (s.frozen or s.always_changed):
            raise ConfigError(f"{s.addressing}: frozen or always changed (dvc repro decides those, not the pool)")
    return [a for a in addresses if a in out]


def stage_cores(stage: Any, slots: int) -> int:
    """The cores a stage's command asks for: ``meta: {cores: N}`` in its dvc.yaml entry (a page renders on one),
    else every slot (it runs alone), at most ``slots``."""
    n = ((stage.meta or {}) if isinstance(stage.meta, dict) else {}).get("cores", slots)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"{stage.addressing}: meta.cores={n!r}, expected a positive integer")
    return min(n, slots)


def run_command(name: str, cmd: str, wdir: str, outs: list[str]) -> str:
    """Run a stage's command as ``dvc repro`` does: its non-persistent outputs (``outs``, absolute paths) removed
    first, then the command in a shell in the stage's folder ``wdir``. RuntimeError naming the stage when it fails."""
    for o in outs:  # claimed by the pool (fraglib.core.outputs.updates) when it planned the stage
        remove_tree(o)
    say(f"Running stage '{name}':\n> {cmd}")
    done = subprocess.run(cmd, shell=True, cwd=wdir, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"stage {name!r} failed: `{cmd}` exited with {done.returncode}")
    return name


def run_pool(stages: list[Any], after: dict[str, set[str]], scheduler: str | None) -> list[str]:
    """Run ``stages`` (the ones to run, :func:`to_run`) on one Dask cluster, each as soon as the stages it depends on
    among them are done: a study stage as its units (:mod:`fraglib_study.experiments.schedule`) and then its summary,
    any other as its command (:func:`run_command`, :func:`stage_cores`); each committed as it ends, before the stages
    after it start. The stages that
    failed, or did not run because one before them failed."""
    import torch

    from fraglib_study.experiments import schedule
    from fraglib_study.experiments.study import finish_study, plan_study, study_arguments, unit_line

    plans = {}
    for s in stages:  # every study stage checked and planned before anything runs
        argv = study_argv(s, strict=False)
        if argv is not None:
            plans[s.addressing] = plan_study(**study_arguments(argv)[1])
    slots = max([torch.get_num_threads(), *(p.jobs for p in plans.values())])
    by = {s.addressing: s for s in stages}
    waits = {a: after[a] & set(by) for a in by}
    n_units = sum(len(p.units) for p in plans.values())
    sys.stderr.write(f"[pool] {len(by)} stages ({len(plans)} of them {n_units} training units) on {slots} cores\n")
    lines = Progress("pool", n_units, "unit", parallel=slots)
    results: dict[str, dict[int, Any]] = {a: {} for a in plans}
    done: set[str] = set()
    failed: list[str] = []
    started: set[str] = set()
    with schedule.cluster(scheduler, slots) as client:
        from distributed import as_completed

        ac = as_completed()
        keys: dict[Any, tuple[str, int | None]] = {}

        def start_ready() -> None:
            for a in by:
                if a in started or not waits[a] <= done | set(failed):
                    continue
                started.add(a)
                if waits[a] & set(failed):
                    failed.append(a)  # not run: a stage before it failed
                    sys.stderr.write(f"[pool] {a}: not run, a stage it depends on failed\n")
                    continue
                if a in plans:
                    p = plans[a]
                    say(f"Running stage '{a}': {len(p.units)} training unit(s)")
                    units = [((a, i), p.work[i], p.threads[i], p.seconds(i)) for i in range(len(p.units))]
                    futures = schedule.submit_all(client, units)
                else:
                    s = by[a]
                    outs = [str(o.fs_path) for o in s.outs if not o.persist]
                    updates(*outs)  # dvc repro clears them before the command: so do we
                    c = stage_cores(s, slots)
                    f = client.submit(run_command, a, s.cmd, str(s.wdir), outs, resources={schedule.RESOURCE: c},
                                      priority=schedule.priority(c, 0), pure=False)  # fmt: skip
                    futures = {f: (a, None)}
                keys.update(futures)
                for f in futures:
                    ac.add(f)

        def finished(a: str) -> None:
            """Commit stage ``a`` before any stage after it starts: ``dvc commit`` moves its outputs into DVC's cache
            and links them back, and a stage reading them meanwhile would find them missing."""
            try:
                dvc("commit", "--force", "--quiet", a)
            except subprocess.CalledProcessError as exc:
                fail(a, f"dvc commit failed: {exc}")
                return
            done.add(a)
            say(f"Finished stage '{a}'")  # its end in make's timeline

        def fail(a: str, why: str) -> None:
            if a not in failed:
                sys.stderr.write(f"[pool] {a} failed: {why}\n")
                say(f"Finished stage '{a}' (failed)")
                failed.append(a)

        start_ready()
        for f in ac:
            a, i = keys.pop(f)
            try:
                unit = f.result()
            except Exception as exc:  # noqa: BLE001 - the stage fails; the others go on
                if a not in failed:  # a study's other units: cancelled when queued (running ones finish)
                    fail(a, f"{'' if i is None else plans[a].names[i] + ': '}{exc}")
                    client.cancel([g for g, (b, _) in keys.items() if b == a])
                start_ready()
                continue
            if i is None:
                finished(a)
            elif a not in failed:
                p = plans[a]
                m, seconds, kept = unit
                results[a][i] = m
                lines.step(f"{p.run} " + unit_line(p.names[i], m, kept), seconds=seconds, timed=not kept)
                if len(results[a]) == len(p.units):
                    try:
                        finish_study(p, [results[a][k] for k in range(len(p.units))])
                        finished(a)
                    except Exception as exc:  # noqa: BLE001 - the stage fails; the others go on
                        fail(a, f"its summary: {exc}")
            start_ready()
    return failed


@command
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "targets", nargs="*", default=["dvc.yaml"], help="pipeline files, stages or foreach groups (default dvc.yaml)"
    )
    ap.add_argument("--scheduler", help="a Dask scheduler's address (default $FRAGLIB_DASK_SCHEDULER, else local)")
    ap.add_argument("--dry", action="store_true", help="say which stages would run, run none")
    args = ap.parse_args(argv)
    stages, after, upstream = collect(args.targets)
    if upstream and not args.dry:
        dvc("repro", *upstream)
    todo = to_run(stages, after)
    print(f"[pool] {len(todo)} of {len(stages)} stages to run: {' '.join(todo) or '-'}", file=sys.stderr)
    if args.dry or not todo:
        return 0
    chosen = [s for s in stages if s.addressing in todo]
    failed = run_pool(chosen, after, args.scheduler)
    for lock in sorted({str(Path(s.dvcfile.relpath).with_suffix(".lock")) for s in chosen}):
        print(f"Updating lock file '{lock}'", flush=True)
    if failed:
        print(f"[pool] failed: {' '.join(failed)} (not committed)", file=sys.stderr)
        return 1
    return 0
