"""A command's timeline (issue #80): each DVC stage's start and end, each training unit's, and the cores' use.

    python -m fraglib_study bench timeline record --out benchmarks/timeline.json -- dvc repro   # `make` records
    #   the pool (fraglib_study/experiments/pool.py: its stages side by side) and then dvc repro
    python -m fraglib_study bench timeline draw benchmarks/timeline.json --out timeline.svg

``record`` runs the command and passes its output through as it comes (where our stdout or stderr is a terminal
the command writes to a pseudo-terminal of the same size, so it still sees one and prints as it would; elsewhere
to a pipe); the command's exit status is ours, and a signal that ended it ends us. It timestamps DVC's lines
``Running stage '<name>':`` (the stage runs), ``Stage '<name>' didn't change, skipping`` (skipped) and
``Stage '<name>' is cached - skipping run`` (restored from DVC's run cache), and the pool's ``Finished stage '<name>'``
(the end of a stage that ran beside others). A stage runs from its line to DVC's
``Updating lock file`` line after it (its outputs saved), else to the next stage's line or the command's end; the
time before its line since the previous one (``check_from``) is DVC checking it (hashing its dependencies; the
first stage's includes DVC's start-up). Every ``--interval`` seconds it reads the machine's CPU counters
(``/proc/stat``: busy is all but idle and iowait, over every process of the machine) and the CPU time of the
command's process tree (``/proc/<pid>/stat`` of it and of every descendant, with the children they waited for).

The record (JSON, written at the end, also when the command fails: ``status``, ``failed``): the command, start
and end, ``cores`` (``os.cpu_count()``), the machine (:func:`fraglib.core.device.hardware`), ``samples`` (``[t, busy,
command]``: seconds since the start at the end of each interval, the share of all cores busy over it, and the
share the command's processes used; both None for an interval in which the CPU counters did not tick), ``stages`` (``name``, ``status`` ran / skipped / restored, ``check_from``,
``start``, ``end``, seconds since the command's start, and the two shares over the stage), ``units`` (each
training unit whose ``runs/<study>/<run>/seeds/<unit>/timing.json`` was written during the command: it ends when
written and starts ``train_seconds + eval_seconds`` before, with its ``threads`` and ``machine``), and the
idle-core fraction 1 − CPU busy time ÷ (wall time × cores), overall and per stage: of the machine
(``idle_core_fraction``) and counting only the command's processes (``command_idle_core_fraction``); the two
differ by what else ran on the machine. Without ``/proc`` (not Linux) the command still runs; the shares are null.

``--out`` replaces only an earlier timeline record (another file there is refused before the command runs, as
the output contract wants, unless ``--overwrite``). ``draw`` makes a figure of a record (format from the suffix of
``--out``: .svg, .png or .pdf): a bar per stage on the time axis, the training units in lanes below them, and the
share of the cores busy over time, idle shaded.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from bisect import bisect_left
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from fraglib.core.outputs import OVERWRITE_HELP, atomic, claim_cli, command, git_revision, write_text
from fraglib_study.audit.costs import timeline_summary
from fraglib_study.audit.costs import timeline_title as title

KIND = "fraglib command timeline"  # marks a record: --out replaces only a file that carries it
DATE = "%Y-%m-%dT%H:%M:%SZ"
FORMATS = (".svg", ".png", ".pdf")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_EVENTS = (
    (re.compile(r"Running stage '([^']+)':"), "ran"),
    (re.compile(r"Stage '([^']+)' didn't change, skipping"), "skipped"),
    (re.compile(r"Stage '([^']+)' is cached - skipping run"), "restored"),
    (re.compile(r"(?:Updating|Generating) lock file '([^']+)'"), "lock"),
    (re.compile(r"^Finished stage '([^']+)'"), "done"),  # the pool's (stages side by side): that stage's end
)


# ----------------------------------------------------------------------------- DVC's lines
def parse_line(line: str) -> tuple[str, str] | None:
    """(kind, name) of a DVC line that starts a stage (kind ran, skipped or restored) or ends one (kind lock, the
    lock file's name); None for any other line. Colour codes are ignored."""
    text = _ANSI.sub("", line)
    for pattern, kind in _EVENTS:
        m = pattern.search(text)
        if m:
            return kind, m.group(1)
    return None


def parse_log(text: str) -> list[tuple[int, str, str]]:
    """(line number, kind, name) of every stage line of a captured DVC log (:func:`parse_line`)."""
    out = []
    for i, line in enumerate(re.split(r"\r\n|\r|\n", text)):
        event = parse_line(line)
        if event:
            out.append((i, *event))
    return out


def stages_from(events: list[tuple[float, str, str]], end: float) -> list[dict[str, Any]]:
    """Stages from timed DVC lines ``(t, kind, name)`` in order (:func:`parse_line`) and the command's ``end``: each
    with ``check_from`` (the previous line's time, 0 for the first), ``start`` (its line) and ``end`` (the lock
    file's line after it, else the next stage's line, else ``end``; a skipped stage ends where it starts). A stage
    with a ``Finished stage`` line (the pool's, side by side with others) runs from its line to that one, with no
    checking time, and a later line skipping it (``dvc repro`` after the pool) adds nothing."""
    ends = {name: t for t, kind, name in events if kind == "done"}
    stages: list[dict[str, Any]] = []
    seen: set[str] = set()
    last = 0.0
    for t, kind, name in events:
        open_stage = stages[-1] if stages and stages[-1]["end"] is None else None
        if kind == "done" or (kind == "skipped" and name in seen):
            continue
        if kind == "lock":
            if open_stage is not None:
                open_stage["end"] = t
            last = t
            continue
        seen.add(name)
        if name in ends:
            stages.append({"name": name, "status": kind, "check_from": t, "start": t, "end": max(ends[name], t)})
            continue
        if open_stage is not None:  # it ran until this line: no time left for checking this one
            open_stage["end"] = last = t
        stages.append(
            {"name": name, "status": kind, "check_from": last, "start": t, "end": t if kind == "skipped" else None}
        )
        last = t
    for s in stages:  # the last one, or one the pool started that never printed its end
        if s["end"] is None:
            s["end"] = max(end, s["start"])
    return stages


# ----------------------------------------------------------------------------- the CPU counters
def cpu_counters() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot (``/proc/stat``; busy = total − idle − iowait; guest time
    is inside user time); None without ``/proc``."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
        v = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError, IndexError):
        return None
    total = sum(v)
    return total - v[3] - v[4], total


def tree_ticks(pid: int) -> int | None:
    """CPU clock ticks (user + system) of process ``pid`` and its descendants, the children each waited for
    included; None without ``/proc``."""
    try:
        names = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return None
    children: dict[int, list[int]] = {}
    own: dict[int, int] = {}
    for name in names:
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                data = fh.read()
            rest = data[data.rindex(b")") + 2 :].split()  # after the command name, which may hold anything
            children.setdefault(int(rest[1]), []).append(int(name))
            own[int(name)] = sum(int(x) for x in rest[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            total += own.get(p, 0)
            todo.extend(children.get(p, ()))
    return total


class Sampler:
    """Cumulative counters ``(t, busy, total, command)`` every ``interval`` seconds in a thread (t: seconds since
    ``t0`` on the monotonic clock; busy, total: :func:`cpu_counters`; command: :func:`tree_ticks` of ``pid``)."""

    def __init__(self, t0: float, interval: float) -> None:
        self.t0, self.interval, self.pid = t0, interval, 0
        self.rows: list[tuple[float, int, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timeline-sampler", daemon=True)

    def take(self, command_ticks: int | None = None) -> None:
        cpu = cpu_counters()
        if cpu is None:
            return
        if command_ticks is None:
            command_ticks = (tree_ticks(self.pid) if self.pid else 0) or 0
        if self.rows:  # a process tree loses the time of a descendant that outlived its parent: never count back
            command_ticks = max(command_ticks, self.rows[-1][3])
        self.rows.append((time.monotonic() - self.t0, *cpu, command_ticks))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.take()

    def start(self, pid: int) -> None:
        self.pid = pid
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def shares(rows: list[tuple[float, int, int, int]], a: float, b: float) -> tuple[float | None, float | None]:
    """(machine's, command's) share of all cores busy between ``a`` and ``b`` seconds: the counters of ``rows``
    (:class:`Sampler`) read at ``a`` and ``b`` by linear interpolation; (None, None) when no ticks lie between."""
    if len(rows) < 2 or b <= a:
        return None, None
    ts = [r[0] for r in rows]

    def at(t: float, k: int) -> float:
        i = min(max(bisect_left(ts, t), 1), len(ts) - 1)
        (t1, *v1), (t2, *v2) = rows[i - 1], rows[i]
        w = 0.0 if t2 == t1 else min(max((t - t1) / (t2 - t1), 0.0), 1.0)
        return v1[k] + w * (v2[k] - v1[k])

    total = at(b, 1) - at(a, 1)
    if total <= 0:
        return None, None
    clip = lambda x: round(min(max(x, 0.0), 1.0), 4)
    return clip((at(b, 0) - at(a, 0)) / total), clip((at(b, 2) - at(a, 2)) / total)


def _idle(busy: float | None) -> float | None:
    return None if busy is None else round(1 - busy, 4)


# ----------------------------------------------------------------------------- the command's output
def _endpoints() -> list[tuple[int, int, int]]:
    """(read end, the command's write end, our fd it goes to) for the command's stdout and stderr: a
    pseudo-terminal of the same size where ours is a terminal (one for both when they are one terminal), a pipe
    elsewhere. The pseudo-terminal passes bytes as written (no output processing: our terminal does its own)."""
    import pty
    import termios

    ends: list[tuple[int, int, int]] = []
    for fd in (1, 2):
        if fd == 2 and ends and ends[0][2] == 1 and os.isatty(1) and os.isatty(2):
            with contextlib.suppress(OSError):
                if os.path.samestat(os.fstat(1), os.fstat(2)):
                    ends.append((-1, ends[0][1], 2))  # the same terminal: the same pseudo-terminal, read once
                    continue
        if os.isatty(fd):
            master, slave = pty.openpty()
            with contextlib.suppress(OSError):
                import fcntl

                fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
            with contextlib.suppress(termios.error):
                attrs = termios.tcgetattr(slave)
                attrs[1] &= ~termios.OPOST
                termios.tcsetattr(slave, termios.TCSANOW, attrs)
            ends.append((master, slave, fd))
        else:
            r, w = os.pipe()
            ends.append((r, w, fd))
    return ends


def _forward(src: int, dst: int, on_line: Callable[[str, float], None], done: threading.Event) -> None:
    """Copy what arrives on ``src`` to ``dst`` as it comes and hand each line (split at \\n or \\r) with its arrival
    time to ``on_line``; ends at the end of ``src`` or, once ``done`` is set, when nothing more is waiting. Where
    ``dst`` is closed (a reader gone) it stops reading, so the command's next write fails as it would have."""
    pending = b""
    try:
        while True:
            ready, _, _ = select.select([src], [], [], 0.1)
            if not ready:
                if done.is_set():
                    break
                continue
            try:
                data = os.read(src, 1 << 16)
            except OSError as exc:
                if exc.errno == errno.EIO:  # a pseudo-terminal whose every writer closed it
                    break
                raise
            if not data:
                break
            now = time.monotonic()
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(dst, view) :]
            except OSError:
                break
            *lines, pending = re.split(rb"\r\n|\r|\n", pending + data)
            for line in lines:
                on_line(line.decode("utf-8", "replace"), now)
            pending = pending[-4096:]  # a line that never ends (a progress bar): its tail is enough to match
    finally:
        if pending:
            on_line(pending.decode("utf-8", "replace"), time.monotonic())
        os.close(src)


# ----------------------------------------------------------------------------- the training units
def units_written(runs: Path, start_unix: float, end_unix: float) -> list[dict[str, Any]]:
    """Training units whose ``<runs>/<study>/<run>/seeds/<unit>/timing.json`` says it was written between
    ``start_unix`` and ``end_unix`` (its ``date``, to the second; the file's time where within 2 s of it): ``run``,
    ``unit``, ``end`` (when written) and ``start`` (``train_seconds + eval_seconds`` before; before 0 for a unit
    resumed from an earlier checkpoint), in seconds since ``start_unix``, with what the record says."""
    out = []
    for path in sorted(Path(runs).glob("*/*/seeds/*/timing.json")):
        try:
            m = json.loads(path.read_text(encoding="utf-8"))
            written = datetime.strptime(m["date"], DATE).replace(tzinfo=timezone.utc).timestamp()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not start_unix - 1 <= written <= end_unix + 1:
            continue
        with contextlib.suppress(OSError):
            mtime = path.stat().st_mtime
            written = mtime if abs(mtime - written) < 2 else written
        spent = [m.get(k) for k in ("train_seconds", "eval_seconds")]
        spent = [float(s) for s in spent if isinstance(s, (int, float)) and not isinstance(s, bool) and s >= 0]
        out.append(
            {
                "run": path.parents[2].as_posix(),
                "unit": path.parent.name,
                "start": round(written - sum(spent) - start_unix, 2),
                "end": round(written - start_unix, 2),
                **{k: m.get(k) for k in ("train_seconds", "eval_seconds", "epochs", "threads", "machine", "date")},
            }
        )
    return sorted(out, key=lambda u: (u["start"], u["run"], u["unit"]))


# ----------------------------------------------------------------------------- record
def _machine() -> dict[str, Any]:
    """:func:`fraglib.core.device.hardware` of the device `make`'s trainings select (imports torch: called at the end)."""
    try:
        from fraglib.core.device import hardware, select_device

        return hardware(select_device()[0])
    except Exception as exc:  # noqa: BLE001 - the record is written whatever this lookup meets
        return {"machine": f"unknown ({type(exc).__name__}: {exc})"}


def record(cmd: list[str], runs: Path = Path("runs"), interval: float = 1.0, machine: bool = True) -> dict[str, Any]:
    """Run ``cmd`` with its output passed through and return its timeline record (the module's docstring); the
    exit status is ``status`` (negative: the signal that ended it; 127: it could not start)."""
    sys.stdout.flush()
    sys.stderr.flush()
    t0, start_unix = time.monotonic(), time.time()
    events: list[tuple[float, str, str]] = []
    lock = threading.Lock()

    def on_line(line: str, now: float) -> None:
        event = parse_line(line)
        if event:
            with lock:
                events.append((round(now - t0, 3), *event))

    sampler = Sampler(t0, interval)
    sampler.take(0)
    rusage = os.times()
    # A terminal's ^C, ^\ and hang-up reach the command's whole process group already: the command decides, we wait
    # for it to end and write the record; a TERM sent to us alone is passed on. Handlers, not SIG_IGN: the command
    # starts with the dispositions it would have without us.
    proc: subprocess.Popen | None = None
    got: list[int] = []

    def on_signal(sig: int, _frame: Any) -> None:
        got.append(sig)
        if proc is not None and sig == signal.SIGTERM:
            with contextlib.suppress(OSError):
                proc.send_signal(sig)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # one ignored by us stays so (the command inherits it)
        kept = (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM)
        previous = {s: signal.signal(s, on_signal) for s in kept if signal.getsignal(s) != signal.SIG_IGN}
    try:
        ends = _endpoints()
        done = threading.Event()
        error = None
        if got:  # interrupted before the command started: it never runs
            error = f"not started: signal {got[0]} before the command began"
        else:
            try:
                proc = subprocess.Popen(cmd, stdout=ends[0][1], stderr=ends[1][1])
                if signal.SIGTERM in got:  # came while it started
                    proc.send_signal(signal.SIGTERM)
            except OSError as exc:
                error = f"{cmd[0]}: {exc.strerror or exc}"
        for write_end in {w for _, w, _ in ends}:  # ours closed: the readers see the end when the command's close
            os.close(write_end)
        readers = [
            threading.Thread(target=_forward, args=(r, fd, on_line, done), name=f"timeline-{fd}", daemon=True)
            for r, _, fd in ends
            if r >= 0
        ]
        for t in readers:
            t.start()
        status = -got[0] if got else 127
        if proc is not None:
            sampler.start(proc.pid)
            status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    end = round(time.monotonic() - t0, 3)
    end_unix = start_unix + end
    done.set()
    for t in readers:
        t.join()
    sampler.stop()
    after = os.times()
    child_ticks = round((after.children_user + after.children_system - rusage.children_user - rusage.children_system)
                        * os.sysconf("SC_CLK_TCK")) if proc is not None else 0  # fmt: skip
    sampler.take(max(child_ticks, sampler.rows[-1][3] if sampler.rows else 0))  # every descendant, waited for
    rows = sampler.rows
    busy, command_busy = shares(rows, 0.0, end)
    stages = stages_from(sorted(events, key=lambda e: e[0]), end)  # stable: one read's lines keep their order
    for s in stages:
        b, c = shares(rows, s["start"], s["end"])
        s.update(
            seconds=round(s["end"] - s["start"], 3),
            busy=b,
            command_busy=c,
            idle_core_fraction=_idle(b),
            command_idle_core_fraction=_idle(c),
        )
    samples = []
    for (ta, *_), (tb, *_) in zip(rows, rows[1:]):
        samples.append([round(tb, 2), *shares(rows, ta, tb)])
    units = units_written(runs, start_unix, end_unix)
    for u in units:
        u["stage"] = next((s["name"] for s in stages if s["start"] <= u["end"] <= s["end"]), None)
    out: dict[str, Any] = {
        "kind": KIND,
        "command": list(cmd),
        "cwd": os.getcwd(),
        "status": status,
        "failed": status != 0,
        **({"error": error} if error else {}),
        "commit": git_revision(),
        "start": datetime.fromtimestamp(start_unix, timezone.utc).strftime(DATE),
        "end": datetime.fromtimestamp(end_unix, timezone.utc).strftime(DATE),
        "start_unix": round(start_unix, 3),
        "seconds": end,
        "cores": os.cpu_count(),
        **(_machine() if machine else {}),
        "interval": interval,
        "busy": busy,
        "command_busy": command_busy,
        "idle_core_fraction": _idle(busy),
        "command_idle_core_fraction": _idle(command_busy),
        "stage_seconds": round(sum(s["seconds"] for s in stages), 2),
        "stages": stages,
        "units": units,
        "samples": samples,
    }
    if error:
        print(f"fraglib_study.bench timeline: {error}", file=sys.stderr)
    return out


def read_record(path: Path) -> dict[str, Any]:
    """A timeline record; ValueError naming ``path`` when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a timeline record ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise ValueError(f'{path}: not a timeline record (no "kind": "{KIND}")')
    for key in ("stages", "samples", "units"):
        if not isinstance(data.get(key), list):
            raise ValueError(f"{path}: a timeline record without its {key!r} list")
    if not isinstance(data.get("seconds"), (int, float)):
        raise ValueError(f"{path}: a timeline record without its 'seconds'")
    return data


# ----------------------------------------------------------------------------- the command line
def _check_out(ap: argparse.ArgumentParser, out: Path, overwrite: bool) -> None:
    """Before the command runs: ``out`` may be replaced when absent, an earlier timeline record (each run replaces
    the last one's), or with ``overwrite``; anything else there ends us with the output contract's refusal."""
    earlier = False
    if out.is_file():
        with contextlib.suppress(ValueError):
            earlier = bool(read_record(out))
    what = "fraglib_study.bench timeline record: --out is not an earlier timeline record"
    claim_cli(ap, [out], [out], overwrite or earlier, what)


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m fraglib_study bench timeline", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="action", required=True)
    p = sub.add_parser("record", help="run a command and record its timeline")
    p.add_argument("--out", type=Path, default=Path("benchmarks/timeline.json"))
    p.add_argument("--runs", type=Path, default=Path("runs"), help="where the studies' training runs lie")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between two CPU samples")
    p.add_argument("--overwrite", action="store_true", help="replace --out also when it is not a timeline record")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    d = sub.add_parser("draw", help="draw a recorded timeline")
    d.add_argument("record", type=Path)
    d.add_argument("--out", type=Path, required=True, help=f"the figure ({', '.join(FORMATS)})")
    d.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    if args.action == "draw":
        if args.out.suffix.lower() not in FORMATS:
            ap.error(f"--out {args.out}: a figure's name ends in {', '.join(FORMATS)}")
        claim_cli(ap, [args.out], [args.out], args.overwrite, "fraglib_study.bench timeline draw")
        try:
            rec = read_record(args.record)
        except ValueError as exc:
            ap.error(str(exc))
        import matplotlib.pyplot as plt

        from fraglib_study.report.plots import timeline_figure

        fig = timeline_figure(rec, title(rec))
        with atomic(args.out) as tmp:
            fig.savefig(tmp, dpi=130)
        plt.close(fig)
        print(f"{timeline_summary(rec)}\nwrote {args.out}")
        return
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("record: no command (python -m fraglib_study bench timeline record --out FILE -- COMMAND ...)")
    if not args.interval > 0:
        ap.error(f"--interval {args.interval}: a positive number of seconds")
    _check_out(ap, args.out, args.overwrite)
    rec = record(cmd, args.runs, args.interval)
    try:
        write_text(args.out, json.dumps(rec, indent=1) + "\n")
        print(f"timeline: {timeline_summary(rec)} (recorded in {args.out})", file=sys.stderr)
    except OSError as exc:  # a full disk, a refusal: the record is lost, never the command's exit status
        print(f"timeline: {timeline_summary(rec)}; NOT recorded: {exc}", file=sys.stderr)
    status = rec["status"]
    if status < 0:  # ended by a signal: end by it too, so the caller (make) sees what the command met
        sys.stdout.flush()
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
        raise SystemExit(128 - status)
    if status:
        raise SystemExit(status)
