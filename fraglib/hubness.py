"""Hubness of a retrieval score matrix: how it is measured, and two test-time corrections
(docs/evaluation.md, "Hubness").

Every function takes scores in *query x candidate* orientation, ``Q`` (n_queries, n_candidates):
image annotation ranks sentences for image queries (``Q = S``), image search ranks images for
sentence queries (``Q = S.T``), with ``S`` the (n_images, n_sentences) matrix of ``fraglib.evaluate``.

* **k-occurrence** ``N_k(c)``: the number of queries with candidate ``c`` in their top k, pessimistic
  on ties as the evaluator's ranks are (``c`` is in the top k of ``q`` iff fewer than k other candidates
  score >= ``Q[q, c]``). A hub is a candidate in many top-k lists; hubness is the skewness of the N_k
  distribution (Radovanović et al., JMLR 2010) and shows as many candidates never retrieved.
* **Inverted softmax** (Smith et al., ICLR 2017): ``Q'[q, c] = β Q[q, c] − log Σ_b exp(β B[b, c])``,
  a candidate's score divided by how strongly the bank queries ``b`` reach it.
* **CSLS** (Conneau et al., ICLR 2018): ``Q'[q, c] = 2 Q[q, c] − r(c)``, ``r(c)`` the mean of the K
  largest ``B[b, c]`` over bank queries. CSLS's query term ``−r(q)`` is constant along the query's row,
  so it leaves every rank unchanged and is omitted.

The bank ``B`` (n_bank, n_candidates) holds other queries' scores against the same candidates:
*inductive* — queries of the training split (what a deployed system has); *transductive* (``bank=None``)
— the other test queries: for query q the statistics leave row q out, so no query normalises itself.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from fraglib.metrics import DIRECTIONS, KS, annotation_ranks, recall_table, search_ranks

METHODS = ("inverted_softmax", "csls")
PROTOCOLS = ("inductive", "transductive")
# Validation grids. β in units of 1 / sd of the finite validation scores (scale-free across systems);
# K capped at the bank's size (transductive: n_queries − 1).
BETAS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)
CSLS_KS = (1, 2, 5, 10, 20, 50)


# ----------------------------------------------------------------------------- measuring
def k_occurrence(Q: torch.Tensor | np.ndarray, k: int = 10, chunk: int = 1024) -> np.ndarray:
    """(n_candidates,) int64 ``N_k``: for each candidate, the queries having it in their top ``k``."""
    Q = torch.as_tensor(Q)
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
    if not (math.isfinite(beta) and beta > 0):  # NaN or inf would make every score NaN
        raise ValueError(f"inverted softmax: the inverse temperature β must be finite and > 0, got {beta}")
    Q = torch.as_tensor(Q).double()
    X = beta * Q
    if bank is not None:
        norm = torch.logsumexp(beta * torch.as_tensor(bank).double(), dim=0)[None, :]
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


def csls(Q: torch.Tensor, k: int, bank: torch.Tensor | None = None) -> torch.Tensor:
    """(n_q, n_c) float64 ``2 Q − r(c)``, ``r(c)`` the mean of the ``k`` largest bank scores of candidate c;
    ``bank`` None: the other queries of ``Q`` (row q left out of its own ``r``)."""
    Q = torch.as_tensor(Q).double()
    if bank is not None:
        B = torch.as_tensor(bank).double()
        if not 1 <= k <= B.shape[0]:
            raise ValueError(f"CSLS k={k}: needs 1 <= k <= {B.shape[0]} bank queries")
        r = B.topk(k, dim=0).values.mean(dim=0)[None, :]
    else:
        if not 1 <= k <= Q.shape[0] - 1:
            raise ValueError(f"transductive CSLS k={k}: needs 1 <= k <= {Q.shape[0] - 1} other queries")
        top = Q.topk(k + 1, dim=0).values  # (k+1, n_c) descending
        with_q = (top.sum(dim=0)[None, :] - Q) / k  # q among the k largest: the k+1 minus q
        without_q = top[:k].sum(dim=0)[None, :] / k
        r = torch.where(Q >= top[k - 1][None, :], with_q, without_q)
    return torch.where(torch.isfinite(Q), 2 * Q - r, torch.full_like(Q, float("-inf")))


def correct(Q: torch.Tensor, method: str, param: float, bank: torch.Tensor | None = None) -> torch.Tensor:
    """``Q`` corrected by ``method`` (``inverted_softmax``: ``param`` = β in score units; ``csls``: K)."""
    if method == "inverted_softmax":
        return inverted_softmax(Q, float(param), bank)
    if method == "csls":
        return csls(Q, int(param), bank)
    raise ValueError(f"hubness correction {method!r}: expected one of {', '.join(METHODS)}")


def grid(method: str, scale: float, n_bank: int) -> list[float]:
    """The validation grid of ``method``: β = BETAS / ``scale`` (the sd of the validation scores), or
    the K of CSLS_KS that fit in ``n_bank`` bank queries."""
    if method == "inverted_softmax":
        return [b / scale for b in BETAS]
    return [float(k) for k in CSLS_KS if k <= n_bank] or [1.0]


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
    R-sum (that direction's R@1+5+10), the uncorrected validation R-sum, and the test metrics/ranks.
    ``protocols``: the corrections' protocols to run (``banks`` is needed for the inductive one only); ``val``
    None: the k-occurrence statistics alone (no parameter can be chosen without validation scores)."""
    summary: dict[str, Any] = {"k": k}
    lists: dict[str, Any] = {"occurrence": {}, "corrected": {}}
    for d in DIRECTIONS:
        occ = k_occurrence(_orient(test, d), k)
        summary[d] = hubness_stats(occ, k)
        lists["occurrence"][d] = occ.tolist()
    if val is None:
        return summary, lists
    scale = summary["beta_unit"] = scale_of(val)
    for method in METHODS:
        for protocol in protocols:
            key = f"{method}_{protocol}"
            out: dict[str, Any] = {}
            for d in DIRECTIONS:
                qv, qt = _orient(val, d), _orient(test, d)
                bv = banks["val"][d] if protocol == "inductive" else None
                bt = banks["test"][d] if protocol == "inductive" else None
                n_bank = min(
                    bv.shape[0] if bv is not None else qv.shape[0] - 1,
                    bt.shape[0] if bt is not None else qt.shape[0] - 1,
                )
                what = f"{key} ({d})"
                tried = [
                    (
                        p,
                        _rsum(
                            _ranks(
                                correct(qv, method, p, bv),
                                d,
                                val_image,
                                f"{what}: validation scores at parameter {p:g}",
                            )
                        ),
                    )
                    for p in grid(method, scale, n_bank)
                ]
                param, val_rsum = max(tried, key=lambda t: t[1])  # first of the best on ties
                r = _ranks(correct(qt, method, param, bt), d, test_image, f"{what}: test scores at parameter {param:g}")
                out[d] = {
                    **recall_table(r),
                    "param": param,
                    "val_rsum": val_rsum,
                    "val_rsum_uncorrected": _rsum(_ranks(qv, d, val_image, "validation scores")),
                }
                lists["corrected"].setdefault(key, {})[d] = r.tolist()
            summary[key] = out
    return summary, lists


def average(trees: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of the numeric leaves of same-shaped dicts (a study's units); other leaves from the first."""
    first = trees[0]
    out: dict[str, Any] = {}
    for key, v in first.items():
        if isinstance(v, dict):
            out[key] = average([t[key] for t in trees])
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(np.mean([t[key] for t in trees]))
        else:
            out[key] = v
    return out
