"""The three papers' comparative claims, tested on the committed results: the registry, the rule, the table.

A claim (``fraglib_study/reference/claims.yaml``, docs/claims.md) compares two sides a and b in one metric on some
tasks. The paper's difference a − b is computed from two rows of ``published_results.yaml``, never typed; ours is
the mean over the training runs both runs have of a − b, with an analytic 95 % CI calibrated by the study's own
A/A check (:func:`paired_analytic`: the test queries' standard error plus the training noise estimated from every
run trained twice, :func:`training_variance`; between splits where a study has several) and a p-value adjusted by
Holm within each paper's claims in each study. :func:`verdict` is the rule; :func:`aa_rows` checks it against each
run compared with itself (docs/claims.md "The rule against itself"); :func:`claim_blocks` is the table
docs/results.md and the index render.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.core.config import read_yaml
from fraglib.core.outputs import unit_key, unit_replicate, unit_seed
from fraglib.metrics.retrieval import (  # the pairing and the analytic difference live with the other statistics
    ALPHA,
    KS,
    _p_value,
    holm,
    pair,
    paired_analytic,
    query_values,
    stratified_mean_se,
)
from fraglib_study.reference import PUBLISHED, published
from fraglib_study.report.loading import (
    left_out_runs,
    load_run,
    other_test_sets,
    read_json,
    read_summary,
    run_folders,
)
from fraglib_study.report.pagetext import ci_text
from fraglib_study.report.printed import PAPER_TASKS
from fraglib_study.report.registry import studies
from fraglib_study.report.tables import Block, Heading, Table
from fraglib_study.report.uncertainty import shared_strata

CLAIMS = Path(__file__).parents[1] / "reference" / "claims.yaml"

REPRODUCED = "reproduced"
SAME_DIRECTION = "same direction, not significant"
NOT_REPRODUCED = "not reproduced"
REVERSED = "reversed"
NOT_TESTABLE = "not testable here"
UNDECIDED = "undecided"  # the rule cannot weigh the training noise: no run of the study's kind trained twice
UNINFORMATIVE = "uninformative"  # a side near chance (NEAR_CHANCE): a difference against it says nothing
ORDERING = "an ordering, not a claim"  # table only, inside the paper's own noise (ORDERING_SE): not tested
NO_ORDER = "no order claimed"  # the text calls the two level (or claims no difference): not tested
VERDICTS = (
    REPRODUCED,
    SAME_DIRECTION,
    NOT_REPRODUCED,
    REVERSED,
    UNDECIDED,
    UNINFORMATIVE,
    ORDERING,
    NO_ORDER,
    NOT_TESTABLE,
)
UNTESTED = (UNINFORMATIVE, ORDERING, NO_ORDER)  # shown with our difference, outside Holm's family and the rule

# Registered with the analysis plan (docs/analysis_plan.md; git tag `registration-1`):
NEAR_CHANCE = 0.2  # a side whose R@K sum covers under a fifth of the way from chance to perfect (300) is near chance
ORDERING_SE = 1.0  # a table-only difference under 1 standard error of the paper's own test set is an ordering
EDGE_Z = 1.645  # a decision a re-run flips with probability ≥ 5 % (one-sided) is undecided (on_edge)
TEXT = ("a_better", "b_better", "no_order")  # what a claim's text states per task (claims.yaml `text`)


# ----------------------------------------------------------------------------- the rule
def verdict(
    paper: float,
    diff: float | None,
    ci: tuple[float, float] | None,
    comparable: bool = True,
    significant: bool | None = None,
) -> str:
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
    reproduced even when smaller than the paper's). ``significant`` (default: the CI excludes zero) is the
    family's decision after Holm's adjustment: False sends a CI that excludes zero down the not-significant
    branches. A paper difference of zero (a printed tie claims no order), a CI with lo > hi and NaNs are refused
    (ValueError)."""
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
    if (lo > 0 or hi < 0) if significant is None else significant:
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


def table_difference(claim: dict[str, Any], task: str) -> float | None:
    """The a − b of the paper's two printed rows for ``task`` (rounded to 6 places: the figures have two); None for
    a claim made in text without a row."""
    p = claim["paper"]
    if "direction" in p:
        return None
    return round(published_value(p["a"], task, claim["metric"]) - published_value(p["b"], task, claim["metric"]), 6)


def stated(claim: dict[str, Any], task: str) -> str | None:
    """What the paper's text states for ``task`` (a_better | b_better | no_order, claims.yaml ``text``; a claim
    without rows states its direction), or None where only the table orders the two."""
    if "direction" in claim["paper"]:
        return claim["paper"]["direction"]
    return (claim.get("text") or {}).get(task)


def paper_difference(claim: dict[str, Any], task: str) -> float:
    """The paper's a − b for ``task`` in the direction the paper claims: the table's difference, its sign the
    text's where the text states one (:func:`conflicts`: they disagree); ±1 in the stated direction for a claim
    without rows (or a row tie the text orders). A claim of no order: the table's difference as printed."""
    said, table, higher = stated(claim, task), table_difference(claim, task), METRICS[claim["metric"]][1]
    if said in ("a_better", "b_better"):
        sign = (1.0 if said == "a_better" else -1.0) * (1.0 if higher else -1.0)
        return sign * (abs(table) if table else 1.0)
    return table if table is not None else 0.0


def conflicts(claim: dict[str, Any], task: str) -> bool:
    """Whether the text states a direction its own table contradicts (the claim is the text's)."""
    table = table_difference(claim, task)
    return (
        stated(claim, task) in ("a_better", "b_better")
        and table is not None
        and table * paper_difference(claim, task) < 0
    )


def comparable(claim: dict[str, Any], dataset: str, task: str | None = None) -> bool:
    """Whether the paper's effect size can be set beside ours on ``dataset``: it has rows, printed on that data
    (and, for ``task``, its table does not contradict the text)."""
    p = claim["paper"]
    return "a" in p and printed_on(p["a"]) == dataset and not (task and conflicts(claim, task))


# Test images of each printed table (the papers' protocol sections; published_results.yaml's comments): a query
# set is its images (annotation) or their five sentences each (search, similarity).
TEST_IMAGES = {
    "karpathy2014_defrag.pascal1k": 100,
    "karpathy2014_defrag.flickr8k": 1000,
    "karpathy2014_defrag.flickr30k": 1000,
    "socher2014_dtrnn": 100,
    "peri2018_thesis.mscoco_5k_test": 5000,
    "peri2018_thesis.flickr30k_1k_test": 1000,
}


def paper_se(ref: str, task: str, metric: str) -> float | None:
    """The standard error of one printed figure from its own test set of n queries: an R@K sum's is the sum of its
    three recalls' binomial errors, 100 √(p(1 − p)/n) each (the three as perfectly correlated: an upper bound); a
    mean rank m's is m/√n (ranks spread as an exponential's, sd = mean). None for CIDEr-D (no error from a table)."""
    paper, table, _ = _ref(ref)
    images = TEST_IMAGES.get(f"{paper}.{table}", TEST_IMAGES.get(paper))
    if images is None or metric == "cider":
        return None
    n = images if task == "annotation" else 5 * images
    row = published_row(ref, task)
    if metric == "rsum":
        return float(sum(100 * math.sqrt(row[f"r{k}"] / 100 * (1 - row[f"r{k}"] / 100) / n) for k in KS))
    return float(row["mean_rank"] / math.sqrt(n))


def paper_noise(claim: dict[str, Any], task: str) -> float | None:
    """The standard error of the paper's difference a − b: its two figures' errors (:func:`paper_se`) added in
    quadrature (the paper gives no pairing); None without rows or for CIDEr-D."""
    p = claim["paper"]
    if "a" not in p:
        return None
    se = [paper_se(p[s], task, claim["metric"]) for s in ("a", "b")]
    return None if None in se else float(math.hypot(*se))


def kind(claim: dict[str, Any], task: str) -> str | None:
    """Whether a claim's task is tested: None (tested by the rule), :data:`NO_ORDER` (the text calls the two
    level or claims no difference) or :data:`ORDERING` (only the table orders them, and by less than
    :data:`ORDERING_SE` standard errors of its own test set, :func:`paper_noise`)."""
    said = stated(claim, task)
    if said == "no_order":
        return NO_ORDER
    noise = paper_noise(claim, task)
    if said is None and noise is not None and abs(table_difference(claim, task) or 0.0) < ORDERING_SE * noise:
        return ORDERING
    return None


def magnitude(paper: float, lo: float, hi: float) -> str:
    """Our CI against the paper's difference printed on the same data: "as large" (it covers it), "smaller" (it
    lies between zero's side and it, or beyond zero) or "larger"."""
    if lo <= paper <= hi:
        return "as large"
    return "smaller" if (hi < paper if paper > 0 else lo > paper) else "larger"


def _check(c: dict[str, Any]) -> None:
    """ValueError naming what claim ``c`` lacks or gets wrong."""
    name = c.get("id", "?")
    for key in ("id", "claim", "source", "paper", "metric", "tasks", "tested_on"):
        if key not in c:
            raise ValueError(f"claim {name}: no {key!r}")
    for key, typ in (
        ("id", str),
        ("claim", str),
        ("paper", dict),
        ("metric", str),
        ("tasks", list),
        ("tested_on", list),
    ):
        if not isinstance(c[key], typ):
            raise ValueError(f"claim {name}: {key}={c[key]!r}: expected a {typ.__name__}")
    for key in ("runs", "not_testable"):
        if key in c and not isinstance(c[key], dict):
            raise ValueError(f"claim {name}: {key}={c[key]!r}: expected a mapping")
    p = c["paper"]
    if not (set(p) == {"a", "b"} or (set(p) == {"direction"} and p["direction"] in ("a_better", "b_better"))):
        raise ValueError(f"claim {name}: paper needs a and b (published rows) or direction (a_better | b_better)")
    if c["metric"] not in METRICS:
        raise ValueError(f"claim {name}: metric {c['metric']!r} is not one of {', '.join(METRICS)}")
    bad = [t for t in c["tasks"] if t not in RETRIEVAL + CAPTIONS] + [
        d for d in c["tested_on"] if not isinstance(d, str) or not d
    ]
    if bad or not c["tasks"]:  # which data a study of this project trains on: tests/test_claims.py checks the names
        raise ValueError(f"claim {name}: unknown task or dataset {bad} (or no task)")
    if "a" in p and printed_on(p["a"]) != printed_on(p["b"]):
        raise ValueError(f"claim {name}: its two rows were printed on different data")
    if c["tested_on"] and set(c.get("runs") or {}) != {"a", "b"}:
        raise ValueError(f"claim {name}: tested on {c['tested_on']} but no runs a and b")
    if not c["tested_on"] and set(c.get("not_testable") or {}) != {"why", "command", "cost"}:
        raise ValueError(f"claim {name}: not tested here, so not_testable needs why, command and cost")
    text = c.get("text") or {}
    if not isinstance(text, dict) or any(t not in c["tasks"] or v not in TEXT for t, v in text.items()):
        raise ValueError(f"claim {name}: text={text!r}: expected task: {' | '.join(TEXT)} for tasks of the claim")
    if text or "direction" in p:
        for key in ("quote", "where"):
            if not isinstance(c.get(key), str) or not c[key].strip():
                raise ValueError(f"claim {name}: the text states it, so it needs its {key!r} (the paper's words)")
    beside = c.get("beside")
    if beside is not None and (
        not isinstance(beside, dict) or not beside or set(beside) - {"a", "b"} or not c["tested_on"]
    ):
        raise ValueError(
            f"claim {name}: beside={beside!r}: expected a or b (another run for a side), on a tested claim"
        )
    for t in c["tasks"]:
        try:
            d, k = paper_difference(c, t), kind(c, t)
        except KeyError as exc:
            raise ValueError(f"claim {name}: {t}: the paper prints no {exc} for it") from None
        if d == 0 and k is None:
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


def aa_pairs(folder: Path, task: str, metric: str, cache: dict[Path, Any]) -> list[dict[str, Any]]:
    """The A/A pairs of run ``folder`` in ``task`` and ``metric``: its first two training runs of one test set
    (a split trained twice, or a k-fold run's two pooled replicates), compared as if two systems: ``d`` the mean
    over queries of first − second, ``se`` its queries' standard error (within folds), ``run``. None for a run
    trained once per test set (or that ranks no such queries), and for one whose two trainings rank every query
    alike (a deterministic fit, e.g. linear kCCA: no training noise to measure, and pooled it would lower the noise
    the other runs' claims are weighed with; docs/deviations.md)."""
    try:
        units, groups, x, run = _side(folder, task, metric, cache)
    except (Untestable, FileNotFoundError):
        return []
    groups = np.asarray(groups)
    for g in dict.fromkeys(groups.tolist()):
        idx = np.flatnonzero(groups == g)
        if len(idx) >= 2:
            if np.array_equal(x[idx[0]], x[idx[1]]):
                return []
            strata = (run.get("strata") or {}).get(task) if isinstance(run, dict) else None
            d, se = stratified_mean_se(x[idx[0]] - x[idx[1]], strata)
            return [{"run": folder.name, "task": task, "metric": metric, "d": d, "se": se}]
    return []


def training_variance(pairs: list[dict[str, Any]], leave_out: str | None = None) -> float:
    """One training's variance of a run's mean (the same test queries, another training seed) over A/A ``pairs``
    (:func:`aa_pairs`; without run ``leave_out``): σ²_T = mean(d²) / 2, pooled over the study's systems. The whole
    spread of two trainings counts, their queries' share (se²) included, which the queries' standard error of a
    claim counts again: conservative on purpose. Subtracting it (the method of moments, mean(d² − se²) / 2) left
    the rule calling 15 of 210 synthetic runs different from themselves (7 %): systems differ in training noise
    (VSE's most, kCCA's least), and the pooled estimate must cover the noisiest; this one keeps the A/A check at or
    below 5 % in every study (docs/claims.md). NaN without pairs."""
    use = [p for p in pairs if p["run"] != leave_out]
    if not use:
        return float("nan")
    return float(np.mean([p["d"] ** 2 for p in use])) / 2


def _captions(folder: Path) -> tuple[list[str], list[Any], np.ndarray, dict[str, Any]]:
    """(units, groups, CIDEr-D × 100 per test image (units × images), the run) of a generating run; a k-fold
    run is read as :func:`fraglib_study.report.loading.pool_folds` reads its ranks: per replicate its folds end to end in fold
    order (units ``r0``, ``r1``, …, one group), its run holding the images' folds (``strata``)."""
    m = read_summary(folder / "metrics.json")
    folds = m.get("protocol") == "folds"
    units = [str(u) for u in m.get("units") or m["seeds"]]
    group = dict(zip(units, m.get("groups") or m["seeds"]))
    rows, seen = {}, {}
    for u in units:
        f = folder / "captions" / f"seed{u}.json"
        if not f.exists():
            raise Untestable(f"`{folder.name}` has no captions of training run {u}")
        caps = read_json(f)["captioning"]
        if not caps or any(c.get("cider") is None for c in caps):
            raise Untestable(f"`{folder.name}`: {f.name} has no per-image CIDEr-D for every test image")
        seen[u] = [c["image"] for c in caps]
        rows[u] = np.array([100 * c["cider"] for c in caps], dtype=float)
    first = {unit_seed(u) if folds else 0: seen[u] for u in reversed(units)}  # a test set's first unit's images
    odd = [u for u in units if seen[u] != first[unit_seed(u) if folds else 0]]
    if odd:
        raise Untestable(f"`{folder.name}`: its training runs captioned different test images (seed{odd[0]}.json)")
    if not folds:
        return units, [group.get(u, u) for u in units], np.stack([rows[u] for u in units]), {}
    fold_ids = sorted({unit_seed(u) for u in units})
    reps = sorted({unit_replicate(u) for u in units})
    lacking = [unit_key(f, r) for r in reps for f in fold_ids if unit_key(f, r) not in rows]
    if lacking:
        raise Untestable(f"`{folder.name}`: k-fold run without the captions of training run(s) {', '.join(lacking)}")
    pooled = np.stack([np.concatenate([rows[unit_key(f, r)] for f in fold_ids]) for r in reps])
    strata = np.concatenate([np.full(len(rows[unit_key(f, reps[0])]), f) for f in fold_ids])
    run = {"run": m["run"], "protocol": "folds", "partition": m.get("partition"), "strata": {"captioning": strata}}
    return [f"r{r}" for r in reps], [0] * len(reps), pooled, run


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


class Undecided(Exception):
    """The rule cannot weigh a difference: one test set and no estimate of the training noise (no run of the
    study trained twice on it in this task and metric)."""


# ----------------------------------------------------------------------------- one pairing rule for every page
def our_difference(
    a: Path,
    b: Path,
    task: str,
    metric: str,
    cache: dict[Path, Any] | None = None,
    train_var: float = float("nan"),
) -> dict[str, Any]:
    """Run folder ``a`` minus ``b`` in ``metric`` on ``task`` over the training runs both have
    (:func:`paired_analytic`, ``train_var`` one training's variance in the study: :func:`training_variance`):
    diff, lo, hi, p, se, ``units`` (the training runs paired) and ``protocol`` ("5 splits", "10 folds": the test
    sets). Untestable when they share none or were tested on test splits of different sizes (one of them is from
    an older benchmark: its study needs a re-run); Undecided on one test set when ``train_var`` is NaN."""
    cache = {} if cache is None else cache
    (ua, ga, xa, ra), (ub, _, xb, rb) = _side(a, task, metric, cache), _side(b, task, metric, cache)
    common, ia, ib = pair(ua, ub)
    if not common:
        raise Untestable(f"`{a.name}` and `{b.name}` share no training run")
    if xa.shape[1] != xb.shape[1]:
        raise Untestable(
            f"`{a.name}` has {xa.shape[1]} {task} queries, `{b.name}` {xb.shape[1]}: not one test set (the study of "
            f"the smaller is from an older benchmark; its `make` target re-runs it: docs/runs.md)"
        )
    strata, groups = shared_strata([ra, rb], task), [ga[i] for i in ia]
    n = len(np.unique(strata)) if strata is not None else len(set(groups))
    protocol = f"{n} folds" if strata is not None else f"{n} split{'s' * (n > 1)}"
    if len(set(groups)) < 2 and np.isnan(train_var):
        d = float((xa[ia] - xb[ib]).mean())
        raise Undecided(
            f"{d:+.1f}, but no run of this study trained twice on one test set in this measure: the training noise "
            "is not estimated (docs/claims.md)"
        )
    ours = paired_analytic(xa[ia], xb[ib], groups, strata, 0.0 if np.isnan(train_var) else train_var)
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
    verdict: str  # after Holm within the paper's claims in this study (what the counts count)
    why: str = ""
    confirmed: dict[int, str] = field(default_factory=dict)  # partition N -> the verdict on it, or "—"
    raw: str = ""  # the verdict of this row alone (its own 95 % CI), before the family's adjustment
    p_holm: float | None = None  # its p-value adjusted by Holm within the family
    beside: bool = False  # another form of a side (claims.yaml `beside`), shown beside the claim, not counted

    @property
    def tested(self) -> bool:
        """Whether the row is a test of the rule: in its paper's Holm family and the counts' decided verdicts."""
        return self.ours is not None and not self.beside and self.verdict not in UNTESTED


def dataset_folders(root: str | Path = ".", folds: bool = False) -> dict[str, list[Path]]:
    """Dataset -> the run folders of its studies (:func:`fraglib_study.report.registry.studies`, in their order): a run is looked
    up in each in turn (the default synthetic study, then the extended one); ``folds``: their k-fold runs folders."""
    out: dict[str, list[Path]] = {}
    for s in studies(root):
        if not folds or s.folds:
            out.setdefault(s.dataset, []).append(Path(root) / (s.folds if folds else s.runs))
    return out


CONFIRM = Path("runs") / "confirm"  # runs/confirm/<dataset>/p<N>/<run>: python -m fraglib_study confirm


def confirmations(root: str | Path = ".") -> dict[str, dict[int, Path]]:
    """Dataset -> partition N -> its folder of confirmation runs (``runs/confirm/<dataset>/p<N>``), N ascending."""
    out: dict[str, dict[int, Path]] = {}
    for d in sorted((Path(root) / CONFIRM).glob("*/p*")):
        if d.is_dir() and d.name[1:].isdigit():
            out.setdefault(d.parent.name, {})[int(d.name[1:])] = d
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def _pair(
    params: dict[str, Any], folders: list[Path], c: dict[str, Any], cache: dict[Any, Any] | None = None
) -> tuple[Path, Path]:
    """The folders of claim ``c``'s runs a and b, looked up in ``folders`` (once per folders in ``cache``: a study's
    folders are read once for its hundreds of claims); Untestable naming a missing one."""
    key = ("folders", tuple(map(str, folders)))
    if cache is None or key not in cache:
        looked = (run_folders(params, folders), other_test_sets(params, folders), left_out_runs(params, folders))
        if cache is None:
            cache = {}
        cache[key] = looked
    found, why, left_out = cache[key]
    missing = [c["runs"][s] for s in ("a", "b") if c["runs"][s] not in found]
    for folder, runs in left_out.items():  # runs scored on an older test split
        if any(r in runs for r in missing):
            raise Untestable(why[folder])
    if missing:
        raise Untestable("no run " + " or ".join(f"`{r}`" for r in missing) + " in this study")
    return found[c["runs"]["a"]], found[c["runs"]["b"]]


def study_noise(
    params: dict[str, Any], folders: list[Path], task: str, metric: str, cache: dict[Any, Any]
) -> tuple[list[dict[str, Any]], float]:
    """(the A/A pairs of every run in ``folders``, :func:`aa_pairs`; the study's training variance from them,
    :func:`training_variance`) for ``task`` and ``metric``, once per folders and measure in ``cache``. Runs after
    the three papers (``runs.<run>.after_papers``: SCAN, VSE∞) are not in the pool: no claim reads them, and a run
    added to a study must not move its claims' CIs (docs/deviations.md)."""
    key = ("noise", tuple(folders), task, metric)
    if key not in cache:
        later = {r for r, e in (params.get("runs") or {}).items() if (e or {}).get("after_papers")}
        runs = {r: f for r, f in run_folders(params, folders).items() if r not in later}
        pairs = [x for f in runs.values() for x in aa_pairs(f, task, metric, cache)]
        cache[key] = (pairs, training_variance(pairs))
    return cache[key]


def chance_rsum(task: str, images: float, sentences: float) -> float:
    """The R@K sum (K = 1, 5, 10) of a random ranking of one test set of ``images`` images and ``sentences``
    sentences (five an image): each query's G candidates hold c correct, P(rank ≤ K) = 1 − C(G − c, K) / C(G, K)."""
    per = sentences / images
    g, c = {"search": (images, 1), "annotation": (sentences, per), "similarity": (sentences - 1, per - 1)}[task]
    g, c = int(round(g)), int(round(c))
    return 100 * sum(1.0 if k >= g else 1 - math.comb(g - c, k) / math.comb(g, k) for k in KS)


def skill(folder: Path, task: str, cache: dict[Any, Any]) -> float | None:
    """How far run ``folder``'s R@K sum in ``task`` goes from chance (0) to perfect (1), each test set's chance from
    its size (:func:`chance_rsum`; a k-fold run's test sets are its folds); None without the ranks to tell."""
    if task not in RETRIEVAL:
        return None
    _side(folder, task, "rsum", cache)
    ranks, strata = cache[folder]["ranks"], (cache[folder].get("strata") or {}).get("annotation")
    if not {"annotation", "search"} <= set(ranks):
        return None
    sets = len(np.unique(strata)) if strata is not None else 1
    chance = chance_rsum(task, ranks["annotation"].shape[1] / sets, ranks["search"].shape[1] / sets)
    return float((query_values(ranks[task], "rsum").mean() - chance) / (300 - chance))


def _near_chance(a: Path, b: Path, task: str, cache: dict[Any, Any]) -> str:
    """Why a claim between runs ``a`` and ``b`` says nothing in ``task`` (a side near chance), or ""."""
    near = []
    for f in (a, b):
        k = skill(f, task, cache)
        if k is not None and k < NEAR_CHANCE:
            near.append(f"`{f.name}` {100 * k:.0f} %")
    if not near:
        return ""
    return (
        f"near chance in {task} ({', '.join(near)} of the way from chance to perfect in R@K sum; the criterion: "
        f"under {100 * NEAR_CHANCE:.0f} %)"
    )


def _row(
    params: dict[str, Any],
    folds: dict[str, list[Path]],
    folders: dict[str, list[Path]],
    c: dict[str, Any],
    task: str,
    data: str,
    cache: dict[Any, Any],
    again: dict[int, str],
    beside: bool = False,
) -> Row:
    """Claim ``c``'s row on ``task`` in the study of ``data`` (its runs: the k-fold ones where both are there)."""
    paper, on, untested = paper_difference(c, task), comparable(c, data, task), kind(c, task)
    try:
        where = (folds or {}).get(data, [])
        try:
            a, b = _pair(params, where, c, cache)
        except Untestable:
            where = folders.get(data, [])
            a, b = _pair(params, where, c, cache)
        noise = study_noise(params, where, task, c["metric"], cache)[1]
        ours = our_difference(a, b, task, c["metric"], cache, noise)
    except Untestable as why:
        return Row(c, task, data, paper, None, NOT_TESTABLE, str(why), again, beside=beside)
    except Undecided as why:
        return Row(c, task, data, paper, None, untested or UNDECIDED, str(why), again, UNDECIDED, beside=beside)
    near = _near_chance(a, b, task, cache) if untested is None else ""
    if untested or near:
        v = untested or UNINFORMATIVE
        return Row(c, task, data, paper, ours, v, near, again, v, beside=beside)
    v = verdict(paper, ours["diff"], (ours["lo"], ours["hi"]), on)
    return Row(c, task, data, paper, ours, v, "", again, v, beside=beside)


def claim_rows(
    params: dict[str, Any],
    folders: dict[str, list[Path]],
    claims: list[dict[str, Any]] | None = None,
    folds: dict[str, list[Path]] | None = None,
    confirmed: dict[str, dict[int, Path]] | None = None,
) -> list[Row]:
    """A :class:`Row` per claim (default: :func:`read_claims`), task and dataset it is tested on, its runs looked up
    in ``folds`` (k-fold runs folders, :func:`dataset_folders`) where both are there, else in ``folders``, each
    difference weighed with the training noise of the folders it came from (:func:`study_noise`); a row the
    registry does not test (:func:`kind`) or against a side near chance (:data:`NEAR_CHANCE`) keeps our difference
    under its own label; the tested verdicts then adjusted by Holm within each paper's rows of each study
    (:func:`adjust`). A claim's ``beside`` runs give a row after it, not counted. With ``confirmed``
    (:func:`confirmations`) the verdict, by the same rule, on each partition's runs ("—" where they are not there).
    A claim not tested here: one row per task, study ""."""
    cache: dict[Any, Any] = {}
    rows = []
    for c in read_claims() if claims is None else claims:
        for task in c["tasks"]:
            if not c["tested_on"]:
                rows.append(Row(c, task, "", paper_difference(c, task), None, NOT_TESTABLE, c["not_testable"]["why"]))
            for data in c["tested_on"]:
                again = {
                    n: _confirmation(params, f, c, task, paper_difference(c, task), comparable(c, data, task), cache)
                    for n, f in ((confirmed or {}).get(data) or {}).items()
                }
                rows.append(_row(params, folds or {}, folders, c, task, data, cache, again))
                if c.get("beside"):
                    other = {**c, "runs": {**c["runs"], **c["beside"]}}
                    rows.append(_row(params, folds or {}, folders, other, task, data, cache, {}, beside=True))
    return adjust(rows)


def on_edge(ps: list[float], i: int, ours: dict[str, Any]) -> bool:
    """Whether a re-run could change row ``i``'s decision in its family (p-values ``ps``, Holm): its difference
    moved by :data:`EDGE_Z` × √2 × tau (a re-run draws each side's trainings anew: the difference of two estimates
    has √2 × their training noise tau) toward zero, or away from it, decides it the other way."""
    diff, se, df, tau = ours["diff"], ours["se"], ours.get("df", math.inf), ours.get("tau", 0.0)
    shift = EDGE_Z * math.sqrt(2) * tau
    if shift == 0:
        return False
    now = holm(ps)[i] < ALPHA
    for moved in (max(0.0, abs(diff) - shift), abs(diff) + shift):
        q = holm([*ps[:i], _p_value(moved, se, df), *ps[i + 1 :]])[i]
        if (q < ALPHA) != now:
            return True
    return False


def adjust(rows: list[Row]) -> list[Row]:
    """``rows`` with each tested row's verdict (:attr:`Row.tested`) decided at Holm's family-wise level
    :data:`ALPHA` within its paper's tested rows of its study (:func:`fraglib.metrics.retrieval.holm`): a row is significant
    only when its adjusted p is below ALPHA; a row whose decision a re-run could change (:func:`on_edge`) is
    :data:`UNDECIDED`; ``raw`` keeps the verdict of its own CI."""
    from dataclasses import replace

    out = list(rows)
    families: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(rows):
        if r.tested:
            families.setdefault((paper_of(r.claim), r.study), []).append(i)
    for idx in families.values():
        ps = [rows[i].ours["p"] for i in idx]
        for k, (i, q) in enumerate(zip(idx, holm(ps))):
            r = rows[i]
            on = comparable(r.claim, r.study, r.task)
            v = verdict(r.paper, r.ours["diff"], (r.ours["lo"], r.ours["hi"]), on, bool(q < ALPHA))
            edge = on_edge(ps, k, r.ours)
            why = (
                f"on the edge: {v} at this run, but a re-run's training noise (±{EDGE_Z} × √2 × "
                f"{r.ours.get('tau', 0.0):.2f}) could decide it the other way"
                if edge
                else r.why
            )
            out[i] = replace(r, verdict=UNDECIDED if edge else v, p_holm=float(q), why=why)
    return out


def _confirmation(
    params: dict[str, Any],
    folder: Path,
    c: dict[str, Any],
    task: str,
    paper: float,
    on: bool,
    cache: dict[Any, Any],
) -> str:
    """The verdict on claim ``c`` and ``task`` from the confirmation runs in ``folder`` by the same rule (its own CI,
    the training noise of the partition's own runs), "—" where its runs or their results are not there."""
    if kind(c, task):
        return kind(c, task)
    try:
        pair = _pair(params, [folder], c, cache)
        noise = study_noise(params, [folder], task, c["metric"], cache)[1]
        ours = our_difference(*pair, task, c["metric"], cache, noise)
    except Untestable:
        return "—"
    except Undecided:
        return UNDECIDED
    if _near_chance(*pair, task, cache):
        return UNINFORMATIVE
    return verdict(paper, ours["diff"], (ours["lo"], ours["hi"]), on)


# ----------------------------------------------------------------------------- the table
def _measure(c: dict[str, Any], task: str) -> str:
    label, higher = METRICS[c["metric"]]
    return f"{task}, {label} {'↑' if higher else '↓'}"


def _paper_cell(r: Row) -> str:
    said, table = stated(r.claim, r.task), table_difference(r.claim, r.task)
    if table is None:
        return f"{'a' if said == 'a_better' else 'b'} better (text, no number)"
    cell = f"{table:+.1f}" + (" †" if r.study and comparable(r.claim, r.study, r.task) else "")
    noise = paper_noise(r.claim, r.task)
    return cell + (f" (SE {noise:.1f})" if noise is not None else "")


def _stated_cell(r: Row) -> str:
    """Where the claim is read from: the text (its words in the registry) or the table; ⚑ where they disagree."""
    said = stated(r.claim, r.task)
    if said is None:
        return "table"
    words = {"a_better": "a better", "b_better": "b better", "no_order": "no order"}[said]
    return f"text: {words}" + (" ⚑ the table says the reverse" if conflicts(r.claim, r.task) else "")


def _size_cell(r: Row) -> str:
    if r.ours is None or not r.study or not comparable(r.claim, r.study, r.task) or r.verdict in UNTESTED:
        return "—"
    return magnitude(r.paper, r.ours["lo"], r.ours["hi"])


def _p(p: float) -> str:
    """A p-value for a reader: two significant digits, "< 0.001" below that."""
    return "< 0.001" if p < 0.001 else f"{p:.2g}"


def claims_table(rows: list[Row]) -> Table:
    """Claim, measure, source, study, the paper's difference, ours [95 % CI], its p-value after Holm, training runs
    paired, their test sets ("5 splits", "10 folds"), verdict (after Holm), the verdict of its own CI alone ("same"
    where Holm changed nothing), and a column "confirmed on partition N" per partition any row has."""
    again = sorted({n for r in rows for n in r.confirmed})
    return Table(
        (
            "claim (a − b)",
            "measure",
            "source",
            "stated",
            "study",
            "paper's difference (its SE)",
            "ours [95 % CI]",
            "size against † (our CI)",
            "p (Holm)",
            "runs paired",
            "test sets",
            "verdict",
            "its own CI alone",
            *(f"confirmed on partition {n}" for n in again),
        ),
        tuple(
            (
                f"{r.claim['claim']} (`{r.claim['runs']['a']}` − `{r.claim['runs']['b']}`)"
                + (" — shown beside, not counted" if r.beside else ""),
                _measure(r.claim, r.task),
                r.claim["source"],
                _stated_cell(r),
                f"`{r.study}`",
                _paper_cell(r),
                "—" if r.ours is None else ci_text(r.ours["diff"], r.ours["lo"], r.ours["hi"]),
                _size_cell(r),
                "—" if r.p_holm is None else _p(r.p_holm),
                "—" if r.ours is None else str(int(r.ours["units"])),
                "—" if r.ours is None else r.ours["protocol"],
                r.verdict + (f": {r.why}" if r.why else ""),
                "—" if r.ours is None else ("same" if r.raw == r.verdict else r.raw),
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
    """'n reproduced, n same direction, not significant, …' over ``rows`` (the rows shown beside not counted),
    every verdict named."""
    return ", ".join(f"{sum(r.verdict == v and not r.beside for r in rows)} {v}" for v in VERDICTS)


PAPERS = {"Karpathy": "Karpathy et al. 2014", "Socher": "Socher et al. 2014", "Peri": "Peri 2018"}
VERDICT_WORDS = dict(  # facts: a word per verdict
    zip(
        ("reproduced", "same", "not", "reversed", "undecided", "uninformative", "ordering", "noorder", "untestable"),
        VERDICTS,
    )
)


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
        per[r.verdict] += not r.beside
    return out


def counts_table(rows: list[Row]) -> Table:
    """Paper × study (its dataset; "none" for the claims not testable here) × verdict: how many rows, after Holm
    (the rows shown beside not counted)."""
    short = ("reproduced", "same direction", "not reproduced", "reversed", "undecided", "uninformative",
             "ordering", "no order", "not testable")  # fmt: skip
    return Table(
        ("paper", "study", *short),
        tuple(
            (PAPERS[paper], f"`{study}`" if study else "none", *(str(per[v]) for v in VERDICTS))
            for paper, studies_ in paper_counts(rows).items()
            for study, per in studies_.items()
        ),
    )


def project_rows(root: str | Path, params: dict[str, Any]) -> list[Row]:
    """:func:`claim_rows` of the project at ``root``: its studies' runs, their k-fold runs first, its confirmations."""
    return claim_rows(
        params,
        dataset_folders(root),
        folds=dataset_folders(root, folds=True),
        confirmed=confirmations(root),
    )


def claim_blocks(root: str | Path, params: dict[str, Any]) -> list[Block]:
    """The verdicts of every claim (:func:`claim_rows`): a paragraph on the rule, the counts, per dataset tested
    a heading, what its CIs cover, its counts and its table, then the claims not testable here (read from ``root``)."""
    rows = project_rows(root, params)
    if not rows:
        return []
    found = {s.dataset: s for s in reversed(studies(root))}  # a dataset's first study
    out: list[Block] = [
        "Every comparative claim of the three papers (`fraglib_study/reference/claims.yaml`, read from their words and "
        "tables: docs/claims.md), under the rule and plan registered at the git tag `registration-1` "
        "(docs/analysis_plan.md; later changes: docs/deviations.md). The paper's difference a − b is computed from "
        "its printed rows, with its standard error on its own test set; where the text states a direction the claim "
        "is the text's, and ⚑ marks a table that says the reverse. Ours is the mean over the training runs both "
        "runs have, with a 95 % CI that weighs the test queries and the training noise, calibrated by the study's "
        "own A/A check (below each study's table). Verdict by `fraglib_study.audit.claims.verdict`: **reproduced** "
        "(significant on the paper's side), **reversed** (on the other side), **same direction, not significant**, "
        "**not reproduced** (not significant and our difference has the other sign, or the CI excludes the paper's "
        "difference where that is comparable: † marks a difference printed on this study's data, whose size our CI "
        "then judges), **undecided** (no estimate of the training noise, or a decision a re-run's training noise "
        "could turn). Not tested, our difference shown: **uninformative** (a side near chance), **an ordering, not "
        "a claim** (only the table orders the two, by less than one standard error of its own test set), **no "
        "order claimed** (the text calls them level). Significant: the p-value adjusted by Holm within the "
        "paper's tested claims in the study is below 0.05; the verdict of a row's own CI alone is in the last "
        'column. Rows "shown beside" use another form of a side (its exact or Gaussian form) and are not '
        "counted. ↑: higher is better, ↓: lower is better. The verdicts on runs committed before the tag are not "
        "pre-registered: the registry's fixes were made with them known.",
        f"All studies: {counts(rows)} (claim × task × study rows).",
        counts_table(rows),
    ]
    for data in dict.fromkeys(r.study for r in rows if r.study):
        part = [r for r in rows if r.study == data]
        study = found.get(data)
        scope = (
            "Over several splits a CI is Student's t between the splits' mean differences (their spread holds the "
            "queries', the trainings' and the data's noise). On one test set (one split, or the pooled folds) it is "
            "the normal interval of the test queries' standard error plus the training noise of each side's mean "
            "(one training's variance, from the study's A/A pairs, over the training runs paired: "
            f"{sum(r.ours is not None and r.ours['units'] == 1 for r in part)} of "
            f"{sum(r.ours is not None for r in part)} rows pair a single training run per side)."
        )
        if any(r.ours is not None and "folds" in r.ours["protocol"] for r in part):
            scope += (
                ' Rows on folds (column "test sets") pool the k-fold runs: every test query once, ranked in its own '
                "fold by its fold's model; the queries' standard error is taken within each fold."
            )
        if any(r.confirmed for r in part):
            scope += (
                ' A column "confirmed on partition N" holds the verdict, by the same rule, on the claim\'s runs '
                "re-run on fresh data N after every choice was frozen (`python -m fraglib_study confirm --partition N`, "
                "docs/claims.md); — where they are not there."
            )
        title = study.title if study is not None else data
        out += [Heading(3, f"Tested on `{data}`: {title}"), scope, f"Verdicts: {counts(part)}.", claims_table(part)]
        out += aa_blocks(params, data, root, part)
        out += cost_blocks(params, data, root, part)
    out += rerun_blocks(root)
    untested = [r for r in rows if not r.study]
    if untested:
        out += [
            Heading(3, "Not testable here"),
            "Claims that need what no study here has; the paper's difference as printed.",
            untested_table(untested),
        ]
    return out


def aa_rows(params: dict[str, Any], folders: list[Path], measures: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """The A/A check of the rule: every A/A pair of the runs in ``folders`` (:func:`aa_pairs`) in each (task,
    metric) of ``measures``, its difference with the CI of the test queries alone (``before``: the rule until the
    training noise was weighed) and with the training noise estimated from the other pairs (``after``, leave one
    out, as a claim on this run would be weighed), each flagged where it calls the run different from itself."""
    from scipy import stats

    z = float(stats.norm.ppf(1 - ALPHA / 2))
    cache: dict[Any, Any] = {}
    out = []
    for task, metric in measures:
        pairs = study_noise(params, folders, task, metric, cache)[0]
        for p in pairs:
            var = training_variance(pairs, leave_out=p["run"])
            se = float(np.sqrt(p["se"] ** 2 + 2 * var)) if not np.isnan(var) else float("nan")
            out.append(
                {
                    **p,
                    "before": abs(p["d"]) > z * p["se"],
                    "after": bool(abs(p["d"]) > z * se) if not np.isnan(se) else None,
                    "ci": (p["d"] - z * se, p["d"] + z * se),
                    "pairs": len(pairs),
                }
            )
    return out


def study_aa_rows(params: dict[str, Any], data: str, root: str | Path, part: list[Row]) -> list[dict[str, Any]]:
    """The A/A check (:func:`aa_rows`) of the study of ``data`` over the folders its rows were read from (k-fold and
    split runs), in the measures its claims (``part``) use."""
    measures = list(dict.fromkeys((r.task, r.claim["metric"]) for r in part if r.task in RETRIEVAL))
    lists = [f for f in (dataset_folders(root, folds=True).get(data), dataset_folders(root).get(data)) if f]
    return [r for folders in lists for r in aa_rows(params, folders, measures)]


def aa_blocks(params: dict[str, Any], data: str, root: str | Path, part: list[Row]) -> list[Block]:
    """A study's A/A check (:func:`aa_rows`) over the folders its rows were read from, in the measures its claims
    use: how often the rule calls a run different from itself, before and after it weighs the training noise, and
    the pairs."""
    rows = study_aa_rows(params, data, root, part)
    if not rows:
        return []
    decided = [r for r in rows if r["after"] is not None]
    shown = [r for r in rows if r["before"] or r["after"] or r["after"] is None]
    before, after = sum(r["before"] for r in rows), sum(bool(r["after"]) for r in decided)
    return [
        f"**The rule against itself (A/A check), `{data}`**: each run trained twice on one test set, its two "
        "trainings compared as if two systems, in every measure its claims use. With the test queries' error alone "
        f"(the rule before it weighed the training noise) {before} of {len(rows)} comparisons "
        f"({100 * before / len(rows):.0f} %) call a run different from itself; with the training noise estimated "
        f"from the other runs' pairs (left out: the run itself) {after} of {len(decided)} "
        f"({100 * after / max(1, len(decided)):.0f} %), against the 5 % a calibrated rule allows. The pairs that either "
        f"rule calls different ({len(shown)}; the other {len(rows) - len(shown)} are the same both ways):",
        Table(
            ("run", "measure", "first − second training", "queries alone", "with training noise"),
            tuple(
                (
                    f"`{r['run']}`",
                    f"{r['task']}, {METRICS[r['metric']][0]}",
                    f"{r['d']:+.2f} [{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]",
                    "differs" if r["before"] else "same",
                    "—" if r["after"] is None else ("differs" if r["after"] else "same"),
                )
                for r in shown
            ),
        ),
    ]


def run_seconds(folder: Path) -> tuple[float, int, set[str]]:
    """(training + test seconds summed over the training runs of ``folder``, their count, the machines named) from
    each ``seeds/*/timing.json`` (:mod:`fraglib_study.experiments.study`); a unit without timing counts 0 seconds."""
    total, units, machines = 0.0, 0, set()
    for f in sorted(folder.glob("seeds/*/timing.json")):
        t = read_json(f)
        total += float(t.get("train_seconds") or 0) + float(t.get("eval_seconds") or 0)
        units += 1
        machines.add(str(t.get("machine", "not recorded")))
    return total, units, machines


def cost_blocks(params: dict[str, Any], data: str, root: str | Path, part: list[Row]) -> list[Block]:
    """What confirming each claim of ``data`` on a fresh partition costs (``python -m fraglib_study confirm --partition
    N --runs a,b``): the two k-fold runs' trainings and their measured seconds, from their timing records."""
    found = run_folders(params, dataset_folders(root, folds=True).get(data) or [])
    rows, seen = [], set()
    for r in part:
        c = r.claim
        if r.beside or c["id"] in seen or not all(c["runs"][s] in found for s in "ab"):
            continue
        seen.add(c["id"])
        (sa, na, ma), (sb, nb, mb) = (run_seconds(found[c["runs"][s]]) for s in "ab")
        rows.append(
            (
                f"`{c['id']}`",
                f"`{c['runs']['a']}`, `{c['runs']['b']}`",
                str(na + nb),
                f"{(sa + sb) / 60:.0f}",
                ", ".join(sorted(ma | mb)),
            )
        )
    if not rows:
        return []
    return [
        f"**What confirming one claim costs, `{data}`** (`python -m fraglib_study confirm --partition N --runs a,b`): its "
        "two runs' trainings on the folds, with the CPU minutes they took here (training and test, from each "
        "training's `timing.json`; one training per process, two at a time on two cores, so the wall time is about "
        "half). A run shared by several claims is trained once.",
        Table(("claim", "runs", "trainings", "CPU minutes", "measured on"), tuple(rows)),
    ]


RERUNS = Path("benchmarks") / "reruns"  # python -m fraglib_study rerun … --json: a re-run on another machine, compared


def rerun_blocks(root: str | Path = ".") -> list[Block]:
    """The verdicts on another CPU: per comparison kept in ``benchmarks/reruns/*.json`` (``python -m fraglib_study rerun
    RUNS --json F``: a study re-made on another machine against the committed results) its machines, the metrics
    within the re-run contract and the verdicts that stayed; then every verdict that changed, with both CIs."""
    from fraglib_study.report.loading import read_json

    files = sorted((Path(root) / RERUNS).glob("*.json"))
    if not files:
        return []
    recs = [(f, read_json(f)) for f in files]
    for f, r in recs:
        if not isinstance(r, dict) or not isinstance(r.get("metrics"), list) or "metrics_within" not in r:
            raise ValueError(f"{f}: not a comparison `python -m fraglib_study rerun --json` writes")

    def ci(o: dict[str, float]) -> str:
        return f"{o['diff']:+.1f} [{o['lo']:+.1f}, {o['hi']:+.1f}]"

    changed = [(f, v) for f, r in recs for v in r.get("verdicts") or [] if not v["same"]]
    out: list[Block] = [
        Heading(3, "The verdicts on another CPU"),
        "Another CPU picks other float kernels, so training follows another trajectory (README "
        '"Reproducibility"). Each row: a study re-made with `make` on another machine, compared with the results '
        "in git by `python -m fraglib_study rerun` (its metrics within |z| ≤ 3 of the committed ones, and every claim's "
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
                        f"{v['committed']}: {ci(v['committed_ours'])}" if v.get("committed_ours") else v["committed"],
                        f"{v['new']}: {ci(v['new_ours'])}" if v.get("new_ours") else v["new"],
                    )
                    for f, v in changed
                ),
            ),
        ]
    return out
