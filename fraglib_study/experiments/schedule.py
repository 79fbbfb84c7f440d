"""Training units on a Dask cluster: two local cores, or a cluster's nodes, with one code path (issue #80).

A unit (one seed × replicate of a run) is a Dask task that trains in a fresh Python process on the worker that takes
it, with the torch threads the study gave it (:func:`fraglib_study.experiments.study.seed_threads`), so its
arithmetic is the same whatever ran before or beside it. A task asks for as many ``cores`` (a
Dask worker resource) as it has threads, so two one-thread units share two cores and a two-thread unit has them
alone. Tasks go longest first (:func:`priority`), and are submitted in that order.

Where the units run (:func:`cluster`): ``--scheduler ADDRESS`` (or ``FRAGLIB_DASK_SCHEDULER``), a running Dask
scheduler whose workers share this repository's folder and environment (a cluster: docs/scale.md); else a local
cluster in this process (one worker, a thread per core, no dashboard), started in well under a second.

Why Dask (``distributed``): the same client code runs on a laptop's cores and on a cluster — any Dask scheduler,
started by hand (``dask scheduler`` / ``dask worker``), over SSH, or on Slurm, PBS or SGE by ``dask-jobqueue`` — with
task priorities and per-task resources, in pure-Python wheels of a few MB. Ray is a much larger install for what
is used here; submitit targets Slurm and has no local pool that caps concurrency at the cores.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

from fraglib.core.outputs import write_bytes

ENV = "FRAGLIB_DASK_SCHEDULER"  # a scheduler's address, as --scheduler
RESOURCE = "cores"  # the worker resource a unit asks for: one per torch thread


THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")  # a Dask nanny sets them to 1


@contextlib.contextmanager
def cluster(address: str | None, slots: int) -> Iterator[Any]:
    """A ``distributed.Client``: on the scheduler at ``address`` (else ``$FRAGLIB_DASK_SCHEDULER``), else on a local
    cluster of ``slots`` cores in this process; closed on exit (a local cluster's running units die with it)."""
    from distributed import Client, LocalCluster

    address = address or os.environ.get(ENV) or None
    if address:
        with Client(address) as client:
            yield client
        return
    n = max(1, slots)
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=n, processes=False, resources={RESOURCE: n}, dashboard_address=None
        ) as lc,
        Client(lc) as client,
    ):
        yield client


def priority(threads: int, seconds: float) -> int:
    """A unit's Dask priority (higher starts first): units that need several cores first (they wait for the machine
    to empty), then the longest (``seconds``: its recorded time, else an estimate) first."""
    return int(threads) * 10**7 + int(min(seconds, 10**7 - 1))


def unit_process(work: tuple, root: str, env: dict[str, str | None]) -> tuple[dict, float, bool]:
    """Run :func:`fraglib_study.experiments.study._run_seed` on ``work`` in a fresh Python process
    (:func:`~fraglib_study.experiments.study.unit_main`: its own torch threads and state; it dies with this process on
    Linux), in folder ``root`` (the submitting repository's: its paths are relative) with ``env``'s thread variables
    (the submitter's; None: unset), so a cluster's worker trains as the submitting machine would; returns what
    ``_run_seed`` returns. RuntimeError naming the unit when it fails (its lines, on stderr, say why)."""
    child = {k: v for k, v in os.environ.items() if k not in env}
    child.update({k: v for k, v in env.items() if v is not None})
    with tempfile.TemporaryDirectory(prefix="fraglib-unit-") as tmp:
        args, result = Path(tmp) / "work.pkl", Path(tmp) / "result.pkl"
        write_bytes(args, pickle.dumps(work))
        code = "from fraglib_study.experiments.study import unit_main; unit_main()"
        cmd = [sys.executable, "-c", code, str(args), str(result)]
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, cwd=root, env=child)
        if done.returncode != 0:
            raise RuntimeError(f"training unit {work[-1]!r} of {work[1].run!r} failed (exit status {done.returncode})")
        return pickle.loads(result.read_bytes())


def submit_all(client: Any, units: list[tuple[Any, tuple, int, float]]) -> dict[Any, Any]:
    """Units ``(key, work, threads, seconds)`` as Dask tasks, submitted highest priority first (a free worker starts
    what reaches it first); future -> key. ConfigError when no worker of the cluster has the cores a unit asks for
    (its workers need ``--resources cores=N``), rather than a wait without end."""
    from fraglib.core.config import ConfigError

    need = max((t for _, _, t, _ in units), default=1)
    workers = client.scheduler_info().get("workers", {}).values()
    most = max((w.get("resources", {}).get(RESOURCE, 0) for w in workers), default=0)
    if most < need:
        raise ConfigError(
            f"the Dask cluster's workers offer at most {most:g} '{RESOURCE}' and a unit needs {need}: start each with "
            f"`dask worker ADDRESS --nthreads N --resources {RESOURCE}=N` (N >= {need}; docs/scale.md)"
        )
    root, env = os.getcwd(), {k: os.environ.get(k) for k in THREAD_VARS}
    order = sorted(units, key=lambda u: -priority(u[2], u[3]))
    return {
        client.submit(
            unit_process, work, root, env, resources={RESOURCE: t}, priority=priority(t, sec), pure=False
        ): key
        for key, work, t, sec in order
    }


def recorded_seconds(unit_dir: Path, epochs: int) -> float:
    """A unit's expected seconds: its last ``timing.json`` (training + evaluation) where one is here, else its epochs
    (a unit of unknown cost counts as one second an epoch)."""
    import json

    try:
        t = json.loads((unit_dir / "timing.json").read_text())
        return float(t.get("train_seconds", 0)) + float(t.get("eval_seconds", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return float(epochs)


def wait(futures: dict[Any, Any]) -> Iterator[tuple[Any, Any, BaseException | None]]:
    """``(key, result, None)`` or ``(key, None, error)`` for each of ``futures`` (future -> key) as it finishes."""
    from distributed import as_completed

    for f in as_completed(list(futures)):
        try:
            yield futures[f], f.result(), None
        except Exception as exc:  # noqa: BLE001 - the caller names the unit and goes on with the others
            yield futures[f], None, exc
