"""Confirmation as data (issue #59): the claims' runs re-run on fresh data after every choice is frozen.

    python -m fraglib.confirm --partition N [--dataset pascal1k|synthetic] [--runs a,b,…]

* ``pascal1k``: the ``pascal1k.folds`` stratified folds of partition seed N (``pascal1k.partition = N``), built
  by the ``folds`` stage's command of ``studies/pascal1k/dvc.yaml`` into ``data/confirm/pascal1k/p<N>/``, each
  run trained per fold as often as per split (``fraglib.study --folds``; the features and the parse are the study's);
* ``synthetic``: the benchmark regenerated with ``synthetic.seed = N`` by the data stages of ``dvc.yaml``
  (generation, parse, fragments, features) into ``data/confirm/synthetic/p<N>/``, each run trained as the default
  study trains it (``study.seeds``, its replicates).

Everything else is ``params.yaml`` as it stands, and the runs are the claims' (``fraglib/reference/claims.yaml``,
sides a and b of every claim tested on the dataset; ``--runs`` a subset). The stage commands are read from the
pipelines, not copied, and training is :func:`fraglib.study.run_study`. Results go to
``runs/confirm/<dataset>/p<N>/<run>/`` (small json and csv, for git; checkpoints to ``models/confirm/…``), with
``confirm.json`` naming what was frozen; the claims table (:mod:`fraglib.claims`) then gains a column
"confirmed on partition N". A finished confirmation is refused unless ``--overwrite``; a killed one resumes
(the data built once, each run resuming as a study does).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from fraglib.config import ConfigError, read_yaml
from fraglib.inputs import DataPaths
from fraglib.outputs import OVERWRITE_HELP, claim_cli, write_text
from fraglib.params import check_params, read_params
from fraglib.study import run_study

DATASETS = {  # dataset -> (its pipeline, its data stages in order, the data folder their commands name)
    "synthetic": (
        "dvc.yaml",
        ("synthetic", "parse_synthetic", "fragments_synthetic", "features_synthetic"),
        "data/synthetic",
    ),
    "pascal1k": ("studies/pascal1k/dvc.yaml", ("folds",), "data/pascal1k/folds"),
}


CLAIMS = Path(__file__).parent / "reference" / "claims.yaml"  # read by fraglib.claims (a layer above)


def claim_runs(dataset: str, path: str | Path = CLAIMS) -> list[str]:
    """The runs the claims of ``path`` tested on ``dataset`` compare (sides a and b), each once, in file order."""
    claims = read_yaml(path).get("claims") or []
    return list(dict.fromkeys(c["runs"][s] for c in claims if dataset in (c.get("tested_on") or []) for s in "ab"))


def frozen_params(params: dict[str, Any], dataset: str, partition: int) -> dict[str, Any]:
    """``params`` with the one key that draws the data set to ``partition``: ``synthetic.seed`` or
    ``pascal1k.partition`` (checked like params.yaml)."""
    out = copy.deepcopy(params)
    key = "seed" if dataset == "synthetic" else "partition"
    out.setdefault(dataset, {})[key] = partition
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


def data_commands(root: Path, dataset: str, params: dict[str, Any], out: Path, params_file: Path) -> list[str]:
    """The dataset's data stages' commands (:data:`DATASETS`), resolved with ``params``, writing to ``out`` instead
    of the study's data folder and reading ``params_file`` where a command takes ``--params``."""
    pipeline, names, folder = DATASETS[dataset]
    stages = read_yaml(root / pipeline).get("stages") or {}
    cmds = []
    for name in names:
        if name not in stages:
            raise ConfigError(f"{pipeline}: no stage {name!r}, which builds the {dataset} data to confirm on")
        cmd = resolve(stages[name]["cmd"], params).replace(folder, out.as_posix())
        cmds.append(re.sub(r"--params \S+", f"--params {shlex.quote(params_file.as_posix())}", cmd))
    return cmds


def run_commands(cmds: list[str], root: Path) -> None:
    """Run each command in ``root`` by the shell, ``python`` being this interpreter; stop at the first failure."""
    for cmd in cmds:
        cmd = re.sub(r"(^|&& |; do )python ", lambda m: f"{m.group(1)}{shlex.quote(sys.executable)} ", cmd)
        print(f"+ {cmd}", flush=True)
        if subprocess.run(cmd, shell=True, cwd=root).returncode:
            raise SystemExit(f"fraglib.confirm: failed: {cmd}")


def captions(root: Path, run_dir: Path, params: dict[str, Any]) -> None:
    """The captions of a generating run (the ``captions`` stages' command), or a line saying why not (no Java:
    its captioning claims stay "—")."""
    from fraglib.captions import java_missing

    why = java_missing()
    if why:
        print(f"fraglib.confirm: no captions of {run_dir}: {why}", flush=True)
        return
    n_boot = (params.get("captions") or {}).get("n_boot", 200)
    run_commands([f"python -m fraglib.captions --run-dir {run_dir} --n-boot {n_boot} --overwrite"], root)


def confirm(
    root: str | Path,
    dataset: str,
    partition: int,
    runs: list[str] | None = None,
    params_file: str = "params.yaml",
) -> Path:
    """Build the data of ``partition`` and train ``runs`` (default: the claims' runs of ``dataset``) on it
    (module docstring); returns ``runs/confirm/<dataset>/p<partition>``."""
    root = Path(root)
    params = frozen_params(read_params(root / params_file), dataset, partition)
    runs = runs or [r for r in claim_runs(dataset) if r in params["runs"]]
    unknown = [r for r in runs if r not in params["runs"]]
    if unknown:
        raise ConfigError(f"--runs: unknown run(s) {', '.join(unknown)} (runs of params.yaml)")
    tag = f"p{partition}"
    data = Path("data") / "confirm" / dataset / tag
    results, models = Path("runs") / "confirm" / dataset / tag, Path("models") / "confirm" / dataset / tag
    (root / data).mkdir(parents=True, exist_ok=True)
    frozen = root / data / "params.yaml"
    write_text(frozen, yaml.safe_dump(params, sort_keys=False))
    if not (root / data / "done").exists():
        run_commands(data_commands(root, dataset, params, data, frozen.relative_to(root)), root)
        write_text(root / data / "done", "")
    folds = dataset == "pascal1k"
    paths = DataPaths(root / data / "fold{seed}", root / "data/pascal1k/features") if folds else DataPaths(root / data)
    for r in runs:
        run_study(paths, r, params, root / results / r, dataset if folds else None, None, str(root / models / r), folds)
        if params["runs"][r].get("system") == "stt" and params["runs"][r].get("images") != "none":
            captions(root, results / r, params)
    record = {"dataset": dataset, "partition": partition, "runs": runs, "params": params_file}
    write_text(root / results / "confirm.json", json.dumps(record, indent=1) + "\n")
    return root / results


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partition", type=int, required=True, help="N: the seed of the fresh partition (or benchmark)")
    ap.add_argument("--dataset", default="pascal1k", choices=sorted(DATASETS))
    ap.add_argument("--runs", help="comma-separated runs (default: the claims' runs tested on the dataset)")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    if args.partition < 0:
        ap.error(f"--partition {args.partition}: a seed, a non-negative integer")
    done = [Path("runs") / "confirm" / args.dataset / f"p{args.partition}" / "confirm.json"]
    claim_cli(ap, done, done, args.overwrite, f"python -m fraglib.confirm --partition {args.partition}")
    try:
        out = confirm(".", args.dataset, args.partition, args.runs.split(",") if args.runs else None, args.params)
    except ConfigError as exc:
        ap.error(str(exc))
    print(f"confirmation runs in {out}; `python -m fraglib.summary` puts their verdicts in the claims table")


if __name__ == "__main__":
    main()
