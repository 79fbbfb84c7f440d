"""Checkpoints that rebuild their system alone, and the one resume policy (docs/formats.md).

A checkpoint (``last.pt`` after every epoch, ``best.pt`` at the best validation epoch) holds only
tensors and plain containers, is written atomically and read with ``torch.load(weights_only=True)``:

``format``, ``run``, ``system`` (registry name), ``system_config``, ``train_config``, ``model_args``
(the sizes the system was built from), ``fingerprint`` (SHA-256 of every input file it was trained
on), ``model``, ``optimizer``, ``epoch``, ``history``, ``best_rsum``, ``best_epoch``,
``rng`` (the random generators' states after that epoch: dropout draws continue exactly on resume),
``info``. No timings: the same run writes the same bytes (the trainer keeps its clock in
``timing.json`` beside them).

:func:`load_system` rebuilds the system from the checkpoint alone (no dataset, no GloVe).
:func:`resume` returns a checkpoint only when its identity — system, both configs, model_args and
input fingerprint — equals the current one; otherwise the run starts from scratch (``restart``)
or stops with the differing fields named. A run whose ``best.pt`` has gone missing or does not
belong to its ``last.pt`` is never finished silently from other weights. The trainer writes
``best.pt`` before ``last.pt``, so a kill between the two leaves ``best.pt`` one epoch ahead (or
alone after epoch 1): the run resumes from ``last.pt`` (or starts again) and rewrites that epoch
exactly. One process at a time trains a run folder (:func:`run_lock`).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, Iterator

import torch

from fraglib.core.outputs import Refused, WriteFailed, atomic, file_sha256

FORMAT = "fraglib-checkpoint-1"
IDENTITY = ("system", "system_config", "train_config", "model_args", "fingerprint")


class CheckpointError(ValueError):
    """A checkpoint is unreadable, not fraglib's, or does not belong to the run that reads it."""


class RunLocked(RuntimeError):
    """Another process is training the run folder (:func:`run_lock`)."""


def fingerprint(files: dict[str, Path]) -> dict[str, str]:
    """{role: sha256} of the input files (a missing file is an error naming it)."""
    out = {}
    for role, p in files.items():
        if not Path(p).is_file():
            raise FileNotFoundError(f"{p}: input file ({role}) not found")
        out[role] = file_sha256(p)
    return out


def save(path: str | Path, ck: dict[str, Any]) -> None:
    """Write atomically (:func:`fraglib.core.outputs.atomic`): a kill or a full disk never leaves a half-written
    checkpoint, and the previous one stays whole. A failed write is an OSError naming ``path``."""
    path = Path(path)
    try:
        with atomic(path) as tmp:
            torch.save({"format": FORMAT, **ck}, tmp)
    except Refused:  # not a full disk: a file this command may not replace (fraglib.core.outputs)
        raise
    except (RuntimeError, OSError) as exc:  # torch: "[enforce fail at inline_container.cc:...] ... file write failed"
        cause = exc.__cause__ if isinstance(exc, WriteFailed) and exc.__cause__ is not None else exc
        raise WriteFailed(
            f"{path}: writing the checkpoint failed, is the disk full? ({_first_line(cause)}). The previous "
            f"{path.name}, if any, is intact: free some space and run the same command again to resume "
            "from it",
            getattr(cause, "errno", None),
        ) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def _not_plain(exc: BaseException) -> str:
    """What torch's weights-only loader refused (``Unsupported global: GLOBAL m.C``), without its advice
    to load with ``weights_only=False`` (that would run the file's code)."""
    m = re.search(r"WeightsUnpickler error:\s*(Unsupported [^\n]*?)(?: was not an allowed|\.?\n|$)", str(exc))
    return "objects other than tensors and plain containers" + (f": {m.group(1).strip()}" if m else "")


def load(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """A fraglib checkpoint, loaded without executing code; CheckpointError names the file otherwise."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        ck = torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as exc:
        if "weights_only" in str(exc):
            raise CheckpointError(
                f"{path}: not a plain-tensor fraglib checkpoint (it holds {_not_plain(exc)}); it is "
                "not loaded, since loading it could run code. Train the run again (or delete the "
                "file) to replace it"
            ) from None
        raise CheckpointError(f"{path}: not a readable fraglib checkpoint ({_first_line(exc)})") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not a fraglib checkpoint (no format {FORMAT!r})")
    return ck


def best_of(seed_dir: str | Path) -> Path:
    """The ``best.pt`` of a trained seed's results folder: beside its results, or in the folder its
    ``metrics.json`` names (``checkpoint_dir``: studies keep checkpoints in DVC under ``models/`` and
    results in git under ``runs/``). CheckpointError names what is missing and how to get it."""
    seed_dir = Path(seed_dir)
    if (seed_dir / "best.pt").exists():
        return seed_dir / "best.pt"
    named = None
    try:
        named = json.loads((seed_dir / "metrics.json").read_text()).get("checkpoint_dir")
    except (OSError, ValueError):
        pass
    if named and (Path(named) / "best.pt").exists():
        return Path(named) / "best.pt"
    where = f"{seed_dir}/best.pt" + (f" or {named}/best.pt" if named else "")
    raise CheckpointError(
        f"{where}: checkpoint not found; checkpoints are DVC outputs: `dvc pull` them from a shared "
        "remote or rebuild them with `dvc repro` (the run's train stage)"
    )


def load_system(path: str | Path, device: Any = "cpu"):
    """(system in eval mode, checkpoint) rebuilt from ``path`` alone."""
    from fraglib.core.config import from_dict
    from fraglib.systems import get_system

    ck = load(path, device)
    cls = get_system(ck["system"], f"{path}: system")
    cfg = from_dict(f"systems.{ck['system']}", ck["system_config"], cls.Config)
    system = cls(cfg, ck["model_args"], seed=ck["train_config"]["seed"]).to(device)
    system.load_state_dict(ck["model"])
    system.eval()
    return system, ck


def _differs(
    ck: dict[str, Any], identity: dict[str, Any], defaults: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """The :data:`IDENTITY` fields where ``ck`` and ``identity`` disagree; a settings dict of ``ck`` first
    gets ``defaults[field]`` for the keys it lacks (settings added after it was written) and loses the keys
    ``identity`` lacks (settings removed since: the six evaluation keys that left ``train_config``)."""

    def stored(k: str) -> Any:
        v = ck.get(k)
        if not (defaults and k in defaults and isinstance(v, dict) and isinstance(identity[k], dict)):
            return v
        v = {**defaults[k], **v}
        return {key: v[key] for key in identity[k] if key in v}

    return [k for k in IDENTITY if stored(k) != identity[k]]


def resume(
    out: Path, identity: dict[str, Any], restart: bool, log=print, defaults: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any] | None:
    """The ``last.pt`` of ``out`` to resume from, or None to start from scratch.

    ``identity``: the :data:`IDENTITY` fields of the run about to train. A checkpoint with other
    values (other inputs, settings or sizes; ``defaults``: as in :func:`_differs`), an unreadable
    one, or one whose ``best.pt`` is missing or foreign, is removed when ``restart`` (with a
    message) and is an error otherwise."""
    last, best = out / "last.pt", out / "best.pt"
    if not last.exists():
        if not best.exists():
            return None
        try:
            b = load(best)
            problem = "" if not _differs(b, identity, defaults) else f"{best} was written for other inputs or settings"
        except CheckpointError as exc:
            b, problem = None, str(exc)
        if not problem:
            if b.get("epoch") == 0:  # a closed-form fit (kcca, random): finished, nothing to train
                return b
            if b.get("epoch") == 1:  # killed between best.pt and last.pt of the first epoch
                log(f"{best} is ahead of a missing {last} (killed during epoch 1's writes): training from scratch")
                best.unlink()
                return None
            problem = f"{best} (epoch {b.get('epoch')}) exists without {last}"
    else:
        try:
            ck = load(last)
            problem = ""
        except CheckpointError as exc:
            ck, problem = None, str(exc)
        if ck is not None:
            diff = _differs(ck, identity, defaults)
            if diff:
                problem = f"{last} was written for other {', '.join(diff)}"
            elif ck.get("best_epoch") is not None:
                try:
                    b = load(best)
                    ahead = b.get("epoch") == ck["epoch"] + 1  # killed between this epoch's two writes
                    if _differs(b, identity, defaults) or (b.get("epoch") != ck["best_epoch"] and not ahead):
                        problem = f"{best} does not belong to {last} (best epoch {ck['best_epoch']})"
                except CheckpointError as exc:
                    problem = f"{exc}; {last} records best epoch {ck['best_epoch']}"
            if not problem:
                return ck
    if not restart:
        raise CheckpointError(f"{problem}: delete {out} (or pass --restart) to train from scratch")
    log(f"{problem}: training from scratch")
    for p in (last, best):
        p.unlink(missing_ok=True)
    return None


@contextlib.contextmanager
def run_lock(*folders: str | Path) -> Iterator[None]:
    """Hold ``<folder>/.lock`` in each of ``folders`` (a non-blocking ``flock``) while this process trains
    into them; a second writer stops at once with RunLocked naming the folder. The OS drops the lock when
    its process dies, so a killed run resumes; the file is removed on release."""
    unique: dict[Path, Path] = {}  # one lock per folder (two spellings: one), as first named
    for f in folders:
        unique.setdefault(Path(f).resolve(), Path(f))
    with contextlib.ExitStack() as held:
        for folder in unique.values():
            held.enter_context(_flock(folder))
        yield


@contextlib.contextmanager
def _flock(folder: Path) -> Iterator[None]:
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / ".lock"
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunLocked(
                f"{folder}: another process is training this run folder (it holds {lock}); wait for it "
                "to finish or stop it, or train into another folder"
            ) from None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed the file as it let go: lock the new one
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        os.close(fd)
