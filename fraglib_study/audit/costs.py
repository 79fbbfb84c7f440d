"""What the work costs, from committed timings: one training of each system, and each ``make`` target in all.

    python -m fraglib_study costs start .venv/.clock-pascal1k                    # the Makefile, before a target's work
    python -m fraglib_study costs stop .venv/.clock-pascal1k "make pascal1k"     # after it: records the wall time

Two sources, both in git, neither estimated:

* ``runs/<study>/<run>/seeds/<unit>/timing.json``, beside each training unit's metrics: ``train_seconds``,
  ``epochs`` (required), ``eval_seconds``, ``device``, ``machine``, ``threads``, ``commit``, ``date``. Runs trained
  before the trainer wrote it have none and count as not measured.
* ``benchmarks/costs.json``: per ``make`` target and machine, its wall time the last time it ran to the end there
  (``target``, ``seconds``, ``commit`` and ``date`` at its start, and :func:`fraglib.core.device.hardware`: ``device``,
  ``machine``, ``threads``). ``stop`` replaces the record of the target on this machine and keeps other machines'
  (the same target costs another time on another CPU); a target that fails records nothing (make stops before
  ``stop``). The time covers the target's own work, after the environment is installed.

:func:`cost_table` is the one table of both (the index shows it). A training row is a study, a system and a device
kind (CPU, or GPU for CUDA/MPS): the median over that system's timed units of ``train_seconds`` and of
``train_seconds / epochs``. A target has a row per machine with its last record there, or "not measured yet".
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fraglib.core.outputs import command, git_revision, remove, updates, write_text

if TYPE_CHECKING:
    from fraglib_study.report.tables import Block, Table

COSTS = Path("benchmarks/costs.json")
TARGETS = ("make", "make pascal1k", "make synthetic-all", "make flickr8k", "make reports", "make test")
NOT_MEASURED = "not measured yet"
HEADER = ("what", "device", "wall time", "per epoch", "timed", "machine", "measured at")


def duration(seconds: float) -> str:
    """``seconds`` for a reader: "42.0 s", "12.5 min", "3.2 h"."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def device_kind(device: str) -> str:
    """CPU or GPU (CUDA, MPS) from a recorded device ("cpu", "cuda:0 NVIDIA H100 …"); "unknown" when not recorded."""
    d = device.strip().lower()
    if d.startswith("cpu"):
        return "CPU"
    return "GPU" if d.startswith(("cuda", "mps")) else "unknown"


def _number(path: Path, m: dict, key: str, positive: bool = False, optional: bool = False) -> float | None:
    """``m[key]`` checked: a finite non-negative (``positive``: > 0) number, or None where ``optional``."""
    v = m.get(key)
    if v is None and optional:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf") or (positive and v == 0):
        want = f"a finite {'positive' if positive else 'non-negative'} number{' or null' if optional else ''}"
        raise ValueError(f"{path}: {key}={v!r}; expected {want}")
    return float(v)


def read_timings(runs_dir: Path) -> list[dict[str, Any]]:
    """Every ``<runs_dir>/<run>/seeds/<unit>/timing.json`` with ``run`` and ``system`` added (the run's
    ``metrics.json``, else ``?``). ``train_seconds`` and ``epochs`` are null for a unit whose training was not
    clocked (a closed-form fit); ValueError naming a file where either is something else than a number."""
    from fraglib_study.report.loading import read_json

    out = []
    for path in sorted(Path(runs_dir).glob("*/seeds/*/timing.json")):
        m = read_json(path)
        if not isinstance(m, dict):
            raise ValueError(f"{path}: not a timing record (a JSON {type(m).__name__}, not an object)")
        _number(path, m, "train_seconds", optional=True)
        _number(path, m, "epochs", positive=True, optional=True)
        run = path.parents[2]
        summary = run / "metrics.json"
        system = read_json(summary).get("system", "?") if summary.exists() else "?"
        out.append({**m, "run": run.name, "system": system})
    return out


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _machine(m: dict[str, Any]) -> str:
    threads = f" ({m['threads']} thread{'' if m['threads'] == 1 else 's'})" if m.get("threads") else ""
    return str(m.get("machine") or "not recorded") + threads


def _when(m: dict[str, Any]) -> str:
    return ", ".join(str(m[k]) for k in ("commit", "date") if m.get(k)) or "not recorded"


def _eval(ts: list[dict[str, Any]]) -> str:
    """ " + x s test evaluation" (the median over the units that recorded it), or ""."""
    e = [t["eval_seconds"] for t in ts if isinstance(t.get("eval_seconds"), (int, float))]
    return f" + {duration(statistics.median(e))} test evaluation" if e else ""


def training_rows(
    title: str, timings: list[dict[str, Any]], apart: frozenset[str] = frozenset()
) -> list[tuple[str, ...]]:
    """Rows of one study: per system and device kind, the medians of its units' timings (the newest's machine and
    date; "not clocked" where no unit's training was); one row saying "not measured yet" when the study has none.
    The runs in ``apart`` (those after the papers: SCAN, VSE∞) get rows of their own, "`system` (`run`)"."""
    if not timings:
        return [(f"one training: {title}", "—", NOT_MEASURED, "—", "—", "—", "—")]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for t in timings:
        system = f"`{t['system']}` (`{t['run']}`)" if t["run"] in apart else f"`{t['system']}`"
        groups.setdefault((system, device_kind(str(t.get("device", "")))), []).append(t)
    rows = []
    for (system, kind), ts in sorted(groups.items()):
        newest = max(ts, key=lambda t: str(t.get("date", "")))
        clocked = [t for t in ts if t.get("train_seconds") is not None]
        per_epoch = [t["train_seconds"] / t["epochs"] for t in clocked if t.get("epochs")]
        rows.append(
            (
                f"one training: {title}, {system}",
                kind,
                (duration(statistics.median(t["train_seconds"] for t in clocked)) if clocked else "not clocked")
                + _eval(ts),
                duration(statistics.median(per_epoch)) if per_epoch else "—",
                _count(len(ts), "unit") + " of " + _count(len({t["run"] for t in ts}), "run"),
                _machine(newest),
                _when(newest),
            )
        )
    return rows


def read_costs(path: Path = COSTS) -> dict[tuple[str, str], dict[str, Any]]:
    """(target, machine) -> its record in ``path``, in the file's order ({} without the file); ValueError naming
    the file and a bad record."""
    from fraglib_study.report.loading import read_json

    if not path.exists():
        return {}
    if not path.is_file():
        raise ValueError(f"{path}: a folder, not the cost register")
    entries = read_json(path)
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of target records, got a {type(entries).__name__}")
    out = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("target"), str):
            raise ValueError(f"{path}: record {i} has no 'target' string")
        _number(path, e, "seconds")
        out[e["target"], str(e.get("machine", ""))] = e
    return out


def target_rows(costs: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, ...]]:
    """Per target of :data:`TARGETS` (then any other recorded one): a row per machine with its last wall time
    there, or one row "not measured"."""
    rows = []
    for target in dict.fromkeys([*TARGETS, *(t for t, _ in costs)]):
        records = [e for (t, _), e in costs.items() if t == target]
        if not records:
            rows.append((f"`{target}` in all", "—", NOT_MEASURED, "—", "—", "—", "—"))
        for e in records:
            rows.append(
                (f"`{target}` in all", device_kind(str(e.get("device", ""))), duration(e["seconds"]), "—", "—")
                + (_machine(e), _when(e))
            )
    return rows


def cost_table(root: str | Path = ".") -> Table:
    """The one cost table of the project at ``root``: one training of each system per study with timings, then
    every ``make`` target's total (:data:`HEADER`)."""
    from fraglib_study.report.registry import studies
    from fraglib_study.report.tables import Table

    root = Path(root)
    apart = frozenset(after_papers(root / "params.yaml"))
    rows = []
    for s in studies(root):
        rows += training_rows(s.title, read_timings(root / s.runs), apart)
        if s.folds and (root / s.folds).is_dir():
            rows += training_rows(f"{s.title.split(',')[0]}, k-fold protocol", read_timings(root / s.folds), apart)
    return Table(HEADER, tuple(rows + target_rows(read_costs(root / COSTS))))


def after_papers(params_file: Path) -> list[str]:
    """The runs of ``params_file`` marked ``after_papers`` (none without the file)."""
    import yaml

    if not params_file.is_file():
        return []
    runs = (yaml.safe_load(params_file.read_text()) or {}).get("runs") or {}
    return [r for r, e in runs.items() if isinstance(e, dict) and e.get("after_papers")]


def cost_blocks(root: str | Path = ".") -> list[Block]:
    """The index's section: a heading, what the numbers are and :func:`cost_table`."""
    from fraglib_study.report.tables import Heading

    return [
        Heading(2, "What it costs"),
        "One training: the median over a system's timed training units (`runs/<study>/<run>/seeds/*/timing.json`, "
        "the trainer's clock) of its training time and of that time per epoch, by the device it ran on. A `make` "
        "target in all: its wall time the last time it ran to the end on each machine (`benchmarks/costs.json`, the "
        "Makefile's clock; after the environment is installed). Each with the machine, the commit and the date it was "
        "measured at. Nothing here is estimated: what has no record says so.",
        cost_table(root),
    ]


MAX_SECONDS = 30 * 24 * 3600  # a clock older than this (or in the future) is not a target's run: refused


def read_clock(clock: Path) -> dict[str, Any]:
    """The clock file's record; ValueError naming ``clock`` when it is missing, not a clock file, or holds a start
    time that is not a finite UNIX time."""
    import math

    from fraglib_study.report.loading import read_json

    if not clock.exists():
        raise ValueError(f"{clock}: no clock file; `python -m fraglib_study costs start {clock}` writes it")
    if not clock.is_file():
        raise ValueError(f"{clock}: a folder, not a clock file")
    try:
        began = read_json(clock)
    except ValueError as exc:
        raise ValueError(f"{clock}: not a clock file ({exc})") from None
    if not isinstance(began, dict) or set(began) - {"start", "commit", "date", "clock"} or "start" not in began:
        raise ValueError(f"{clock}: not a clock file (expected an object with a 'start' time, as `start` writes)")
    t = began["start"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        raise ValueError(f"{clock}: start={t!r} is not a time (seconds since 1970, finite, positive)")
    return began


def start(clock: Path) -> None:
    """Write the clock file: the time, the code's revision and the UTC date at a target's start. Replaces only an
    earlier clock file (a target that failed leaves its clock); ValueError naming any other file at ``clock``."""
    if clock.exists() or clock.is_symlink():
        try:
            read_clock(clock)
        except ValueError as exc:
            raise ValueError(f"{clock}: refusing to replace it with a clock file: {exc}") from None
        updates(clock)
    began = time.time()
    today = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_text(clock, json.dumps({"start": began, "commit": git_revision(), "date": today}) + "\n")


def stop(clock: Path, target: str, path: Path = COSTS) -> dict[str, Any]:
    """Record ``target``'s wall time since :func:`start` wrote ``clock`` into ``path`` (replacing its record from
    this machine) and remove the clock; ValueError naming a missing or damaged clock."""
    end = time.time()  # before the imports below: this module starts without torch (`make` times its targets)
    from fraglib.core.device import hardware, select_device

    began = read_clock(clock)
    seconds = end - began["start"]
    if not 0 <= seconds <= MAX_SECONDS:
        raise ValueError(
            f"{clock}: its start lies {abs(seconds):.3g} s {'in the future' if seconds < 0 else 'back, over 30 days'}: "
            "not a clock of this target's run; run `start` again"
        )
    costs = read_costs(path)  # a damaged register stops us before anything is written
    record = {
        "target": target,
        "seconds": round(seconds, 1),
        "commit": began.get("commit", "unknown"),
        "date": began.get("date", "unknown"),
        **hardware(select_device()[0]),
    }
    costs[target, str(record.get("machine", ""))] = record
    updates(path)  # a register: this machine's record of the target is replaced, the others kept
    write_text(path, json.dumps(list(costs.values()), indent=1) + "\n")
    updates(clock)  # read and checked above: a clock file, this target's
    remove(clock)
    return record


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("start", help="write the clock file").add_argument("clock", type=Path)
    p = sub.add_parser("stop", help="record the wall time since start")
    p.add_argument("clock", type=Path)
    p.add_argument("target", help='the name in the table, e.g. "make pascal1k"')
    p.add_argument("--out", type=Path, default=COSTS)
    args = ap.parse_args(argv)
    try:
        if args.command == "start":
            start(args.clock)
        else:
            r = stop(args.clock, args.target, args.out)
            print(f"{r['target']}: {duration(r['seconds'])} (recorded in {args.out})")
    except ValueError as exc:
        ap.error(str(exc))


def timeline_summary(rec: dict[str, Any]) -> str:
    """One line of a timeline record (:mod:`fraglib_study.bench.timeline`): the wall time and the idle-core fractions."""
    pct = lambda x: "n/a" if x is None else f"{x:.0%}"
    ran = sum(s["status"] != "skipped" for s in rec["stages"])
    return (
        f"{duration(rec['seconds'])} on {rec['cores']} cores, {ran} of {len(rec['stages'])} stages run; idle cores: "
        f"{pct(rec['idle_core_fraction'])} of the machine, {pct(rec['command_idle_core_fraction'])} counting only "
        "the command's processes"
    )


def timeline_title(rec: dict[str, Any]) -> str:
    """The title of a timeline record's figure: the command, its start and :func:`timeline_summary`, the machine."""
    failed = f", FAILED (status {rec['status']})" if rec.get("failed") else ""
    shown = " ".join([Path(rec["command"][0]).name, *rec["command"][1:]]) if rec.get("command") else ""
    return (
        f"{shown}{failed}, {rec.get('start', '')}: {timeline_summary(rec)}\n"
        f"a stage: its minutes, idle cores of the machine | counting only the command's processes. {rec.get('machine', '')}"
    )
