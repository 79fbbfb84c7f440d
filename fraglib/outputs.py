"""Command-line outputs are never overwritten or deleted without ``--overwrite``.

A command that writes a *family* of files first calls :func:`claim` (on a command line,
:func:`claim_cli`), before its work. When any member of the family already exists, it stops with the
list unless the user passed ``--overwrite``; with it, members this run will not rewrite are removed,
so no stale file (an old ``groundtruth.npz`` beside a new ``rcnn.npz``) survives as if current.
DVC deletes a stage's outputs before it runs, so pipeline stages never meet an existing family.

The families: ``fraglib.data`` (``dataset.json``, ``conversion.json``; precomp: its feature caches
too), ``fraglib.data.synthetic`` (the benchmark folder), ``fraglib.text`` (``parse.conllu``; the
fragment files), ``fraglib.vision.features`` / ``regions`` / ``objectness`` (their caches),
``fraglib.search --out``, ``fraglib.captions`` (``<name>.json`` and ``<name>/``),
``fraglib.evaluate --out``, ``fraglib.fusion --out`` (a fused run's folder; never one of its inputs),
``fraglib.summary --out`` (a page it did not write), ``fraglib.notebook`` (a page and its executed
notebook) and ``fraglib.index``; tests/test_outputs.py derives the list of commands with an output flag
from the code and tries every one. Three keep what exists on purpose:
training (``fraglib.train`` / ``fraglib.study`` resume a run from its checkpoint),
``fraglib.bench`` (``benchmarks/results.json`` is a register: a run updates this machine's entries,
and replacing another machine's needs ``--overwrite``) and ``fraglib.data.download`` (resumes: keeps
the images whose checksums verify).

**Every file is written atomically** (:func:`atomic`, :func:`write_text`, :func:`write_bytes`): the
bytes go to a hidden temporary file in the target's folder, which replaces the target only once it is
complete, so a kill or a full disk never leaves a cut file where a complete one was (or is expected).
tests/test_outputs.py fails on any write in the package that bypasses these helpers.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

OVERWRITE_HELP = "replace outputs already in the target folder (they are otherwise never touched)"


def claim(family: Iterable[Path], writes: Iterable[Path], overwrite: bool, what: str) -> None:
    """Check the files of ``family`` before a command writes ``writes`` (a subset of it).

    Raises FileExistsError naming up to five existing members when ``overwrite`` is False; with
    ``overwrite`` deletes the existing members not in ``writes``.
    """
    family = [Path(p) for p in family]
    writes = {Path(p) for p in writes}
    existing = [p for p in family if p.exists()]
    if not existing:
        return
    if not overwrite:
        shown = ", ".join(str(p) for p in existing[:5]) + (
            f" and {len(existing) - 5} more" if len(existing) > 5 else ""
        )
        raise FileExistsError(
            f"{what}: refusing to replace {len(existing)} existing file(s): {shown}. "
            "Pass --overwrite to replace them, or write somewhere else."
        )
    for p in existing:
        if p not in writes:
            p.unlink()


def claim_cli(ap: Any, family: Iterable[Path], writes: Iterable[Path], overwrite: bool, what: str) -> None:
    """:func:`claim` for a command line: a refusal ends the command with its usage line and the message
    (exit status 2) instead of a traceback. Call it before the command's work."""
    try:
        claim(family, writes, overwrite, what)
    except FileExistsError as exc:
        ap.error(str(exc))


@contextlib.contextmanager
def atomic(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same folder, same suffix) for any writer (``np.savez``,
    ``torch.save``, ``savefig``); on success it replaces ``path`` in one rename, on any error (a kill,
    ``ENOSPC``) it is removed and ``path`` is left as it was. Creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp-{os.getpid()}-{path.name}"
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"{path}: the writer produced no file (expected {tmp.name})")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic`)."""
    with atomic(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic`)."""
    with atomic(path) as tmp:
        tmp.write_bytes(data)


@contextlib.contextmanager
def appending(path: str | Path) -> Iterator[Any]:
    """A journal opened for appending whole lines: what one ``with`` block writes is flushed and synced
    when it closes (one block per line), so a kill cuts at most the line being written (readers drop or
    name a torn last line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


def git_revision(where: str | Path = ".") -> str:
    """``git describe --always --dirty`` of the repository holding ``where`` ("unknown" outside one)."""
    import subprocess

    try:
        run = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=where, capture_output=True, text=True, check=True
        )
        return run.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def file_sha256(path: str | Path, block: int = 1 << 22) -> str:
    """SHA-256 hex digest of a file, read in blocks of ``block`` bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()
