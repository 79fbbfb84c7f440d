"""Reading a study back: its runs, tables with uncertainty, paired differences (any system); the queries'
groups: :mod:`fraglib_study.report.breakdown`; hubness corrections: :mod:`fraglib_study.report.corrections`;
figures from a checkpoint: :mod:`fraglib_study.report.live`.

Uncertainty has three sources and every CI covers all of them (docs/evaluation.md, "Uncertainty"):
the data split, the training run (seed) and the test queries. A study's training runs ("units":
seeds, and their replicates, ``runs.<run>.replicates``) fall into groups that share a test set (the
splits; on one dataset all units are one group). The 95% percentile bootstrap draws, per resample,
the groups with replacement, then within each drawn group its units with replacement and its test
queries with replacement (one draw of queries for every unit of the group), and averages the metric
over the drawn units. Paired differences make the same draws for both runs, unit u of one paired
with unit u of the other. Tables also show the mean ± sd over units.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fraglib.core.outputs import unit_key, unit_replicate, unit_seed
from fraglib.metrics.retrieval import DIRECTIONS, KS, N_BOOT, bootstrap_seed_mean, paired_difference
from fraglib.metrics.retrieval import rank_metric as _metric
from fraglib_study.report.pagetext import code, fragment, join, plain

# Socher et al. 2014's task names (published_results.yaml) -> ours; "similarity" ranks sentences
# against sentences (systems with a sentence space only)
PAPER_TASKS = {"sentence_similarity": "similarity", "image_search": "search", "describing_images": "annotation"}


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


def run_difference(a: dict[str, Any], b: dict[str, Any], task: str, metric: str) -> float:
    """Loaded run ``a`` (:func:`load_run`) minus ``b`` in a per-query ``metric`` (:func:`fraglib.metrics.retrieval.per_query`)
    on ``task``, paired by :func:`fraglib.metrics.retrieval.pair` (:func:`fraglib.metrics.retrieval.paired_value`, the claims' rule); ValueError when they share no training run."""
    from fraglib.metrics.retrieval import pair, paired_value, query_values

    common, ia, ib = pair(list(a["units"]), list(b["units"]))
    if not common:
        raise ValueError(f"runs {a.get('run')} and {b.get('run')} share no training run")
    return paired_value(
        query_values(a["ranks"][task][ia], metric),
        query_values(b["ranks"][task][ib], metric),
        [a["groups"][i] for i in ia],
        shared_strata([a, b], task),
    )


def paired_r1(folder: str | Path, a: str, b: str, correction: str | None = None) -> dict[str, float] | None:
    """R@1 of run ``a`` minus run ``b`` of ``folder`` per direction, paired as every page pairs
    (:func:`run_difference`), on their ranks or (``correction``, a key of :data:`CORRECTIONS`' ranks, e.g.
    ``inverted_softmax_inductive``) their corrected ranks; None where either run, or that correction of it, is not
    here. A damaged run is a ValueError naming it (:func:`load_run`)."""
    folder = Path(folder)
    if not all((folder / r / "metrics.json").is_file() for r in (a, b)):
        return None
    ra, rb = load_run(folder / a), load_run(folder / b)
    if correction:
        if not all(correction in (r.get("corrected") or {}) for r in (ra, rb)):
            return None
        ra, rb = ({**r, "ranks": r["corrected"][correction]} for r in (ra, rb))
    return {d: run_difference(ra, rb, d, "r1") for d in DIRECTIONS}


def shared_strata(runs: list[dict[str, Any]], task: str) -> np.ndarray | None:
    """The query strata (folds, :func:`pool_folds`) of ``task`` the loaded ``runs`` share, None where none has
    any; ValueError when they differ (k-fold runs of two partitions, or one beside a split run): not one test set."""
    found = [(r.get("strata") or {}).get(task) for r in runs]
    if all(x is None for x in found):
        return None
    if (
        any(x is None for x in found)
        or len({r.get("partition") for r in runs}) > 1
        or any(not np.array_equal(found[0], x) for x in found)
    ):
        names = ", ".join(f"{r.get('run')} ({r.get('protocol', 'splits')} {r.get('partition', '')})" for r in runs)
        raise ValueError(f"{names}: not the same folds of one partition, so not one set of {task} queries")
    return found[0]


NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def number_word(n: int) -> str:
    """``n`` as a heading writes it: a word to ten, digits above."""
    return NUMBER_WORDS[n] if 0 <= n < len(NUMBER_WORDS) else str(n)


def _plural(n: int, word: str) -> str:
    return f"{number_word(n)} {word}{'s' * (n != 1)}"


def _test_sets(run: dict[str, Any]) -> tuple[str, int, tuple[int, int]]:
    """(test set word, how many, (fewest, most) trainings per test set) of a run, loaded (:func:`load_run`) or its
    summary (``metrics.json``): a k-fold run's folds (trained once per replicate each), else its splits (the
    groups of its units)."""
    units = list(run.get("units") or [str(s) for s in run["seeds"]])
    if run.get("protocol") == "folds":
        folds = int(run.get("folds") or len(run["seeds"]))
        per = len(units) if "strata" in run else len({unit_replicate(u) for u in units})  # loaded: one unit a replicate
        return "fold", folds, (per, per)
    groups = list(run.get("groups") or [unit_seed(u) for u in units])
    per = [groups.count(g) for g in dict.fromkeys(groups)]
    return "split", len(per), (min(per), max(per))


def protocol_text(study: dict[str, dict[str, Any]], runs: list[str] | None = None):
    """What a heading or caption over results of ``runs`` (default: all) of ``study`` (runs loaded, or their
    summaries) says about how they were tested and trained: the protocol ("ten folds", "five splits", "one split":
    the most runs' number of test sets, runs on fewer named) and the trainings per test set ("two trainings per
    fold", runs trained otherwise named; more than three: counted), e.g. "five splits, two trainings per split
    (`kcca_euclidean`: one)". Page text (:mod:`fraglib_study.report.pagetext`: run names as code, nothing else unescaped)."""
    names = [r for r in (study if runs is None else runs) if r in study]
    if not names:
        return fragment("no run")
    shape = {r: _test_sets(study[r]) for r in names}
    kinds = [shape[r][0] for r in names]
    kind = max(kinds, key=kinds.count)

    def per(r: str) -> str:
        lo, hi = shape[r][2]
        return number_word(lo) if lo == hi else f"{number_word(lo)} or {number_word(hi)}"

    def who(rs: list[str]):  # the runs of an exception: by name when three or fewer, else counted
        return join(", ", [code(r) for r in rs]) if len(rs) <= 3 else fragment("{} of the {} runs", len(rs), len(names))

    sets = [shape[r][1] for r in names]
    main_sets = max(sets, key=sets.count)
    fewer = [r for r in names if shape[r][1] != main_sets]
    counts = [per(r) for r in names]
    main = max(counts, key=counts.count)
    other = [r for r in names if per(r) != main]
    return fragment(
        "{}{}, {} training{} per {}{}",
        _plural(main_sets, kind),
        fragment(" ({} on {})", who(fewer), " or ".join(number_word(n) for n in sorted({shape[r][1] for r in fewer})))
        if fewer
        else "",
        main,
        "" if main == "one" else "s",
        kind,
        fragment(
            " ({})",
            join(
                "; ",
                [
                    fragment("{}: {}", who([r for r in other if per(r) == c]), c)
                    for c in dict.fromkeys(per(r) for r in other)
                ],
            ),
        )
        if other
        else "",
    )


def metric_label(name: str) -> str:
    """Column label of a metric: r1 -> R@1, mean_rank -> mean rank, median_rank -> median rank,
    median_rank_vsepp -> median rank (VSE++) (:func:`fraglib.run.evaluate.median_rank_vsepp`)."""
    return name.replace("_vsepp", " (VSE++)").replace("_", " ") if "rank" in name else name.replace("r", "R@", 1)


def mean_sd(run: dict[str, Any], task: str, metric: str) -> tuple[float, float | None]:
    """Mean and sd over training runs of ``metric`` on ``task`` (a direction, or ``similarity``): the summary's
    (``metrics.json``: ``<task>``, ``<task>_sd``), else from the per-query ranks of a loaded run (:func:`load_run`;
    e.g. ``median_rank_vsepp``, which the trainer does not write; sd with ddof 1, None for one training run)."""
    if metric in (run.get(task) or {}):
        return run[task][metric], (run.get(f"{task}_sd") or {}).get(metric)
    per_unit = _metric(run["ranks"][task], metric)
    return float(per_unit.mean()), float(per_unit.std(ddof=1)) if len(per_unit) > 1 else None


def seed_mean_cis(
    study: dict[str, dict[str, Any]],
    metrics: tuple[str, ...],
    n_boot: int = N_BOOT,
    tasks: tuple[str, ...] = DIRECTIONS,
) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(run, task, metric) -> the 95 % bootstrap CI of the mean over training runs (the module's resampling, the
    tables' CIs) for every loaded run of ``study`` (:func:`load_run`) and each of ``tasks`` it ranked."""
    return {
        (r, d, m): bootstrap_seed_mean(s["ranks"][d], m, n_boot, groups=s["groups"], strata=shared_strata([s], d))
        for r, s in study.items()
        for d in tasks
        if d in s["ranks"]
        for m in metrics
    }


def training_noise(
    study: dict[str, dict[str, Any]], metrics=("r1", "r5", "r10"), labels: dict[str, str] | None = None
) -> pd.DataFrame:
    """Run-to-run noise of runs trained more than once on a split: per run, direction and metric the
    pooled within-split sd over training seeds and the mean |difference| of two seeds on one split
    (same data and test queries: training noise alone). Long format; empty without replicates."""
    rows = []
    for v, s in study.items():
        groups = np.asarray(s["groups"])
        sets = [np.flatnonzero(groups == g) for g in np.unique(groups)]
        sets = [m for m in sets if len(m) > 1]
        if not sets:
            continue
        for d in DIRECTIONS:
            for m in metrics:
                vals = [_metric(s["ranks"][d][idx], m) for idx in sets]
                sd = float(np.sqrt(np.mean([np.var(x, ddof=1) for x in vals])))
                gap = float(np.mean([np.abs(x[:, None] - x[None]).sum() / (len(x) * (len(x) - 1)) for x in vals]))
                rows.append(
                    {
                        "run": (labels or {}).get(v, v),
                        "direction": d,
                        "metric": metric_label(m),
                        "within_split_sd": sd,
                        "mean_abs_gap": gap,
                        "splits": len(sets),
                        "seeds_per_split": float(np.mean([len(x) for x in vals])),
                    }
                )
    return pd.DataFrame(rows)


# Student's t 97.5 % quantiles for 1..30 degrees of freedom (standard tables); 1.96 beyond
_T975 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def t975(df: int) -> float:
    """Student's t 97.5 % quantile with ``df`` degrees of freedom (a table to 30, then 1.96)."""
    if df < 1:
        raise ValueError(f"t quantile needs df >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def split_differences(
    summaries: dict[str, dict[str, Any]],
    pairs: list[tuple[str, str]],
    metrics=("r1", "r5", "r10"),
    labels: dict[str, str] | None = None,
) -> pd.DataFrame:
    """a − b from the runs' ``metrics.json`` summaries alone (no per-query ranks needed): the per-split
    differences of each metric over the seeds/splits both runs have (a split's replicates averaged
    first), their mean and a 95 % t interval
    (mean ± t_{0.975, n−1} sd / √n). Each split's difference carries that split's query sampling and its
    training runs' noise, so the interval covers both — coarsely, with five splits. Long format."""

    def per_split(summary, d, m):  # a split's training runs (replicates) averaged
        out: dict[int, list[float]] = {}
        for u, v in summary["per_seed"].items():
            out.setdefault(unit_seed(u), []).append(v[d][m])
        return {k: float(np.mean(v)) for k, v in out.items()}

    rows = []
    for a, b in pairs:
        common = sorted(
            {unit_seed(u) for u in summaries[a]["per_seed"]} & {unit_seed(u) for u in summaries[b]["per_seed"]}
        )
        if len(common) < 2:
            raise ValueError(f"runs {a} and {b}: {len(common)} common seeds; a t interval needs two")
        for d in DIRECTIONS:
            for m in metrics:
                pa, pb = per_split(summaries[a], d, m), per_split(summaries[b], d, m)
                x = np.array([pa[k] - pb[k] for k in common])
                half = t975(len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
                rows.append(
                    {
                        "run": (labels or {}).get(a, a),
                        "base": (labels or {}).get(b, b),
                        "direction": d,
                        "metric": metric_label(m),
                        "n_seeds": len(x),
                        "diff": float(x.mean()),
                        "lo": float(x.mean() - half),
                        "hi": float(x.mean() + half),
                        "excludes_zero": bool(x.mean() - half > 0 or x.mean() + half < 0),
                    }
                )
    return pd.DataFrame(rows)


def published_table(dataset: str) -> pd.DataFrame:
    """The paper's rows for ``dataset`` (Karpathy et al. 2014), same layout, numbers as printed."""
    from fraglib_study.reference import published

    t = published()["karpathy2014_defrag"][dataset]
    rank = metric_label(f"{t['rank']}_rank")
    rows = {}
    for name, r in t["rows"].items():
        rows[f"paper: {name}"] = {
            (d, m): r[d][k]
            for d in DIRECTIONS
            for m, k in (("R@1", "r1"), ("R@5", "r5"), ("R@10", "r10"), (rank, "rank"))
        }
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df


def peri_published_table() -> pd.DataFrame:
    """Peri's (2018) retrieval rows as printed, on MSCOCO and Flickr30K (data we do not have: never
    comparable with our rows). Columns: (direction, metric) with annotation = Peri's sentence retrieval."""
    from fraglib_study.reference import published

    t = published()["peri2018_thesis"]
    rows = {}
    for data in ("mscoco_5k_test", "flickr30k_1k_test"):
        for name, r in t[data].items():
            rows[f"{data}: {name}"] = {
                (d, m): r[k][key]
                for d, k in (("annotation", "i2t"), ("search", "t2i"))
                for m, key in (
                    ("R@1", "r1"),
                    ("R@5", "r5"),
                    ("R@10", "r10"),
                    (metric_label("median_rank_vsepp"), "med"),
                    (metric_label("mean_rank"), "mean"),
                )
            }
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df


def ci_table(diffs: pd.DataFrame) -> pd.DataFrame:
    """Paired differences (long format, :func:`paired_differences`) as 'diff [lo, hi]' strings
    (:func:`fraglib_study.report.pagetext.ci_text`, as the claims table prints them), rows (run, base), one column per
    (direction, metric)."""
    from fraglib_study.report.pagetext import ci_text

    d = diffs.assign(ci=[ci_text(x, lo, hi) for x, lo, hi in zip(diffs["diff"], diffs["lo"], diffs["hi"])])
    wide = d.pivot_table(index=["run", "base"], columns=["direction", "metric"], values="ci", aggfunc="first")
    return wide[list(dict.fromkeys(zip(d["direction"], d["metric"])))]  # columns as computed: R@1, R@5, R@10


def lead_word(lo: float, hi: float, who: str = "fragments") -> str:
    """A run − baseline difference in R@K (higher is better) read by its 95 % CI ``[lo, hi]``; ``who``: the
    first run's side in words (the fragment runs; a run after the papers by its name)."""
    return f"{who} ahead" if lo > 0 else f"{who} behind" if hi < 0 else "not distinguishable"


def lead_summary(diffs: pd.DataFrame, by: str = "direction", who: str = "fragments") -> str:
    """Rows of :func:`paired_differences` (a run − baseline, an R@K metric; ``who`` names the run's side, the
    fragment runs by default), one per baseline and ``by`` (a column: the direction, or a correction): the counts
    first ("fragments ahead in 1, behind in 3, not distinguishable in 14 of 18"), then each row as "base / by:
    diff [lo, hi] — word" (:func:`lead_word`)."""
    from fraglib_study.report.pagetext import ci_text

    words = [lead_word(lo, hi, who) for lo, hi in zip(diffs["lo"], diffs["hi"])]
    counts = {w: words.count(w) for w in (f"{who} ahead", f"{who} behind", "not distinguishable")}
    head = (
        f"{who} ahead in {counts[f'{who} ahead']}, behind in {counts[f'{who} behind']}, "
        f"not distinguishable in {counts['not distinguishable']} of {len(words)}"
    )
    rows = [f"{r.base} / {r[by]}: {ci_text(r['diff'], r.lo, r.hi)} — {w}" for (_, r), w in zip(diffs.iterrows(), words)]
    return head + ". " + "; ".join(rows)


def paired_differences(
    study: dict[str, dict[str, Any]],
    pairs: list[tuple[str, str]],
    tasks=DIRECTIONS,
    metrics=tuple(f"r{k}" for k in KS),
    labels: dict[str, str] | None = None,
    n_boot: int = N_BOOT,
) -> pd.DataFrame:
    """Difference a − b for each (a, b) in ``pairs`` (runs of ``study``), each task (``direction`` column) and
    metric, over the units both runs have (``n_seeds``: their seeds/splits, ``n_units``: training runs; a run
    limited to fewer seeds, ``runs.<run>.seeds``, or replicates is paired on those). The pairing and the difference
    are the claims' (:func:`fraglib.metrics.retrieval.pair`, :func:`fraglib.metrics.retrieval.paired_value`; docs/claims.md, "How
    differences are paired"), so a difference this prints is the one the claims table prints; the CI is the paired
    bootstrap's (module docstring). A median rank, no mean over queries, keeps the bootstrap's point (the mean over
    units). Long format."""
    from fraglib.metrics.retrieval import pair, paired_value, per_query, query_values

    rows = []
    for a, b in pairs:
        common, ia, ib = pair(list(study[a]["units"]), list(study[b]["units"]))
        if not common:
            raise ValueError(f"runs {a} and {b} share no seed ({study[a]['units']} vs {study[b]['units']})")
        groups = [study[a]["groups"][i] for i in ia]
        for d in tasks:
            if d not in study[a]["ranks"] or d not in study[b]["ranks"]:
                continue
            strata = shared_strata([study[a], study[b]], d)
            ra, rb = study[a]["ranks"][d][ia], study[b]["ranks"][d][ib]
            for m in metrics:
                r = paired_difference(ra, rb, m, n_boot, groups=groups, strata=strata)
                if per_query(m):
                    r["diff"] = paired_value(query_values(ra, m), query_values(rb, m), groups, strata)
                rows.append(
                    {
                        "run": (labels or {}).get(a, a),
                        "base": (labels or {}).get(b, b),
                        "direction": d,
                        "metric": metric_label(m),
                        "n_seeds": len(set(groups)),
                        "n_units": len(common),
                        **r,
                    }
                )
    return pd.DataFrame(rows)


def differences_from(
    study: dict[str, dict[str, Any]], base: str = "full", labels: dict[str, str] | None = None, n_boot: int = N_BOOT
) -> pd.DataFrame:
    """Paired-bootstrap difference (run - base) of R@1/5/10 both ways, with CIs."""
    return paired_differences(study, [(v, base) for v in study if v != base], labels=labels, n_boot=n_boot)


# ----------------------------------------------------------------------------- histories, captions, galleries, the explorer
def top_sentences(scores: np.ndarray, sentence_image: np.ndarray, image: int, k: int = 5) -> list[tuple[int, bool]]:
    """The ``k`` best-scoring sentences (positions) of test image ``image``, each with whether it is
    one of the image's own."""
    order = np.argsort(-scores[image], kind="stable")[:k]
    return [(int(j), bool(sentence_image[j] == image)) for j in order]


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


def has_pictures(dataset_dir: str | Path) -> bool:
    """Whether the test split's pictures of the dataset in ``dataset_dir`` are on disk (the first test image's file):
    a dataset imported from precomputed features (docs/own_data.md) has none, and the figures that show pictures
    say so instead of failing."""
    from fraglib.data import read_karpathy_json

    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    test = [r for r, im in enumerate(ds.images) if im["split"] == "test"]
    return bool(test) and ds.image_path(test[0]).is_file()


def _mean_ci(value: float, ci: list[float] | None) -> str:
    """A caption metric ×100 as 'mean [lo, hi]' (no brackets without a CI)."""
    return f"{100 * value:.1f}" + (f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else "")


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


def paraphrase_table(results: dict[tuple[str, str], dict[str, Any]]) -> pd.DataFrame:
    """Rows (trained on, scored on) of :func:`paraphrase_results`: each metric ×100 as 'mean [95% CI]'
    (mean over seeds, bootstrap over input captions), the scored tokens' ``<unk>`` share in the model's
    vocabulary, and the input dependence (NLL own / another's input, nats per caption)."""
    from fraglib_study.experiments.caption_record import METRICS

    rows = {}
    for key, c in results.items():
        ci, d = c.get("paraphrasing_ci") or {}, c.get("input_dependence", {})
        rows[key] = {
            **{m: _mean_ci(c["paraphrasing"][m], ci.get(m)) for m in METRICS},
            "<unk> %": f"{100 * c['unk_share']:.1f}" if c.get("unk_share") is not None else "",
            "NLL own / other": (
                f"{d['paraphrasing_own']:.1f} / {d['paraphrasing_other']:.1f}" if "paraphrasing_own" in d else ""
            ),
            "seeds": len(c["seeds"]),
        }
    df = pd.DataFrame(rows).T
    df.index.names = ["trained on", "scored on"]
    return df


def peri_caption_published() -> pd.DataFrame:
    """Peri's (2018) captioning and paraphrasing rows as printed (MSCOCO 1K / Flickr30K: not our data), ×100."""
    from fraglib_study.reference import published

    t = published()["peri2018_thesis"]
    rows = {}
    for key, table in t.items():
        if key.startswith(("captioning", "paraphrasing")):
            for name, r in table.items():
                rows[(key, name)] = {m: round(100 * v, 1) for m, v in r.items()}
    return pd.DataFrame(rows).T


def gallery_panels(
    rec: dict[str, Any],
    picture,
    sentence_image: np.ndarray,
    S: np.ndarray | None = None,
    n_good: int = 2,
    n_bad: int = 2,
    k: int = 3,
) -> list[dict[str, Any]]:
    """Panels in the layout of Peri's figures from a captions record (``captions/seed<seed>.json``): a test image
    (``picture(i)`` -> (array, title)), its generated caption, two paraphrases (of its first two captions), with
    the scores ``S`` (n_images, n_sentences) the top-``k`` retrieved captions (✓ = its own), and the ground truth.
    Chosen by rule: the ``n_good`` images with the highest and the ``n_bad`` with the lowest CIDEr-D of their
    caption (ties: lower index). ``sentence_image``: each test sentence's image position."""
    scored = sorted((c for c in rec["captioning"] if c["cider"] is not None), key=lambda c: (-c["cider"], c["image"]))
    pick = [(c, "good") for c in scored[:n_good]] + [
        (c, "bad") for c in scored[::-1][:n_bad] if c not in scored[:n_good]
    ]
    sentence_image = np.asarray(sentence_image)
    para = {}
    for p in rec["paraphrasing"]:
        para.setdefault(int(sentence_image[p["sentence"]]), []).append(p)
    panels = []
    for c, kind in pick:
        i = c["image"]
        lines = [f"caption: {c['caption']}  (CIDEr-D {100 * c['cider']:.0f}, {kind})"]
        lines += [f"paraphrase: {p['input']} → {p['paraphrase']}" for p in para.get(i, [])[:2]]
        if S is not None:
            lines += [
                f"{'✓' if ok else '✗'} retrieved {r + 1}: {rec['paraphrasing'][j]['input']}"
                for r, (j, ok) in enumerate(top_sentences(S, sentence_image, i, k))
            ]
        lines += [f"truth: {t}" for t in c["references"]]
        image, title = picture(i)
        panels.append({"image": image, "title": title, "lines": lines})
    return panels


def read_explorer(explorer_dir: str | Path) -> dict[str, Any]:
    """The explorer's data of a study (``explorer.json``, :mod:`fraglib_study.experiments.explore`) with each test image's
    ``picture``: its thumbnail as an array. Raises FileNotFoundError naming a missing file."""
    from PIL import Image

    folder = Path(explorer_dir)
    data = json.loads((folder / "explorer.json").read_text(encoding="utf-8"))
    for im in data["images"]:
        im["picture"] = np.asarray(Image.open(folder / im["thumb"]).convert("RGB"))
    return data


def explorer_title(im: dict[str, Any]) -> str:
    """A thumbnail's title on a figure: the image id and its category."""
    return f"test image {im['id']}" + (f" ({im['category']})" if im.get("category") else "")


def explorer_gallery(run_dir: str | Path, seed: int, explorer: dict[str, Any], **kw) -> list[dict[str, Any]]:
    """:func:`gallery_panels` of a captioning run's split ``seed`` from committed files alone: its captions
    record and the explorer's thumbnails of that split (:func:`read_explorer`); no retrieved captions (they
    need the run's checkpoint). Raises ValueError when the explorer shows another split."""
    from fraglib_study.experiments.caption_record import read_record

    if explorer["seed"] != seed:
        raise ValueError(f"the explorer shows split {explorer['seed']}, the gallery split {seed}")
    rec = read_record(Path(run_dir) / "captions" / f"seed{seed}.json")
    images = explorer["images"]
    sentence_image = np.array([s["image"] for s in explorer["sentences"]])
    return gallery_panels(rec, lambda i: (images[i]["picture"], explorer_title(images[i])), sentence_image, **kw)


def explorer_panels(
    explorer_dir: str | Path, explorer: dict[str, Any], run: str, n: int, seed: int, k: int = 5, top: int = 6
) -> list[dict[str, Any]]:
    """The paper's Figure 4 from committed files alone: for ``n`` test images drawn with ``seed`` (the draw of
    :func:`fraglib_study.report.live.retrieval_panels`), ``run``'s top-``k`` sentences from the explorer's lists (✓ = the image's own) and,
    for the top one, the best box of each of its fragments (at most ``top``) with its score, from
    ``alignments_<run>.json``, on the thumbnail. Raises ValueError for a run the explorer does not hold."""
    images, sentences = explorer["images"], explorer["sentences"]
    if run not in explorer["runs"]:
        raise ValueError(f"run {run} is not in the explorer's data ({', '.join(explorer['runs'])})")
    align = None
    if run in explorer["aligned"]:
        align = json.loads((Path(explorer_dir) / f"alignments_{run}.json").read_text(encoding="utf-8"))
    pick = sorted(np.random.default_rng(seed).choice(len(images), size=min(n, len(images)), replace=False).tolist())
    panels = []
    for img in pick:
        im = images[img]
        top_k = explorer["runs"][run]["image_top"][img][:k]
        p = {
            "image": im["picture"],
            "title": explorer_title(im),
            "lines": [
                f"{'✓' if sentences[j]['image'] == img else '✗'} {r + 1}. {sentences[j]['text']}"
                for r, j in enumerate(top_k)
            ],
        }
        if align is not None and top_k:
            j = top_k[0]
            pair = align["pairs"][f"{img},{j}"]
            scale = im["picture"].shape[1] / im["w"]
            boxes = align["boxes"][img]
            p["boxes"] = [np.array(boxes[b]) * scale for b in pair[0::2]][:top]
            p["labels"] = [f"{f} {s / 10:.1f}" for f, s in zip(align["fragments"][str(j)], pair[1::2])][:top]
        panels.append(p)
    return panels


def read_triplets(folder: str | Path) -> tuple[dict[str, Any], list[tuple[str, list[tuple[np.ndarray, str]] | str]]]:
    """(``triplets.json``, [(title, [(crop, score label)]) or (title, reason)]) of a folder written by
    ``python -m fraglib_study figures``: the shape :func:`fraglib_study.experiments.alignment.triplet_crops` gives, from committed files
    alone. Raises FileNotFoundError naming a missing file."""
    from PIL import Image

    folder = Path(folder)
    record = json.loads((folder / "triplets.json").read_text(encoding="utf-8"))
    out = []
    for e in record["queries"]:
        if "reason" in e:
            out.append((e["query"], e["reason"]))
            continue
        crops = [(np.asarray(Image.open(folder / h["crop"]).convert("RGB")), f"{h['score']:.2f}") for h in e["hits"]]
        out.append((e["query"], crops))
    return record, out


# ----------------------------------------------------------------------------- searches
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
