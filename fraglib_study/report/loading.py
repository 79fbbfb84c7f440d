"""A study read back from what git holds, every file checked: its runs' summaries and per-query ranks
(:func:`load_run`; a k-fold run pooled, :func:`pool_folds`), which runs a folder has and which it lacks, their
labels, histories, caption records and search tables. A damaged file is a ValueError naming it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.core.outputs import unit_key, unit_replicate, unit_seed
from fraglib.metrics.retrieval import DIRECTIONS
from fraglib_study.report.pagetext import fragment, plain


def run_names(params: dict[str, Any], runs_dir: str | Path | None = None) -> list[str]:
    """The retrieval runs of ``params.yaml: runs`` in their order (with ``runs_dir``: only those trained
    there — a ``metrics.json`` and the ``seeds`` folder with the per-query ranks; a fresh clone has
    the former from git but the latter only after ``dvc repro`` or ``dvc pull``). Text-only runs
    (``images: none``) retrieve nothing and are left out: they have their own report."""
    names = [r for r, e in (params.get("runs") or {}).items() if (e or {}).get("images") != "none"]
    return [
        r
        for r in names
        if runs_dir is None
        or ((Path(runs_dir) / r / "metrics.json").exists() and (Path(runs_dir) / r / "seeds").is_dir())
    ]


def run_folders(params: dict[str, Any], runs_dirs: list[str | Path]) -> dict[str, Path]:
    """Run -> its folder, for the trained retrieval runs in ``runs_dirs`` (study folders: the default synthetic
    study and the extended one, say), in ``params.yaml`` order; the first folder holding a run wins. A run
    tested on another test split than the first folder's (:func:`left_out_runs`: not re-run since its benchmark
    changed) is left out: it cannot be paired with the others."""
    out: dict[str, Path] = {}
    stale = left_out_runs(params, runs_dirs)
    for d in runs_dirs:
        for r in run_names(params, d):
            if r not in stale.get(str(d), ()):
                out.setdefault(r, Path(d) / r)
    return {r: out[r] for r in run_names(params) if r in out}


_QUERIES: dict[tuple[str, int, int], int] = {}  # (ranks.json, its mtime_ns, size) -> image queries


def _queries(run: Path) -> int | None:
    """The image queries of the test split ``run`` was scored on (its first unit's ``ranks.json``), or None.
    Each file is parsed once per process while it stays as it was (a page's tables ask thousands of times)."""
    for f in sorted((run / "seeds").glob("*/ranks.json")):
        st = f.stat()
        key = (str(f.resolve()), st.st_mtime_ns, st.st_size)
        if key not in _QUERIES:
            _QUERIES[key] = len(read_json(f)["annotation"])
        return _QUERIES[key]
    return None


def test_queries(params: dict[str, Any], runs_dir: str | Path) -> int | None:
    """The image queries of the test split the runs of ``runs_dir`` were scored on (the first trained run's first
    unit's ``ranks.json``), or None when it holds none."""
    return next((n for r in run_names(params, runs_dir) if (n := _queries(Path(runs_dir) / r)) is not None), None)


def _short(folder: str) -> str:
    """``runs/<study>`` of a study folder, however it was given (relative or absolute)."""
    return "/".join(Path(folder).parts[-2:])


def _sizes(params: dict[str, Any], runs_dirs: list[str | Path]) -> tuple[int | None, dict[str, dict[str, int]]]:
    """(the first folder's test size, folder -> {run: its test size} for every run scored on another size)."""
    first = next((n for d in runs_dirs if (n := test_queries(params, d)) is not None), None)
    other: dict[str, dict[str, int]] = {}
    for d in runs_dirs:
        for r in run_names(params, d):
            n = _queries(Path(d) / r)
            if n is not None and n != first:
                other.setdefault(str(d), {})[r] = n
    return first, other


def left_out_runs(params: dict[str, Any], runs_dirs: list[str | Path]) -> dict[str, list[str]]:
    """Folder -> its runs scored on a test split of another size than the first folder's (say runs of the
    extended synthetic study trained before the benchmark's test split grew: its `make` target re-runs them)."""
    return {d: list(runs) for d, runs in _sizes(params, runs_dirs)[1].items()}


def other_test_sets(params: dict[str, Any], runs_dirs: list[str | Path], page: bool = False) -> dict[str, str]:
    """Folder -> why some of its runs are left out (:func:`left_out_runs`), naming them and the sizes; with ``page``
    as page text (:func:`fraglib_study.report.pagetext.fragment`: the run and folder names escaped)."""
    first, other = _sizes(params, runs_dirs)
    out = {}
    for d, runs in other.items():
        ref = _short(next(str(f) for f in runs_dirs if test_queries(params, f) == first))
        sizes = sorted(set(runs.values()))
        out[d] = (fragment if page else plain)(
            "{} run(s) of {:code} ({}) were scored on {} test images, {:code} on {}: not one test set, so they are "
            "left out until re-run (docs/runs.md)",
            len(runs),
            f"{_short(d)}/",
            ", ".join(runs),
            " or ".join(map(str, sizes)),
            f"{ref}/",
            first,
        )
    return out


def _folder(runs_dir: str | Path | dict[str, Path], r: str) -> Path:
    """A run's folder: from :func:`run_folders`' mapping, or ``runs_dir / r``."""
    return runs_dir[r] if isinstance(runs_dir, dict) else Path(runs_dir) / r


def run_labels(params: dict[str, Any]) -> dict[str, str]:
    """Run -> label for tables: the run's ``label`` key, else "<system>: <run name>"."""
    return {
        r: (e or {}).get("label") or f"{(e or {}).get('system', '?')}: {r}"
        for r, e in (params.get("runs") or {}).items()
    }


SUMMARY_KEYS = (
    "system",
    "seeds",
    "annotation",
    "search",
)  # what every run summary (fraglib_study.experiments.study) holds


RERUN = "restore it (from git, or `dvc pull`) or re-run the run (`python -m fraglib_study study`)"


def read_json(path: str | Path) -> Any:
    """The JSON in ``path``; ValueError naming the file when it is not JSON (a cut or damaged file)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}): the file is cut or damaged"
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): the file is damaged") from None


def read_register(path: Path) -> list[dict[str, Any]]:
    """The entries of a results file (a JSON list of objects, each with a ``name``; a missing file: none).
    ValueError naming the file and its defect otherwise (call it before measuring: nothing is lost)."""
    if not path.exists():
        return []
    entries = read_json(path)
    if not isinstance(entries, list):
        raise ValueError(
            f"{path}: not a benchmark register (a JSON {type(entries).__name__}, not a list of entries); "
            "repair it or move it away, or pass --out elsewhere"
        )
    bad = [i for i, e in enumerate(entries) if not isinstance(e, dict) or not isinstance(e.get("name"), str)]
    if bad:
        raise ValueError(
            f'{path}: {len(bad)} of its {len(entries)} entries are not objects with a "name" (the '
            f"first: entry {bad[0] + 1}); repair it or move it away, or pass --out elsewhere"
        )
    return entries


def read_summary(path: str | Path) -> dict[str, Any]:
    """A run's ``metrics.json`` (``fraglib_study.experiments.study``), checked: ValueError naming the file and what it lacks."""
    m = read_json(path)
    if not isinstance(m, dict):
        raise ValueError(f"{path}: not a run summary (a JSON {type(m).__name__}, not an object); {RERUN}")
    missing = [k for k in SUMMARY_KEYS if k not in m]
    missing += [
        f"{d}.{k}"
        for d in DIRECTIONS
        if d in m
        for k in ("r1", "r5", "r10", "mean_rank")
        if not isinstance((m[d] if isinstance(m[d], dict) else {}).get(k), (int, float))
    ]
    if missing:
        raise ValueError(
            f"{path}: not a run summary fraglib_study.experiments.study writes: it lacks {', '.join(missing)}; {RERUN}"
        )
    for d in (d for d in (*DIRECTIONS, "similarity") if isinstance(m.get(d), dict)):
        for k, v in m[d].items():
            recall = k.startswith("r") and k[1:].isdigit()
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            ok = ok and (0 <= v <= 100 if recall else v >= 1 if k.endswith("rank") else True)
            if not ok:
                want = "a percentage in [0, 100]" if recall else "a rank of at least 1" if k.endswith("rank") else ""
                raise ValueError(f"{path}: {d}.{k}={v!r} is impossible ({want or 'a finite number'}); {RERUN}")
    return m


def read_ranks(path: str | Path, unit: dict[str, Any]) -> dict[str, Any]:
    """One training run's ``ranks.json``, checked against its figures in the run's summary (``unit``:
    ``metrics.json: per_seed[<unit>]``): per direction a list of ranks (test images for annotation, test
    sentences for search) whose R@K and mean rank are the summary's. ValueError naming the file otherwise."""
    from fraglib.metrics.retrieval import recall_table

    r = read_json(path)
    for d, queries in (("annotation", "images"), ("search", "sentences")):
        if not isinstance(r, dict) or not isinstance(r.get(d), list):
            raise ValueError(f"{path}: no list of {d} ranks; {RERUN}")
        got, want = recall_table(np.asarray(r[d])), unit[d]
        off = [k for k in ("r1", "r5", "r10", "mean_rank") if abs(got[k] - want[k]) > 1e-6]
        if off:
            raise ValueError(
                f"{path}: {len(r[d])} {d} ranks whose {', '.join(f'{k} {got[k]:.4g}' for k in off)} "
                f"are not the run's metrics.json figures for this training run "
                f"({', '.join(f'{k} {want[k]:.4g}' for k in off)}): not the ranks of its test {queries} "
                f"(cut, or another run's); {RERUN}"
            )
    return r


def load_run(run_dir: str | Path) -> dict[str, Any]:
    """Summary and per-unit per-query ranks (arrays, units x queries) of one run (``fraglib_study.experiments.study``):
    ``ranks[d]`` for both directions, and ``ranks["similarity"]`` for systems with a sentence space;
    ``units`` (names: seed, or seed + replicate) and ``groups`` (the test set of each unit; a summary
    written before replicates existed: one group per seed); a k-fold run is pooled (:func:`pool_folds`). Every
    file is checked (:func:`read_summary`, :func:`read_ranks`): a damaged one is a ValueError naming it."""
    run_dir = Path(run_dir)
    summary = read_summary(run_dir / "metrics.json")
    summary.setdefault("units", [str(s) for s in summary["seeds"]])
    summary.setdefault("groups", list(summary["seeds"]))
    figures = summary.get("per_seed") or {}
    lacking = [
        u for u in summary["units"] if not all(isinstance((figures.get(u) or {}).get(d), dict) for d in DIRECTIONS)
    ]
    if lacking:
        raise ValueError(
            f"{run_dir / 'metrics.json'}: no per_seed figures for training run(s) {', '.join(lacking)}; {RERUN}"
        )
    files = [run_dir / "seeds" / f"seed{u}" / "ranks.json" for u in summary["units"]]
    per_seed = [read_ranks(f, figures[u]) for f, u in zip(files, summary["units"])]
    tasks = DIRECTIONS + (("similarity",) if all("similarity" in r for r in per_seed) else ())
    hub = [r["hubness"] for r in per_seed] if all("hubness" in r for r in per_seed) else None
    if summary.get("protocol") == "folds":
        return pool_folds(summary, per_seed, tasks, hub)
    for d in DIRECTIONS:
        n = [len(r[d]) for r in per_seed]
        if len(set(n)) > 1:
            raise ValueError(
                f"{run_dir}: its training runs ranked different numbers of {d} queries ("
                + ", ".join(f"{f.parent.name} {k}" for f, k in zip(files, n))
                + "); a table over training runs needs one test set size"
            )
    summary["ranks"] = {d: np.stack([np.asarray(r[d]) for r in per_seed]) for d in tasks}
    if hub:  # fraglib.metrics.hubness: k-occurrence, corrected ranks
        summary["corrected"] = {
            key: {d: np.stack([np.asarray(x["corrected"][key][d]) for x in hub]) for d in DIRECTIONS}
            for key in hub[0]["corrected"]
            if all(key in x["corrected"] for x in hub)  # a unit written before a correction existed lacks it
        }
        summary["occurrence"] = {d: [np.asarray(x["occurrence"][d]) for x in hub] for d in DIRECTIONS}
    return summary


def pool_folds(
    summary: dict[str, Any], per_unit: list[dict[str, Any]], tasks, hub: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """A k-fold run (``protocol: folds``, ``fraglib_study.experiments.study --folds``) read as one test set: per replicate its folds'
    per-query ranks end to end in fold order (every test query once, ranked in its own fold's gallery by its own
    fold's model; ``per_unit``: each unit's ``ranks.json``, ``hub`` their hubness records). Units become the
    replicates (``r0``, …: one group), ``strata[d]`` the fold of each query: the bootstrap draws queries within
    their fold and never draws folds (:func:`fraglib.metrics.retrieval.bootstrap_draws`). ValueError when a replicate lacks
    a fold."""
    units = summary["units"]
    folds = sorted({unit_seed(u) for u in units})
    reps = sorted({unit_replicate(u) for u in units})
    missing = [unit_key(f, r) for r in reps for f in folds if unit_key(f, r) not in units]
    if missing:
        raise ValueError(f"run {summary.get('run')}: k-fold run without training run(s) {', '.join(missing)}; {RERUN}")
    order = [[units.index(unit_key(f, r)) for f in folds] for r in reps]

    def pooled(rows: list[Any]) -> np.ndarray:  # per-unit lists -> (replicates, pooled queries)
        return np.stack([np.concatenate([np.asarray(rows[i]) for i in o]) for o in order])

    summary["ranks"] = {d: pooled([r[d] for r in per_unit]) for d in tasks}
    summary["strata"] = {
        d: np.concatenate([np.full(len(per_unit[i][d]), f) for i, f in zip(order[0], folds)]) for d in tasks
    }
    summary["units"], summary["groups"] = [f"r{r}" for r in reps], [0] * len(reps)
    if hub:
        keys = [k for k in hub[0]["corrected"] if all(k in x["corrected"] for x in hub)]
        summary["corrected"] = {k: {d: pooled([x["corrected"][k][d] for x in hub]) for d in DIRECTIONS} for k in keys}
        summary["occurrence"] = {d: list(pooled([x["occurrence"][d] for x in hub])) for d in DIRECTIONS}
    return summary


def run_histories(
    runs_dir: str | Path | dict[str, Path], names: list[str], labels: dict[str, str] | None = None
) -> pd.DataFrame:
    """Per-epoch histories of the runs (all seeds), with a ``run`` column; runs never trained are left out."""
    parts = []
    for r in names:
        h = pd.read_csv(_folder(runs_dir, r) / "history.csv")
        if len(h) and "val_rsum" in h:
            parts.append(h.assign(run=(labels or {}).get(r, r)))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def validation_by_split(runs_dir: str | Path, names: list[str], labels: dict[str, str] | None = None) -> pd.DataFrame:
    """The search criterion of each run on each split: the best validation R-sum over the epochs of the
    split's first training run (seed = split: the very training a ``fraglib_study.experiments.search`` trial of these
    settings does), one column per split, with their mean ("first runs"), the mean over every training
    run ("all runs") and the mean |gap| between two training runs of one split ("run gap", the noise of
    the criterion). Rows: runs (``labels``)."""
    h = run_histories(runs_dir, names, labels)
    if not len(h):
        return pd.DataFrame()
    best = h.assign(unit=h["seed"].astype(str)).groupby(["run", "unit"], sort=False).val_rsum.max().reset_index()
    best["split"] = best.unit.str.split("r").str[0].astype(int)
    first = best[~best.unit.str.contains("r")].pivot(index="run", columns="split", values="val_rsum")
    first.columns = [f"split {c}" for c in first.columns]
    first["first runs"] = first.mean(axis=1)
    first["all runs"] = best.groupby("run").val_rsum.mean()
    gaps = best.groupby(["run", "split"]).val_rsum.agg(lambda v: v.max() - v.min() if len(v) > 1 else np.nan)
    first["run gap"] = gaps.groupby("run").mean()
    return first.loc[[r for r in dict.fromkeys(best.run) if r in first.index]].round(1)


def paraphrase_results(runs: dict[str, str | Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """Text-only paraphrasing summaries of every (trained on, scored on) pair of ``runs`` (data label →
    a run folder trained on it) that exists: the run's ``captions.json`` on its own data,
    ``transfer_<label in lower case>.json`` on another's (``python -m fraglib_study captions --name``)."""
    out = {}
    for a, d in runs.items():
        for b in runs:
            f = Path(d) / ("captions.json" if a == b else f"transfer_{b.lower()}.json")
            if f.exists():
                out[(a, b)] = {**read_json(f), "folder": str(Path(d) / f.stem)}
    return out


def search_budget(tables: list[str | Path], params: dict[str, Any]) -> pd.DataFrame:
    """One row per searched system: its search tables' trials (rows), trainings (trials × splits, each
    one training run of ``epochs`` epochs, or one fit) and compute (the tables' ``seconds``: one process
    on one thread per trial, so core-minutes). ``tables``: CSVs written by ``fraglib_study.experiments.search`` (a JSON
    beside each names its run and splits); a missing table is skipped."""
    rows = []
    for t in map(Path, tables):
        meta_file = t.with_suffix(".json")
        if not t.is_file() or not meta_file.is_file():
            continue
        meta, df = read_json(meta_file), pd.read_csv(t)
        run = meta.get("run", "?")
        system = params.get("runs", {}).get(run, {}).get("system", run)
        rows.append(
            {
                "system": system,
                "tables": 1,
                "trials": len(df),
                "trainings": len(df) * len(meta.get("splits") or [0]),
                "core_minutes": float(df["seconds"].sum()) / 60.0 if "seconds" in df else float("nan"),
            }
        )
    if not rows:
        return pd.DataFrame(columns=["system", "tables", "trials", "trainings", "core_minutes"])
    out = pd.DataFrame(rows).groupby("system", sort=False).sum().reset_index()
    return out.assign(core_minutes=out.core_minutes.round(1))
