"""Hubness of a retrieval score matrix: how it is measured, and four test-time corrections
(docs/evaluation.md, "Hubness").

Every function takes scores in *query x candidate* orientation, ``Q`` (n_queries, n_candidates):
image annotation ranks sentences for image queries (``Q = S``), image search ranks images for
sentence queries (``Q = S.T``), with ``S`` the (n_images, n_sentences) matrix of ``fraglib.run.evaluate``.

* **k-occurrence** ``N_k(c)``: the number of queries with candidate ``c`` in their top k, pessimistic
  on ties as the evaluator's ranks are (``c`` is in the top k of ``q`` iff fewer than k other candidates
  score >= ``Q[q, c]``). A hub is a candidate in many top-k lists; hubness is the skewness of the N_k
  distribution (Radovanović et al., JMLR 2010) and shows as many candidates never retrieved.
* **Inverted softmax** (Smith et al., ICLR 2017): ``Q'[q, c] = β Q[q, c] − log Σ_b exp(β B[b, c])``,
  a candidate's score divided by how strongly the bank queries ``b`` reach it.
* **CSLS** (Conneau et al., ICLR 2018): ``Q'[q, c] = 2 Q[q, c] − r(c)``, ``r(c)`` the mean of the K
  largest ``B[b, c]`` over bank queries. CSLS's query term ``−r(q)`` is constant along the query's row,
  so it leaves every rank unchanged and is omitted.
* **DIS**, QB-Norm's dynamic inverted softmax (Bogolin et al., CVPR 2022): the *activation set* holds the
  candidates in the top ``DIS_K`` of at least one bank query; a query whose top-1 candidate is in it gets its
  inverted-softmax row, any other query keeps its raw row.
* **NNN** (Chowdhury et al., EMNLP 2024): ``Q'[q, c] = Q[q, c] − α r_k(c)``, ``r_k`` as CSLS's ``r``; at
  α = 1/2 it is CSLS halved (the same ranks).

The bank ``B`` (n_bank, n_candidates) holds other queries' scores against the same candidates:
*inductive* — queries of the training split (what a deployed system has); *transductive* (``bank=None``)
— the other test queries: for query q the statistics leave row q out, so no query normalises itself.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from fraglib.metrics.retrieval import (
    DIRECTIONS,
    KS,
    ScoreError,
    annotation_ranks,
    check_scores,
    recall_table,
    search_ranks,
)

METHODS = ("inverted_softmax", "csls", "dis", "nnn")
PROTOCOLS = ("inductive", "transductive")
# Validation grids. β in units of 1 / sd of the finite validation scores (scale-free across systems);
# K capped at the bank's size (transductive: n_queries − 1).
BETAS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
CSLS_KS = (1, 2, 5, 10, 20, 50)
# DIS: a candidate is active if it is in the top DIS_K of a bank query (QB-Norm's default, k = 1); β from BETAS.
DIS_K = 1
# NNN: α x k; its k are among CSLS_KS (sweep computes r(c) once for both), capped like K.
NNN_ALPHAS = (0.25, 0.5, 0.75, 1.0)
NNN_KS = (1, 10, 50)


# ----------------------------------------------------------------------------- checks where a matrix enters
def whole_number(name: str, k: Any) -> int:
    """``k`` as an int when it is a whole number (``2.0`` is 2: the CSLS grid holds floats), else a ValueError
    naming ``name`` (NaN, 2.5, True, "3" and None are refused, never truncated); its range is checked where it
    is used, against the matrix."""
    if not (isinstance(k, numbers.Real) and not isinstance(k, bool) and math.isfinite(k) and k == int(k)):
        raise ValueError(f"{name}: a whole number is needed, got {k!r}")
    return int(k)


def _real(name: str, x: Any) -> float:
    """``x`` as a float when it is a real number (not a bool, a string or a pair), else a ValueError naming ``name``."""
    if not isinstance(x, numbers.Real) or isinstance(x, bool):
        raise ValueError(f"{name}: a number is needed, got {x!r}")
    return float(x)


def _scores(Q: Any, name: str) -> torch.Tensor:
    """``Q`` as a 2-D tensor of scores that can be ranked (NaN and +inf refused, naming ``name``)."""
    Q = torch.as_tensor(Q)
    if Q.dim() != 2:
        raise ScoreError(f"{name}: a (n_queries, n_candidates) matrix is needed, got shape {tuple(Q.shape)}")
    check_scores(Q, name)
    return Q


def _bank(Q: torch.Tensor, bank: Any, name: str) -> torch.Tensor | None:
    """``bank`` (None: transductive) as a tensor checked against the scores ``Q``: 2-D, at least one bank query,
    one column per candidate of ``Q`` (both shapes named otherwise), no NaN or +inf (-inf: a candidate without
    rows, as in the scores)."""
    if bank is None:
        return None
    B = torch.as_tensor(bank)
    if B.dim() != 2 or B.shape[0] == 0 or B.shape[1] != Q.shape[1]:
        raise ScoreError(
            f"{name}: the bank must be (n_bank >= 1, {Q.shape[1]}), bank queries x the scores' candidates; got "
            f"bank {tuple(B.shape)} for scores {tuple(Q.shape)}"
        )
    check_scores(B, f"{name}: bank")
    return B


# ----------------------------------------------------------------------------- measuring
def k_occurrence(Q: torch.Tensor | np.ndarray, k: int = 10, chunk: int = 1024) -> np.ndarray:
    """(n_candidates,) int64 ``N_k``: for each candidate, the queries having it in their top ``k``."""
    Q = _scores(Q, "k-occurrence")
    k = whole_number("hubness k (evaluation.hub_k)", k)
    n_q, n_c = Q.shape
    if not 1 <= k < n_c:  # with k >= n_c every candidate is in every top k: N_k constant, skewness 0
        raise ValueError(f"hubness k = {k}: needs 1 <= k < {n_c}, the number of candidates (evaluation.hub_k sets k)")
    counts = torch.zeros(n_c, dtype=torch.long)
    for a in range(0, n_q, chunk):
        blk = Q[a : a + chunk]
        bound = blk.topk(k + 1, dim=1).values[:, -1:]  # the (k+1)-th largest value bounds the top k strictly
        inside = blk > bound
        counts += (inside & torch.isfinite(blk)).sum(dim=0).cpu()
    return counts.numpy()


def skewness(x: np.ndarray) -> float:
    """Population skewness ``E[(x − μ)³] / σ³`` (0 for a constant ``x``)."""
    x = np.asarray(x, np.float64)
    sd = x.std()
    return float(((x - x.mean()) ** 3).mean() / sd**3) if sd > 0 else 0.0


def hubness_stats(counts: np.ndarray, k: int) -> dict[str, float]:
    """Summary of a k-occurrence vector: ``skewness``; ``never`` (% of candidates in no top-k list);
    ``max`` N_k; ``top5_share`` (% of all top-k slots held by the 5 % most-retrieved candidates);
    ``mean`` N_k (= k x queries / candidates when no query has fewer than k finite candidates)."""
    c = np.sort(np.asarray(counts))[::-1]
    top = max(1, int(np.ceil(0.05 * len(c))))
    return {
        "k": k,
        "skewness": skewness(c),
        "never": float(100.0 * np.mean(c == 0)),
        "max": int(c[0]),
        "top5_share": float(100.0 * c[:top].sum() / max(c.sum(), 1)),
        "mean": float(c.mean()),
    }


# ----------------------------------------------------------------------------- corrections
def inverted_softmax(Q: torch.Tensor, beta: float, bank: torch.Tensor | None = None) -> torch.Tensor:
    """(n_q, n_c) float64 ``β Q − log Σ_b exp(β B[b, c])``; ``bank`` (n_b, n_c), or None: the other
    queries of ``Q`` (row q left out of its own normaliser)."""
    beta = _real("inverted softmax β", beta)
    if not (math.isfinite(beta) and beta > 0):  # NaN or inf would make every score NaN
        raise ValueError(f"inverted softmax: the inverse temperature β must be finite and > 0, got {beta}")
    Q = _scores(Q, "inverted softmax")
    bank = _bank(Q, bank, "inverted softmax")
    Q = Q.double()
    X = beta * Q
    if bank is not None:
        norm = torch.logsumexp(beta * bank.double(), dim=0)[None, :]
    else:
        if Q.shape[0] < 2:
            raise ValueError("transductive inverted softmax needs at least 2 queries")
        m1, i1 = X.max(dim=0)  # (n_c,) the largest term and its row
        T1 = torch.exp(X - m1).nansum(dim=0)  # >= 1 where m1 is finite
        rest = T1[None, :] - torch.exp(X - m1)  # row q left out; >= 1 unless q is the argmax
        norm = m1 + torch.log(rest)
        own = torch.zeros_like(X, dtype=torch.bool)
        own[i1, torch.arange(X.shape[1])] = True
        X2 = X.masked_fill(own, float("-inf"))  # the argmax row's normaliser: the others
        m2 = X2.max(dim=0).values
        norm_top = m2 + torch.log(torch.exp(X2 - m2).nansum(dim=0))
        norm = torch.where(own, norm_top[None, :].expand_as(norm), norm)
    return torch.where(torch.isfinite(Q), X - norm, torch.full_like(X, float("-inf")))


def _bank_top_mean(Q: torch.Tensor, k: int, bank: torch.Tensor | None, name: str) -> torch.Tensor:
    """(1 or n_q, n_c) float64 ``r(c)``: the mean of the ``k`` largest bank scores of candidate c; ``bank`` None:
    the other rows of ``Q`` (row q left out of its own ``r``). ``name`` names the correction in errors."""
    k = whole_number(f"{name} k", k)
    if bank is not None:
        B = _bank(Q, bank, name).double()
        if not 1 <= k <= B.shape[0]:
            raise ValueError(f"{name} k={k}: needs 1 <= k <= {B.shape[0]} bank queries")
        return B.topk(k, dim=0).values.mean(dim=0)[None, :]
    if not 1 <= k <= Q.shape[0] - 1:
        raise ValueError(f"transductive {name} k={k}: needs 1 <= k <= {Q.shape[0] - 1} other queries")
    top = Q.topk(k + 1, dim=0).values  # (k+1, n_c) descending
    with_q = (top.sum(dim=0)[None, :] - Q) / k  # q among the k largest: the k+1 minus q
    without_q = top[:k].sum(dim=0)[None, :] / k
    return torch.where(Q >= top[k - 1][None, :], with_q, without_q)


def _keep_empty(Q: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """``X`` with −inf wherever ``Q`` is not finite (a candidate without rows stays last)."""
    return torch.where(torch.isfinite(Q), X, torch.full_like(X, float("-inf")))


def csls(Q: torch.Tensor, k: int, bank: torch.Tensor | None = None) -> torch.Tensor:
    """(n_q, n_c) float64 ``2 Q − r(c)``, ``r(c)`` the mean of the ``k`` largest bank scores of candidate c;
    ``bank`` None: the other queries of ``Q`` (row q left out of its own ``r``)."""
    Q = _scores(Q, "CSLS").double()
    return _keep_empty(Q, 2 * Q - _bank_top_mean(Q, k, bank, "CSLS"))


def nnn(Q: torch.Tensor, alpha: float, k: int, bank: torch.Tensor | None = None) -> torch.Tensor:
    """(n_q, n_c) float64 ``Q − α r(c)``, ``r(c)`` as in :func:`csls` (``bank`` None: row q left out)."""
    alpha = _real("NNN α", alpha)
    if not (math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"NNN: the weight α must be finite and >= 0, got {alpha}")
    Q = _scores(Q, "NNN").double()
    return _keep_empty(Q, Q - alpha * _bank_top_mean(Q, k, bank, "NNN"))


def _in_top(X: torch.Tensor, k: int) -> torch.Tensor:
    """(n, n_c) bool: c is in row n's top ``k``, ties included (finite, and fewer than ``k`` candidates score
    strictly higher)."""
    bound = X.topk(k, dim=1).values[:, -1:]
    return (X >= bound) & torch.isfinite(X)


def activated(Q: torch.Tensor, k: int = DIS_K, bank: torch.Tensor | None = None, chunk: int = 1024) -> torch.Tensor:
    """(n_q,) bool: DIS normalises query q — one of its top-1 candidates (ties included) is in the top ``k`` of a
    bank query; ``bank`` None: of another row of ``Q`` (q's own top k activates nothing for q)."""
    Q = _scores(Q, "DIS")
    n_c = Q.shape[1]
    k = whole_number("DIS k", k)
    if not 1 <= k <= n_c:
        raise ValueError(f"DIS k={k}: needs 1 <= k <= {n_c} candidates")
    B = Q if bank is None else _bank(Q, bank, "DIS")
    votes = torch.zeros(n_c, dtype=torch.long)
    for a in range(0, B.shape[0], chunk):
        votes += _in_top(B[a : a + chunk], k).sum(dim=0).cpu()
    # a top-1 candidate of q is in q's own top k, so transductively it needs a second vote
    need = 1 if bank is not None else 2
    return torch.cat(
        [(_in_top(Q[a : a + chunk], 1).cpu() & (votes >= need)).any(dim=1) for a in range(0, Q.shape[0], chunk)]
    )


def _dis_rows(Q: torch.Tensor, inverted: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    return torch.where(active[:, None].to(inverted.device), inverted, torch.as_tensor(Q).double())


def dis(Q: torch.Tensor, beta: float, bank: torch.Tensor | None = None, k: int = DIS_K) -> torch.Tensor:
    """(n_q, n_c) float64: QB-Norm's dynamic inverted softmax — :func:`inverted_softmax`'s row for the queries
    :func:`activated` selects, the raw score row for the others; ``bank`` None: the other queries of ``Q``, for
    the activation set and the normaliser alike."""
    Q = _scores(Q, "DIS")
    if bank is None and Q.shape[0] < 2:
        raise ValueError("transductive DIS needs at least 2 queries")
    _bank(Q, bank, "DIS")
    return _dis_rows(Q, inverted_softmax(Q, beta, bank), activated(Q, k, bank))


Param = float | tuple[float, int]


def correct(Q: torch.Tensor, method: str, param: Param, bank: torch.Tensor | None = None) -> torch.Tensor:
    """``Q`` corrected by ``method`` (``inverted_softmax`` and ``dis``: ``param`` = β in score units; ``csls``: K;
    ``nnn``: (α, k)). A parameter of the wrong kind (K = NaN or 2.5, β = "1", NNN's without its k) is a ValueError
    naming the method; the matrices are checked by each correction (NaN, +inf, an empty bank or one of another
    width than ``Q``)."""
    if method in ("inverted_softmax", "dis"):
        beta = _real(f"{method} β", param)
        return inverted_softmax(Q, beta, bank) if method == "inverted_softmax" else dis(Q, beta, bank)
    if method == "csls":
        return csls(Q, whole_number("csls K", param), bank)
    if method == "nnn":
        if not (isinstance(param, (tuple, list)) and len(param) == 2):
            raise ValueError(f"nnn: the parameter is a pair (α, k), got {param!r}")
        return nnn(Q, _real("nnn α", param[0]), whole_number("nnn k", param[1]), bank)
    raise ValueError(f"hubness correction {method!r}: expected one of {', '.join(METHODS)}")


def grid(method: str, scale: float, n_bank: int) -> list[Param]:
    """The validation grid of ``method``: β = BETAS / ``scale`` (the sd of the validation scores; inverted
    softmax and DIS), the K of CSLS_KS that fit in ``n_bank`` bank queries, or NNN's (α, k) pairs of NNN_ALPHAS
    x the NNN_KS that fit (k = 1 if none does)."""
    if method in ("inverted_softmax", "dis"):
        return [b / scale for b in BETAS]
    if method == "nnn":
        return [(a, k) for k in [k for k in NNN_KS if k <= n_bank] or [1] for a in NNN_ALPHAS]
    return [float(k) for k in CSLS_KS if k <= n_bank] or [1.0]


def sweep(
    Q: torch.Tensor, bank: torch.Tensor | None, grids: dict[str, list[Param]]
) -> Iterator[tuple[str, Param, torch.Tensor]]:
    """(method, parameter, ``correct(Q, method, parameter, bank)``) over every method's grid, each matrix
    computed once: DIS reuses the inverted softmax of the same β, NNN the ``r(c)`` of CSLS at the same k."""
    active = activated(Q, DIS_K, bank) if grids.get("dis") else None
    for beta in dict.fromkeys([*grids.get("inverted_softmax", []), *grids.get("dis", [])]):
        X = inverted_softmax(Q, beta, bank)
        if beta in grids.get("inverted_softmax", []):
            yield "inverted_softmax", beta, X
        if beta in grids.get("dis", []):
            yield "dis", beta, _dis_rows(Q, X, active)
    Qd = torch.as_tensor(Q).double()
    pairs = grids.get("nnn", [])
    for k in dict.fromkeys([*(int(x) for x in grids.get("csls", [])), *(k for _, k in pairs)]):
        r = _bank_top_mean(Qd, k, bank, "CSLS" if k in grids.get("csls", []) else "NNN")
        if float(k) in grids.get("csls", []):
            yield "csls", float(k), _keep_empty(Qd, 2 * Qd - r)
        for alpha, kk in pairs:
            if kk == k:
                yield "nnn", (alpha, k), _keep_empty(Qd, Qd - alpha * r)


# ----------------------------------------------------------------------------- one evaluation


def _orient(S: torch.Tensor, d: str) -> torch.Tensor:
    return S if d == "annotation" else S.T


def _ranks(Qc: torch.Tensor, d: str, sentence_image: np.ndarray, what: str) -> np.ndarray:
    if d == "annotation":
        return annotation_ranks(Qc, sentence_image, what=what)
    return search_ranks(Qc.T, sentence_image, what=what)


def _rsum(ranks: np.ndarray) -> float:
    """R@1 + R@5 + R@10 of one direction's ranks (the validation criterion)."""
    t = recall_table(ranks)
    return float(sum(t[f"r{k}"] for k in KS))


# Finite scores beyond 2**±HUGE overflow (or underflow) float64 in the statistics and corrections (the sd's
# squares; CSLS's 2Q): such matrices are scaled by a power of two first, which changes no rank and no bit.
HUGE = 500


def _exponent(mats: list[torch.Tensor], chunk: int = 1024) -> int:
    """0, or the e of ``2**e`` by which to divide ``mats`` when their largest finite magnitude ``m`` lies
    outside [2**-HUGE, 2**HUGE] (float64 scores of another tool; float16/32 never do): ``m / 2**e`` in [0.5, 1)."""
    m = 0.0
    for X in mats:
        if X.dtype != torch.float64:  # float32's range lies inside the bounds
            continue
        for a in range(0, X.shape[0], chunk):
            blk = X[a : a + chunk]
            m = max(m, float(blk.abs().masked_fill(~torch.isfinite(blk), 0).amax()) if blk.numel() else 0.0)
    if m == 0.0 or 2.0**-HUGE <= m <= 2.0**HUGE:
        return 0
    return math.frexp(m)[1]


def _scaled(X: torch.Tensor | None, e: int) -> torch.Tensor | None:
    """``X / 2**e`` in float64, exactly (two steps: 2**±1074 is not a float64)."""
    if X is None or e == 0:
        return X
    h = -e // 2
    return X.double() * 2.0**h * 2.0 ** (-e - h)


def scale_of(S: torch.Tensor) -> float:
    """sd of the finite entries of ``S`` (1 if there are none or they are constant)."""
    v = torch.as_tensor(S)[torch.isfinite(torch.as_tensor(S))].double()
    sd = float(v.std()) if v.numel() > 1 else 0.0
    return sd if sd > 0 else 1.0


def evaluate(
    test: torch.Tensor,
    test_image: np.ndarray,
    val: torch.Tensor | None,
    val_image: np.ndarray | None,
    banks: dict[str, dict[str, torch.Tensor]] | None,
    k: int = 10,
    protocols: tuple[str, ...] = PROTOCOLS,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Hubness of the test matrix and every correction's test metrics, parameters chosen on validation.

    ``test`` / ``val``: (n_images, n_sentences) scores, ``*_image`` their sentence -> image index;
    ``banks[split][direction]``: the inductive bank, (n_bank, n_candidates) in query x candidate
    orientation (annotation: training images x the split's sentences; search: training sentences x the
    split's images). Returns (summary for ``metrics.json``, per-query lists for ``ranks.json``): k-occurrence
    stats per direction, and per ``<method>_<protocol>`` and direction the chosen parameter, its validation
    R-sum (that direction's R@1+5+10), the uncorrected validation R-sum, and the test metrics/ranks; NNN's
    two parameters as ``param`` (α) and ``param_k`` (k); DIS also ``active``, the % of test queries it
    normalised. ``protocols``: the corrections' protocols to run (``banks`` is needed for the inductive one
    only); ``val`` None: the k-occurrence statistics alone (no parameter is chosen without validation scores).
    Every matrix is checked first (NaN and +inf refused; each bank against its scores' width, named
    ``banks['<split>']['<direction>']``); float64 scores beyond 2**±HUGE are corrected at a power of two's scale
    (the same ranks, β and ``beta_unit`` reported in the scores' own units)."""
    test = _scores(test, "test scores")
    summary: dict[str, Any] = {"k": k}
    lists: dict[str, Any] = {"occurrence": {}, "corrected": {}}
    for d in DIRECTIONS:
        occ = k_occurrence(_orient(test, d), k)
        summary[d] = hubness_stats(occ, k)
        lists["occurrence"][d] = occ.tolist()
    if val is None:
        return summary, lists
    val = _scores(val, "validation scores")
    if "inductive" in protocols:
        banks = _checked_banks(banks, {"val": val, "test": test})
    e = _exponent([val, test, *(b for s in (banks or {}).values() for b in s.values())])
    if e:  # scores a float64 holds, beyond what its statistics hold: the same ranks at a power of two's scale
        val, test = _scaled(val, e), _scaled(test, e)
        banks = {s: {d: _scaled(b, e) for d, b in v.items()} for s, v in banks.items()} if banks else banks
    scale = scale_of(val)
    summary["beta_unit"] = math.ldexp(scale, e)
    out: dict[str, dict[str, Any]] = {f"{m}_{p}": {} for m in METHODS for p in protocols}
    for protocol in protocols:
        for d in DIRECTIONS:
            qv, qt = _orient(val, d), _orient(test, d)
            bv = banks["val"][d] if protocol == "inductive" else None
            bt = banks["test"][d] if protocol == "inductive" else None
            n_bank = min(
                bv.shape[0] if bv is not None else qv.shape[0] - 1,
                bt.shape[0] if bt is not None else qt.shape[0] - 1,
            )
            plain = _rsum(_ranks(qv, d, val_image, "validation scores"))
            tried: dict[str, list[tuple[Param, float]]] = {m: [] for m in METHODS}
            for method, p, Qc in sweep(qv, bv, {m: grid(m, scale, n_bank) for m in METHODS}):
                what = f"{method}_{protocol} ({d}): validation scores at parameter {_show(p)}"
                tried[method].append((p, _rsum(_ranks(Qc, d, val_image, what))))
            for method in METHODS:
                key = f"{method}_{protocol}"
                param, val_rsum = max(tried[method], key=lambda t: t[1])  # first of the best on ties
                what = f"{key} ({d}): test scores at parameter {_show(param)}"
                r = _ranks(correct(qt, method, param, bt), d, test_image, what)
                chosen = {"param": param[0], "param_k": param[1]} if method == "nnn" else {"param": param}
                if e and method in ("inverted_softmax", "dis"):  # β in the scores' own units
                    chosen["param"] = math.ldexp(param, -e)
                extra = {"active": float(100.0 * activated(qt, DIS_K, bt).double().mean())} if method == "dis" else {}
                out[key][d] = {
                    **recall_table(r),
                    **chosen,
                    **extra,
                    "val_rsum": val_rsum,
                    "val_rsum_uncorrected": plain,
                }
                lists["corrected"].setdefault(key, {})[d] = r.tolist()
    summary.update(out)
    return summary, lists


def _checked_banks(banks: Any, scores: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """The inductive banks, each checked against its split's scores (:func:`_bank`: NaN, +inf, empty, another
    width), named ``banks['<split>']['<direction>']`` in an error."""
    if not isinstance(banks, dict) or any(not isinstance(banks.get(s), dict) for s in scores):
        raise ValueError("hubness: the inductive protocol needs banks {'val': {...}, 'test': {...}}")
    out = {}
    for s, S in scores.items():
        missing = [d for d in DIRECTIONS if d not in banks[s]]
        if missing:
            raise ValueError(f"hubness: banks[{s!r}] lacks {', '.join(missing)}")
        out[s] = {d: _bank(_orient(S, d), banks[s][d], f"banks[{s!r}][{d!r}]") for d in DIRECTIONS}
    return out


def _show(p: Param) -> str:
    return f"α={p[0]:g}, k={p[1]}" if isinstance(p, tuple) else f"{p:g}"


def average(trees: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of the numeric leaves of same-shaped dicts (a study's units); other leaves from the first. A key
    missing from some unit (one written before a correction existed) is left out."""
    first = trees[0]
    out: dict[str, Any] = {}
    for key, v in first.items():
        if not all(key in t for t in trees):
            continue
        if isinstance(v, dict):
            out[key] = average([t[key] for t in trees])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(np.mean([t[key] for t in trees]))
        else:
            out[key] = v
    return out
