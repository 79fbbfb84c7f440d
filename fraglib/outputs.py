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
``fraglib.evaluate --out``, ``fraglib.notebook`` (a page and its executed notebook) and
``fraglib.index``; tests/test_outputs.py tries every one. Two commands keep what exists on purpose:
training (``fraglib.train`` / ``fraglib.study`` resume a run from its checkpoint) and
``fraglib.bench`` (``benchmarks/results.json`` is a register: a run updates this machine's entries,
and replacing another machine's needs ``--overwrite``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

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
        shown = ", ".join(str(p) for p in existing[:5]) + (f" and {len(existing) - 5} more" if len(existing) > 5 else "")
        raise FileExistsError(f"{what}: refusing to replace {len(existing)} existing file(s): {shown}. "
                              "Pass --overwrite to replace them, or write somewhere else.")
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
