"""The three papers' comparative claims, tested on the committed results: the registry, the rule, the table.

A claim (``fraglib/reference/claims.yaml``, docs/claims.md) compares two sides a and b in one metric on some
tasks. The paper's difference a − b is computed from two rows of ``published_results.yaml``, never typed; ours is
the mean over the training runs both runs have of a − b, with the 95 % percentile CI of the paired three-level
bootstrap of :mod:`fraglib.results` (groups of units sharing a test set, training runs, test queries; the same
draws for both runs). :func:`verdict` is the rule, written before any verdict was computed; :func:`claim_blocks`
is the table docs/results.md and the index render.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.config import read_yaml
from fraglib.metrics import KS, bootstrap_draws
from fraglib.reference import PUBLISHED, published
from fraglib.results import (
    PAPER_TASKS,
    left_out_runs,
    load_run,
    other_test_sets,
    read_json,
    read_summary,
    run_folders,
    shared_strata,
)
from fraglib.studies import studies
from fraglib.tables import Block, Heading, Table

CLAIMS = Path(__file__).parent / "reference" / "claims.yaml"
N_BOOT = 1000

REPRODUCED = "reproduced"
SAME_DIRECTION = "same direction, not significant"
NOT_REPRODUCED = "not reproduced"
REVERSED = "reversed"
NOT_TESTABLE = "not testable here"
VERDICTS = (REPRODUCED, SAME_DIRECTION, NOT_REPRODUCED, REVERSED, NOT_TESTABLE)


# ----------------------------------------------------------------------------- the rule
def verdict(paper: float, diff: float | None, ci: tuple[float, float] | None, comparable: bool = True) -> str:
    """The verdict on one claim, one task, one study. ``paper``: the paper's difference a − b; ``diff``: ours
    (None: no runs for it here); ``ci``: our 95 % CI (lo, hi); ``comparable``: whether the paper's effect size
    can be set beside ours (it was printed on this study's data, so the metric has the same scale).

    Every difference is a − b in the claim's metric as printed: R@K sum and CIDEr-D higher is better, mean rank
    lower is better. The direction of a difference is its sign; the paper's and ours are the same quantity, so a
    lower-is-better metric needs no flip (a mean-rank difference of −2.9 in the paper, a ranking better, is
    reproduced by ours of −1.0 [−1.8, −0.2]). A CI covers a value when lo ≤ value ≤ hi (a CI touching zero
    covers it); it excludes zero when lo > 0 or hi < 0.

    * not testable here: ``diff`` is None;
    * reproduced: the CI excludes zero on the paper's side;
    * reversed: the CI excludes zero on the other side;
    * not reproduced: the CI covers zero and either our point difference is not of the paper's sign (opposite, or
      exactly zero) or, where ``comparable``, the CI excludes the paper's difference;
    * same direction, not significant: the CI covers zero, our point difference has the paper's sign and, where
      ``comparable``, the CI covers the paper's difference.

    So where the CI excludes zero its side decides, whatever the point difference; an effect size counts only
    where it is comparable and only when the CI covers zero (a significant difference of the paper's sign is
    reproduced even when smaller than the paper's). A paper difference of zero (a printed tie claims no order),
    a CI with lo > hi and NaNs are refused (ValueError)."""
    if diff is None:
        return NOT_TESTABLE
    if ci is None:
        raise ValueError("a difference of ours needs its CI")
    lo, hi = ci
    if any(math.isnan(x) for x in (paper, diff, lo, hi)):
        raise ValueError(f"NaN in the verdict's inputs: paper {paper}, ours {diff} [{lo}, {hi}]")
    if paper == 0:
        raise ValueError("the paper's difference is 0: a printed tie claims no order")
    if lo > hi:
        raise ValueError(f"a CI with lo {lo} > hi {hi}")
    side = 1.0 if paper > 0 else -1.0
    if lo > 0 or hi < 0:
        return REPRODUCED if (lo > 0) == (side > 0) else REVERSED
    if diff * side <= 0 or (comparable and not lo <= paper <= hi):
        return NOT_REPRODUCED
    return SAME_DIRECTION


# ----------------------------------------------------------------------------- the registry
METRICS = {"rsum": ("R@K sum", True), "mean_rank": ("mean rank", False), "cider": ("CIDEr-D × 100", True)}
RETRIEVAL = ("annotation", "search", "similarity")  # per-query ranks in ranks.json
CAPTIONS = ("captioning", "paraphrasing")
PRINTED_ON = ("pascal1k", "flickr8k", "flickr30k", "mscoco")  # the data a paper's table key names
TASK_KEYS = {  # our task -> a paper's key for it (Karpathy et al. use ours)
    "socher2014_dtrnn": {ours: theirs for theirs, ours in PAPER_TASKS.items()},
    "peri2018_thesis": {"annotation": "i2t", "search": "t2i"},
}
TESTED_ON = ("synthetic", "pascal1k", "flickr8k")


def _ref(ref: str) -> tuple[str, str, str]:
    """("<paper>", "<table>", "<row>") of a reference "<paper>.<table>:<row>"."""
    paper, _, rest = ref.partition(".")
    table, _, row = rest.partition(":")
    return paper, table, row


def printed_on(ref: str) -> str:
    """The data a published row was printed on: the dataset its table's key names."""
    table = _ref(ref)[1]
    found = [d for d in PRINTED_ON if d in table]
    if not found:
        raise ValueError(f"{ref}: its table names none of {', '.join(PRINTED_ON)}")
    return found[0]


def published_row(ref: str, task: str) -> dict[str, float]:
    """The printed figures of row ``ref`` for ``task``: r1, r5, r10 and mean_rank where printed, or cider × 100.
    KeyError naming the field when the paper does not print it; ValueError naming the file for a row of the
    wrong shape."""
    try:
        return _published_row(ref, task)
    except KeyError as exc:
        raise KeyError(f"{ref} ({task}): {exc.args[0] if exc.args else exc}") from None
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"{PUBLISHED}: row {ref} ({task}) is not shaped as its table's rows ({exc})") from None


def _published_row(ref: str, task: str) -> dict[str, float]:
    paper, table, row = _ref(ref)
    t = published()[paper][table]
    if paper == "karpathy2014_defrag":
        n = t["rows"][row][task]
        return {
            "r1": n["r1"],
            "r5": n["r5"],
            "r10": n["r10"],
            **({"mean_rank": n["rank"]} if t["rank"] == "mean" else {}),
        }
    if paper == "socher2014_dtrnn":
        n = t[TASK_KEYS[paper][task]][row]
        return dict(n) if isinstance(n, dict) else {"mean_rank": n}
    n = t[row]
    if task in CAPTIONS:
        return {"cider": 100 * n["cider"]}
    n = n[TASK_KEYS[paper][task]]
    return {"r1": n["r1"], "r5": n["r5"], "r10": n["r10"], "mean_rank": n["mean"]}


def published_value(ref: str, task: str, metric: str) -> float:
    """Metric ``metric`` of row ``ref`` for ``task``; KeyError when the paper does not print it."""
    row = published_row(ref, task)
    return sum(row[f"r{k}"] for k in KS) if metric == "rsum" else row[metric]


def paper_difference(claim: dict[str, Any], task: str) -> float:
    """The paper's a − b for ``task``, from its two rows (rounded to 6 places: the printed figures have two);
    for a claim made in text without a row, ±1 in the direction it states."""
    p, higher = claim["paper"], METRICS[claim["metric"]][1]
    if "direction" in p:
        return (1.0 if p["direction"] == "a_better" else -1.0) * (1.0 if higher else -1.0)
    return round(published_value(p["a"], task, claim["metric"]) - published_value(p["b"], task, claim["metric"]), 6)


def comparable(claim: dict[str, Any], dataset: str) -> bool:
    """Whether the paper's effect size can be set beside ours on ``dataset``: it has rows, printed on that data."""
    return "a" in claim["paper"] and printed_on(claim["paper"]["a"]) == dataset


def _check(c: dict[str, Any]) -> None:
    """ValueError naming what claim ``c`` lacks or gets wrong."""
    name = c.get("id", "?")
    for key in ("id", "claim", "source", "paper", "metric", "tasks", "tested_on"):
        if key not in c:
            raise ValueError(f"claim {name}: no {key!r}")
    for key, kind in (
        ("id", str),
        ("claim", str),
        ("paper", dict),
        ("metric", str),
        ("tasks", list),
        ("tested_on", list),
    ):
        if not isinstance(c[key], kind):
            raise ValueError(f"claim {name}: {key}={c[key]!r}: expected a {kind.__name__}")
    for key in ("runs", "not_testable"):
        if key in c and not isinstance(c[key], dict):
            raise ValueError(f"claim {name}: {key}={c[key]!r}: expected a mapping")
    p = c["paper"]
    if not (set(p) == {"a", "b"} or (set(p) == {"direction"} and p["direction"] in ("a_better", "b_better"))):
        raise ValueError(f"claim {name}: paper needs a and b (published rows) or direction (a_better | b_better)")
    if c["metric"] not in METRICS:
        raise ValueError(f"claim {name}: metric {c['metric']!r} is not one of {', '.join(METRICS)}")
    bad = [t for t in c["tasks"] if t not in RETRIEVAL + CAPTIONS] + [d for d in c["tested_on"] if d not in TESTED_ON]
    if bad or not c["tasks"]:
        raise ValueError(f"claim {name}: unknown task or dataset {bad} (or no task)")
    if "a" in p and printed_on(p["a"]) != printed_on(p["b"]):
        raise ValueError(f"claim {name}: its two rows were printed on different data")
    if c["tested_on"] and set(c.get("runs") or {}) != {"a", "b"}:
        raise ValueError(f"claim {name}: tested on {c['tested_on']} but no runs a and b")
    if not c["tested_on"] and set(c.get("not_testable") or {}) != {"why", "command", "cost"}:
        raise ValueError(f"claim {name}: not tested here, so not_testable needs why, command and cost")
    for t in c["tasks"]:
        try:
            d = paper_difference(c, t)
        except KeyError as exc:
            raise ValueError(f"claim {name}: {t}: the paper prints no {exc} for it") from None
        if d == 0:
            raise ValueError(f"claim {name}: {t}: the paper's rows tie (a tie claims no order)")


def read_claims(path: str | Path = CLAIMS) -> list[dict[str, Any]]:
    """The claims of ``path``, each checked (ValueError naming the file, the claim and its defect)."""
    found = read_yaml(path).get("claims") or []
    if not isinstance(found, list):
        raise ValueError(f"{path}: claims: expected a list of claims, got a {type(found).__name__}")
    for i, c in enumerate(found):
        if not isinstance(c, dict):
            raise ValueError(f"{path}: claims[{i}]: expected a mapping, got {c!r}")
        try:
            _check(c)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: {exc}") from None
    ids = [c["id"] for c in found]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ValueError(f"{path}: claim ids given twice: {', '.join(twice)}")
    return found


# ----------------------------------------------------------------------------- our differences
class Untestable(Exception):
    """Why a claim cannot be tested in a study (its runs, or their per-query results, are not here)."""


def query_values(ranks: np.ndarray, metric: str) -> np.ndarray:
    """Per-query values (units × queries) whose mean over the queries is ``metric`` of the ranks: R@K sum
    (100 × the number of K in 1, 5, 10 with rank ≤ K) or the rank itself (mean rank)."""
    if metric == "rsum":
        return 100.0 * sum((ranks <= k).astype(float) for k in KS)
    if metric == "mean_rank":
        return ranks.astype(float)
    raise ValueError(f"no per-query values of {metric!r} from ranks")


def paired_mean_difference(
    a: np.ndarray, b: np.ndarray, groups, n_boot: int = N_BOOT, seed: int = 0, strata=None
) -> dict[str, float]:
    """Mean over units (rows) and queries of a − b (per-query values of the same units and queries), with the
    95 % percentile CI of the three-level bootstrap (:func:`fraglib.metrics.bootstrap_draws`, the same draws for
    both; ``strata``: the queries' folds; for a metric that is a mean over queries this is
    :func:`fraglib.metrics.paired_difference`)."""
    if a.shape != b.shape:
        raise ValueError(f"paired difference needs the same units and queries: {a.shape} vs {b.shape}")
    d = a - b
    units, queries = bootstrap_draws(groups, d.shape[1], n_boot, seed, strata)
    draws = d[units[..., None], queries[:, :, None, :]].mean(axis=(1, 2, 3))
    return {"diff": float(d.mean()), "lo": float(np.percentile(draws, 2.5)), "hi": float(np.percentile(draws, 97.5))}


def _captions(folder: Path) -> tuple[list[str], list[Any], np.ndarray, dict[str, Any]]:
    """(units, groups, CIDEr-D × 100 per test image (units × images), the run) of a generating run; a k-fold
    run's folds are pooled end to end into one unit, ``r0``, its run holding the images' folds (``strata``)."""
    m = read_summary(folder / "metrics.json")
    folds = m.get("protocol") == "folds"
    group = dict(zip(m.get("units") or [str(s) for s in m["seeds"]], m.get("groups") or m["seeds"]))
    units, rows, images = [], [], None
    for s in m["seeds"]:
        f = folder / "captions" / f"seed{s}.json"
        if not f.exists():
            raise Untestable(f"`{folder.name}` has no captions of training run {s}")
        caps = read_json(f)["captioning"]
        if not caps or any(c.get("cider") is None for c in caps):
            raise Untestable(f"`{folder.name}`: {f.name} has no per-image CIDEr-D for every test image")
        seen = [c["image"] for c in caps]
        if images is not None and seen != images and not folds:
            raise Untestable(f"`{folder.name}`: its training runs captioned different test images")
        images = seen
        units.append(str(s))
        rows.append(np.array([100 * c["cider"] for c in caps], dtype=float))
    if not folds:
        return units, [group.get(u, u) for u in units], np.asarray(rows), {}
    strata = np.concatenate([np.full(len(r), int(s)) for r, s in zip(rows, m["seeds"])])
    run = {"run": m["run"], "protocol": "folds", "partition": m.get("partition"), "strata": {"captioning": strata}}
    return ["r0"], [0], np.concatenate(rows)[None], run


def _side(
    folder: Path, task: str, metric: str, cache: dict[Path, Any]
) -> tuple[list[str], list[Any], np.ndarray, dict[str, Any]]:
    """(units, groups, per-query values, the loaded run) of one run for ``task`` in ``metric`` (runs loaded once
    per ``cache``)."""
    key = folder if task in RETRIEVAL else folder / "captions"
    if key not in cache:
        cache[key] = load_run(folder) if task in RETRIEVAL else _captions(folder)
    if task not in RETRIEVAL:
        return cache[key]
    run = cache[key]
    if task not in run["ranks"]:
        raise Untestable(f"`{folder.name}` ranks no {task} queries")
    return list(run["units"]), list(run["groups"]), query_values(run["ranks"][task], metric), run


def our_difference(
    a: Path, b: Path, task: str, metric: str, n_boot: int = N_BOOT, cache: dict[Path, Any] | None = None
) -> dict[str, Any]:
    """Run folder ``a`` minus ``b`` in ``metric`` on ``task`` over the training runs both have
    (:func:`paired_mean_difference`): diff, lo, hi, ``units`` (the training runs paired) and ``protocol`` ("5
    splits", "10 folds": the test sets). Untestable when they share none or were tested on test splits of
    different sizes (one of them is from an older benchmark: its study needs a re-run)."""
    cache = {} if cache is None else cache
    (ua, ga, xa, ra), (ub, _, xb, rb) = _side(a, task, metric, cache), _side(b, task, metric, cache)
    common = [u for u in ua if u in ub]
    if not common:
        raise Untestable(f"`{a.name}` and `{b.name}` share no training run")
    ia, ib = [ua.index(u) for u in common], [ub.index(u) for u in common]
    if xa.shape[1] != xb.shape[1]:
        raise Untestable(
            f"`{a.name}` has {xa.shape[1]} {task} queries, `{b.name}` {xb.shape[1]}: not one test set (the study of "
            f"the smaller is from an older benchmark; its `make` target re-runs it: docs/runs.md)"
        )
    strata, groups = shared_strata([ra, rb], task), [ga[i] for i in ia]
    n = len(np.unique(strata)) if strata is not None else len(set(groups))
    protocol = f"{n} folds" if strata is not None else f"{n} split{'s' * (n > 1)}"
    ours = paired_mean_difference(xa[ia], xb[ib], groups, n_boot, strata=strata)
    return {**ours, "units": len(common), "protocol": protocol}


# ----------------------------------------------------------------------------- the verdicts
@dataclass(frozen=True)
class Row:
    """One claim on one task in one study (``study``: its dataset; "" for a claim not tested here)."""

    claim: dict[str, Any]
    task: str
    study: str
    paper: float
    ours: dict[str, Any] | None
    verdict: str
    why: str = ""
    confirmed: dict[int, str] = field(default_factory=dict)  # partition N -> the verdict on it, or "—"


def dataset_folders(root: str | Path = ".", folds: bool = False) -> dict[str, list[Path]]:
    """Dataset -> the run folders of its studies (:func:`fraglib.studies.studies`, in their order): a run is looked
    up in each in turn (the default synthetic study, then the extended one); ``folds``: their k-fold runs folders."""
    out: dict[str, list[Path]] = {}
    for s in studies(root):
        if not folds or s.folds:
            out.setdefault(s.dataset, []).append(Path(root) / (s.folds if folds else s.runs))
    return out


CONFIRM = Path("runs") / "confirm"  # runs/confirm/<dataset>/p<N>/<run>: python -m fraglib.confirm


def confirmations(root: str | Path = ".") -> dict[str, dict[int, Path]]:
    """Dataset -> partition N -> its folder of confirmation runs (``runs/confirm/<dataset>/p<N>``), N ascending."""
    out: dict[str, dict[int, Path]] = {}
    for d in sorted((Path(root) / CONFIRM).glob("*/p*")):
        if d.is_dir() and d.name[1:].isdigit():
            out.setdefault(d.parent.name, {})[int(d.name[1:])] = d
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def _pair(params: dict[str, Any], folders: list[Path], c: dict[str, Any]) -> tuple[Path, Path]:
    """The folders of claim ``c``'s runs a and b, looked up in ``folders``; Untestable naming a missing one."""
    found = run_folders(params, folders)
    missing = [c["runs"][s] for s in ("a", "b") if c["runs"][s] not in found]
    why = other_test_sets(params, folders)
    for folder, runs in left_out_runs(params, folders).items():  # runs scored on an older test split
        if any(r in runs for r in missing):
            raise Untestable(why[folder])
    if missing:
        raise Untestable("no run " + " or ".join(f"`{r}`" for r in missing) + " in this study")
    return found[c["runs"]["a"]], found[c["runs"]["b"]]


def claim_rows(
    params: dict[str, Any],
    folders: dict[str, list[Path]],
    claims: list[dict[str, Any]] | None = None,
    n_boot: int = N_BOOT,
    folds: dict[str, list[Path]] | None = None,
    confirmed: dict[str, dict[int, Path]] | None = None,
) -> list[Row]:
    """A :class:`Row` per claim (default: :func:`read_claims`), task and dataset it is tested on, its runs looked up
    in ``folds`` (k-fold runs folders, :func:`dataset_folders`) where both are there, else in ``folders``; with
    ``confirmed`` (:func:`confirmations`) the verdict, by the same rule, on each partition's runs ("—" where they
    are not there). A claim not tested here: one row per task, study ""."""
    cache: dict[Path, Any] = {}
    rows = []
    for c in read_claims() if claims is None else claims:
        for task in c["tasks"]:
            paper = paper_difference(c, task)
            if not c["tested_on"]:
                rows.append(Row(c, task, "", paper, None, NOT_TESTABLE, c["not_testable"]["why"]))
            for data in c["tested_on"]:
                on = comparable(c, data)
                again = {
                    n: _confirmation(params, f, c, task, paper, on, n_boot, cache)
                    for n, f in ((confirmed or {}).get(data) or {}).items()
                }
                try:
                    try:  # the k-fold runs where both are there
                        a, b = _pair(params, (folds or {}).get(data, []), c)
                    except Untestable:
                        a, b = _pair(params, folders.get(data, []), c)
                    ours = our_difference(a, b, task, c["metric"], n_boot, cache)
                except Untestable as why:
                    rows.append(Row(c, task, data, paper, None, NOT_TESTABLE, str(why), again))
                    continue
                v = verdict(paper, ours["diff"], (ours["lo"], ours["hi"]), on)
                rows.append(Row(c, task, data, paper, ours, v, "", again))
    return rows


def _confirmation(
    params: dict[str, Any],
    folder: Path,
    c: dict[str, Any],
    task: str,
    paper: float,
    on: bool,
    n_boot: int,
    cache: dict[Path, Any],
) -> str:
    """The verdict on claim ``c`` and ``task`` from the confirmation runs in ``folder`` by the same rule, "—" where
    its runs or their results are not there."""
    try:
        ours = our_difference(*_pair(params, [folder], c), task, c["metric"], n_boot, cache)
    except Untestable:
        return "—"
    return verdict(paper, ours["diff"], (ours["lo"], ours["hi"]), on)


# ----------------------------------------------------------------------------- the table
def _measure(c: dict[str, Any], task: str) -> str:
    label, higher = METRICS[c["metric"]]
    return f"{task}, {label} {'↑' if higher else '↓'}"


def _paper_cell(r: Row) -> str:
    if "direction" in r.claim["paper"]:
        return f"{'a' if r.claim['paper']['direction'] == 'a_better' else 'b'} better (text, no number)"
    return f"{r.paper:+.1f}" + (" †" if r.study and comparable(r.claim, r.study) else "")


def claims_table(rows: list[Row]) -> Table:
    """Claim, measure, source, study, the paper's difference, ours [95 % CI], training runs paired, their test sets
    ("5 splits", "10 folds"), verdict, and a column "confirmed on partition N" per partition any row has."""
    again = sorted({n for r in rows for n in r.confirmed})
    return Table(
        (
            "claim (a − b)",
            "measure",
            "source",
            "study",
            "paper's difference",
            "ours [95 % CI]",
            "runs paired",
            "test sets",
            "verdict",
            *(f"confirmed on partition {n}" for n in again),
        ),
        tuple(
            (
                f"{r.claim['claim']} (`{r.claim['runs']['a']}` − `{r.claim['runs']['b']}`)",
                _measure(r.claim, r.task),
                r.claim["source"],
                f"`{r.study}`",
                _paper_cell(r),
                "—" if r.ours is None else f"{r.ours['diff']:+.1f} [{r.ours['lo']:+.1f}, {r.ours['hi']:+.1f}]",
                "—" if r.ours is None else str(int(r.ours["units"])),
                "—" if r.ours is None else r.ours["protocol"],
                r.verdict + (f": {r.why}" if r.why else ""),
                *(r.confirmed.get(n, "—") for n in again),
            )
            for r in rows
        ),
    )


def untested_table(rows: list[Row]) -> Table:
    """The claims no study here can test: claim, measure, source, the paper's difference, why, command, cost."""
    return Table(
        ("claim (a − b)", "measure", "source", "paper's difference", "why", "command", "cost"),
        tuple(
            (
                r.claim["claim"],
                _measure(r.claim, r.task),
                r.claim["source"],
                _paper_cell(r),
                *(" ".join(str(r.claim["not_testable"][k]).split()) for k in ("why", "command", "cost")),
            )
            for r in rows
        ),
    )


def counts(rows: list[Row]) -> str:
    """'n reproduced, n same direction, not significant, …' over ``rows``, every verdict named."""
    return ", ".join(f"{sum(r.verdict == v for r in rows)} {v}" for v in VERDICTS)


PAPERS = {"Karpathy": "Karpathy et al. 2014", "Socher": "Socher et al. 2014", "Peri": "Peri 2018"}
VERDICT_WORDS = dict(zip(("reproduced", "same", "not", "reversed", "untestable"), VERDICTS))  # short names (facts)


def paper_of(c: dict[str, Any]) -> str:
    """The paper of claim ``c``: its source's first word, a key of :data:`PAPERS`."""
    first = str(c.get("source", "")).split()[0] if c.get("source") else ""
    if first not in PAPERS:
        raise ValueError(f"claim {c.get('id')}: source {c.get('source')!r} names none of {list(PAPERS)}")
    return first


def paper_counts(rows: list[Row]) -> dict[str, dict[str, dict[str, int]]]:
    """Paper -> study (its dataset; "" for the claims not testable here) -> verdict -> rows, every verdict named."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in rows:
        per = out.setdefault(paper_of(r.claim), {}).setdefault(r.study, dict.fromkeys(VERDICTS, 0))
        per[r.verdict] += 1
    return out


def by_paper(rows: list[Row]) -> list[str]:
    """One line per paper: its verdicts per study, then its claims not testable here."""
    lines = []
    for paper, per in paper_counts(rows).items():
        parts = [
            f"on `{s}`: " + ", ".join(f"{n} {v}" for v, n in c.items() if v != NOT_TESTABLE or n)
            for s, c in per.items()
            if s
        ]
        if "" in per:
            parts.append(f"not testable here: {per[''][NOT_TESTABLE]}")
        lines.append(f"**{PAPERS[paper]}** — " + "; ".join(parts) + ".")
    return lines


def project_rows(root: str | Path, params: dict[str, Any], n_boot: int = N_BOOT) -> list[Row]:
    """:func:`claim_rows` of the project at ``root``: its studies' runs, their k-fold runs first, its confirmations."""
    return claim_rows(
        params,
        dataset_folders(root),
        n_boot=n_boot,
        folds=dataset_folders(root, folds=True),
        confirmed=confirmations(root),
    )


def claim_blocks(root: str | Path, params: dict[str, Any], n_boot: int = N_BOOT) -> list[Block]:
    """The verdicts of every claim (:func:`claim_rows`): a paragraph on the rule, the counts, per dataset tested
    a heading, what its CIs cover, its counts and its table, then the claims not testable here (read from ``root``)."""
    rows = project_rows(root, params, n_boot)
    if not rows:
        return []
    found = {s.dataset: s for s in reversed(studies(root))}  # a dataset's first study
    out: list[Block] = [
        "Every comparative claim of the three papers' tables (`fraglib/reference/claims.yaml`, docs/claims.md): "
        "the paper's difference a − b computed from its printed rows, ours the mean over the training runs both "
        "runs have, with the 95 % CI of the paired bootstrap over splits, training runs and test queries. "
        "Verdict by the rule of `fraglib.claims.verdict`, fixed before any verdict was computed: **reproduced** "
        "(the CI excludes zero on the paper's side), **reversed** (on the other side), **same direction, not "
        "significant**, **not reproduced** (the CI covers zero and our difference has the other sign, or excludes "
        "the paper's difference where that is comparable: † marks a difference printed on this study's data). "
        "↑: higher is better, ↓: lower is better.",
        f"All studies: {counts(rows)} (claim × task × study rows).",
        *by_paper(rows),
    ]
    for data in dict.fromkeys(r.study for r in rows if r.study):
        part = [r for r in rows if r.study == data]
        study = found.get(data)
        scope = (
            "A CI covers the splits both runs have, their training runs and the test queries."
            if study is not None and study.unit == "splits"
            else "One data split: a CI covers the test queries and, where both runs trained more than once, those "
            f"training runs ({sum(r.ours is not None and r.ours['units'] == 1 for r in part)} of "
            f"{sum(r.ours is not None for r in part)} rows pair a single training run per side: their CIs come "
            "from the test queries alone)."
        )
        if any(r.ours is not None and "folds" in r.ours["protocol"] for r in part):
            scope += (
                ' Rows on folds (column "test sets") pool the k-fold runs: every test query once, ranked in its own '
                "fold by its fold's model; a CI draws queries within each fold and never draws folds."
            )
        if any(r.confirmed for r in part):
            scope += (
                ' A column "confirmed on partition N" holds the verdict, by the same rule, on the claim\'s runs '
                "re-run on fresh data N after every choice was frozen (`python -m fraglib.confirm --partition N`, "
                "docs/claims.md); — where they are not there."
            )
        title = study.title if study is not None else data
        out += [Heading(3, f"Tested on `{data}`: {title}"), scope, f"Verdicts: {counts(part)}.", claims_table(part)]
    out += rerun_blocks(root)
    untested = [r for r in rows if not r.study]
    if untested:
        out += [
            Heading(3, "Not testable here"),
            "Claims that need what no study here has; the paper's difference as printed.",
            untested_table(untested),
        ]
    return out


RERUNS = Path("benchmarks") / "reruns"  # python -m fraglib.rerun … --json: a re-run on another machine, compared


def rerun_blocks(root: str | Path = ".") -> list[Block]:
    """The verdicts on another CPU: per comparison kept in ``benchmarks/reruns/*.json`` (``python -m fraglib.rerun
    RUNS --json F``: a study re-made on another machine against the committed results) its machines, the metrics
    within the re-run contract and the verdicts that stayed; then every verdict that changed, with both CIs."""
    from fraglib.results import read_json

    files = sorted((Path(root) / RERUNS).glob("*.json"))
    if not files:
        return []
    recs = [(f, read_json(f)) for f in files]
    for f, r in recs:
        if not isinstance(r, dict) or not isinstance(r.get("metrics"), list) or "metrics_within" not in r:
            raise ValueError(f"{f}: not a comparison `python -m fraglib.rerun --json` writes")

    def ci(o: dict[str, float]) -> str:
        return f"{o['diff']:+.1f} [{o['lo']:+.1f}, {o['hi']:+.1f}]"

    changed = [(f, v) for f, r in recs for v in r.get("verdicts") or [] if not v["same"]]
    out: list[Block] = [
        Heading(3, "The verdicts on another CPU"),
        "Another CPU picks other float kernels, so training follows another trajectory (README "
        '"Reproducibility"). Each row: a study re-made with `make` on another machine, compared with the results '
        "in git by `python -m fraglib.rerun` (its metrics within |z| ≤ 3 of the committed ones, and every claim's "
        "verdict by the same rule).",
        Table(
            ("comparison", "results in git from", "re-made on", "metrics within the contract", "verdicts the same"),
            tuple(
                (
                    f"`{f.name}`",
                    ", ".join(r.get("reference_machines") or ["not recorded"]),
                    ", ".join(r.get("new_machines") or ["not recorded"]),
                    f"{r['metrics_within']} of {len(r['metrics'])}",
                    "—" if r.get("verdicts") is None else f"{r['verdicts_same']} of {len(r['verdicts'])}",
                )
                for f, r in recs
            ),
        ),
    ]
    if changed:
        out += [
            "The verdicts that changed (ours [95 % CI] on each machine):",
            Table(
                ("comparison", "claim", "task", "in git", "re-made"),
                tuple(
                    (
                        f"`{f.name}`",
                        f"`{v['claim']}`",
                        v["task"],
                        f"{v['committed']}: {ci(v['committed_ours'])}" if "committed_ours" in v else v["committed"],
                        f"{v['new']}: {ci(v['new_ours'])}" if "new_ours" in v else v["new"],
                    )
                    for f, v in changed
                ),
            ),
        ]
    return out
