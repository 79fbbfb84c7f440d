"""The contract every registered system keeps (parametrized over the registry, like open_clip's
test over ``list_models()``): it builds from sizes, scores finite, its loss is finite with
non-zero gradients when trainable (and ``join`` of encoded shares gives the same loss), a one-epoch run writes metrics, and the checkpoint alone
rebuilds a system that reproduces the score matrix exactly."""

import dataclasses
import json

import numpy as np
import pytest
import torch

from fraglib.core.config import ConfigError
from fraglib.run.checkpoint import load_system
from fraglib.run.evaluate import score_matrix
from fraglib.run.inputs import DataPaths, load_splits, make_batches
from fraglib.run.train import resolve_run, train
from fraglib.systems import SYSTEMS, get_system

from conftest import TINY_SYSTEMS, tiny_eval, tiny_params

CPU = torch.device("cpu")


def test_every_system_has_a_tiny_configuration():
    assert set(TINY_SYSTEMS) == set(SYSTEMS), "add a TINY_SYSTEMS entry in tests/conftest.py for every system"


def test_unknown_system_names_the_known_ones():
    with pytest.raises(
        ConfigError, match="unknown system, known: fragment, devise, random, socher, kcca, vse, stt, scan"
    ):
        get_system("vsepp")


# every system with its tiny settings, and the other settings of a system that change its code path
CASES = (
    [(name, {}) for name in SYSTEMS]
    + [("socher", {"encoder": e}) for e in ("bow", "chain", "ctrnn", "sdtrnn")]
    + [("socher", {"loss": "squared"}), ("kcca", {"kernel": "linear"}), ("kcca", {"distance": "euclidean"})]
    + [
        ("vse", {"similarity": "order", "negatives": "sum"}),
        ("vse", {"word_init": "glove", "word_dim": 50}),
        ("vse", {"similarity": "attention", "images": "top36", "warmup_epochs": 1}),
        ("vse", {"similarity": "attention", "clipped_l2norm": True, "images": "grid"}),
        ("stt", {"similarity": "attention", "images": "top36", "beam": 2}),
        ("fragment", {"finetune": 1}),
        ("vse", {"finetune": 1, "images": "rcnn"}),  # CNN fine-tuning
        ("fragment", {"cosine_scale": 10.0, "hardest": True, "tune_words": True}),  # the modern recipe (#18)
        ("fragment", {"images": "top36", "detections": 3}),
        ("scan", {"cross_attn": "both", "agg_func": "LogSumExp", "raw_feature_norm": "softmax", "images": "grid"}),
        ("scan", {"cross_attn": "i2t", "bi_gru": False, "max_violation": False, "max_elems": 1}),
    ]
)  # fewer detections (#18)


@pytest.mark.parametrize("name, settings", CASES, ids=[n + "".join(f"-{v}" for v in s.values()) for n, s in CASES])
def test_system_contract(name, settings, tiny_full, tmp_path):
    params = tiny_params(r={"system": name, **settings})
    spec = resolve_run(params, "r", extra={"epochs": 1})
    cls = SYSTEMS[name]
    assert cls.NAME == name and dataclasses.is_dataclass(cls.Config)
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), CPU)
    torch.manual_seed(0)
    system = cls(spec.system_config, dims, 0)
    system.prepare(splits["train"])
    te = splits["test"]
    S = score_matrix(system, te, chunk=3, sent_chunk=4)
    assert S.shape == (te.n_images, te.n_sentences)
    usable = torch.from_numpy(te.sentences.counts() > 0)
    assert torch.isfinite(S[:, usable]).all()
    # tiling (images and sentences) changes only BLAS rounding (relative to the largest score: terms can cancel)
    scale = float(S[torch.isfinite(S)].abs().max())
    torch.testing.assert_close(S, score_matrix(system, te, chunk=100), rtol=1e-5, atol=1e-5 * max(1.0, scale))
    tr = splits["train"]
    # the hubness banks encode the training items once for every split: each bank is, to the bit, the
    # matrix score_matrix gives for the same items and tiles (here several tiles each way)
    from fraglib.run.evaluate import bank_items, hubness_banks

    imgs, sents = bank_items(tr, n_bank=7)
    assert len(imgs) == len(sents) == 7
    banks = hubness_banks(system, {"val": splits["val"], "test": te}, tr, n_bank=7, chunk=3, sent_chunk=5)
    for part in ("val", "test"):
        ev = splits[part]
        assert torch.equal(
            banks[part]["annotation"], score_matrix(system, tr, 3, 5, image_items=imgs, sentences=ev.sentences)
        )
        assert torch.equal(
            banks[part]["search"], score_matrix(system, ev, 3, 5, sentences=tr.sentences, sentence_items=sents).T
        )
    if cls.TRAINABLE:
        b = make_batches(tr, 8, seed=0, epoch=0)[0]
        system.use_training_split(tr)
        cost, parts = system.loss(
            system.encode_images(tr.images.take(tr.sentence_image[b])),
            system.encode_sentences(tr.sentences.take(b)),
            epoch=0,
        )
        assert torch.isfinite(cost) and all(np.isfinite(float(v)) for v in parts.values())
        # two shares encoded apart and joined give the whole batch's loss (what data-parallel training relies on)
        shares = np.array_split(b, 2)
        joined, _ = system.loss(
            system.join([system.encode_images(tr.images.take(tr.sentence_image[p])) for p in shares]),
            system.join([system.encode_sentences(tr.sentences.take(p)) for p in shares]),
            epoch=0,
        )
        torch.testing.assert_close(joined, cost, rtol=1e-5, atol=1e-6)
        cost.backward()
        grads = [p.grad for p in system.parameters() if p.requires_grad]
        if system.phase(0) == "train":  # alternating systems train a part per phase
            assert all(g is not None for g in grads)
        grads = [g for g in grads if g is not None]
        assert grads and any(g.abs().sum() > 0 for g in grads)
    else:
        assert not any(p.requires_grad for p in system.parameters())
    m = train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=CPU, progress=False)
    assert json.loads((tmp_path / "metrics.json").read_text())["system"] == name
    assert 0 <= m["test"]["annotation"]["r1"] <= 100
    reloaded, ck = load_system(tmp_path / "best.pt")
    assert ck["system"] == name and ck["model_args"] == dims
    trained_splits, _, _ = load_splits(DataPaths(tiny_full), reloaded.views(reloaded.cfg), CPU)
    ranks = json.loads((tmp_path / "ranks.json").read_text())
    from fraglib.run.evaluate import evaluate_split

    again = evaluate_split(reloaded, trained_splits, tiny_eval(), spec.train_config.seed)  # the study's own path
    assert ("similarity" in ranks) == reloaded.SENTENCE_SPACE
    assert again["ranks"] == ranks, "the checkpoint alone must reproduce the test ranks"


def test_fragment_modern_options(tiny_full):
    """cosine_scale: fragment scores are scale × cosine (the objectives see M unchanged in form, so the
    loss equals total_cost on explicitly normalised embeddings); hardest reaches C_G; tune_words trains
    an offset of the word table, starts at GloVe and is regularised."""
    from fraglib.systems.objectives import total_cost

    params = tiny_params(
        r={"system": "fragment", "cosine_scale": 4.0, "hardest": True, "tune_words": True, "alpha": 1e-3}
    )
    spec = resolve_run(params, "r")
    splits, dims, _ = load_splits(DataPaths(tiny_full), SYSTEMS["fragment"].views(spec.system_config), CPU)
    torch.manual_seed(0)
    system = SYSTEMS["fragment"](spec.system_config, dims, 0)
    system.prepare(splits["train"])
    tr = splits["train"]
    b = make_batches(tr, 10, 0, 0)[0]
    system.use_training_split(tr)
    im, se = system.encode_images(tr.images.take(tr.sentence_image[b])), system.encode_sentences(tr.sentences.take(b))
    torch.testing.assert_close(im.x.norm(dim=1), torch.full((len(im.x),), 2.0))  # sqrt(4)
    nz = se.x.norm(dim=1) > 0
    torch.testing.assert_close(se.x[nz].norm(dim=1), torch.full((int(nz.sum()),), 2.0))
    cos = torch.nn.functional.cosine_similarity(im.x[:, None], se.x[None][:, nz], dim=-1)
    torch.testing.assert_close(im.x @ se.x[nz].T, 4.0 * cos, rtol=1e-5, atol=1e-5)
    loss, _ = system.loss(im, se, epoch=0)
    ref, _ = total_cost(
        im.x,
        se.x,
        im.owner,
        se.owner,
        dense=True,
        beta=system.cfg.beta,
        margin=system.cfg.margin,
        smooth=system.cfg.smooth,
        hardest=True,
    )
    assert loss.item() == pytest.approx(ref.item() / im.n + 1e-3 * system.regularizer().item(), rel=1e-6)
    soft, _ = total_cost(
        im.x,
        se.x,
        im.owner,
        se.owner,
        dense=True,
        beta=system.cfg.beta,
        margin=system.cfg.margin,
        smooth=system.cfg.smooth,
        hardest=False,
    )
    assert soft.item() != pytest.approx(ref.item())  # hardest is used
    late = SYSTEMS["fragment"](
        resolve_run(
            tiny_params(
                r={
                    "system": "fragment",
                    "cosine_scale": 4.0,
                    "hardest": True,
                    "hardest_after": 2,
                    "dense_epochs": 9,
                    "alpha": 0.0,
                }
            ),
            "r",
        ).system_config,
        dims,
        0,
    )
    late.load_state_dict(system.state_dict(), strict=False)
    li, ls = late.encode_images(tr.images.take(tr.sentence_image[b])), late.encode_sentences(tr.sentences.take(b))
    assert late.loss(li, ls, epoch=1)[0].item() == pytest.approx(soft.item() / im.n, rel=1e-6)  # warm-up: summed
    assert late.loss(li, ls, epoch=2)[0].item() == pytest.approx(ref.item() / im.n, rel=1e-6)  # then the hardest
    torch.testing.assert_close(system.words, tr.words)  # GloVe, untouched
    assert float(system.word_offset.abs().sum()) == 0.0
    loss.backward()
    assert float(system.word_offset.grad.abs().sum()) > 0
    plain = SYSTEMS["fragment"](resolve_run(tiny_params(r={"system": "fragment"}), "r").system_config, dims, 0)
    assert plain.word_offset is None and not any(n.startswith("word") for n, _ in plain.named_parameters())


def test_sentence_fragments_equal_the_per_fragment_equation():
    """``s = ReLU(W_R[rel] [w1; w2] + b_R[rel])`` one fragment at a time (the equation) gives the batched
    loop's embeddings, and the loop's gradients are bit-identical to those of the former per-type
    ``W_R[r]`` indexing (each unused entry is an exact zero either way)."""
    from fraglib.systems.fragment import Config, FragmentSystem

    torch.manual_seed(0)
    dims = {"n_words": 30, "word_dim": 6, "n_relations": 5, "img_dim": 8}
    system = FragmentSystem(Config(embed_dim=7), dims, 0)
    system.words = torch.randn(30, 6)
    with torch.no_grad():
        system.b_R.normal_()
    rel = torch.tensor([3, 0, 3, 1, 3, 0, 1, 1, 3])  # type 2 and 4 unused, 3 not contiguous
    w1, w2 = torch.randint(0, 30, (9,)), torch.randint(0, 30, (9,))
    g = torch.randn(9, 7)
    out = system.embed_sentences(rel, w1, w2)
    out.backward(g)
    new = system.W_R.grad.clone(), system.b_R.grad.clone()
    x = torch.cat([system.words[w1], system.words[w2]], dim=1)
    eq = torch.stack([torch.relu(system.W_R[r] @ x[i] + system.b_R[r]) for i, r in enumerate(rel.tolist())])
    torch.testing.assert_close(out, eq, rtol=1e-6, atol=1e-6)
    system.W_R.grad = system.b_R.grad = None  # the former code: W_R[r] per relation type
    order = torch.argsort(rel, stable=True)
    pieces = [
        torch.relu(p @ system.W_R[r].T + system.b_R[r])
        for r, p in enumerate(torch.split(x[order], torch.bincount(rel, minlength=5).tolist()))
        if len(p)
    ]
    old = torch.empty_like(out)
    old[order] = torch.cat(pieces).detach()
    torch.cat(pieces).backward(g[order])
    assert torch.equal(old, out.detach())
    assert torch.equal(system.W_R.grad, new[0]) and torch.equal(system.b_R.grad, new[1])
    assert float(new[0][2].abs().sum()) == 0.0 and float(new[0][3].abs().sum()) > 0


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_grouped_relation_maps_equal_the_per_type_loop(dtype, tol):
    """The GPU form of the relation maps (types padded into one batched product) gives the CPU loop's
    embeddings and gradients (rows, matrices, biases), with types unused, non-contiguous and single, and
    an empty batch; an unused type's matrix gets a zero gradient."""
    from fraglib.systems.fragment import relation_maps

    rel = torch.tensor([3, 0, 3, 1, 3, 0, 1, 1, 3, 5, 3])  # 2 and 4 unused, 5 once
    grads = {}
    for grouped in (False, True):
        gen = torch.Generator().manual_seed(5)  # the same inputs both times
        x, W, b = (
            torch.randn(shape, generator=gen, dtype=dtype).requires_grad_() for shape in ((11, 6), (6, 7, 6), (6, 7))
        )
        out = relation_maps(x, rel, W, b, grouped)
        out.backward(torch.randn(out.shape, generator=gen, dtype=dtype))
        grads[grouped] = (out.detach(), x.grad, W.grad, b.grad)
        assert relation_maps(x[:0], rel[:0], W, b, grouped).shape == (0, 7)
    for a, c in zip(grads[False], grads[True]):
        torch.testing.assert_close(c, a, rtol=tol, atol=tol)
    eq = torch.stack([torch.relu(W[r] @ x[i] + b[r]) for i, r in enumerate(rel.tolist())])
    torch.testing.assert_close(grads[True][0], eq.detach(), rtol=tol, atol=tol)
    assert float(grads[True][2][2].abs().sum()) == 0.0 and float(grads[True][2][5].abs().sum()) > 0


def test_bookkeeping_on_the_cpu_copies_changes_no_bit(tiny_full):
    """The fragment loss with its index bookkeeping on the loader's CPU copies (``Rows.cpu``: what a GPU
    run does; the relation maps in their GPU form) gives the floats of the bookkeeping on the data's own
    tensors, cost and gradients, in both phases; ``Rows.cpu`` prefers the loader's copy."""
    from fraglib.core.batches import Rows
    from fraglib.systems.fragment import Config, FragmentSystem, relation_maps

    cfg = Config(dense_epochs=1, embed_dim=16)
    splits, dims, _ = load_splits(DataPaths(tiny_full), FragmentSystem.views(cfg), torch.device("cpu"))
    tr = splits["train"]
    b = make_batches(tr, 8, seed=0, epoch=0)[0]
    imgs, sents = tr.images.take(tr.sentence_image[b]), tr.sentences.take(b)
    out = {}
    for on_cpu in (False, True):
        torch.manual_seed(0)
        system = FragmentSystem(cfg, dims)
        system.prepare(tr)
        for epoch in (0, 1):
            i, s = system.encode_images(imgs), system.encode_sentences(sents)
            if not on_cpu:
                i, s = dataclasses.replace(i, owner_cpu=None), dataclasses.replace(s, owner_cpu=None)
            x = torch.cat([system.words[sents.data["w1"]], system.words[sents.data["w2"]]], 1)
            grouped = relation_maps(
                x, sents.data["rel"], system.W_R, system.b_R, True, rel_cpu=sents.cpu("rel").clone() if on_cpu else None
            )
            cost, _ = system.loss(i, s, epoch)
            system.zero_grad()
            (cost + grouped.sum()).backward()
            out[on_cpu, epoch] = (cost.detach(), grouped.detach(), *[p.grad.clone() for p in system.parameters()])
    for epoch in (0, 1):
        assert all(torch.equal(a, c) for a, c in zip(out[False, epoch], out[True, epoch]))
    r = Rows({"rel": torch.tensor([1, 2])}, torch.tensor([0, 0]), 1, np.arange(1), host={"rel": torch.tensor([7, 8])})
    assert r.cpu("rel").tolist() == [7, 8] and r.cpu("owner").tolist() == [0, 0]


def test_detections_cut_a_view_at_its_first_k_rows(tiny_full):
    """``detections: k`` on the 36-proposal view gives the rcnn view of k detections (both are the
    detector's NMS ranking, cut at k or at 36), so k can be searched without re-extracting."""
    from fraglib.core.batches import Views

    rcnn, _, _ = load_splits(DataPaths(tiny_full), Views("rcnn", "dependency"), CPU)
    k = int(np.diff(rcnn["test"].images.off).max()) - 1
    cut, _, _ = load_splits(DataPaths(tiny_full), Views("top36", "dependency", detections=k), CPU)
    top, _, _ = load_splits(DataPaths(tiny_full), Views("top36", "dependency"), CPU)
    for s in ("train", "test"):
        assert np.diff(top[s].images.off).max() > k + 1  # the cut removes rows
        np.testing.assert_array_equal(cut[s].images.off, rcnn[s].images.off)
        torch.testing.assert_close(cut[s].images.data["x"], rcnn[s].images.data["x"])


# every system, with its random generators in use (dropout for the GRU systems)
RESUME = {name: ({"dropout": 0.3} if name in ("vse", "stt", "scan") else {}) for name in SYSTEMS}


@pytest.mark.parametrize("name", list(SYSTEMS))
def test_killed_run_resumes_to_the_same_bytes(name, tiny_full, tmp_path):
    """The exact-resume contract: a run stopped after one epoch (as if killed) and started again, and a run
    killed between one epoch's ``best.pt`` and ``last.pt`` writes, end with the uninterrupted run's
    metrics.json byte for byte; a finished run started again re-scores to the same bytes."""
    spec = resolve_run(tiny_params(r={"system": name, **RESUME[name]}), "r", extra={"epochs": 3, "select": "last"})
    run = lambda out, **kw: train(
        DataPaths(tiny_full), tmp_path / out, spec, tiny_eval(), device=CPU, progress=False, **kw
    )  # noqa: E731
    run("whole")
    whole = (tmp_path / "whole" / "metrics.json").read_bytes()
    print(f"{name}: uninterrupted {len(whole)} bytes", end="")
    run("again")  # finished: re-scored from its checkpoint
    run("again")
    assert (tmp_path / "again" / "metrics.json").read_bytes() == whole
    if not SYSTEMS[name].TRAINABLE:
        assert not (tmp_path / "whole" / "last.pt").exists()
        print(", closed-form: re-run of a finished run identical")
        return
    assert (tmp_path / "whole" / "last.pt").read_bytes() == (tmp_path / "again" / "last.pt").read_bytes()
    assert run("killed", stop_after=1) == {"stopped_at_epoch": 1}
    run("killed")
    assert (tmp_path / "killed" / "metrics.json").read_bytes() == whole
    # killed after epoch 2's best.pt, before its last.pt (select: last writes best.pt every epoch)
    run("torn", stop_after=1)
    kept = (tmp_path / "torn" / "last.pt").read_bytes()
    run("torn", stop_after=1)
    (tmp_path / "torn" / "last.pt").write_bytes(kept)
    run("torn")
    assert (tmp_path / "torn" / "metrics.json").read_bytes() == whole
    # killed after epoch 1's best.pt, before the first last.pt
    run("first", stop_after=1)
    (tmp_path / "first" / "last.pt").unlink()
    run("first")
    assert (tmp_path / "first" / "metrics.json").read_bytes() == whole
    print(", resumed after a kill, after a torn epoch and after a torn first epoch: identical")


@pytest.mark.parametrize(
    "name, settings",
    [("devise", {"images": "rcnn"}), ("kcca", {"images": "rcnn"}), ("socher", {"images": "rcnn", "encoder": "bow"})],
)
def test_pooled_views_give_the_batch_means_bit_for_bit(name, settings, tiny_full):
    """Systems whose views are ``pooled`` read each image's mean row, taken once by the loader: the
    standardisation, the image encodings and the score matrix equal those of the unpooled rows to the
    bit; images without rows keep none; a split with other image inputs (boxes) is refused, naming them."""
    from fraglib.run.inputs import pool_images

    params = tiny_params(r={"system": name, **settings})
    spec = resolve_run(params, "r", extra={"epochs": 1})
    cls = SYSTEMS[name]
    views = cls.views(spec.system_config)
    assert views.pooled
    got = {}
    for pooled in (False, True):
        splits, dims, _ = load_splits(DataPaths(tiny_full), dataclasses.replace(views, pooled=pooled), CPU)
        tr, te = splits["train"], splits["test"]
        assert (tr.images.counts() == 1).all() if pooled else (tr.images.counts() > 1).any()
        torch.manual_seed(0)
        system = cls(spec.system_config, dims, 0)
        system.prepare(tr)
        system.fit(tr)
        system.eval()
        got[pooled] = (system.img_mean, system.img_std, score_matrix(system, te, chunk=3, sent_chunk=4))
    for a, b in zip(got[False], got[True]):
        assert torch.equal(a, b)
    tr = splits["train"]
    hole = dataclasses.replace(
        tr, images=dataclasses.replace(tr.images, off=np.concatenate([[0, 0], tr.images.off[1:]])), row_moments=None
    )
    pooled = pool_images(hole).images
    assert pooled.counts()[0] == 0 and pooled.n == hole.images.n
    with pytest.raises(ValueError, match="box"):
        pool_images(
            dataclasses.replace(
                tr, images=dataclasses.replace(tr.images, data={**tr.images.data, "box": tr.images.data["x"][:, :4]})
            )
        )
