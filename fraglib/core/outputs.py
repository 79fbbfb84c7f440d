"""The one output contract: a command never replaces, deletes or writes through what it did not claim.

A command that writes a *family* of files first calls :func:`claim` (on a command line,
:func:`claim_cli`), before its work. When any member of the family already exists, it stops with the
list unless the user passed ``--overwrite``; with it, members this run will not rewrite are removed,
so no stale file (an old ``groundtruth.npz`` beside a new ``rcnn.npz``) survives as if current.
DVC deletes a stage's outputs before it runs, so pipeline stages never meet an existing family.

**By construction, not by review.** Every ``main`` of the package is wrapped in :func:`command`
(tests/test_outputs.py finds every ``main`` from the code and fails on one without it). Inside a command:

* a write (:func:`atomic`, :func:`write_text`, :func:`write_bytes`) to a file that already exists is refused
  (:class:`Refused`, exit status 2, the file named) unless this command claimed it, wrote it itself earlier in
  the run, or declared it as a register it updates in place (:func:`updates`: ``benchmarks/costs.json``,
  ``benchmarks/results.json``) or as part of a folder it resumes (:func:`resumes`: a training run's folder,
  a download); so a writer added without a claim fails loudly instead of replacing a user's file;
* a family never reaches through a symlink out of its folder: a member (or a write below the claimed folder)
  whose real location lies outside the folder's real location is refused, and nothing is deleted there;
* a write that fails (a full disk, a read-only folder) raises :class:`WriteFailed` naming the file, leaves the
  previous file whole, and the command removes the files it had created so far in this run (not those it
  resumes or updates), so a half-written set never blocks the next run; the command ends with exit status 1
  and one line naming the file, not a traceback.

Outside a command (a notebook, a test, the library called from Python) the helpers only write atomically.

The families: ``fraglib.data`` (``dataset.json``, ``conversion.json``; precomp: its feature caches
too), ``fraglib.data.synthetic`` (the benchmark folder), ``fraglib.text`` (``parse.conllu``; the
fragment files), ``fraglib.vision.features`` / ``regions`` / ``objectness`` (their caches),
``fraglib_study.experiments.search --out``, ``fraglib_study.experiments.captions`` (``<name>.json`` and ``<name>/``),
``fraglib.run.evaluate --out`` / ``--save-scores``, ``fraglib_study.experiments.fusion --out`` (a fused run's folder; never one of its
inputs), ``fraglib_study.pages.summary --out`` (a page it did not write) / ``--csv``, ``fraglib_study.report.notebook`` (a page, its
executed notebook and its figures), ``fraglib_study.experiments.explore`` (``explorer.json``, ``alignments_*.json`` and the
thumbnails its ``explorer.json`` lists: never another picture in ``thumbs/``), ``fraglib_study.audit.costs start`` (a clock
file: never anything else) and ``fraglib_study.pages.index``; tests/test_outputs.py derives the list of commands with an
output flag from the code and tries every one. Three keep what exists on purpose:
training (``fraglib.run.train`` / ``fraglib_study.experiments.study`` resume a run from its checkpoint),
``fraglib_study.bench`` (``benchmarks/results.json`` is a register: a run updates this machine's entries,
and replacing another machine's needs ``--overwrite``) and ``python -m fraglib.data download`` (resumes: keeps
the images whose checksums verify).

**Every file is written atomically** (:func:`atomic`, :func:`write_text`, :func:`write_bytes`): the
bytes go to a hidden temporary file in the target's folder, which replaces the target only once it is
complete, so a kill or a full disk never leaves a cut file where a complete one was (or is expected).
tests/test_outputs.py fails on any write in the package that bypasses these helpers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

OVERWRITE_HELP = "replace outputs already in the target folder (they are otherwise never touched)"


class Refused(FileExistsError):
    """A command would replace, delete or write through what it did not claim; the message names the file."""


class WriteFailed(OSError):
    """Writing a file failed (full disk, permissions); the message names the file, the previous one is whole.
    ``errno`` is the failed write's."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


@dataclasses.dataclass
class _Contract:
    """What the running command may touch (:func:`command`); ``strict`` False outside a command."""

    strict: bool = False
    allowed: set[str] = dataclasses.field(default_factory=set)  # files it claimed or wrote
    roots: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (claimed folder, its real location)
    kept: list[str] = dataclasses.field(default_factory=list)  # files and folders it resumes or updates in place
    created: list[Path] = dataclasses.field(default_factory=list)  # files it created (none was there)
    written: set[str] = dataclasses.field(default_factory=set)  # files it wrote, created or replaced


_NOW = _Contract()


def _key(path: str | Path) -> str:
    return os.path.abspath(path)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _real(path: Path) -> str:
    """Where ``path`` really lies: its folder's real location and its own name (a link itself is not followed)."""
    return os.path.join(os.path.realpath(path.parent), path.name)


def _escapes(path: Path, folder: Path) -> bool:
    """True when ``path``, lexically inside ``folder``, really lies outside it (a symlinked folder between them)."""
    return _under(_key(path), _key(folder)) and not _under(_real(path), os.path.realpath(folder))


def _root_of(family: list[Path]) -> Path | None:
    if not family:
        return None
    try:
        return Path(os.path.commonpath([_key(p.parent) for p in family]))
    except ValueError:  # different drives
        return None


def claim(
    family: Iterable[Path], writes: Iterable[Path], overwrite: bool, what: str, root: str | Path | None = None
) -> None:
    """Check the files of ``family`` before a command writes ``writes`` (a subset of it).

    Raises :class:`Refused` (a FileExistsError) naming up to five existing members when ``overwrite`` is False,
    and whatever ``overwrite`` says when a member lies through a symlink outside ``root`` (default: the folder
    holding the whole family); with ``overwrite`` deletes the existing members not in ``writes``. Inside a
    :func:`command`, the family's files may then be written.
    """
    family = [Path(p) for p in family]
    writes = {Path(p) for p in writes}
    top = Path(root) if root is not None else _root_of([*family, *writes])
    if top is not None:
        out = [p for p in [*family, *writes] if _escapes(p, top)]
        if out:
            raise Refused(
                f"{what}: {out[0]} lies through a symlink outside {top} (really {_real(out[0])}): refusing to "
                "write or delete anything there, with or without --overwrite. Remove the link or write elsewhere."
            )
        if _NOW.strict:
            _NOW.roots.append((_key(top), os.path.realpath(top)))
    existing = [p for p in family if p.exists() or p.is_symlink()]
    odd = [p for p in existing if not (p.is_symlink() or p.is_file())]
    if odd:
        kind = "a folder" if odd[0].is_dir() else "not a regular file (a device, a pipe, a socket)"
        raise Refused(f"{what}: {odd[0]} is {kind}: refusing to replace it, with or without --overwrite")
    if existing and not overwrite:
        shown = ", ".join(str(p) for p in existing[:5]) + (
            f" and {len(existing) - 5} more" if len(existing) > 5 else ""
        )
        raise Refused(
            f"{what}: refusing to replace {len(existing)} existing file(s): {shown}. "
            "Pass --overwrite to replace them, or write somewhere else."
        )
    for p in existing:
        if p not in writes:
            p.unlink()
    if _NOW.strict:  # outside a command nothing is kept: a notebook or a test process keeps no growing state
        _NOW.allowed.update(_key(p) for p in [*family, *writes])


def claim_cli(ap: Any, family: Iterable[Path], writes: Iterable[Path], overwrite: bool, what: str) -> None:
    """:func:`claim` for a command line: a refusal ends the command with its usage line and the message
    (exit status 2) instead of a traceback. Call it before the command's work."""
    try:
        claim(family, writes, overwrite, what)
    except FileExistsError as exc:
        ap.error(str(exc))


def prune(family: Iterable[Path]) -> list[Path]:
    """After a command's work: delete the members of ``family`` it did not write in this run (an earlier run's
    outputs that the new set no longer has), and return them. Claim such a family with ``writes=family`` (nothing
    deleted before the work), then prune once the new set is complete: a run that fails half way leaves the
    earlier set whole instead of nothing (never lost work). Only inside a :func:`command`, which knows what it
    wrote (RuntimeError elsewhere)."""
    if not _NOW.strict:
        raise RuntimeError(
            "outputs.prune runs inside a command (fraglib.core.outputs.command): only it knows what it wrote"
        )
    gone = [Path(p) for p in family if (Path(p).exists() or Path(p).is_symlink()) and _key(p) not in _NOW.written]
    for p in gone:
        remove(p)
    return gone


def listed_files(out: str | Path, record: str, names: Callable[[Any], Iterable[Any]], folder: str) -> list[Path]:
    """The files an earlier run wrote into ``out/folder/`` as its JSON ``record`` (a file in ``out``) lists them:
    ``names(data)`` gives the listed paths relative to ``out``; only plain ``<folder>/<name>.jpg`` entries count
    (never a path out of the folder). None when ``record`` is absent or damaged: it then vouches for no file."""
    import json
    import re

    try:
        found = list(names(json.loads((Path(out) / record).read_text(encoding="utf-8"))))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    pattern = re.compile(rf"{re.escape(folder)}/[^/\\]+\.jpg")
    return [Path(out) / n for n in found if isinstance(n, str) and pattern.fullmatch(n)]


def updates(*paths: str | Path) -> None:
    """Declare files the running command updates in place on purpose (a register such as
    ``benchmarks/costs.json``), or folders it resumes (:func:`resumes`): writes there are not refused. Nothing to
    declare outside a command."""
    if _NOW.strict:
        _NOW.kept.extend(_key(p) for p in paths)


resumes = updates  # a folder a command resumes (a training run's checkpoints, a download): the same permission


def _check_write(path: Path) -> bool:
    """Inside a command, refuse a write the contract does not allow (:class:`Refused`); True when the file is new."""
    new = not (path.exists() or path.is_symlink())
    if not _NOW.strict:
        return new
    key = _key(path)
    for folder, real in _NOW.roots:
        if _under(key, folder) and not _under(_real(path), real):
            raise Refused(
                f"{path}: lies through a symlink outside {folder} (really {_real(path)}): refusing to write there"
            )
    if not new and key not in _NOW.allowed and not any(_under(key, k) for k in _NOW.kept):
        raise Refused(
            f"{path}: refusing to replace a file this command did not write or claim. Pass --overwrite where the "
            "command takes it, or write somewhere else."
        )
    return new


@contextlib.contextmanager
def atomic(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` (same folder, same suffix) for any writer (``np.savez``,
    ``torch.save``, ``savefig``); on success it replaces ``path`` in one rename, on any error (a kill,
    ``ENOSPC``) it is removed and ``path`` is left as it was: an OSError of the write is raised as
    :class:`WriteFailed` naming ``path``. Creates the parent folder. Inside a :func:`command`, refuses
    (:class:`Refused`) to replace a file the command may not touch."""
    path = Path(path)
    if path.is_dir():
        raise Refused(f"{path}: is a folder, not a file: refusing to write over it")
    new = _check_write(path)
    # short whatever the target's name (a 255-byte name stays writable), its suffix kept (savefig and np.savez read it)
    tag = hashlib.sha1(path.name.encode()).hexdigest()[:8]
    tmp = path.parent / f".tmp-{os.getpid()}-{tag}{path.suffix if len(path.suffix) < 16 else ''}"
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            if not tmp.exists():
                raise FileNotFoundError(f"{path}: the writer produced no file (expected {tmp.name})")
            os.replace(tmp, path)
        except (WriteFailed, Refused):
            raise
        except OSError as exc:
            if exc.filename not in (None, str(tmp), str(path), str(path.parent)) or isinstance(exc, FileNotFoundError):
                raise
            raise WriteFailed(
                f"{path}: could not write it ({exc.strerror or exc}); the file there before, if any, is unchanged",
                exc.errno,
            ) from exc
    finally:
        with contextlib.suppress(OSError):  # never hides the error that ended the write
            tmp.unlink(missing_ok=True)
    if _NOW.strict:
        _NOW.allowed.add(_key(path))
        _NOW.written.add(_key(path))
        if new:
            _NOW.created.append(path)


def write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic`)."""
    with atomic(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic`)."""
    with atomic(path) as tmp:
        tmp.write_bytes(data)


def remove(path: str | Path) -> None:
    """Delete ``path`` (no error when absent); inside a :func:`command` only a file it claimed or wrote."""
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if _NOW.strict:
        key = _key(path)
        if key not in _NOW.allowed and not any(_under(key, k) for k in _NOW.kept):
            raise Refused(f"{path}: refusing to delete a file this command did not write or claim")
    path.unlink()


def remove_tree(path: str | Path) -> None:
    """Delete ``path``, a file or a folder with everything under it (no error when absent), as ``dvc repro`` clears a
    stage's declared output before running it; inside a :func:`command` only one it claimed (a folder: whole)."""
    import shutil

    path = Path(path)
    if not (path.is_dir() and not path.is_symlink()):
        return remove(path)
    if _NOW.strict and not any(_under(_key(path), k) for k in _NOW.kept):
        raise Refused(f"{path}: refusing to delete a folder this command did not claim")
    shutil.rmtree(path)


def command(main: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command's ``main`` under the contract (the module docstring): writes to files it did not claim are
    refused; a refusal ends it with exit status 2 and a write that fails with 1, each with one line naming the
    file (after removing the files this run created, so no partial set is left behind)."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        global _NOW
        outer, _NOW = _NOW, _Contract(strict=True)
        try:
            return main(*args, **kwargs)
        except (Refused, WriteFailed) as exc:
            gone = [p for p in _NOW.created if not any(_under(_key(p), k) for k in _NOW.kept)]
            if isinstance(exc, WriteFailed):
                for p in gone:
                    p.unlink(missing_ok=True)
            note = f" (removed the {len(gone)} file(s) it had written)" if gone and isinstance(exc, WriteFailed) else ""
            print(f"{main.__module__}: error: {exc}{note}", file=sys.stderr)
            raise SystemExit(2 if isinstance(exc, Refused) else 1) from exc
        finally:
            _NOW = outer

    return run


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


# ----------------------------------------------------------------------------- training-run (unit) names: seed<unit>/ folders
def unit_key(seed: int, replicate: int) -> str:
    """Name of one training run of a study: ``"3"`` (seed 3) or ``"3r1"`` (its replicate 1)."""
    return f"{seed}" if replicate == 0 else f"{seed}r{replicate}"


def unit_seed(unit: str) -> int:
    """The seed (split) of a unit name, the inverse of :func:`unit_key`: ``"3r1"`` -> 3."""
    return int(str(unit).split("r")[0])


def unit_replicate(unit: str) -> int:
    """The replicate of a unit name (:func:`unit_key`): ``"3r1"`` -> 1, ``"3"`` -> 0."""
    return int(str(unit).split("r")[1]) if "r" in str(unit) else 0
