"""SCAN (Lee et al. 2018; fraglib/systems/scan.py) against (a) a slow loop written from the paper's equations,
one image, caption and query element at a time, with every attended vector formed explicitly; (b) the
authors' own functions (github kuanghuei/SCAN, ``model.py``), read at test time from a local mirror of the
repository when there is one (skipped otherwise: CI has no network); (c) autograd's gradient check."""

from __future__ import annotations

import ast
import dataclasses
import math
import os
import subprocess
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from fraglib.core.config import ConfigError
from fraglib.systems import vse
from fraglib.systems.objectives import contrastive_hinge
from fraglib.systems.scan import (
    AGG_FUNCS,
    EPS,
    RAW_FEATURE_NORMS,
    Config,
    ScanText,
    scan_scores,
    xattn_scores,
)

# SCAN's own spellings of the options both implement (l1norm / clipped_l1norm call an undefined function there;
# relu_l2norm is the paper's [.]+, not in its code)
SCAN_NORMS = ("clipped_l2norm", "l2norm", "softmax", "clipped", "no_norm")
LAMBDA = {"t2i": 9.0, "i2t": 4.0}  # SCAN's λ1 per direction (its README)
LSE = 6.0


@pytest.fixture
def f64():
    """Double precision for the comparisons (restored afterwards)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def ragged(n, m, R, L, D, seed, nv=None, ne=None):
    """Unit regions and words with real counts ``nv`` / ``ne`` (random when None), zero padding (as the
    encoders give): (V, vmask, E, emask, nv, ne)."""
    g = torch.Generator().manual_seed(seed)
    V = torch.nn.functional.normalize(torch.randn(n, R, D, generator=g, dtype=torch.float64), dim=2)
    E = torch.nn.functional.normalize(torch.randn(m, L, D, generator=g, dtype=torch.float64), dim=2)
    nv = torch.randint(1, R + 1, (n,), generator=g).tolist() if nv is None else nv
    ne = torch.randint(1, L + 1, (m,), generator=g).tolist() if ne is None else ne
    vm = torch.arange(R)[None] < torch.tensor(nv)[:, None]
    em = torch.arange(L)[None] < torch.tensor(ne)[:, None]
    return V * vm[..., None], vm, E * em[..., None], em, nv, ne


# ----------------------------------------------------------------------------- (a) the paper's equations, by loops
def dot(x, y):
    return sum(a * b for a, b in zip(x, y))


def pair_score(regions, words, direction, lam, norm, agg, lse):
    """S(I, T) of one image (list of region vectors) and one caption (list of word vectors), in Python floats.
    t2i: queries = words, context = regions; i2t: the reverse. s_qc = q · c; s̄ normalised over the queries for
    each context element (the paper's [s]+ / sqrt(Σ [s]+²), with SCAN's ε and its LeakyReLU(0.1) for
    ``clipped``); α_qc = exp(λ1 s̄_qc) / Σ_c' exp(λ1 s̄_qc'); a_q = Σ_c α_qc c; R_q = cos(q, a_q) (SCAN's
    max(‖q‖ ‖a‖, ε)); S = AVG / LSE (log Σ exp(λ2 R) / λ2) / Max / Sum of R_q over the queries."""
    queries, context = (words, regions) if direction == "t2i" else (regions, words)
    s = [[dot(q, c) for c in context] for q in queries]
    Q, C = len(queries), len(context)
    leaky = lambda x: x if x > 0 else 0.1 * x
    z = [[0.0] * C for _ in range(Q)]
    for c in range(C):
        col = [s[q][c] for q in range(Q)]
        if norm == "no_norm":
            out = col
        elif norm == "clipped":
            out = [leaky(x) for x in col]
        elif norm == "softmax":
            out = [math.exp(x) / sum(math.exp(y) for y in col) for x in col]
        else:
            x = {"l2norm": col, "clipped_l2norm": [leaky(v) for v in col], "relu_l2norm": [max(v, 0.0) for v in col]}[
                norm
            ]
            nrm = math.sqrt(sum(v * v for v in x))
            out = [v / (nrm + EPS) for v in x]
        for q in range(Q):
            z[q][c] = out[q]
    rel = []
    for q, qv in enumerate(queries):
        w = [math.exp(lam * z[q][c]) for c in range(C)]
        alpha = [x / sum(w) for x in w]
        a = [sum(alpha[c] * context[c][d] for c in range(C)) for d in range(len(qv))]
        rel.append(dot(qv, a) / max(math.sqrt(dot(qv, qv)) * math.sqrt(dot(a, a)), EPS))
    if agg == "Mean":
        return sum(rel) / len(rel)
    if agg == "Sum":
        return sum(rel)
    if agg == "Max":
        return max(rel)
    return math.log(sum(math.exp(lse * r) for r in rel)) / lse


def scores_loop(V, nv, E, ne, direction, lam, norm, agg, lse):
    n, m = len(V), len(E)
    S = torch.zeros(n, m, dtype=torch.float64)
    for k in range(n):
        regions = V[k, : nv[k]].tolist()
        for t in range(m):
            S[k, t] = pair_score(regions, E[t, : ne[t]].tolist(), direction, lam, norm, agg, lse)
    return S


def hinge_loop(S, margin, hardest):
    """SCAN's loss term by term: for each pair b, its caption-retrieval hinges [α − S_bb + S_bc]+ (image b
    against the other captions) and image-retrieval hinges [α − S_bb + S_cb]+, summed or the largest of each."""
    B = len(S)
    total = 0.0
    for b in range(B):
        cap = [max(0.0, margin - float(S[b, b]) + float(S[b, c])) for c in range(B) if c != b]
        img = [max(0.0, margin - float(S[b, b]) + float(S[c, b])) for c in range(B) if c != b]
        total += (max(cap, default=0.0) + max(img, default=0.0)) if hardest else (sum(cap) + sum(img))
    return total


@pytest.mark.parametrize("direction", ["t2i", "i2t", "both"])
@pytest.mark.parametrize("norm", RAW_FEATURE_NORMS)
def test_scores_match_the_equations(direction, norm):
    """Every direction × normalisation × pooling on ragged inputs (regions and captions of one row
    included), in one tile and in tiles of one caption, to 1e-10."""
    V, vm, E, em, nv, ne = ragged(3, 4, 4, 5, 4, seed=1, nv=[4, 1, 3], ne=[2, 5, 1, 3])
    for agg in AGG_FUNCS:
        cfg = Config(cross_attn=direction, agg_func=agg, raw_feature_norm=norm, lambda_lse=LSE)
        if direction == "both":
            want = (
                scores_loop(V, nv, E, ne, "t2i", LAMBDA["t2i"], norm, agg, LSE)
                + scores_loop(V, nv, E, ne, "i2t", LAMBDA["i2t"], norm, agg, LSE)
            ) / 2
        else:
            want = scores_loop(V, nv, E, ne, direction, LAMBDA[direction], norm, agg, LSE)
        for max_elems in (1 << 24, 1):
            got = scan_scores(V, vm, E, em, dataclasses.replace(cfg, max_elems=max_elems))
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{direction} {norm} {agg} {max_elems}")


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
@pytest.mark.parametrize("hardest", [True, False])
def test_loss_matches_the_equations(direction, hardest):
    """The summed hinge and the hardest negative (SCAN's max_violation) on SCAN scores, to 1e-10."""
    V, vm, E, em, nv, ne = ragged(4, 4, 3, 4, 5, seed=2)
    S = xattn_scores(V, vm, E, em, direction, LAMBDA[direction], "clipped_l2norm", "LogSumExp", LSE)
    want = hinge_loop(
        scores_loop(V, nv, E, ne, direction, LAMBDA[direction], "clipped_l2norm", "LogSumExp", LSE), 0.2, hardest
    )
    assert abs(float(contrastive_hinge(S, 0.2, hardest)) - want) < 1e-10


def test_padding_and_order_never_change_a_score():
    """Extra zero padding (regions and words) and a permutation of the captions leave every score unchanged."""
    V, vm, E, em, nv, ne = ragged(3, 5, 4, 5, 4, seed=3)
    pad = lambda x, m, k: (
        torch.cat([x, x.new_zeros(x.shape[0], k, x.shape[2])], 1),
        torch.cat([m, m.new_zeros(m.shape[0], k)], 1),
    )
    Vp, vmp = pad(V, vm, 2)
    Ep, emp = pad(E, em, 3)
    perm = torch.tensor([3, 0, 4, 2, 1])
    for direction in ("t2i", "i2t"):
        S = xattn_scores(V, vm, E, em, direction, 5.0)
        torch.testing.assert_close(xattn_scores(Vp, vmp, Ep, emp, direction, 5.0), S, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(
            xattn_scores(V, vm, E[perm], em[perm], direction, 5.0), S[:, perm], rtol=1e-12, atol=1e-12
        )


def test_i2t_without_normalisation_is_the_vse_attention():
    """SCAN's i2t AVG with no_norm on unit vectors is the project's region–word attention (vse.attention_scores,
    Peri's Eqs. 13–17): the same function, two implementations."""
    V, vm, E, em, _, _ = ragged(5, 6, 4, 5, 8, seed=4)
    got = xattn_scores(V, vm, E, em, "i2t", 4.0, "no_norm", "Mean")
    torch.testing.assert_close(got, vse.attention_scores(V, vm, E, em, 4.0), rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- (b) SCAN's own code
MIRROR = Path(os.environ.get("FRAGLIB_MIRROR", "/work/.mirror"))
SCAN_FUNCTIONS = (
    "l1norm",
    "l2norm",
    "func_attention",
    "cosine_similarity",
    "xattn_score_t2i",
    "xattn_score_i2t",
    "ContrastiveLoss",
)


def scan_model_source() -> tuple[str, str] | None:
    """(text of SCAN's model.py, where it was read) from ``$SCAN_MODEL_PY`` (a file) or a mirror of
    kuanghuei/SCAN under ``$FRAGLIB_MIRROR`` (default /work/.mirror; ``kuanghuei+SCAN*``: a checkout holding
    model.py or a bare git directory, read at HEAD); None when there is none."""
    env = os.environ.get("SCAN_MODEL_PY")
    if env and Path(env).is_file():
        return Path(env).read_text(), env
    roots = sorted(MIRROR.glob("kuanghuei+SCAN*")) if MIRROR.is_dir() else []
    for root in roots:
        for d in [root, *sorted(p for p in root.iterdir() if p.is_dir())] if root.is_dir() else []:
            if (d / "model.py").is_file():
                return (d / "model.py").read_text(), str(d / "model.py")
            if (d / "HEAD").is_file() and (d / "objects").is_dir():
                try:
                    r = subprocess.run(
                        ["git", "--git-dir", str(d), "show", "HEAD:model.py"],
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if r.returncode == 0 and "def xattn_score_t2i" in r.stdout:
                    return r.stdout, f"{d} HEAD:model.py"
    return None


def load_scan(text: str) -> dict:
    """SCAN's scoring functions and loss, executed from the text of its model.py: only the definitions named in
    :data:`SCAN_FUNCTIONS` (not its imports of torchvision and PyTorch 0.x modules), in a namespace with
    ``torch``, ``nn`` and ``Variable`` (a no-op wrapper in PyTorch ≥ 0.4, still importable)."""
    tree = ast.parse(text)
    keep = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in SCAN_FUNCTIONS]
    missing = set(SCAN_FUNCTIONS) - {n.name for n in keep}
    assert not missing, f"SCAN's model.py lacks {missing}"
    ns = {"torch": torch, "nn": torch.nn, "Variable": torch.autograd.Variable}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "kuanghuei/SCAN/model.py", "exec"), ns)
    return ns


@pytest.fixture(scope="module")
def scan_code():
    found = scan_model_source()
    if found is None:
        pytest.skip(
            f"SCAN's model.py not found (no $SCAN_MODEL_PY, no kuanghuei+SCAN mirror under {MIRROR}): "
            "the comparison with the authors' code needs a local copy of github.com/kuanghuei/SCAN"
        )
    return load_scan(found[0])


def scan_opt(direction, norm, agg):
    return SimpleNamespace(
        cross_attn=direction,
        raw_feature_norm=norm,
        agg_func=agg,
        lambda_softmax=LAMBDA[direction],
        lambda_lse=LSE,
    )


def scan_inputs(n=3, m=5, seed=5):
    """SCAN's inputs: images of a fixed number of regions (no mask), captions cut at their lengths (≥ 2: its
    ``cosine_similarity`` squeezes a single word's (n, 1) to (n,) and its pooling then fails); float64."""
    ne = torch.randint(2, 7, (m,), generator=torch.Generator().manual_seed(seed)).tolist()
    V, vm, E, em, _, _ = ragged(n, m, 4, 6, 5, seed, nv=[4] * n, ne=ne)
    return V, vm, E, em, ne


def call_scan(fn, *args):
    with warnings.catch_warnings():  # nn.Softmax() without dim: PyTorch's deprecation (same dim as then: 1)
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args)


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
@pytest.mark.parametrize("norm", SCAN_NORMS)
def test_scores_and_gradients_equal_scans_code(direction, norm, scan_code):
    """Every pooling: our scores equal SCAN's xattn_score_t2i / xattn_score_i2t to 1e-10, and so do the
    gradients of a random weighting of them with respect to the regions and the words."""
    V, vm, E, em, ne = scan_inputs()
    W = torch.randn(3, 5, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    fn = scan_code["xattn_score_" + direction]
    for agg in AGG_FUNCS:
        v1, e1 = V.clone().requires_grad_(), E.clone().requires_grad_()
        want = call_scan(fn, v1, e1, ne, scan_opt(direction, norm, agg))
        v2, e2 = V.clone().requires_grad_(), E.clone().requires_grad_()
        got = xattn_scores(v2, vm, e2, em, direction, LAMBDA[direction], norm, agg, LSE)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{direction} {norm} {agg}")
        gw = torch.autograd.grad((want * W).sum(), (v1, e1))
        gg = torch.autograd.grad((got * W).sum(), (v2, e2))
        for a, b in zip(gg, gw):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"gradient {direction} {norm} {agg}")


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
@pytest.mark.parametrize("max_violation", [True, False])
def test_loss_equals_scans_contrastive_loss(direction, max_violation, scan_code, monkeypatch):
    """For every normalisation and pooling, SCAN's ContrastiveLoss (margin 0.2, summed or hardest negative,
    both directions) equals contrastive_hinge on our scores, and so do its gradients, to 1e-10."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # it moves its mask to the GPU when it can
    V, vm, E, em, ne = scan_inputs(n=4, m=4, seed=7)
    for norm in SCAN_NORMS:
        for agg in AGG_FUNCS:
            opt = scan_opt(direction, norm, agg)
            v1, e1 = V.clone().requires_grad_(), E.clone().requires_grad_()
            want = call_scan(scan_code["ContrastiveLoss"](opt, margin=0.2, max_violation=max_violation), v1, e1, ne)
            v2, e2 = V.clone().requires_grad_(), E.clone().requires_grad_()
            cfg = Config(cross_attn=direction, agg_func=agg, raw_feature_norm=norm, lambda_lse=LSE)
            got = contrastive_hinge(scan_scores(v2, vm, e2, em, cfg), 0.2, max_violation)
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, msg=f"{norm} {agg}")
            for a, b in zip(torch.autograd.grad(got, (v2, e2)), torch.autograd.grad(want, (v1, e1))):
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"gradient {norm} {agg}")


# ----------------------------------------------------------------------------- (c) gradients, devices, settings
@pytest.mark.parametrize("direction", ["t2i", "i2t"])
@pytest.mark.parametrize("norm", ["clipped_l2norm", "softmax", "no_norm"])
def test_gradcheck(direction, norm, f64):
    """autograd.gradcheck of the scores (LSE pooling) and of the hardest-negative loss on them, ragged."""
    V, vm, E, em, _, _ = ragged(3, 3, 3, 3, 3, seed=8, nv=[3, 1, 2], ne=[2, 3, 1])
    V, E = V.requires_grad_(), E.requires_grad_()
    f = lambda a, b: xattn_scores(a, vm, b, em, direction, LAMBDA[direction], norm, "LogSumExp", LSE)
    assert torch.autograd.gradcheck(f, (V, E))
    assert torch.autograd.gradcheck(lambda a, b: contrastive_hinge(f(a, b), 0.2, True), (V, E))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU on this machine")
def test_gpu_equals_cpu():
    V, vm, E, em, _, _ = ragged(6, 40, 5, 7, 16, seed=9)
    cuda = torch.device("cuda")
    for direction in ("t2i", "i2t"):
        want = xattn_scores(V, vm, E, em, direction, 9.0, "clipped_l2norm", "LogSumExp", LSE)
        got = xattn_scores(
            V.to(cuda), vm.to(cuda), E.to(cuda), em.to(cuda), direction, 9.0, "clipped_l2norm", "LogSumExp", LSE
        )
        torch.testing.assert_close(got.cpu(), want, rtol=1e-10, atol=1e-10)


def test_bi_gru_averages_the_two_directions():
    """ScanText with bi_gru: the word states are the mean of a bidirectional GRU's two halves (SCAN's
    EncoderText), zero past each caption's end."""
    import numpy as np

    from fraglib.core.batches import Rows

    torch.manual_seed(0)
    enc = ScanText(10, 4, 6, 0.0, True)
    owner = torch.tensor([0, 0, 0, 1])
    rows = Rows({"rel": torch.tensor([1, 2, 3, 4])}, owner, 2, np.arange(2), host={"owner": owner})
    out, _, lengths = enc(rows)
    assert lengths.tolist() == [3, 1] and out.shape == (2, 3, 6)
    full, _ = enc.gru(enc.embed(torch.tensor([[1, 2, 3]])))
    torch.testing.assert_close(out[0], (full[0, :, :6] + full[0, :, 6:]) / 2)
    one, _ = enc.gru(enc.embed(torch.tensor([[4]])))
    torch.testing.assert_close(out[1, 0], (one[0, 0, :6] + one[0, 0, 6:]) / 2)
    assert (out[1, 1:] == 0).all()


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="systems.scan.agg_func"):
        Config(agg_func="AVG").validate()
    with pytest.raises(ConfigError, match="systems.scan.raw_feature_norm"):
        Config(raw_feature_norm="l1norm").validate()
    with pytest.raises(ConfigError, match="systems.scan.images"):
        Config(images="none").validate()
    assert Config().validate() == Config()
