"""VSE∞'s Generalized Pooling Operator (fraglib/systems/gpo.py) against a loop written from its equations, against
the authors' module (github.com/woodfrog/vse_infty, read at test time from a local mirror of their repository
where one exists; never copied here), by gradcheck, and as the pooling of the ``vse`` system (one epoch on the
tiny benchmark, padding invariance, the configuration's refusals)."""

import glob
import json
import math
import os
import subprocess
import types

import numpy as np
import pytest
import torch

from fraglib.core.config import ConfigError
from fraglib.run.inputs import DataPaths, load_splits, make_batches
from fraglib.systems.gpo import GPO, positional_encoding
from fraglib.systems.vse import VseSystem

from conftest import tiny_eval, tiny_params

CPU = torch.device("cpu")


def token_rows(captions):
    """Rows of the tokens view holding ``captions`` (lists of vocabulary ids), as tests/test_vse.py builds them."""
    from fraglib.core.batches import Rows

    rel = torch.tensor([t for c in captions for t in c], dtype=torch.long)
    owner = torch.tensor([n for n, c in enumerate(captions) for _ in c], dtype=torch.long)
    return Rows({"rel": rel, "w1": rel.clone()}, owner, len(captions), np.arange(len(captions)))


def random_gpo(d_pe=6, d_hidden=5, seed=0, dtype=torch.float64) -> GPO:
    """A GPO with N(0, 0.5) parameters (larger than the default initialisation, so the weights are far from
    uniform and every parameter matters)."""
    torch.manual_seed(seed)
    g = GPO(d_pe, d_hidden).to(dtype)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in g.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=dtype) * 0.5)
    return g


def ragged(lengths, K, D, seed, dtype=torch.float64):
    """(B, K, D) features with garbage past each item's length (huge and tiny values): masking must ignore it."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), K, D, generator=gen, dtype=dtype)
    for b, n in enumerate(lengths):
        x[b, n:] = torch.where(torch.rand(K - n, D, generator=gen) < 0.5, 1e6, -1e6).to(dtype)
    return x, torch.tensor(lengths)


# ----------------------------------------------------------------------------- (a) the equations, by loops
def gru_direction(params, suffix, xs):
    """PyTorch's GRU equations, one step at a time over ``xs`` (a list of input vectors), gates (r, z, n):
    r = σ(W_ir x + b_ir + W_hr h + b_hr), z = σ(W_iz x + b_iz + W_hz h + b_hz),
    n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 − z) n + z h."""
    W_i, W_h = params[f"weight_ih_l0{suffix}"], params[f"weight_hh_l0{suffix}"]
    b_i, b_h = params[f"bias_ih_l0{suffix}"], params[f"bias_hh_l0{suffix}"]
    H = W_h.shape[1]
    h, out = torch.zeros(H, dtype=W_h.dtype), []
    for x in xs:
        gi, gh = W_i @ x + b_i, W_h @ h + b_h
        r = torch.sigmoid(gi[:H] + gh[:H])
        z = torch.sigmoid(gi[H : 2 * H] + gh[H : 2 * H])
        n = torch.tanh(gi[2 * H :] + r * gh[2 * H :])
        h = (1 - z) * n + z * h
        out.append(h)
    return out


def weights_loop(g: GPO, K: int) -> list[float]:
    """θ_1 … θ_K of a set of K: p_k = PE(k − 1) with PE(k)_{2i} = sin(k / 10000^{2i/d}), PE(k)_{2i+1} = cos(·);
    the forward GRU over p_1 … p_K and the backward GRU over p_K … p_1, averaged; w · h_k / τ; softmax over k."""
    d = g.d_pe
    pe = [
        torch.tensor(
            [f(k / 10000 ** (2 * (j // 2) / d)) for j, f in zip(range(d), [math.sin, math.cos] * d)],
            dtype=torch.float64,
        )
        for k in range(K)
    ]
    params = {k: v.detach() for k, v in g.gru.named_parameters()}
    fwd = gru_direction(params, "", pe)
    bwd = gru_direction(params, "_reverse", pe[::-1])[::-1]
    w = g.linear.weight[0].detach()
    s = [float(w @ ((fwd[k] + bwd[k]) / 2)) / g.temperature for k in range(K)]
    e = [math.exp(v - max(s)) for v in s]
    return [v / sum(e) for v in e]


def gpo_loop(g: GPO, x: torch.Tensor, lengths) -> tuple[torch.Tensor, list[list[float]]]:
    """Each item b and dimension d: v_d = Σ_k θ_k · (k-th largest of x[b, :K_b, d])."""
    B, _, D = x.shape
    out, thetas = torch.zeros(B, D, dtype=torch.float64), []
    for b in range(B):
        K = int(lengths[b])
        theta = weights_loop(g, K)
        thetas.append(theta)
        for d in range(D):
            vals = sorted((float(x[b, k, d]) for k in range(K)), reverse=True)
            out[b, d] = sum(t * v for t, v in zip(theta, vals))
    return out, thetas


@pytest.mark.parametrize("lengths", [[5, 2, 1, 5, 3, 2], [4], [1, 1], [7, 3]])
def test_gpo_equals_the_equations(lengths):
    """Pooled vectors and weights of a ragged batch (garbage past each length) equal the loops, float64, 1e-12;
    the weights of a length do not depend on the batch around it."""
    g = random_gpo(seed=1)
    K = max(lengths) + 2  # extra padding rows beyond the longest item
    x, n = ragged(lengths, K, 4, seed=2)
    with torch.no_grad():
        got, theta = g(x, n)
    want, thetas = gpo_loop(g, x, n)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert theta.shape == (len(lengths), max(lengths))
    for b, t in enumerate(thetas):
        torch.testing.assert_close(theta[b, : len(t)], torch.tensor(t, dtype=torch.float64), rtol=1e-12, atol=1e-12)
        assert not theta[b, len(t) :].any()
    if max(lengths) > 1:  # θ is far from uniform (else the test would not see the sort order)
        assert (
            max(float(theta[b, : lengths[b]].max() - theta[b, : lengths[b]].min()) for b in range(len(lengths))) > 0.05
        )
    torch.testing.assert_close(theta.sum(1), torch.ones(len(lengths), dtype=torch.float64))


def test_gpo_special_cases_and_refusals():
    """One row pools to itself; rows in any order pool alike (a set function); the encoding table is the
    Transformer's; lengths 0, beyond the rows given, or an odd d_pe are refused."""
    g = random_gpo(seed=3)
    x, n = ragged([1, 4], 4, 3, seed=4)
    torch.testing.assert_close(g(x, n)[0][0], x[0, 0])
    perm = torch.tensor([2, 0, 3, 1])
    torch.testing.assert_close(g(x[:, perm][1:], n[1:])[0], g(x[1:], n[1:])[0])
    pe = positional_encoding(3, 4)
    torch.testing.assert_close(pe[2], torch.tensor([math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)]).double())
    with pytest.raises(ValueError, match="at least one row"):
        g(x, torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="exceeds"):
        g(x, torch.tensor([5, 4]))
    with pytest.raises(ValueError, match="even"):
        GPO(5, 4)


# ----------------------------------------------------------------------------- (b) the authors' module
MIRROR_ENV = "VSE_INFTY_GIT_DIR"  # a git directory of github.com/woodfrog/vse_infty (else /work/.mirror is searched)
AUTHORS_FILE = "lib/modules/aggr/gpo.py"


def authors_source() -> str:
    """The text of the authors' GPO module from a local git mirror of their repository, or skip with the reason."""
    dirs = [os.environ[MIRROR_ENV]] if os.environ.get(MIRROR_ENV) else []
    for d in sorted(glob.glob("/work/.mirror/woodfrog+vse_infty*")):
        dirs += [os.path.join(d, "repo"), d]
    dirs = [d for d in dirs if os.path.isdir(d)]
    if not dirs:
        pytest.skip(
            f"no local mirror of github.com/woodfrog/vse_infty (set {MIRROR_ENV} to a git dir of it, or fetch it "
            "under /work/.mirror): the authors' GPO is read from their repository at test time, never vendored"
        )
    errors = []
    for d in dirs:
        try:
            out = subprocess.run(
                ["git", f"--git-dir={d}", "show", f"HEAD:{AUTHORS_FILE}"], capture_output=True, text=True, timeout=60
            )
        except OSError as exc:
            pytest.skip(f"git is not available ({exc}): cannot read the authors' {AUTHORS_FILE}")
        if out.returncode == 0:
            return out.stdout
        errors.append(f"{d}: {out.stderr.strip()[:200]}")
    pytest.skip(f"the vse_infty mirror holds no {AUTHORS_FILE}: {'; '.join(errors)}")


@pytest.fixture(scope="module")
def authors():
    """The authors' gpo.py executed as a module (it imports only torch and math)."""
    mod = types.ModuleType("vse_infty_gpo")
    exec(compile(authors_source(), f"vse_infty/{AUTHORS_FILE}", "exec"), mod.__dict__)
    return mod


def both(authors, dtype, d_pe=32, d_hidden=32, seed=5):
    """Our GPO with random parameters and the authors' with the same parameters (their names are ours)."""
    ours = random_gpo(d_pe, d_hidden, seed=seed, dtype=dtype)
    theirs = authors.GPO(d_pe, d_hidden).to(dtype)
    theirs.load_state_dict(ours.state_dict())  # strict: the same parameter names and shapes
    return ours, theirs


LENGTHS = [36, 12, 1, 36, 7, 20, 2, 36]


def test_encoding_table_equals_the_authors(authors):
    """Their table is computed in float32 arithmetic, ours in float64 and rounded: apart by the float32
    rounding of the angle k · 10000^(−2i/d) (≤ k · 2⁻²⁴), 2e-6 up to position 49."""
    torch.testing.assert_close(
        positional_encoding(50, 32, torch.float32), authors.positional_encoding_1d(32, 50), rtol=0, atol=2e-6
    )


def test_gpo_equals_the_authors_float64(authors):
    """float64, their table replaced by ours (in their own cache, ``pe_database``; the tables are compared
    above): pooled vectors, weights and every parameter's gradient equal theirs to 1e-12 on a ragged batch
    (their padding is −10000; ours −∞ — the features here stay above it)."""
    ours, theirs = both(authors, torch.float64)
    for k in range(1, max(LENGTHS) + 1):
        theirs.pe_database[k] = positional_encoding(k, 32)
    x, n = ragged(LENGTHS, 40, 16, seed=6)
    x = x.clamp(-1e3, 1e3)  # the garbage past each length stays above their padding value
    got, w = ours(x, n)
    want, w_theirs = theirs(x, n)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, w_theirs[..., 0], rtol=1e-12, atol=1e-12)
    R = torch.randn(got.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ga = torch.autograd.grad((got * R).sum(), list(ours.parameters()))
    gb = torch.autograd.grad((want * R).sum(), list(theirs.parameters()))
    for (name, _), a, b in zip(ours.named_parameters(), ga, gb):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12, msg=f"gradient of {name}")


def test_gpo_equals_the_authors_float32(authors):
    """float32, both as they are (their float32 table, ours rounded from float64): pooled vectors and weights to 1e-5."""
    ours, theirs = both(authors, torch.float32, seed=8)
    x, n = ragged(LENGTHS, 36, 16, seed=9, dtype=torch.float32)
    x = x.clamp(-1e3, 1e3)
    got, w = ours(x, n)
    want, w_theirs = theirs(x, n)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w, w_theirs[..., 0], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- (c) gradcheck
def test_gpo_gradcheck():
    """Gradients of the pooled vectors in the features and in every parameter, float64, on a ragged batch."""
    g = random_gpo(4, 3, seed=10)
    x, n = ragged([3, 1, 2], 3, 2, seed=11)
    x = x.clamp(-5, 5).requires_grad_()
    names = [k for k, _ in g.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in g.parameters())

    def f(x, *ps):
        return torch.func.functional_call(g, dict(zip(names, ps)), (x, n))[0]

    assert torch.autograd.gradcheck(f, (x, *params))


# ----------------------------------------------------------------------------- (d) as the vse system's pooling
def tiny_vse(**kw) -> VseSystem:
    torch.manual_seed(0)
    cfg = VseSystem.Config(embed_dim=8, word_dim=6, hidden=7, **kw).validate()
    return VseSystem(cfg, {"n_relations": 20, "n_words": 20, "word_dim": 50, "img_dim": 5}).eval()


def test_defaults_build_no_pooling_module():
    """The defaults (mean of the rows, the GRU's final state) build the system as before: no GPO parameters."""
    a = tiny_vse()
    assert not any(k.startswith(("img_gpo", "txt_gpo")) for k in a.state_dict())
    b = tiny_vse(image_pooling="gpo", text_pooling="gpo", gpo_pe_dim=4, gpo_hidden=3)
    assert {k for k in b.state_dict() if "gpo" in k} == {
        f"{s}_gpo.{p}"
        for s in ("img", "txt")
        for p in [f"gru.{w}_{m}_l0{r}" for w in ("weight", "bias") for m in ("ih", "hh") for r in ("", "_reverse")]
        + ["linear.weight"]
    }
    for k, v in a.state_dict().items():  # built last: the other modules start from the same numbers
        assert torch.equal(v, b.state_dict()[k])


@pytest.mark.parametrize("pooling", ["mean", "max", "gpo"])
def test_text_pooling_equals_the_pooled_outputs_and_ignores_padding(pooling, f64):
    """A caption's vector is the pooling of its mapped GRU outputs, alone or padded in a batch."""
    system = tiny_vse(text_pooling=pooling, gpo_pe_dim=4, gpo_hidden=3)
    caps = [[3, 4], [5, 6, 7, 8, 9, 1], [2]]
    batch = system.encode_sentences(token_rows(caps))
    for i, c in enumerate(caps):
        out, _, _ = system.text(token_rows([c]))
        E = system.txt(out[0, : len(c)])  # (L, D)
        if pooling == "mean":
            v = E.mean(0)
        elif pooling == "max":
            v = E.amax(0)
        else:
            v = system.txt_gpo(E[None], torch.tensor([len(c)]))[0][0]
        torch.testing.assert_close(batch[i], torch.nn.functional.normalize(v, dim=0))
        torch.testing.assert_close(system.encode_sentences(token_rows([c]))[0], batch[i])


@pytest.mark.parametrize("pooling", ["max", "gpo"])
def test_image_pooling_over_the_mapped_rows(pooling, f64):
    """An image's vector is the pooling of its standardised, mapped rows (regions), alone or in a batch; an
    image without rows pools its zero padding row."""
    from fraglib.core.batches import Rows

    system = tiny_vse(image_pooling=pooling, gpo_pe_dim=4, gpo_hidden=3)
    gen = torch.Generator().manual_seed(12)
    system.img_mean.copy_(torch.randn(5, generator=gen))
    system.img_std.copy_(torch.rand(5, generator=gen) + 0.5)
    counts = [3, 1, 4]
    x = torch.randn(sum(counts), 5, generator=gen)
    owner = torch.repeat_interleave(torch.arange(3), torch.tensor(counts))
    v, mask, _ = system.encode_images(Rows({"x": x}, owner, 3, np.arange(3)))
    assert mask is None and v.shape == (3, 8)
    for i in range(3):
        R = system.img((x[owner == i] - system.img_mean) / system.img_std)
        want = R.amax(0) if pooling == "max" else system.img_gpo(R[None], torch.tensor([len(R)]))[0][0]
        torch.testing.assert_close(v[i], torch.nn.functional.normalize(want, dim=0))
    empty = system.encode_images(Rows({"x": x[:3]}, torch.zeros(3, dtype=torch.long), 2, np.arange(2)))[0]
    assert torch.isfinite(empty).all()


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"similarity": "attention", "images": "top36", "image_pooling": "gpo"}, "attention keeps every region"),
        ({"similarity": "attention", "images": "top36", "text_pooling": "max"}, "attention keeps every region"),
        ({"image_pooling": "last"}, "image_pooling"),
        ({"text_pooling": "sum"}, "text_pooling"),
        ({"gpo_pe_dim": 31}, "must be even"),
    ],
)
def test_pooling_settings_refused(settings, message):
    with pytest.raises(ConfigError, match=message):
        VseSystem.Config(**settings).validate()


@pytest.fixture
def f64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("system", ["vse", "stt"])
def test_gpo_pooling_trains_one_epoch(system, tiny_full, tmp_path):
    """VSE∞'s pooling on both sides (``top36``: many regions per image) trains on the tiny benchmark: a batch's
    loss is finite, its gradient reaches both GPOs; a one-epoch run writes metrics, and its checkpoint alone
    reproduces the test ranks (stt: the same encoders under the captioning heads)."""
    from fraglib.run.checkpoint import load_system
    from fraglib.run.evaluate import evaluate_split
    from fraglib.run.train import resolve_run, train
    from fraglib.systems import SYSTEMS

    settings = {"images": "top36", "image_pooling": "gpo", "text_pooling": "gpo", "gpo_pe_dim": 8, "gpo_hidden": 6}
    spec = resolve_run(tiny_params(r={"system": system, **settings}), "r", extra={"epochs": 1})
    cls = SYSTEMS[system]
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), CPU)
    tr = splits["train"]
    assert (tr.images.counts() > 1).any()
    torch.manual_seed(0)
    model = cls(spec.system_config, dims, 0)
    model.prepare(tr)
    model.use_training_split(tr)
    b = make_batches(tr, 8, seed=0, epoch=0)[0]
    cost, _ = model.loss(
        model.encode_images(tr.images.take(tr.sentence_image[b])), model.encode_sentences(tr.sentences.take(b)), 0
    )
    assert torch.isfinite(cost)
    cost.backward()
    for side in ("img_gpo", "txt_gpo"):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in getattr(model, side).parameters()), side
    m = train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=CPU, progress=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["system"] == system and metrics["system_config"]["image_pooling"] == "gpo"
    assert 0 <= m["test"]["annotation"]["r1"] <= 100
    reloaded, _ = load_system(tmp_path / "best.pt")
    assert isinstance(reloaded.img_gpo, GPO) and isinstance(reloaded.txt_gpo, GPO)
    again = evaluate_split(reloaded, splits, tiny_eval(), spec.train_config.seed)
    assert again["ranks"] == json.loads((tmp_path / "ranks.json").read_text())
