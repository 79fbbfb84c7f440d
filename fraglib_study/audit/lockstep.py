"""Is each DVC lock in step with the code and settings a clone holds? (issue #78, docs/runs.md "The lock")

    python -m fraglib_study lockstep check [dvc.lock ...]            # stages whose recorded sources or settings differ,
                                                               # or that dvc.yaml declares and the lock lacks
    python -m fraglib_study lockstep record --evidence TEXT TARGET... # re-record stages after a change that moved nothing
    python -m fraglib_study lockstep record --keep-outs ...          # the same for stages whose outputs no machine holds

A stage's lock entry records the md5 of every dependency and the values of its ``params.yaml`` keys. A *source*
is a dependency that no stage of any lock writes (the package's modules, the notebooks, the reference files);
``check`` hashes the sources as DVC does (a file: md5 of its bytes; a folder: md5 of the sorted
``[{"md5", "relpath"}]`` list, ``.dir``) and compares the settings, without DVC (fast enough for a test).

When a change moves no number (a module moved, a docstring edited), re-running days of trainings to prove it is
not affordable: ``record`` re-records the named stages with ``dvc commit --force`` (deps, settings, command and
the outputs a clone holds), and appends the evidence -- which stages were re-run and found byte-identical, and
where -- to ``docs/lock_records.json``. It refuses a stage whose ``params.yaml`` values changed: a changed setting
is re-run, not re-recorded (``--rerun``: the stages' own commands just ran outside DVC, as ``make reports`` runs
the report stages') -- unless the stage trains (``python -m fraglib_study study``) and its committed units record
the very settings today's ``params.yaml`` resolve to (:func:`fraglib_study.experiments.study.settled`: another
run's entry or a new key at its default changed the section, not this run). A change that moves numbers re-runs
what it moves (``dvc repro``).

``--keep-outs`` is for stages whose outputs no machine holds whole (every fold's checkpoints): instead of ``dvc
commit`` it writes each stage's lock entry from its ``dvc.yaml`` declaration -- command, sources hashed here,
settings read here, an input another stage writes as recorded -- and keeps the outputs the lock records.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from fraglib.core.outputs import command, updates, write_text


def locks(root: str | Path = ".") -> list[str]:
    """The project's locks found under ``root``: the default pipeline's, then each study's (``studies/*/dvc.lock``)."""
    root = Path(root)
    found = ["dvc.lock"] * (root / "dvc.lock").is_file()
    return found + sorted(p.relative_to(root).as_posix() for p in root.glob("studies/*/dvc.lock"))


RECORDS = Path("docs/lock_records.json")
_MISSING = object()


def md5_of(path: str | Path) -> tuple[str, int, int | None]:
    """DVC's hash of a file or folder: (md5, size in bytes, files in it or None for a file). A folder's md5 is
    that of the JSON list of its files' md5 and relative paths, sorted by path parts, with ``.dir`` appended;
    bytecode (``__pycache__``, ``*.pyc``) left out, as ``.dvcignore`` tells DVC."""
    path = Path(path)
    if path.is_file():
        data = path.read_bytes()
        return hashlib.md5(data).hexdigest(), len(data), None
    entries, size = [], 0
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "__pycache__"]  # .dvcignore: bytecode is no part of a package folder
        for f in files:
            if f.endswith(".pyc"):
                continue
            p = Path(root) / f
            data = p.read_bytes()
            entries.append({"md5": hashlib.md5(data).hexdigest(), "relpath": p.relative_to(path).as_posix()})
            size += len(data)
    entries.sort(key=lambda e: e["relpath"].split("/"))
    listing = json.dumps(entries, sort_keys=True).encode()
    return hashlib.md5(listing).hexdigest() + ".dir", size, len(entries)


def _read(lock: str | Path) -> dict[str, Any]:
    return _yaml(lock)["stages"]


def _yaml(path: str | Path) -> Any:
    """A YAML file read as DVC reads it (ruamel, YAML 1.2: ``1e-05`` is a number, not PyYAML's string)."""
    from ruamel.yaml import YAML

    return YAML(typ="safe").load(Path(path).read_text())


def _inside(a: str, b: str) -> bool:
    """Whether path ``a`` is ``b`` or under it."""
    return a == b or a.startswith(b.rstrip("/") + "/")


def outputs(locks: list[str | Path]) -> list[str]:
    """Every path some stage of ``locks`` writes."""
    return [o["path"] for lock in locks for e in _read(lock).values() for o in e.get("outs") or []]


def is_source(path: str, outs: list[str]) -> bool:
    """A dependency no stage writes, nor holds a stage's output (``runs/synthetic`` holds written runs)."""
    return not any(_inside(path, o) or _inside(o, path) for o in outs)


def _value(params: dict[str, Any], key: str) -> Any:
    node: Any = params
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def out_of_step(lock: str | Path, root: str | Path = ".", outs: list[str] | None = None) -> list[dict[str, str]]:
    """One row per difference in ``lock`` (relative to ``root``, the repository): ``stage``, ``what`` (``source``
    or ``setting``), ``path`` (a source's path, a setting's ``file:key``) and ``why``. ``outs``: every path the
    project's stages write (default: those of :func:`locks` under ``root``)."""
    root = Path(root)
    if outs is None:
        outs = outputs([root / f for f in locks(root)])
    rows: list[dict[str, str]] = []
    settings: dict[str, Any] = {}
    hashes: dict[str, str] = {}  # a source shared by many stages is hashed once
    for stage, entry in _read(root / lock).items():
        for dep in entry.get("deps") or []:
            path = dep["path"]
            if not is_source(path, outs):
                continue
            if not (root / path).exists():
                rows.append({"stage": stage, "what": "source", "path": path, "why": "missing"})
                continue
            if path not in hashes:
                hashes[path] = md5_of(root / path)[0]
            if hashes[path] != dep.get("md5"):
                rows.append({"stage": stage, "what": "source", "path": path, "why": "changed since recorded"})
        for file, values in (entry.get("params") or {}).items():
            if file not in settings:
                settings[file] = _yaml(root / file) if (root / file).is_file() else {}
            for key, recorded in values.items():
                now = _value(settings[file], key)
                if now is _MISSING or now != recorded:
                    why = "missing" if now is _MISSING else "changed since recorded"
                    rows.append({"stage": stage, "what": "setting", "path": f"{file}:{key}", "why": why})
    return rows


def made_by(outs: list[str], root: str | Path = ".") -> str:
    """Which code made a stage's committed results (``outs``: its outputs' paths): the commits, dates and machines
    the ``timing.json`` of its training units record (``fraglib_study.experiments.study`` writes one per unit), as
    one phrase ("6f0ce43-dirty (2026-11-27) on AMD EPYC, 2 logical cores"); "" where its outputs hold none."""
    root = Path(root)
    seen: dict[tuple[str, str], set[str]] = {}
    for out in outs:
        for f in sorted((root / out).glob("**/timing.json")) if (root / out).is_dir() else []:
            t = json.loads(f.read_text())
            if isinstance(t, dict) and t.get("commit"):
                key = (str(t["commit"]), str(t.get("date", ""))[:10])
                seen.setdefault(key, set()).add(str(t.get("machine", "an unnamed machine")))
    if not seen:
        return ""
    commits = sorted(seen, key=lambda k: (k[1], k[0]))
    machines = sorted(set().union(*seen.values()))
    return ", ".join(f"{c} ({d})" if d else c for c, d in commits) + " on " + " / ".join(machines)


def unrecorded(pipeline: str | Path, root: str | Path = ".") -> list[dict[str, str]]:
    """What ``pipeline`` (a ``dvc.yaml``, resolved by DVC) declares and its lock does not record: a stage never run
    (``why``: "not in the lock"), an input or a setting added to a stage after it ran ("declared, not recorded").
    Rows as :func:`out_of_step`'s; ``what`` is ``stage``, ``source`` or ``setting``."""
    from dvc.repo import Repo

    root = Path(root)
    lock = root / Path(pipeline).with_suffix(".lock")
    recorded = _read(lock) if lock.is_file() else {}
    rows: list[dict[str, str]] = []
    for stage in Repo(str(root)).stage.collect(str(root / pipeline)):
        entry = recorded.get(stage.name)
        if entry is None:
            rows.append({"stage": stage.name, "what": "stage", "path": str(pipeline), "why": "not in the lock"})
            continue
        deps = {d["path"] for d in entry.get("deps") or []}
        keys = {f"{f}:{k}" for f, v in (entry.get("params") or {}).items() for k in v}
        for dep in stage.deps:
            if type(dep).__name__ == "ParamsDependency":
                rows += [
                    {
                        "stage": stage.name,
                        "what": "setting",
                        "path": f"{dep.def_path}:{k}",
                        "why": "declared, not recorded",
                    }
                    for k in dep.params
                    if f"{dep.def_path}:{k}" not in keys
                ]
            elif dep.def_path not in deps:
                rows.append(
                    {"stage": stage.name, "what": "source", "path": dep.def_path, "why": "declared, not recorded"}
                )
    return rows


def _named(targets: list[str], pipeline: str, stage: str) -> bool:
    """Whether ``targets`` name ``stage`` of ``pipeline``: the pipeline, the stage's address, or its foreach group."""
    return any(t in (pipeline, f"{pipeline}:{stage}", f"{pipeline}:{stage.split('@')[0]}") for t in targets)


def _declared(pipeline: str) -> dict[str, Any]:
    """``pipeline``'s stages as DVC resolves them (name -> stage), or {} where there is no such file."""
    if not Path(pipeline).is_file():
        return {}
    from dvc.repo import Repo

    return {s.name: s for s in Repo(".").stage.collect(pipeline)}


def _settled(stage: Any, keys: list[str]) -> bool:
    """Whether a training stage's changed settings ``keys`` (``params.yaml`` keys) reach none of its committed units
    (module docstring): each one read by :func:`fraglib_study.experiments.study.settled`, which finds nothing."""
    from fraglib_study.experiments.study import settled, settles
    from fraglib_study.schema import read_checked

    cmd = shlex.split(stage.cmd) if stage is not None and isinstance(stage.cmd, str) else []
    if cmd[:4] != ["python", "-m", "fraglib_study", "study"] or "--params" in cmd or not all(map(settles, keys)):
        return False
    return not settled(cmd[4:], read_checked("params.yaml"))


def _entries(lock: str, stages: list[Any]) -> str:
    """``lock``'s text with ``stages``' entries written from their declarations, the recorded outputs kept
    (``--keep-outs``, module docstring). Refused: a stage never run, one whose declared outputs differ from those
    recorded, a source missing here, an input no lock records."""
    from ruamel.yaml import YAML

    yaml = YAML()
    data = yaml.load(Path(lock).read_text())
    all_locks = locks()
    outs = outputs(all_locks)
    written = {o["path"]: o for f in all_locks for e in _read(f).values() for o in e.get("outs") or []}
    files: dict[str, Any] = {}
    for stage in stages:
        entry = data["stages"].get(stage.name)
        if entry is None:
            raise ValueError(f"{lock}: {stage.name} was never run (not in the lock): run it (dvc repro)")
        declared_outs = sorted(o.def_path for o in stage.outs)
        if declared_outs != sorted(o["path"] for o in entry.get("outs") or []):
            raise ValueError(
                f"{lock}: {stage.name}: dvc.yaml declares outputs {declared_outs}, the lock others: run it"
            )
        old = {d["path"]: d for d in entry.get("deps") or []}
        deps, params = [], {}
        for dep in stage.deps:
            path = dep.def_path
            if type(dep).__name__ == "ParamsDependency":
                if path not in files:
                    files[path] = _yaml(path)
                keys = sorted(dep.params) or sorted(files[path])
                params[path] = {k: _value(files[path], k) for k in keys}
                missing = [k for k, v in params[path].items() if v is _MISSING]
                if missing:
                    raise ValueError(f"{lock}: {stage.name}: {path} lacks {', '.join(missing)}")
            elif is_source(path, outs):
                if not Path(path).exists():
                    raise ValueError(f"{lock}: {stage.name}: its source {path} is not here")
                md5, size, n = md5_of(path)
                deps.append({"path": path, "hash": "md5", "md5": md5, "size": size, **({"nfiles": n} if n else {})})
            else:
                rec = old.get(path) or written.get(path)
                if rec is None:
                    raise ValueError(f"{lock}: {stage.name}: its input {path} is recorded by no stage")
                deps.append({k: rec[k] for k in ("path", "hash", "md5", "size", "nfiles") if k in rec})
        kept = {k: v for k, v in entry.items() if k not in ("cmd", "deps", "params")}
        new = {"cmd": stage.cmd, "deps": sorted(deps, key=lambda d: d["path"])}
        ordered = dict(sorted(params.items(), key=lambda kv: (kv[0] != "params.yaml", kv[0])))  # as DVC orders them
        data["stages"][stage.name] = {**new, **({"params": ordered} if ordered else {}), **kept}
    buf = io.StringIO()
    yaml.dump(data, buf)
    return buf.getvalue()


def record(
    targets: list[str], evidence: str, records: Path = RECORDS, rerun: bool = False, keep_outs: bool = False
) -> dict[str, Any]:
    """``dvc commit --force`` of ``targets`` (DVC's stage addresses, e.g. ``dvc.yaml:index``) after checking that
    none of their settings changed -- unless ``rerun``: their commands were just run outside DVC with the current
    settings (``make reports`` runs the report stages' own commands), or the stage trains and its committed units
    hold today's settings (:func:`_settled`); ``keep_outs``: the entries written here, outputs kept (module
    docstring). Appends ``{date, parent, targets, rerun, [keep_outs,] evidence}`` to ``records``."""
    if not evidence.strip():
        raise ValueError("--evidence: say which stages were re-run and found byte-identical, and where")
    chosen, skipped, named = {}, [], set()
    changed: dict[tuple[str, str], list[dict[str, str]]] = {}  # (pipeline, stage) -> its changed settings' rows
    declared_in: dict[str, dict[str, Any]] = {}
    for lock in locks():
        pipeline = str(Path(lock).with_suffix(".yaml"))
        if not any(t == pipeline or t.startswith(pipeline + ":") for t in targets):
            continue
        declared, ran = declared_in.setdefault(pipeline, _declared(pipeline)), _read(lock)
        chosen[lock] = [stage for name, stage in declared.items() if _named(targets, pipeline, name)]
        named |= {t for t in targets for name in declared if _named([t], pipeline, name)}
        if keep_outs:  # a group's or a pipeline's stage never run has nothing to re-record; one named alone is refused
            never = [s.name for s in chosen[lock] if s.name not in ran and f"{pipeline}:{s.name}" not in targets]
            chosen[lock] = [s for s in chosen[lock] if s.name not in never]
            skipped += [f"{pipeline}:{name}" for name in never]
        for row in out_of_step(lock) + (unrecorded(pipeline) if declared else []):
            if not rerun and row["what"] == "setting" and _named(targets, pipeline, row["stage"]):
                changed.setdefault((pipeline, row["stage"]), []).append(row)
    unknown = [t for t in targets if t not in named]
    if unknown:
        raise ValueError(f"{' '.join(unknown)}: names no stage of the project's pipelines (e.g. dvc.yaml:index)")
    refused = [
        f"{pipeline}:{stage} {row['path']} ({row['why']})"
        for (pipeline, stage), rows in changed.items()
        if not _settled(declared_in[pipeline].get(stage), [r["path"].split(":", 1)[1] for r in rows])
        for row in rows
    ]
    if refused:
        raise ValueError(
            "settings changed (re-run these stages, or pass --rerun if their commands just ran): " + "; ".join(refused)
        )
    if keep_outs:
        texts = {lock: _entries(lock, stages) for lock, stages in chosen.items() if stages}  # all checked, then written
        for lock, text in texts.items():
            updates(lock)  # a lock is updated in place on purpose, as DVC does
            write_text(lock, text)
        if skipped:
            print(f"never run, nothing to re-record: {' '.join(skipped)}", file=sys.stderr)
    else:
        subprocess.run([sys.executable, "-m", "dvc", "commit", "--force", *targets], check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    entry = {
        "date": dt.date.today().isoformat(),
        "parent": head,
        "targets": targets,
        "rerun": rerun,
        **({"keep_outs": True} if keep_outs else {}),
        "evidence": evidence,
    }
    log = json.loads(records.read_text()) if records.is_file() else []
    updates(records)  # the project's register of re-recordings: appended on purpose
    write_text(records, json.dumps([*log, entry], indent=1, ensure_ascii=False) + "\n")
    return entry


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="list the stages whose recorded sources or settings differ (exit 1 if any)")
    c.add_argument("locks", nargs="*", default=locks())
    r = sub.add_parser("record", help="re-record stages after a change that moved no number, with its evidence")
    r.add_argument("targets", nargs="+", help="stage addresses (dvc.yaml:index) or pipeline files")
    r.add_argument("--evidence", required=True, help="which stages were re-run and found byte-identical, and where")
    r.add_argument(
        "--keep-outs",
        action="store_true",
        help="write the targets' entries here (sources, settings, command) and keep the outputs recorded: for stages "
        "whose outputs no machine holds whole",
    )
    r.add_argument(
        "--rerun",
        action="store_true",
        help="the targets' commands were just run outside DVC with the current settings (make reports): record them "
        "even where a setting changed",
    )
    args = ap.parse_args(argv)
    if args.command == "record":
        print(
            json.dumps(
                record(args.targets, args.evidence, rerun=args.rerun, keep_outs=args.keep_outs), ensure_ascii=False
            )
        )
        return
    bad = 0
    for lock in args.locks:
        rows = out_of_step(lock) + unrecorded(Path(lock).with_suffix(".yaml"))
        stages, entries = sorted({r["stage"] for r in rows}), _read(lock)
        bad += len(stages)
        print(f"{lock}: {len(stages)} stage(s) out of step" + (":" if stages else ""))
        for s in stages:
            mine = [r for r in rows if r["stage"] == s]
            made = made_by([o["path"] for o in entries[s].get("outs") or []]) if s in entries else ""
            print(f"  {s}: " + ", ".join(f"{r['path']} ({r['why']})" for r in mine[:6])
                  + (f" and {len(mine) - 6} more" if len(mine) > 6 else "")
                  + (f"; its results made by {made}" if made else ""))  # fmt: skip
    raise SystemExit(1 if bad else 0)
