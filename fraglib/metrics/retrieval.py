"""Ranking metrics of an image x sentence score matrix (docs/evaluation.md): numbers from scores, no model.

The interface follows SCAN's: scores first, then ranks, so any model (or a random one) is
evaluated by the same code. ``sentence_image[j]`` is the row of sentence j's image — explicit
indices, any number of sentences per image.

Ranks are 1-based and **pessimistic on ties**: a competitor scoring the same as the correct item
is counted as ranked above it. Hence a sentence with no fragment (-inf against every image, as in
the authors' code) ranks last, and a constant score matrix gives every query the worst rank.
**NaN and +inf are refused** (:func:`check_scores`, a :class:`ScoreError` naming the matrix): every
comparison with NaN is false, so a diverged model's NaN scores would otherwise rank every correct item
first; -inf alone means "no score" and ranks last.

* image annotation (image -> sentences): rank of the best-ranked of the image's sentences,
  ``1 + #{non-matching sentences j : S[k, j] >= max_{j' of k} S[k, j']}``;
* image search (sentence -> images): ``1 + #{other images k' : S[k', j] >= S[k_j, j]}``;
* sentence similarity (systems with a sentence space, Socher et al. 2014): each sentence ranks
  the other sentences; rank of the best-ranked one of the same image (:func:`similarity_ranks`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported inside the functions that rank a score matrix: the statistics of committed
    import torch  # ranks load none, so the report layer runs without it (tests/test_light_reports.py)

KS = (1, 5, 10)  # the R@K of every table
DIRECTIONS = ("annotation", "search")  # image -> sentences, sentence -> images
N_BOOT = 1000  # bootstrap resamples of every test CI unless a setting says otherwise (params.yaml evaluation.n_boot)
METRICS = tuple(f"r{k}" for k in KS) + ("median_rank", "mean_rank")  # a direction's figures (recall_table)


class ScoreError(ValueError):
    """A score matrix that cannot be ranked: NaN or +inf entries, or a shape that does not match its index."""


def _largest(blk: torch.Tensor, worst: torch.Tensor) -> torch.Tensor:
    """The running largest score, left on the device (no host wait): NaN if any entry so far is NaN (``amax``
    and ``maximum`` propagate it), +inf if any is +inf — one reduction per tile screens for both."""
    import torch

    return torch.maximum(worst, blk.amax()) if blk.numel() else worst


def check_scores(S: torch.Tensor, what: str = "scores", worst: torch.Tensor | None = None) -> None:
    """Refuse a score matrix holding NaN or +inf: ScoreError naming ``what``, the count and the first entry;
    -inf is allowed (an item without fragments: ranked last). ``worst``: the ranking loop's own running
    :func:`_largest`, read once here, so a GPU waits once per matrix, not per tile."""
    import torch

    S = S.detach()
    v = float(_largest(S, torch.tensor(float("-inf"), device=S.device)) if worst is None else worst.detach())
    if math.isnan(v) or v == math.inf:
        bad = torch.isnan(S) | (S == math.inf)
        i, j = (int(x) for x in torch.nonzero(bad)[0])
        raise ScoreError(
            f"{what}: {int(bad.sum())} of {S.numel()} scores are NaN or +inf (first at [{i}, {j}]: "
            f"{float(S[i, j])}); a diverged or damaged model cannot be ranked"
        )


def check_matrix(a: np.ndarray | torch.Tensor, what: str, finite: bool = False) -> None:
    """Refuse a matrix at the point it enters a ranking (a score file, a bank, embeddings; :class:`ScoreError`
    naming ``what``): not 2-D, empty (no rows or no columns), NaN or +inf entries, and with ``finite`` -inf too
    (embeddings: -inf is a score's "no score", never a coordinate). One reduction screens a clean matrix; the
    entries are located only when it is not. Its shape against the split's is the caller's check."""
    import torch

    t = torch.as_tensor(a).detach()
    if t.dim() != 2 or 0 in t.shape:
        raise ScoreError(f"{what}: a non-empty 2-D matrix is needed, got shape {tuple(t.shape)}")
    if t.dtype.is_floating_point:
        check_scores(t, what)
        if finite and bool(torch.isneginf(t.amin())):
            bad = torch.isneginf(t)
            i, j = (int(x) for x in torch.nonzero(bad)[0])
            raise ScoreError(f"{what}: {int(bad.sum())} of {t.numel()} entries are -inf (first at [{i}, {j}])")


def _matrix(
    scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, what: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores as a 2-D tensor, the sentence -> image index on its device), shapes checked."""
    import torch

    S = torch.as_tensor(scores).detach()
    si = torch.as_tensor(np.asarray(sentence_image), dtype=torch.long, device=S.device)
    if S.dim() != 2 or si.dim() != 1 or si.shape[0] != S.shape[1]:
        raise ScoreError(
            f"{what}: a (n_images, n_sentences) matrix with one image index per sentence is needed, "
            f"got scores {tuple(S.shape)} and {tuple(si.shape)} indices"
        )
    if si.numel() and (int(si.min()) < 0 or int(si.max()) >= S.shape[0]):
        raise ScoreError(
            f"{what}: sentence image indices must lie in [0, {S.shape[0]}), got [{int(si.min())}, {int(si.max())}]"
        )
    return S, si


def annotation_ranks(
    scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, chunk: int = 256, what: str = "scores"
) -> np.ndarray:
    """(n_images,) rank of each image's best-ranked ground-truth sentence. Images without any
    sentence get rank 0 (excluded by :func:`recall_table`). ``what`` names the matrix in errors."""
    import torch

    S, si = _matrix(scores, sentence_image, what)
    n_img = S.shape[0]
    ranks = np.zeros(n_img, np.int64)
    worst = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    for a in range(0, n_img, chunk):
        blk = S[a : a + chunk]
        worst = _largest(blk, worst)
        rows = torch.arange(a, a + blk.shape[0], device=S.device)
        gt = si[None, :] == rows[:, None]  # (c, Ns)
        best = torch.where(gt, blk, torch.full_like(blk, float("-inf"))).amax(dim=1)
        has = gt.any(dim=1)
        worse_or_tied = ((blk >= best[:, None]) & ~gt).sum(dim=1)
        r = (1 + worse_or_tied).cpu().numpy()
        r[~has.cpu().numpy()] = 0
        ranks[a : a + blk.shape[0]] = r
    check_scores(S, what, worst)
    return ranks


def search_ranks(
    scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, chunk: int = 256, what: str = "scores"
) -> np.ndarray:
    """(n_sentences,) rank of each sentence's image among all images."""
    import torch

    S, si = _matrix(scores, sentence_image, what)
    own = S[si, torch.arange(S.shape[1], device=S.device)]  # (Ns,)
    count = torch.zeros(S.shape[1], dtype=torch.long, device=S.device)
    worst = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    for a in range(0, S.shape[0], chunk):
        blk = S[a : a + chunk]
        worst = _largest(blk, worst)
        rows = torch.arange(a, a + blk.shape[0], device=S.device)
        other = rows[:, None] != si[None, :]
        count += ((blk >= own[None, :]) & other).sum(dim=0)
    check_scores(S, what, worst)
    return (1 + count).cpu().numpy()


def similarity_ranks(
    sim: np.ndarray | torch.Tensor, sentence_image: np.ndarray, chunk: int = 256, what: str = "sentence similarities"
) -> np.ndarray:
    """(n_sentences,) sentence similarity (Socher et al. 2014, Table 1 left): each sentence queries
    all *other* sentences by ``sim`` (n_s, n_s); rank of the best-ranked sentence of the same image
    (pessimistic on ties). A sentence whose image has no other sentence gets rank 0 (excluded)."""
    import torch

    S = torch.as_tensor(sim).detach()
    si = torch.as_tensor(np.asarray(sentence_image), dtype=torch.long, device=S.device)
    if S.dim() != 2 or S.shape[0] != S.shape[1] or si.shape != (S.shape[0],):
        raise ScoreError(
            f"{what}: a square (n_sentences, n_sentences) matrix with one image index per sentence "
            f"is needed, got {tuple(S.shape)} and {tuple(si.shape)} indices"
        )
    n = S.shape[0]
    ranks = np.zeros(n, np.int64)
    worst = torch.tensor(float("-inf"), dtype=S.dtype, device=S.device)
    for a in range(0, n, chunk):
        blk = S[a : a + chunk]
        worst = _largest(blk, worst)
        rows = torch.arange(a, a + blk.shape[0], device=S.device)
        cols = torch.arange(n, device=S.device)
        self_ = rows[:, None] == cols[None, :]
        gt = (si[rows][:, None] == si[None, :]) & ~self_
        best = torch.where(gt, blk, torch.full_like(blk, float("-inf"))).amax(dim=1)
        r = (1 + ((blk >= best[:, None]) & ~gt & ~self_).sum(dim=1)).cpu().numpy()
        r[~gt.any(dim=1).cpu().numpy()] = 0
        ranks[a : a + blk.shape[0]] = r
    check_scores(S, what, worst)
    return ranks


def recall_table(ranks: np.ndarray) -> dict[str, float]:
    """R@1/5/10 (% of queries with rank <= K), median and mean rank; rank-0 entries are ignored."""
    r = np.asarray(ranks)
    r = r[r > 0]
    out = {f"r{k}": float(100.0 * np.mean(r <= k)) for k in KS}
    out["median_rank"] = float(np.median(r))
    out["mean_rank"] = float(np.mean(r))
    return out


def median_rank_vsepp(ranks: np.ndarray) -> float:
    """VSE++'s (and Peri's) median rank ``floor(median(rank − 1)) + 1``: an integer, which differs from
    the median of 1-based ranks when the query count is even and the middle pair differ."""
    r = np.asarray(ranks)
    r = r[r > 0]
    return float(np.floor(np.median(r - 1)) + 1)


def bootstrap_ci(ranks: np.ndarray, n_boot: int = N_BOOT, seed: int = 0, level: float = 0.95) -> dict[str, list[float]]:
    """Percentile bootstrap CIs of every :func:`recall_table` entry, resampling queries."""
    if n_boot < 1:
        raise ValueError(f"bootstrap: n_boot must be at least 1, got {n_boot}")
    r = np.asarray(ranks)
    r = r[r > 0]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(r), size=(n_boot, len(r)))
    samples = r[idx]
    stats = {f"r{k}": 100.0 * (samples <= k).mean(axis=1) for k in KS}
    stats["median_rank"] = np.median(samples, axis=1)
    stats["mean_rank"] = samples.mean(axis=1)
    lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    return {k: [float(np.percentile(v, lo)), float(np.percentile(v, hi))] for k, v in stats.items()}


def hodosh_columns(sentence_image: np.ndarray, sentids: np.ndarray) -> np.ndarray:
    """Column indices keeping only the first sentence (lowest sentid) of each image."""
    first: dict[int, int] = {}
    for j, (k, sid) in enumerate(zip(sentence_image, sentids)):
        if int(k) not in first or sid < sentids[first[int(k)]]:
            first[int(k)] = j
    return np.array(sorted(first.values()), np.int64)


def evaluate_scores(
    scores: np.ndarray | torch.Tensor,
    sentence_image: np.ndarray,
    n_boot: int = N_BOOT,
    seed: int = 0,
    what: str = "scores",
) -> dict[str, Any]:
    """Both directions: metrics, bootstrap CIs and the per-query ranks (for error analysis); ``what``
    names the matrix (run and split) in a :class:`ScoreError`."""
    a = annotation_ranks(scores, sentence_image, what=what)
    s = search_ranks(scores, sentence_image, what=what)
    return {
        "annotation": recall_table(a),
        "search": recall_table(s),
        "annotation_ci": bootstrap_ci(a, n_boot, seed),
        "search_ci": bootstrap_ci(s, n_boot, seed + 1),
        "ranks": {"annotation": a.tolist(), "search": s.tolist()},
    }


def rsum(metrics: dict[str, Any]) -> float:
    """Model-selection criterion: R@1 + R@5 + R@10 of both directions."""
    return sum(metrics[d][f"r{k}"] for d in DIRECTIONS for k in KS)


def random_scores(n_images: int, n_sentences: int, seed: int = 0) -> np.ndarray:
    """The random-ranking baseline: i.i.d. uniform scores."""
    return np.random.default_rng(seed).random((n_images, n_sentences))


def fold_metrics(
    scores: np.ndarray | torch.Tensor, sentence_image: np.ndarray, folds: int = 5, what: str = "scores"
) -> dict[str, Any]:
    """The COCO literature's "1K" protocol: the images cut into ``folds`` consecutive equal folds (5K test:
    five folds of 1,000), each fold's sentences ranked against its images only; R@K and ranks averaged
    over the folds (``per_fold`` keeps each). The full matrix is the "5K" protocol (:func:`evaluate_scores`)."""
    import torch

    S = torch.as_tensor(scores)
    si = np.asarray(sentence_image)
    n = S.shape[0]
    if folds < 2 or n % folds:
        raise ValueError(f"fold_metrics: {n} images do not cut into {folds} equal folds")
    size, per = n // folds, []
    for f in range(folds):
        cols = np.nonzero((si >= f * size) & (si < (f + 1) * size))[0]
        sub = S[f * size : (f + 1) * size][:, torch.from_numpy(cols)]
        w = f"{what} (fold {f + 1} of {folds})"
        per.append(
            {
                "annotation": recall_table(annotation_ranks(sub, si[cols] - f * size, what=w)),
                "search": recall_table(search_ranks(sub, si[cols] - f * size, what=w)),
            }
        )
    mean = {d: {k: float(np.mean([p[d][k] for p in per])) for k in per[0][d]} for d in DIRECTIONS}
    return {**mean, "folds": folds, "fold_images": size, "per_fold": per}


# ----------------------------------------------------------------------------- uncertainty over runs and queries
# The three-level bootstrap of docs/evaluation.md "Uncertainty" (groups of units sharing a test set, units = training
# runs, test queries); one unit in one group is the plain query bootstrap.
def rank_metric(r: np.ndarray, name: str) -> np.ndarray:
    """Metric ``name`` (``r<K>``, ``median_rank``, ``median_rank_vsepp``, ``mean_rank``) over the last axis of a
    (..., queries) rank array."""
    if name.startswith("r"):
        return 100.0 * (r <= int(name[1:])).mean(axis=-1)
    if name == "median_rank_vsepp":  # floor(median(rank - 1)) + 1
        return np.floor(np.median(r - 1, axis=-1)) + 1
    return np.median(r, axis=-1) if name == "median_rank" else r.mean(axis=-1)


def bootstrap_draws(groups, n_queries: int, n_boot: int, seed: int = 0, strata=None) -> tuple[np.ndarray, np.ndarray]:
    """The resamples of the three-level bootstrap for units in ``groups`` (U,): ``units`` (n_boot, G, K)
    unit indices (G groups drawn with replacement, then K units within each, K = the largest group's
    size) and ``queries`` (n_boot, G, n_queries) query indices (one draw per drawn group). ``strata``
    (n_queries,): each query's stratum, e.g. its fold of a k-fold protocol (fixed disjoint test sets, each
    ranked by its own model): queries are then drawn within their stratum, which keeps its size and its
    positions, and strata are never drawn (stratified bootstrap)."""
    groups = np.asarray(groups)
    names = np.unique(groups)
    members = [np.flatnonzero(groups == g) for g in names]
    K = max(len(m) for m in members)
    table = np.stack([np.resize(m, K) for m in members])  # (G, K), rows padded cyclically
    sizes = np.array([len(m) for m in members])
    rng = np.random.default_rng(seed)
    g = rng.integers(0, len(names), size=(n_boot, len(names)))
    k = (rng.random((n_boot, len(names), K)) * sizes[g][..., None]).astype(int)
    units = table[g[..., None], k]
    if strata is None:
        return units, rng.integers(0, n_queries, size=(n_boot, len(names), n_queries))
    strata = np.asarray(strata)
    if strata.shape != (n_queries,):
        raise ValueError(f"bootstrap: strata must give one stratum per query ({n_queries}), got shape {strata.shape}")
    queries = np.empty((n_boot, len(names), n_queries), np.int64)
    for s in np.unique(strata):
        idx = np.flatnonzero(strata == s)
        queries[..., idx] = idx[rng.integers(0, len(idx), size=(n_boot, len(names), len(idx)))]
    return units, queries


def _boot_values(ranks: np.ndarray, name: str, units: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """(n_boot,) the metric averaged over the drawn units, on their drawn queries. R@K gathers each query's hit
    (1 byte) rather than its rank (8): the same booleans, so the same values, in two thirds of the time."""
    if name.startswith("r"):
        hits = ranks <= int(name[1:])
        return (100.0 * hits[units[..., None], queries[:, :, None, :]].mean(axis=-1)).mean(axis=(1, 2))
    return rank_metric(ranks[units[..., None], queries[:, :, None, :]], name).mean(axis=(1, 2))


def bootstrap_seed_mean(
    ranks: np.ndarray, name: str, n_boot: int = N_BOOT, seed: int = 0, groups=None, strata=None
) -> tuple[float, float]:
    """95% CI of the unit-averaged metric of ``ranks`` (units x queries), resampling groups, units and
    queries (module docstring); ``groups`` default: every unit its own group; ``strata``: of the queries
    (:func:`bootstrap_draws`)."""
    groups = np.arange(len(ranks)) if groups is None else groups
    units, queries = bootstrap_draws(groups, ranks.shape[1], n_boot, seed, strata)
    vals = _boot_values(ranks, name, units, queries)
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def paired_difference(
    a: np.ndarray, b: np.ndarray, name: str, n_boot: int = N_BOOT, seed: int = 0, groups=None, strata=None
) -> dict[str, float]:
    """Mean over units of metric(a) - metric(b) with a 95% paired three-level bootstrap CI (the same
    draws of groups, units and queries for both); ``groups`` default: every unit its own group; ``strata``:
    of the queries (:func:`bootstrap_draws`)."""
    if a.shape != b.shape:
        raise ValueError(f"paired difference needs the same units and queries: {a.shape} vs {b.shape}")
    groups = np.arange(len(a)) if groups is None else groups
    units, queries = bootstrap_draws(groups, a.shape[1], n_boot, seed, strata)
    d = _boot_values(a, name, units, queries) - _boot_values(b, name, units, queries)
    point = float((rank_metric(a, name) - rank_metric(b, name)).mean())
    lo, hi = float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))
    return {"diff": point, "lo": lo, "hi": hi, "excludes_zero": bool(lo > 0 or hi < 0)}


# ----------------------------------------------------------------------------- analytic paired differences
def stratified_mean_se(d: np.ndarray, strata=None) -> tuple[float, float]:
    """Mean of per-query values ``d`` (n,) and its standard error when the queries are a sample: within each
    stratum (a fold of a k-fold protocol: its size fixed) when ``strata`` (n,) is given,
    SE² = Σ_s (n_s / n)² var_s / n_s (var_s with n_s − 1), else SE² = var / n. The analytic counterpart of the
    stratified query bootstrap (:func:`bootstrap_draws`); ValueError on fewer than 2 values in a stratum."""
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 1 or len(d) < 2:
        raise ValueError(f"a standard error needs at least 2 per-query values, got shape {d.shape}")
    if strata is None:
        return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))
    strata = np.asarray(strata)
    if strata.shape != d.shape:
        raise ValueError(f"strata must give one stratum per query ({len(d)}), got shape {strata.shape}")
    var = 0.0
    for s in np.unique(strata):
        x = d[strata == s]
        if len(x) < 2:
            raise ValueError(f"stratum {s} holds {len(x)} query: a standard error needs 2 per stratum")
        var += (len(x) / len(d)) ** 2 * float(x.var(ddof=1)) / len(x)
    return float(d.mean()), math.sqrt(var)


def holm(p: Any) -> np.ndarray:
    """Holm's step-down adjusted p-values of ``p`` (a family of tests, any order): the k-th smallest is
    max over j ≤ k of min(1, (m − j + 1) p_(j)); a test is significant at level α when its adjusted p < α.
    Controls the family-wise error rate at α for any dependence between the tests."""
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1 or np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise ValueError(f"holm: p-values in [0, 1] needed, got {p}")
    order = np.argsort(p, kind="stable")
    m = len(p)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out


# ----------------------------------------------------------------------------- paired differences (the claims' rule)
ALPHA = 0.05  # two-sided: 95 % CIs; Holm's family-wise level within a paper's claims in a study


def query_values(ranks: np.ndarray, metric: str) -> np.ndarray:
    """Per-query values (units × queries) whose mean over the queries is ``metric`` of the ranks: R@K sum
    (100 × the number of K in 1, 5, 10 with rank ≤ K), one R@K (``r1``, ``r5``, …: 100 where rank ≤ K) or the rank
    itself (mean rank). A median rank has none (it is no mean over the queries): ValueError."""
    if metric == "rsum":
        return 100.0 * sum((ranks <= k).astype(float) for k in KS)
    if metric == "mean_rank":
        return ranks.astype(float)
    if metric[:1] == "r" and metric[1:].isdigit():
        return 100.0 * (ranks <= int(metric[1:])).astype(float)
    raise ValueError(f"no per-query values of {metric!r} from ranks")


def per_query(metric: str) -> bool:
    """Whether ``metric`` is a mean over the test queries (:func:`query_values` has its per-query values)."""
    return metric in ("rsum", "mean_rank") or (metric[:1] == "r" and metric[1:].isdigit())


def paired_analytic(a: np.ndarray, b: np.ndarray, groups, strata=None, train_var: float = 0.0) -> dict[str, float]:
    """Mean over units (rows) and queries of a − b (units × queries, paired by unit and query), its 95 % CI and
    two-sided p-value, analytic:

    * several groups (splits, each with its own test set and trainings): between the groups' means, with Student's
      t on G − 1 degrees of freedom (the spread of the splits holds their queries', trainings' and data's noise);
    * one group (one split, or a k-fold run's pooled folds): the test queries' standard error of the units' mean
      difference (:func:`fraglib.metrics.retrieval.stratified_mean_se`, within folds where ``strata`` is given) plus the
      training noise of each side's mean over its U training runs, ``train_var`` × 2 / U (``train_var``: one
      training's variance, :func:`training_variance`), with the normal quantile.

    Returns diff, lo, hi, p, se (the standard error), df (the t's degrees of freedom; inf: the normal) and tau (the
    training noise's share of the standard error, √(``train_var`` × 2 / U), which a re-run would draw anew)."""
    if a.shape != b.shape:
        raise ValueError(f"paired difference needs the same units and queries: {a.shape} vs {b.shape}")
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    groups = np.asarray(groups)
    names = np.unique(groups)
    if len(names) >= 2:
        means = np.array([d[groups == g].mean() for g in names])
        diff, se, df = float(means.mean()), float(means.std(ddof=1) / np.sqrt(len(means))), float(len(means) - 1)
    else:
        diff, se_q = stratified_mean_se(d.mean(axis=0), strata)
        se, df = float(np.sqrt(se_q**2 + train_var * 2 / len(d))), math.inf
    q = float(_dist(df).ppf(1 - ALPHA / 2))
    tau = float(np.sqrt(train_var * 2 / len(d)))
    return {
        "diff": diff,
        "lo": diff - q * se,
        "hi": diff + q * se,
        "p": _p_value(diff, se, df),
        "se": se,
        "df": df,
        "tau": tau,
    }


def _dist(df: float):
    from scipy import stats

    return stats.norm() if math.isinf(df) else stats.t(df)


def _p_value(diff: float, se: float, df: float) -> float:
    """Two-sided p of a difference ``diff`` with standard error ``se`` (normal, or Student's t on ``df``)."""
    return float(2 * _dist(df).sf(abs(diff) / se)) if se > 0 else float(diff == 0)


def pair(units_a: list[str], units_b: list[str]) -> tuple[list[str], list[int], list[int]]:
    """The pairing of every difference the project prints (docs/claims.md, "How differences are paired"): the
    training runs both sides have, unit by unit (the same split or fold and the same replicate), in ``units_a``'s
    order, and their rows in each side. A side's training runs the other lacks are left out of the difference."""
    common = [u for u in units_a if u in units_b]
    return common, [units_a.index(u) for u in common], [units_b.index(u) for u in common]


def paired_value(a: np.ndarray, b: np.ndarray, groups, strata=None) -> float:
    """The difference a − b of per-query values (units × queries, paired by :func:`pair` and by query) as the rule
    computes it (:func:`paired_analytic`'s ``diff``: the mean of the splits' mean differences over several splits,
    else the mean over training runs and queries). The claims table and the result pages
    (fraglib_study.report.uncertainty.paired_differences) both print this number, so one difference prints one value."""
    return paired_analytic(a, b, groups, strata)["diff"]
