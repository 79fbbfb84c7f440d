"""Progress a person can read while a command runs: one line per finished piece of work, with the time so far and an
estimate of the time left; a redrawn bar only on a terminal.

    [full] 3 training units (seeds 0, 1, 2), 2 at a time
    [full seed 0] epoch 1/8: cost 0.412, val R-sum 96.0; elapsed 2s, ETA 14s
    [full] unit 1/3: seed 0 trained, test annotation R@1 21.0, search R@1 17.2; elapsed 19s, ETA 19s
    [features resnet18, cpu] image 120/1400; elapsed 30s, ETA 5m20s

:class:`Progress` prints those lines (to stderr, flushed, never a carriage return): the ETA is the mean time of the
pieces timed so far times the rounds still to go, ``parallel`` pieces at a time (:func:`eta`); ``every`` keeps a
fast loop to a line per so many seconds (its first and last piece always print). :func:`track` walks an iterable
with a tqdm bar where stderr is a terminal (:func:`interactive`) and with such lines elsewhere: DVC's and CI's logs
keep a bar's every redraw (``CI`` set means a log, whatever the stream says). Printing only: nothing here touches
the work's arithmetic or its files."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, TypeVar

T = TypeVar("T")


def interactive(stream: IO[str] | None = None) -> bool:
    """Whether a bar may redraw itself on ``stream`` (default stderr): a terminal, and not under CI (``CI`` set to
    anything but empty, 0, false or no)."""
    if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def duration(seconds: float) -> str:
    """``45s``, ``3m12s``, ``2h05m``: whole seconds below an hour, whole minutes above."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def eta(mean: float, remaining: int, parallel: int = 1) -> float:
    """Seconds left for ``remaining`` pieces of ``mean`` seconds each, ``parallel`` at a time: in rounds (3 units left
    on 2 workers take two unit times, the last round running one)."""
    return mean * math.ceil(max(0, remaining) / max(1, parallel))


class Progress:
    """``total`` pieces of work named ``what`` under ``label``; :meth:`step` when one is done prints
    ``[label] what k/total[: note]; elapsed E, ETA R``. ``done``: pieces finished before this process started (a
    resumed training: counted, not timed); ``parallel``: pieces that run at a time; ``every``: at most a line per
    so many seconds (the first and the last step always print); ``clock``: seconds, monotonic (a test's fake)."""

    def __init__(
        self,
        label: str,
        total: int,
        what: str = "unit",
        *,
        done: int = 0,
        parallel: int = 1,
        every: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        stream: IO[str] | None = None,
    ) -> None:
        self.label, self.total, self.what = label, total, what
        self.done, self.parallel, self.every = done, max(1, parallel), every
        self.clock, self.stream = clock, stream
        self.start = self.last = clock()
        self.shown: float | None = None
        self.times: list[float] = []

    def eta(self) -> float | None:
        """Seconds left by the pieces timed so far; None before the first."""
        if not self.times:
            return None
        return eta(sum(self.times) / len(self.times), self.total - self.done, self.parallel)

    def step(self, note: str = "", seconds: float | None = None, timed: bool = True) -> str | None:
        """One more piece done: ``seconds`` its own time (a worker's; default the time since the previous step),
        ``timed=False`` for one that did no work (a result kept as it was) and says nothing of the others. Returns
        the line printed, or None when ``every`` held it back."""
        now = self.clock()
        took = now - self.last if seconds is None else seconds
        self.last = now
        self.done += 1
        if timed:
            self.times.append(took)
        if self.shown is not None and now - self.shown < self.every and self.done < self.total:
            return None
        self.shown = now
        line = self.line(note, now)
        stream = self.stream if self.stream is not None else sys.stderr
        stream.write(line + "\n")  # one write: units training side by side share the stream, a line stays whole
        stream.flush()
        return line

    def line(self, note: str, now: float) -> str:
        left = self.eta()
        tail = "" if self.done >= self.total else f", ETA {'unknown' if left is None else duration(left)}"
        return (
            f"[{self.label}] {self.what} {self.done}/{self.total}{note and ': ' + note}; "
            f"elapsed {duration(now - self.start)}{tail}"
        )


def track(
    items: Iterable[T],
    label: str,
    total: int,
    what: str = "item",
    *,
    enabled: bool = True,
    every: float = 30.0,
    clock: Callable[[], float] = time.monotonic,
    stream: IO[str] | None = None,
) -> Iterator[T]:
    """``items`` as they come, with a tqdm bar titled ``label`` on a terminal, else a :class:`Progress` line per
    ``every`` seconds (``what k/total; elapsed E, ETA R``); nothing when not ``enabled``. A piece's time is from one
    item handed out to the next."""
    if not enabled:
        yield from items
        return
    if interactive(stream):
        from tqdm import tqdm

        yield from tqdm(items, total=total, desc=label, unit=what, mininterval=1, file=stream)
        return
    p = Progress(label, total, what, every=every, clock=clock, stream=stream)
    for x in items:
        yield x
        p.step()
