"""Confirmation as data (issue #59): the claims' runs re-run on fresh data after every choice is frozen.

    python -m fraglib_study confirm --partition N [--dataset pascal1k|synthetic] [--runs a,b,…] [--params FILE]

* ``pascal1k``: the ``pascal1k.folds`` stratified folds of partition seed N (``pascal1k.partition = N``), built
  by the ``folds`` stage's command of ``studies/pascal1k/dvc.yaml`` into ``data/confirm/pascal1k/p<N>/``, each
  run trained per fold as often as per split (``fraglib_study.experiments.study --folds``; the features and the parse are the study's);
* ``synthetic``: the benchmark regenerated with ``synthetic.seed = N`` by the data stages of ``dvc.yaml``
  (generation, parse, fragments, features) into ``data/confirm/synthetic/p<N>/``, each run trained as the default
  study trains it (``study.seeds``, its replicates).

Everything else is ``--params`` (default ``params.yaml``) as it stands, frozen into
``data/confirm/<dataset>/p<N>/params.yaml``: every data stage reads that file (``--params`` is passed to every
command that reads a parameter file; :data:`PARAMS_FREE` take their values on the command line, resolved from it)
and every run is trained on it. The runs are the claims' (``fraglib_study/reference/claims.yaml``, sides a and b of
every claim tested on the dataset and not yet confirmed on the partition; ``--runs`` a subset). The stage commands
are read from the pipelines, not copied, and training is :func:`fraglib_study.experiments.study.run_study`. Results go to
``runs/confirm/<dataset>/p<N>/<run>/`` (small json and csv, for git; checkpoints to ``models/confirm/…``), with
``confirm.json`` naming the runs confirmed there, the frozen file's SHA-256 and each data stage's inputs (its
command and the hash of the parameters it read); the claims table (:mod:`fraglib_study.audit.claims`) then gains a column
"confirmed on partition N".

A partition is confirmed one claim at a time: later ``--runs`` are added to ``confirm.json`` (the earlier kept)
as long as the frozen parameters are the same (same SHA-256); other parameters on a confirmed or built partition
are refused naming both hashes, and ``--overwrite`` then rebuilds the partition on them and retrains every run it
holds. A run already confirmed there is refused unless ``--overwrite`` (the default runs leave it out). A killed
confirmation resumes at any point: each data stage's start and completion are recorded with its inputs in
``data/confirm/<dataset>/p<N>/stages.json``, a completed stage of the same inputs is kept, a started one is run
again with ``--overwrite`` (its partial files are confirm's own), and each run resumes as a study does.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from fraglib.core.config import ConfigError, dataset_sections, read_yaml
from fraglib.core.outputs import OVERWRITE_HELP, command, remove, resumes, write_text
from fraglib.data import readers
from fraglib.run.inputs import DataPaths
from fraglib_study.experiments.study import run_study
from fraglib_study.schema import check_params, read_checked

# The protocol is read from the pipelines (no dataset is named here): the key that draws a dataset's partition is
# ``<dataset>.partition`` when its section has ``folds`` (the k-fold protocol), else ``<dataset>.seed``; its data stages
# are the stages of the first pipeline (dvc.yaml, then studies/*/dvc.yaml) that run only the library's data commands
# (DATA_COMMANDS) and read that key (or its whole section), then every such stage after them (through their outputs),
# in file order; the partition's folder replaces the first one's ``--out``.
PIPELINES = ("dvc.yaml", "studies/*/dvc.yaml")
DATA_COMMANDS = ("fraglib.data", "fraglib.text", "fraglib.vision")

# commands of the data stages that read no parameter file (the readers, fraglib.data.readers): every setting on their
# command line (``${…}``, resolved from the frozen parameters); every other fraglib command of a data stage is given
# ``--params`` (a test checks both against the commands' parsers)
PARAMS_FREE = frozenset(
    f"fraglib.data {d}" for d in readers.names() if not getattr(readers.reader(d), "READS_PARAMS", False)
)

STATE = "stages.json"  # in the partition's data folder: each data stage's progress and inputs
RECORD = "confirm.json"  # in the partition's results folder

CLAIMS = Path(__file__).parents[1] / "reference" / "claims.yaml"  # read by fraglib_study.audit.claims (a layer above)


def claim_runs(dataset: str, path: str | Path = CLAIMS) -> list[str]:
    """The runs the claims of ``path`` tested on ``dataset`` compare (sides a and b), each once, in file order."""
    claims = read_yaml(path).get("claims") or []
    return list(dict.fromkeys(c["runs"][s] for c in claims if dataset in (c.get("tested_on") or []) for s in "ab"))


def folds_protocol(params: dict[str, Any], dataset: str) -> bool:
    """Whether ``dataset`` is confirmed under the k-fold protocol: its section has ``folds``."""
    return "folds" in (params.get(dataset) or {})


def partition_key(params: dict[str, Any], dataset: str) -> str:
    """The key that draws ``dataset``'s data: ``<dataset>.partition`` (the k-fold protocol), else ``<dataset>.seed``."""
    return f"{dataset}.{'partition' if folds_protocol(params, dataset) else 'seed'}"


def frozen_params(params: dict[str, Any], dataset: str, partition: int) -> dict[str, Any]:
    """``params`` with the one key that draws the data set to ``partition`` (:func:`partition_key`; checked like
    params.yaml)."""
    out = copy.deepcopy(params)
    out.setdefault(dataset, {})[partition_key(params, dataset).split(".")[1]] = partition
    check_params(out)
    return out


def resolve(cmd: str, params: dict[str, Any]) -> str:
    """``cmd`` with every ``${a.b}`` of DVC's templating replaced by that value of ``params`` (KeyError naming it)."""

    def value(m: re.Match) -> str:
        v: Any = params
        for k in m.group(1).split("."):
            if not isinstance(v, dict) or k not in v:
                raise KeyError(f"{m.group(0)}: no such key in params")
            v = v[k]
        return str(v)

    return re.sub(r"\$\{([A-Za-z0-9_.]+)\}", value, cmd)


_SEPARATOR = re.compile(r"(\s*(?:&&|\|\||;)\s*)")  # between the simple commands of a shell line
# one of ours (an entry point and its command word), maybe a loop's body
_FRAGLIB = re.compile(r"(?:do\s+)?python -m ((?:fraglib|fraglib_study)(?:\.\w+)*(?:\s+[a-z][\w-]*)?)(?=\s|$)")


def fraglib_modules(cmd: str) -> list[str]:
    """The fraglib commands ``cmd`` runs (``python -m ENTRY COMMAND …``: "ENTRY COMMAND"), in order."""
    return [m.group(1) for part in _SEPARATOR.split(cmd.strip())[::2] if (m := _FRAGLIB.match(part))]


def with_options(cmd: str, params_file: str | Path | None = None, overwrite: bool = False) -> str:
    """``cmd`` with ``--params params_file`` in every fraglib command of it that reads a parameter file
    (not :data:`PARAMS_FREE`; replacing the one it names) and, when ``overwrite``, ``--overwrite`` in every one."""
    parts = _SEPARATOR.split(cmd.strip())
    for i in range(0, len(parts), 2):
        m = _FRAGLIB.match(parts[i])
        if not m:
            continue
        part = parts[i]
        if params_file is not None and m.group(1) not in PARAMS_FREE:
            opt = f"--params {shlex.quote(Path(params_file).as_posix())}"
            part, n = re.subn(r"(?<=\s)--params(?:=|\s+)\S+", lambda _: opt, part)
            part = part if n else f"{part} {opt}"
        if overwrite and not re.search(r"(?<=\s)--overwrite(?=\s|$)", part):
            part = f"{part} --overwrite"
        parts[i] = part
    return "".join(parts)


def _paths(entries: Any) -> list[str]:
    """The paths of a stage's ``deps`` or ``outs`` (an entry: a path, or a mapping of one path to its options)."""
    return [str(next(iter(e))) if isinstance(e, dict) else str(e) for e in entries or []]


def _within(a: str, b: str) -> bool:
    """Whether path ``a`` is path ``b`` or lies under it."""
    return a == b or a.startswith(b.rstrip("/") + "/")


def _data_stage(stage: dict[str, Any]) -> bool:
    """Whether a stage runs fraglib commands and only the library's data commands (:data:`DATA_COMMANDS`)."""
    cmd = stage.get("cmd", "")
    mods = fraglib_modules(cmd if isinstance(cmd, str) else " && ".join(cmd))
    return bool(mods) and all(m.split(" ")[0] in DATA_COMMANDS for m in mods)


def protocol(root: Path, dataset: str, params: dict[str, Any]) -> tuple[str, dict[str, Any], list[str]]:
    """(pipeline, its stages, the names of ``dataset``'s data stages in order) as the module comment above says;
    ConfigError when no pipeline has a data stage reading :func:`partition_key`."""
    key = partition_key(params, dataset)
    files = [p.relative_to(root).as_posix() for pattern in PIPELINES for p in sorted(root.glob(pattern))]
    for pipeline in files:
        stages = read_yaml(root / pipeline).get("stages") or {}
        chosen = [
            n
            for n, st in stages.items()
            if _data_stage(st) and any(p in (key, dataset) for p in st.get("params") or [] if isinstance(p, str))
        ]
        if not chosen:
            continue
        outs = [o for n in chosen for o in _paths(stages[n].get("outs"))]
        for n, st in stages.items():  # file order: a stage after the chosen ones, reading what they write
            if n not in chosen and _data_stage(st):
                if any(_within(d, o) or _within(o, d) for d in _paths(st.get("deps")) for o in outs):
                    chosen.append(n)
                    outs += _paths(st.get("outs"))
        return pipeline, stages, [n for n in stages if n in chosen]
    raise ConfigError(
        f"no pipeline ({', '.join(PIPELINES)}) has a data stage reading {key}: nothing draws {dataset}'s partition"
    )


def data_folder(cmd: str) -> str:
    """The folder a data stage's (resolved) command writes: its first ``--out``."""
    m = re.search(r"(?<=\s)--out(?:=|\s+)(\S+)", cmd)
    if not m:
        raise ConfigError(f"{cmd}: no --out, so no data folder to replace with the partition's")
    return m.group(1)


def features_folder(stages: dict[str, Any]) -> str | None:
    """The feature caches of a pipeline's ``fraglib.vision features`` stage, which the folds share: its
    ``--out-dir``, else its ``--dataset-dir``'s ``features``. None without one."""
    for st in stages.values():
        cmd = st.get("cmd", "")
        cmd = cmd if isinstance(cmd, str) else " && ".join(cmd)
        if "fraglib.vision features" in fraglib_modules(cmd):
            out = re.search(r"--out-dir\s+(\S+)", cmd)
            data = re.search(r"--dataset-dir\s+(\S+)", cmd)
            return out.group(1) if out else f"{data.group(1)}/features" if data else None
    return None


def data_stages(
    root: Path, dataset: str, params: dict[str, Any], out: Path, params_file: Path
) -> list[tuple[str, str]]:
    """(name, command) of the dataset's data stages (:func:`protocol`), resolved with ``params``, writing to
    ``out`` instead of the study's data folder and reading ``params_file`` (:func:`with_options`)."""
    _, stages, names = protocol(Path(root), dataset, params)
    cmds = [resolve(stages[n]["cmd"], params) for n in names]
    folder = data_folder(cmds[0])
    return [(n, with_options(c.replace(folder, out.as_posix()), params_file)) for n, c in zip(names, cmds)]


def data_commands(root: Path, dataset: str, params: dict[str, Any], out: Path, params_file: Path) -> list[str]:
    """The commands of :func:`data_stages`."""
    return [cmd for _, cmd in data_stages(root, dataset, params, out, params_file)]


def run_commands(cmds: list[str], root: Path) -> None:
    """Run each command in ``root`` by the shell, ``python`` being this interpreter; stop at the first failure."""
    for cmd in cmds:
        cmd = re.sub(r"(^|&& |; do )python ", lambda m: f"{m.group(1)}{shlex.quote(sys.executable)} ", cmd)
        print(f"+ {cmd}", flush=True)
        if subprocess.run(cmd, shell=True, cwd=root).returncode:
            raise SystemExit(f"fraglib_study.experiments.confirm: failed: {cmd}")


def captions(root: Path, run_dir: Path, params: dict[str, Any]) -> None:
    """The captions of a generating run (the ``captions`` stages' command), or a line saying why not (no Java:
    its captioning claims stay "—")."""
    from fraglib_study.experiments.captions import java_missing

    why = java_missing()
    if why:
        print(f"fraglib_study.experiments.confirm: no captions of {run_dir}: {why}", flush=True)
        return
    n_boot = (params.get("captions") or {}).get("n_boot", 200)
    run_commands([f"python -m fraglib_study captions --run-dir {run_dir} --n-boot {n_boot} --overwrite"], root)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    """The object in ``path`` ({} when there is none); ConfigError naming a damaged one."""
    if not path.exists():
        return {}
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: not readable JSON ({exc}); fraglib_study.experiments.confirm wrote it: remove it to start over"
        )
    if not isinstance(found, dict):
        raise ConfigError(f"{path}: expected a JSON object, found {type(found).__name__}")
    return found


def build_data(
    root: Path, stages: list[tuple[str, str]], data: Path, params_sha: str, overwrite: bool
) -> dict[str, dict[str, str]]:
    """Run the data ``stages`` into ``root / data`` that are not done on the same inputs (command and
    ``params_sha``), recording each one's start and completion in ``data / STATE``; a stage after one run
    here is run too, and a stage started before (its partial files are ours) or every stage when ``overwrite``
    is run with ``--overwrite``. Returns each stage's inputs."""
    path = root / data / STATE
    state = _read_json(path)
    done = state.setdefault("stages", {})
    inputs, rerun = {}, False
    for name, cmd in stages:
        inputs[name] = {"cmd": cmd, "params_sha256": params_sha}
        entry = done.get(name)
        if not rerun and isinstance(entry, dict) and entry.get("done") and entry.get("cmd") == cmd:
            if entry.get("params_sha256") == params_sha:
                print(f"fraglib_study.experiments.confirm: stage {name} done on these inputs: kept", flush=True)
                continue
        rerun = True
        replace = overwrite or entry is not None
        done[name] = {**inputs[name], "done": False}
        write_text(path, json.dumps(state, indent=1) + "\n")
        run_commands([with_options(cmd, overwrite=replace)], root)
        done[name]["done"] = True
        write_text(path, json.dumps(state, indent=1) + "\n")
    return inputs


def _refuse_other_params(what: str, old: str | None, new: str, params_file: str, where: Path) -> None:
    raise ConfigError(
        f"{what} {where} was frozen on parameters of SHA-256 {old or '(not recorded: an older fraglib_study.experiments.confirm)'}; "
        f"{params_file} frozen for it gives SHA-256 {new}: confirm on another --partition, or pass --overwrite "
        "to rebuild this partition on the new parameters and retrain every run it holds"
    )


def confirm(
    root: str | Path,
    dataset: str,
    partition: int,
    runs: list[str] | None = None,
    params_file: str = "params.yaml",
    overwrite: bool = False,
) -> Path:
    """Build the data of ``partition`` and train ``runs`` (default: the claims' runs of ``dataset`` not confirmed
    there yet) on it (module docstring); returns ``runs/confirm/<dataset>/p<partition>``."""
    root = Path(root)
    params = frozen_params(read_checked(root / params_file), dataset, partition)
    text = yaml.safe_dump(params, sort_keys=False)
    sha = sha256(text)
    tag = f"p{partition}"
    data = Path("data") / "confirm" / dataset / tag
    results, models = Path("runs") / "confirm" / dataset / tag, Path("models") / "confirm" / dataset / tag
    frozen, record_path = root / data / "params.yaml", root / results / RECORD
    record = _read_json(record_path)
    legacy = (root / data / "done").exists() and not (root / data / STATE).exists()
    changed = legacy  # the partition holds data or runs of other (or unknown) parameters
    if record and record.get("params_sha256") != sha:
        changed = True
        if not overwrite:
            _refuse_other_params("the confirmation", record.get("params_sha256"), sha, params_file, record_path)
    old = sha256(frozen.read_text(encoding="utf-8")) if frozen.exists() else sha
    if old != sha:
        changed = True
        if not overwrite:
            _refuse_other_params("the data of", old, sha, params_file, frozen)
    if legacy and not overwrite:
        raise ConfigError(
            f"{root / data} was built by an older fraglib_study.experiments.confirm, whose parse, fragments and features stages read "
            "params.yaml instead of the frozen parameters: pass --overwrite to rebuild it and retrain its runs"
        )
    recorded = [r for r in record.get("runs") or [] if isinstance(r, str)]
    if runs is None:
        runs = [r for r in claim_runs(dataset) if r in params["runs"]]
        if not runs:
            raise ConfigError(f"no run of {params_file} is a claim's tested on {dataset}: name them with --runs")
        runs = [r for r in runs if overwrite or r not in recorded]
        if not runs:
            raise ConfigError(
                f"every claim run tested on {dataset} is confirmed on partition {partition} already ({record_path}): "
                "--overwrite to train them again"
            )
    runs = list(dict.fromkeys(runs))
    again = [r for r in runs if r in recorded]
    if again and not overwrite:
        raise ConfigError(
            f"--runs: {', '.join(again)} confirmed on partition {partition} already ({record_path}): "
            "leave them out, or pass --overwrite to train them again"
        )
    if changed:  # none of the partition's runs is left on other parameters
        runs = list(dict.fromkeys(recorded + runs))
    unknown = [r for r in runs if r not in params["runs"]]
    if unknown:
        raise ConfigError(f"--runs: unknown run(s) {', '.join(unknown)} (runs of {params_file})")
    resumes(root / data, root / results, root / models)  # the partition's own folders: state, runs, checkpoints
    (root / data).mkdir(parents=True, exist_ok=True)
    if changed or not frozen.exists():
        write_text(frozen, text)
    stages = data_stages(root, dataset, params, data, frozen.relative_to(root))
    inputs = build_data(root, stages, data, sha, overwrite or legacy)
    if legacy:
        remove(root / data / "done")  # the older confirm's marker, replaced by STATE
    folds = folds_protocol(params, dataset)
    features = features_folder(protocol(root, dataset, params)[1]) if folds else None
    paths = (
        DataPaths(root / data / "fold{seed}", root / features if features else None)
        if folds
        else DataPaths(root / data)
    )
    for r in runs:
        run_study(paths, r, params, root / results / r, dataset if folds else None, None, str(root / models / r), folds)
        if params["runs"][r].get("system") == "stt" and params["runs"][r].get("images") != "none":
            captions(root, results / r, params)
    latest = _read_json(record_path)  # another confirmation of the partition may have added runs meanwhile
    before = [r for r in latest.get("runs") or [] if isinstance(r, str)] if latest.get("params_sha256") == sha else []
    record = {
        "dataset": dataset,
        "partition": partition,
        "params": str(params_file),
        "params_sha256": sha,
        "frozen_params": (data / "params.yaml").as_posix(),
        "stages": inputs,
        "runs": list(dict.fromkeys(before + runs)),
    }
    write_text(record_path, json.dumps(record, indent=1) + "\n")
    return root / results


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partition", type=int, required=True, help="N: the seed of the fresh partition (or benchmark)")
    ap.add_argument(
        "--dataset",
        help="the data to confirm on: a section of --params whose key draws it (default: the first with folds)",
    )
    ap.add_argument(
        "--runs", help="comma-separated runs (default: the claims' runs tested on the dataset, not confirmed yet)"
    )
    ap.add_argument("--params", default="params.yaml", help="the parameters to freeze (every stage and run reads them)")
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help=OVERWRITE_HELP + " (other parameters on a confirmed partition: rebuilt, and every run retrained)",
    )
    args = ap.parse_args(argv)
    if args.partition < 0:
        ap.error(f"--partition {args.partition}: a seed, a non-negative integer")
    runs = args.runs.split(",") if args.runs else None
    if args.dataset is None:
        from fraglib_study.params import read_params

        params = read_params(args.params)
        with_folds = [d for d in dataset_sections(params) if "folds" in params[d]]
        if not with_folds:
            ap.error(f"--dataset: {args.params} has no dataset section with folds to default to; name one")
        args.dataset = with_folds[0]
    try:
        out = confirm(".", args.dataset, args.partition, runs, args.params, args.overwrite)
    except ConfigError as exc:
        ap.error(str(exc))
    print(f"confirmation runs in {out}; `python -m fraglib_study summary` puts their verdicts in the claims table")
