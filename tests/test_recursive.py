"""Socher et al. 2014's trees, level-batched encoders and Eq. 5 (fraglib/text/trees.py,
fraglib/systems/recursive.py): the paper's worked example, a recursive reference, gradcheck, loops."""

import dataclasses

import numpy as np
import pytest
import torch

from fraglib.run.inputs import DataPaths
from fraglib.systems.recursive import (
    compose,
    compose_reference,
    hinge_all_negatives,
    hinge_all_negatives_reference,
    levels,
    plan,
    squared_loss,
)
from fraglib.text.parse import Token
from fraglib.text.trees import basic_tree, binarize_head_outward, collapsed_tree, heights, slots, subtree_sizes

from conftest import tiny_eval


def _tokens(spec):
    """[(form, head, deprel, upos)] with 1-based heads, 0 = root."""
    return [Token(i, f, f.lower(), u, u, h, r) for i, (f, h, r, u) in enumerate(spec, 1)]


# Students_1 ride_2 bikes_3 at_4 night_5 (SYSTEMS A2; spaCy/ClearNLP labels)
EXAMPLE = _tokens(
    [
        ("Students", 2, "nsubj", "NOUN"),
        ("ride", 0, "ROOT", "VERB"),
        ("bikes", 2, "dobj", "NOUN"),
        ("at", 2, "prep", "ADP"),
        ("night", 4, "pobj", "NOUN"),
    ]
)


def test_worked_example_basic_tree_slots_and_lengths():
    t = basic_tree(EXAMPLE)
    assert t.words == ["students", "ride", "bikes", "at", "night"] and t.parent.tolist() == [1, -1, 1, 1, 3]
    side, rank = slots(t.parent)
    # Students = l1 of ride, bikes = r1, at = r2, night = r1 of at
    assert list(zip(side.tolist(), rank.tolist())) == [(0, 0), (-1, -1), (1, 0), (1, 1), (1, 0)]
    assert subtree_sizes(t.parent).tolist() == [1, 5, 1, 2, 1]
    assert heights(t.parent).tolist() == [0, 2, 0, 1, 0]


def test_worked_example_composition_by_hand():
    """h4 = f(½(W_v x4 + W_r1 h5)); h2 = f(⅕(W_v x2 + W_l1 h1 + W_r1 h3 + 2 W_r2 h4))."""
    g = torch.Generator().manual_seed(0)
    n = 4
    x = torch.randn(5, n, generator=g, dtype=torch.float64)
    Wv = torch.randn(n, n, generator=g, dtype=torch.float64)
    W = torch.randn(4, n, n, generator=g, dtype=torch.float64)  # l1, l2, r1, r2
    t = basic_tree(EXAMPLE)
    side, rank = slots(t.parent)
    ell = torch.from_numpy(subtree_sizes(t.parent)).double()
    h = compose(x @ Wv.T, t.parent, side * 2 + rank, W, weight=ell, scale=1 / ell)
    f = torch.tanh
    l1, r1, r2 = W[0], W[2], W[3]
    h1, h3, h5 = f(Wv @ x[0]), f(Wv @ x[2]), f(Wv @ x[4])
    h4 = f(0.5 * (Wv @ x[3] + r1 @ h5))
    h2 = f(0.2 * (Wv @ x[1] + l1 @ h1 + r1 @ h3 + 2 * r2 @ h4))
    torch.testing.assert_close(h, torch.stack([h1, h2, h3, h4, h5]))


def test_collapsed_example_and_punctuation_and_two_roots():
    t = collapsed_tree(EXAMPLE, "clearnlp")
    assert t.words == ["students", "ride", "bikes", "night"] and t.parent.tolist() == [1, -1, 1, 1]
    assert t.rel == ["nsubj", "root", "dobj", "prep_at"]
    assert subtree_sizes(t.parent).tolist() == [1, 4, 1, 1]
    # "dogs run . cats sleep ," : punctuation dropped (its child re-attached), second root under the first
    toks = _tokens(
        [
            ("dogs", 2, "nsubj", "NOUN"),
            ("run", 0, "ROOT", "VERB"),
            (".", 2, "punct", "PUNCT"),
            ("cats", 5, "nsubj", "NOUN"),
            ("sleep", 0, "ROOT", "VERB"),
            (",", 5, "punct", "PUNCT"),
        ]
    )
    b = basic_tree(toks)
    assert b.words == ["dogs", "run", "cats", "sleep"] and b.parent.tolist() == [1, -1, 3, 1]
    assert b.rel == ["nsubj", "root", "nsubj", "dep"]
    assert basic_tree(_tokens([(".", 0, "ROOT", "PUNCT")])) is None


def test_head_outward_binarisation():
    """ "A man rides a bike" -> ((A man) (rides (a bike))); leaves in sentence order."""
    toks = _tokens(
        [
            ("A", 2, "det", "DET"),
            ("man", 3, "nsubj", "NOUN"),
            ("rides", 0, "ROOT", "VERB"),
            ("a", 5, "det", "DET"),
            ("bike", 3, "dobj", "NOUN"),
        ]
    )
    t = basic_tree(toks)
    left, right = binarize_head_outward(t.parent)
    n = len(t)

    def show(i):
        return t.words[i] if i < n else f"({show(left[i - n])} {show(right[i - n])})"

    assert show(n + len(left) - 1) == "((a man) (rides (a bike)))"
    assert len(left) == n - 1


def _random_forest(rng, n_trees=6, max_nodes=9, k=5):
    parent, off = [], 0
    for _ in range(n_trees):
        m = int(rng.integers(1, max_nodes + 1))
        order = rng.permutation(m)  # random tree: each node's parent comes earlier in `order`
        par = np.full(m, -1)
        for a in range(1, m):
            par[order[a]] = order[rng.integers(0, a)]
        parent.extend([p + off if p >= 0 else -1 for p in par])
        off += m
    parent = np.array(parent, np.int64)
    return parent, rng.integers(0, k, len(parent)), k


def _leaves(parent, rng, share):
    """A random ``share`` of the forest's leaves, as a raw mask (N,)."""
    leaf = np.ones(len(parent), bool)
    leaf[parent[parent >= 0]] = False
    return leaf & (rng.random(len(parent)) < share)


def test_level_batched_equals_recursive_reference_on_random_trees():
    rng = np.random.default_rng(0)
    g = torch.Generator().manual_seed(1)
    for trial in range(5):
        parent, slot, k = _random_forest(rng)
        N, n = len(parent), 3
        base = torch.randn(N, n, generator=g, dtype=torch.float64)
        W = torch.randn(k, n, n, generator=g, dtype=torch.float64) * 0.5
        ell = torch.from_numpy(subtree_sizes(parent)).double()
        raw = _leaves(parent, rng, 0.3) if trial % 2 else None
        for weight, scale in ((None, None), (ell, 1 / ell)):
            torch.testing.assert_close(
                compose(base, parent, slot, W, weight=weight, scale=scale, raw=raw),
                compose_reference(base, parent, slot, W, weight=weight, scale=scale, raw=raw),
            )
            roots = np.nonzero(parent < 0)[0]
            torch.testing.assert_close(
                compose(base, parent, slot, W, weight=weight, scale=scale, raw=raw, roots_only=True),
                compose_reference(base, parent, slot, W, weight=weight, scale=scale, raw=raw)[roots],
            )
    assert sorted(np.concatenate(levels(parent)).tolist()) == list(range(len(parent)))


def test_roots_only_takes_the_same_floats_as_every_node():
    """``roots_only`` gathers the roots from the ends of their levels instead of from every node's vector:
    the same values and the same gradients to the bit (only copies differ), so trained runs do not move."""
    rng = np.random.default_rng(3)
    g = torch.Generator().manual_seed(4)
    for trial in range(4):
        parent, slot, k = _random_forest(rng)
        N, n = len(parent), 5
        x = torch.randn(N, n, generator=g)
        ell = torch.from_numpy(subtree_sizes(parent)).float()
        roots, raw = np.nonzero(parent < 0)[0], (_leaves(parent, rng, 0.2) if trial % 2 else None)
        out = []
        for roots_only in (False, True):
            W = (torch.randn(k, n, n, generator=torch.Generator().manual_seed(trial)) * 0.5).requires_grad_()
            Win = torch.randn(n, n, generator=torch.Generator().manual_seed(trial)).requires_grad_()
            h = compose(x @ Win.T, parent, slot, W, ell, 1 / ell, raw, roots_only=roots_only)
            h = h if roots_only else h[roots]
            w_out = torch.randn(h.shape, generator=torch.Generator().manual_seed(9))
            out.append((h, *torch.autograd.grad((h * w_out).sum(), (W, Win))))
        assert all(torch.equal(a, b) for a, b in zip(*out))


def _table_case(rng, trial, n_trees, max_nodes, k, n, V):
    """A random forest reading rows of a (V, n) float64 word table, its ℓ and k identity-plus-noise matrices:
    (parent, slot, table, rows, ell, W0, the generator drawn from)."""
    parent, slot, k = _random_forest(rng, n_trees=n_trees, max_nodes=max_nodes, k=k)
    g = torch.Generator().manual_seed(trial)
    table = torch.randn(V, n, generator=g, dtype=torch.float64)
    rows = torch.from_numpy(rng.integers(0, V, len(parent)))
    ell = torch.from_numpy(subtree_sizes(parent)).double()
    W0 = torch.eye(n, dtype=torch.float64) + 0.3 * torch.randn(k, n, n, generator=g, dtype=torch.float64)
    return parent, slot, table, rows, ell, W0, g


@pytest.mark.parametrize("roots_only", [False, True])
def test_compose_on_a_word_table_equals_the_recursion(roots_only):
    """Nodes reading rows of a word table (the leaves' tanh taken on the table, its gradient summed per word
    first) give the plain recursion's outputs and gradients for the table and the matrices, and the same
    matrices' gradient when the table needs none: random forests with ℓ weights, raw leaves, one-row matrix
    runs, n = 50."""
    rng = np.random.default_rng(11)
    for trial in range(6):
        parent, slot, table, rows, ell, W0, g = _table_case(rng, trial, n_trees=40, max_nodes=12, k=7, n=50, V=30)
        N, n = len(parent), 50
        raw = _leaves(parent, rng, 0.5) if trial % 3 == 2 else None
        weight, scale = (ell, 1 / ell) if trial % 2 else (None, None)
        roots = np.nonzero(parent < 0)[0]
        w_out = torch.randn((len(roots) if roots_only else N, n), generator=g, dtype=torch.float64)
        out = []
        for form in ("compose", "recursion"):
            x, W = table.clone().requires_grad_(), W0.clone().requires_grad_()
            if form == "compose":
                h = compose(x, parent, slot, W, weight, scale, raw, roots_only=roots_only, rows=rows)
            else:
                h = compose_reference(x.index_select(0, rows), parent, slot, W, weight, scale, raw)
                h = h[roots] if roots_only else h
            out.append((h, *torch.autograd.grad((h * w_out).sum(), (x, W))))
        for name, a, b in zip(("output", "table gradient", "W gradient"), *out):
            torch.testing.assert_close(a, b, msg=lambda m: f"trial {trial}, {name}: {m}")
        W = W0.clone().requires_grad_()  # a table without gradient: the leaves' level is cut short
        h = compose(table, parent, slot, W, weight, scale, raw, roots_only=roots_only, rows=rows)
        torch.testing.assert_close(torch.autograd.grad((h * w_out).sum(), W)[0], out[1][2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (checked on a lent GPU machine)")
@pytest.mark.parametrize("roots_only", [False, True])
def test_compose_on_cuda_equals_the_cpu(roots_only):
    """The hand-written level schedule (_Compose) on a GPU: outputs and the table's and matrices' gradients
    equal the CPU's in float64, on random forests with ℓ weights, raw leaves and a word table."""
    rng = np.random.default_rng(5)
    for trial in range(4):
        parent, slot, table, rows, ell, W0, _ = _table_case(rng, trial, n_trees=60, max_nodes=14, k=6, n=40, V=25)
        raw = _leaves(parent, rng, 0.5) if trial % 2 else None
        out = []
        for dev in ("cpu", "cuda"):
            x, W = table.to(dev).requires_grad_(), W0.to(dev).requires_grad_()
            h = compose(
                x, parent, slot, W, ell.to(dev), (1 / ell).to(dev), raw, roots_only=roots_only, rows=rows.to(dev)
            )
            w_out = torch.ones_like(h) + torch.arange(h.numel(), device=dev, dtype=h.dtype).view_as(h) % 3
            out.append([t.cpu() for t in (h, *torch.autograd.grad((h * w_out).sum(), (x, W)))])
        for name, a, b in zip(("output", "table gradient", "W gradient"), *out):
            torch.testing.assert_close(b, a, msg=lambda m: f"trial {trial}, {name}: {m}")


def test_compose_refuses_factors_that_need_a_gradient_and_raw_inner_nodes():
    parent, slot = np.array([-1, 0]), np.array([0, 0])
    x, W = torch.randn(2, 3), torch.randn(1, 3, 3)
    with pytest.raises(ValueError, match="weight is a constant"):
        compose(x, parent, slot, W, weight=torch.tensor([2.0, 1.0], requires_grad=True))
    with pytest.raises(ValueError, match="raw nodes must be leaves"):
        compose(x, parent, slot, W, raw=np.array([True, False]))
    with pytest.raises(ValueError, match="planned without them"):
        compose(x, parent, slot, W, raw=np.array([False, True]), schedule=plan(parent, slot))


def test_level_batched_gradients_equal_the_recursive_reference():
    """The level-ordered schedule (children as runs per matrix, one gather) gives the plain recursion's
    gradients for the inputs, the matrices and the input map."""
    rng = np.random.default_rng(5)
    g = torch.Generator().manual_seed(6)
    parent, slot, k = _random_forest(rng)
    ell = torch.from_numpy(subtree_sizes(parent)).double()
    x = torch.randn(len(parent), 3, generator=g, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(k, 3, 3, generator=g, dtype=torch.float64) * 0.5).requires_grad_()
    Win = torch.randn(3, 3, generator=g, dtype=torch.float64, requires_grad=True)
    w_out = torch.randn(len(parent), 3, generator=g, dtype=torch.float64)
    got = torch.autograd.grad((compose(x @ Win.T, parent, slot, W, ell, 1 / ell) * w_out).sum(), (x, W, Win))
    want = torch.autograd.grad((compose_reference(x @ Win.T, parent, slot, W, ell, 1 / ell) * w_out).sum(), (x, W, Win))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_compose_gradcheck():
    rng = np.random.default_rng(3)
    parent, slot, k = _random_forest(rng, n_trees=3, max_nodes=5, k=3)
    g = torch.Generator().manual_seed(2)
    base = torch.randn(len(parent), 3, generator=g, dtype=torch.float64, requires_grad=True)
    W = (torch.randn(k, 3, 3, generator=g, dtype=torch.float64) * 0.5).requires_grad_()
    ell = torch.from_numpy(subtree_sizes(parent)).double()
    Win = (
        torch.eye(3, dtype=torch.float64) + 0.1 * torch.randn(3, 3, generator=g, dtype=torch.float64)
    ).requires_grad_()
    assert torch.autograd.gradcheck(lambda b, w: compose(b, parent, slot, w, weight=ell, scale=1 / ell), (base, W))
    assert torch.autograd.gradcheck(
        lambda w, wi: compose(base.detach() @ wi.T, parent, slot, w, weight=ell, scale=1 / ell, roots_only=True),
        (W, Win),
    )


def test_levels_refuse_a_cycle():
    with pytest.raises(ValueError, match="cycle"):
        levels(np.array([1, 2, 1, -1]))


def test_eq5_all_negatives_against_loops():
    g = torch.Generator().manual_seed(4)
    v_all = torch.randn(5, 3, generator=g, dtype=torch.float64)
    y_all = torch.randn(12, 3, generator=g, dtype=torch.float64)
    img_of = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4])
    pairs = [(0, 1), (1, 4), (3, 7), (4, 11)]
    k = torch.tensor([p[0] for p in pairs])
    j = torch.tensor([p[1] for p in pairs])
    for margin in (0.5, 3.0):
        got = hinge_all_negatives(v_all[k], y_all[j], v_all, y_all, k, img_of, margin)
        assert float(got) == pytest.approx(hinge_all_negatives_reference(v_all, y_all, pairs, img_of, margin))
    assert float(squared_loss(v_all[k], y_all[j])) == pytest.approx(
        sum(float(((v_all[a] - y_all[b]) ** 2).sum()) for a, b in pairs) / len(pairs)
    )


def test_tree_rows_keep_out_of_dictionary_words_as_zero_vectors():
    from fraglib.run.inputs import compact_words
    from fraglib.text.parse import ParsedCaption
    from fraglib.text.trees import encode_trees

    parsed = [ParsedCaption(7, "students ride bikes at night", EXAMPLE), ParsedCaption(8, "", [])]
    index = {"ride": 10, "bikes": 3, "at": 5, "night": 8}  # "students" unknown
    f = encode_trees(parsed, "clearnlp", "tree_basic", index)
    assert f.w1.tolist() == [-1, 10, 3, 5, 8] and f.offsets.tolist() == [0, 5, 5] and f.reasons == ["", "empty"]
    c = f.columns
    assert c["parent"].tolist() == [1, -1, 1, 1, 3] and c["ell"].tolist() == [1, 5, 1, 2, 1]
    assert c["side"].tolist() == [0, -1, 1, 1, 1] and c["rank"].tolist() == [0, -1, 0, 1, 0]
    assert [f.relations[r] for r in f.rel] == ["nsubj", "root", "dobj", "prep", "pobj"]
    used, w1, _ = compact_words(f.w1, f.w2)
    assert used.tolist() == [3, 5, 8, 10] and w1.tolist() == [4, 3, 0, 1, 2]  # -1 -> the appended zero row
    g = encode_trees(parsed, "clearnlp", "tree_collapsed", index)
    assert g.w1.tolist() == [-1, 10, 3, 8] and [g.relations[r] for r in g.rel] == ["nsubj", "root", "dobj", "prep_at"]


def test_adagrad_sums_reset_every_n_epochs():
    from fraglib.run.train import TrainConfig, make_optimizer, reset_adagrad

    tc = TrainConfig(optimizer="adagrad", adagrad_reset=5, lr=0.1)
    w = torch.nn.Parameter(torch.ones(3))
    opt = make_optimizer(tc, [w])
    assert float(opt.state[w]["sum"][0]) == 1.0  # sums start at 1
    (w**2).sum().backward()
    opt.step()
    assert float(opt.state[w]["sum"][0]) == pytest.approx(5.0)  # 1 + 2²
    for epoch in (1, 4):
        reset_adagrad(tc, opt, epoch)
        assert float(opt.state[w]["sum"][0]) == pytest.approx(5.0)
    reset_adagrad(tc, opt, 5)
    assert opt.state[w]["sum"].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("encoder", ["chain", "ctrnn", "dtrnn", "sdtrnn"])
def test_socher_encoders_match_one_sentence_at_a_time(encoder, tiny_full):
    """The system's batched encoders (global ids, slots, binarisation) against a per-sentence
    recursion written from the definitions, and its loss against Eq. 5 by loops."""
    from fraglib.run.inputs import load_splits, make_batches
    from fraglib.run.train import resolve_run
    from fraglib.systems import SYSTEMS

    from conftest import tiny_params

    spec = resolve_run(tiny_params(r={"system": "socher", "encoder": encoder, "init_noise": 0.3}), "r")
    cls = SYSTEMS["socher"]
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), torch.device("cpu"))
    system = cls(spec.system_config, dims, 0).double()
    tr = splits["train"]
    system.prepare(tr)
    items = np.arange(min(12, tr.n_sentences))
    system.eval()
    with torch.no_grad():
        got = system.encode_sentences(tr.sentences.take(items)).vec
        for k, j in enumerate(items):
            rows = tr.sentences.take(np.array([j]))
            d = {key: v.numpy() for key, v in rows.data.items()}
            x = system.words[rows.data["w1"]] / system.word_scale
            m = len(d["w1"])
            if m == 0:
                assert got[k].abs().sum() == 0
                continue
            if encoder == "ctrnn":
                left, right = binarize_head_outward(d["parent"])
                node = {i: x[i] for i in range(m)}
                for q, (a, b) in enumerate(zip(left, right)):
                    node[m + q] = torch.tanh(system.W[0] @ node[int(a)] + system.W[1] @ node[int(b)])
                want = node[m + len(left) - 1] if m > 1 else x[0]
            else:
                if encoder == "chain":
                    parent, slot, ell = np.append(np.arange(1, m), -1), np.zeros(m, np.int64), None
                else:
                    parent = d["parent"]
                    slot = d["side"] * system.max_rank + d["rank"] if encoder == "dtrnn" else d["rel"]
                    ell = torch.from_numpy(subtree_sizes(parent)).double()
                    assert ell.tolist() == d["ell"].tolist()
                h = compose_reference(
                    x @ system.W_v.T, parent, np.maximum(slot, 0), system.W, ell, None if ell is None else 1 / ell
                )
                want = h[int(np.nonzero(parent < 0)[0][0])]
            torch.testing.assert_close(got[k], want)
    b = make_batches(tr, 4, seed=0, epoch=0)[0]
    system.use_training_split(tr)
    system.train()
    neg = system._negatives
    imgs, all_img, all_sent, img_of = neg.images, neg.image_rows, neg.sentence_rows, neg.image_of
    enc_i, enc_s = (
        system.encode_images(tr.images.take(tr.sentence_image[b])),
        system.encode_sentences(tr.sentences.take(b)),
    )
    cost, parts = system.loss(enc_i, enc_s, epoch=0)
    assert enc_i.vec is None and enc_s.vec is None  # a training step of Eq. 5 never encodes its batch apart
    system.eval()
    with torch.no_grad():
        v_all, y_all = system.encode_images(all_img).vec, system.encode_sentences(all_sent).vec
    ok = list(all_sent.index)
    pairs = [(int(np.searchsorted(imgs, tr.sentence_image[j])), ok.index(int(j))) for j in b]
    assert parts["hinge"] == pytest.approx(hinge_all_negatives_reference(v_all, y_all, pairs, img_of, 3.0))
    assert float(cost.detach()) == pytest.approx(parts["hinge"] + 0.08 * parts["reg"])


@pytest.mark.parametrize("encoder", ["chain", "dtrnn", "sdtrnn"])
def test_word_map_once_per_distinct_word_equals_once_per_node(encoder):
    """The encoders take ``W_v x`` once per distinct word and gather it to the nodes: the same vectors as
    ``W_v`` applied at every node (the former code), to the bit in float32 (each row is its own dot
    products); the gradients agree to float tolerance (W_v's is summed per word first)."""
    from fraglib.systems.socher import Config, SocherSystem
    from fraglib_study.bench.common import random_split

    train, dims = random_split(12, 5, img_dim=8, seed=2)
    system = SocherSystem(Config(encoder=encoder, init_noise=0.3), dims, 0)
    system.prepare(train)
    rows = train.sentences.take(np.arange(train.n_sentences))
    st = system.structure(rows)
    assert len(st.vocab) < len(st.parent)  # words repeat: fewer products than nodes
    w_out = torch.randn(rows.n, dims["word_dim"], generator=torch.Generator().manual_seed(0))
    new = system._sentence_vectors(rows, st)
    x = system.words[rows.data["w1"]] / system.word_scale  # the per-node formulation
    weight = st.ell.float() if st.ell is not None else None
    h = compose(
        x @ system.W_v.T,
        st.parent,
        st.slot,
        system.W,
        weight,
        None if weight is None else 1 / weight,
        schedule=st.plan,
        roots_only=True,
    )
    old = torch.zeros_like(new).index_copy(0, st.root_items, h)
    assert torch.equal(new, old)
    params = (system.W_v, system.W)
    for a, b in zip(torch.autograd.grad((new * w_out).sum(), params), torch.autograd.grad((old * w_out).sum(), params)):
        assert (a - b).abs().max() <= 1e-5 * a.abs().max()  # float32 sums in another order


# ------------------------------------------------------------------ sampled negatives (systems.socher.negatives)
def _sampling_system(negatives, encoder="dtrnn", seed=0, n_images=40):
    """A float64 Socher system with ``negatives`` on a random training split of ``n_images`` images × 5
    sentences (fraglib_study.bench.common.random_split), in training mode: (system, split, first batch of 8)."""
    from fraglib.run.inputs import make_batches
    from fraglib.systems.socher import Config, SocherSystem
    from fraglib_study.bench.common import random_split

    train, dims = random_split(n_images, 5, img_dim=8, seed=2)
    system = SocherSystem(Config(encoder=encoder, init_noise=0.3, negatives=negatives), dims, seed).double()
    system.prepare(train)
    system.use_training_split(train)
    system.train()
    return system, train, make_batches(train, 8, seed=0, epoch=0)[0]


def _step_loss(system, train, b, epoch=0):
    return system.loss(
        system.encode_images(train.images.take(train.sentence_image[b])),
        system.encode_sentences(train.sentences.take(b)),
        epoch,
    )


@pytest.mark.parametrize("encoder", ["bow", "chain", "ctrnn", "dtrnn", "sdtrnn"])
def test_sampled_negatives_covering_the_split_equal_eq5_and_its_gradients(encoder):
    """n ≥ the training split, drawn without replacement, is every sentence and image once, weights M/M = N/N
    = 1: the loss and every gradient are Eq. 5's (``negatives: 0``)."""
    exact, train, b = _sampling_system(0, encoder)
    sampled, *_ = _sampling_system(10**6, encoder)
    got = []
    for s in (exact, sampled):
        cost, parts = _step_loss(s, train, b)
        got.append((cost, parts, torch.autograd.grad(cost, list(s.parameters()))))
    assert float(got[1][0].detach()) == pytest.approx(float(got[0][0].detach()), rel=1e-12)
    assert got[1][1]["hinge"] == pytest.approx(got[0][1]["hinge"], rel=1e-12)
    for a, c in zip(got[0][2], got[1][2]):
        torch.testing.assert_close(c, a, rtol=1e-10, atol=1e-12)


def test_sampled_eq5_is_unbiased_over_every_subset():
    """The estimator itself (hinge_all_negatives with drawn ids and weights M/n, N/n) averaged over *every*
    pair of n-subsets equals Eq. 5 by loops exactly: the weights and exclusions make it unbiased."""
    import itertools

    g = torch.Generator().manual_seed(4)
    v_all = torch.randn(5, 3, generator=g, dtype=torch.float64)
    y_all = torch.randn(12, 3, generator=g, dtype=torch.float64)
    img_of = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4])
    pairs = [(0, 1), (1, 4), (3, 7), (4, 11)]
    k, j = torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])
    n_s, n_i = 3, 2
    total, count = 0.0, 0
    for cs in itertools.combinations(range(12), n_s):
        for ci in itertools.combinations(range(5), n_i):
            cs_t, ci_t = torch.tensor(cs), torch.tensor(ci)
            total += float(
                hinge_all_negatives(
                    v_all[k],
                    y_all[j],
                    v_all[ci_t],
                    y_all[cs_t],
                    k,
                    img_of[cs_t],
                    1.5,
                    image_ids=ci_t,
                    sentence_weight=12 / n_s,
                    image_weight=5 / n_i,
                )
            )
            count += 1
    assert total / count == pytest.approx(hinge_all_negatives_reference(v_all, y_all, pairs, img_of, 1.5), rel=1e-12)


def test_sampled_negatives_mean_over_draws_approaches_eq5():
    """The system's sampled loss (its own draws, n = 20 of 200 sentences and of 40 images) averaged over
    300 steps is Eq. 5 by loops (from the eval-mode encodings) within 4 standard errors."""
    system, train, b = _sampling_system(20)
    with torch.no_grad():
        draws = np.array([_step_loss(system, train, b)[1]["hinge"] for _ in range(300)])
    neg = system._negatives
    system.eval()
    with torch.no_grad():
        v_all, y_all = system.encode_images(neg.image_rows).vec, system.encode_sentences(neg.sentence_rows).vec
    pairs = [
        (int(np.searchsorted(neg.images, train.sentence_image[q])), int(np.searchsorted(neg.sentences, q))) for q in b
    ]
    exact = hinge_all_negatives_reference(v_all, y_all, pairs, neg.image_of, 3.0)
    se = draws.std() / len(draws) ** 0.5
    assert draws.std() > 0 and abs(draws.mean() - exact) < 4 * se


def test_sampled_negatives_compose_only_the_batch_and_the_drawn_trees(monkeypatch):
    """A step composes each tree of (batch ∪ drawn sentences) once, never the rest of the split; Eq. 5's
    exact form composes every training tree."""
    import fraglib.systems.socher as socher

    composed = []
    real = socher.compose

    def counting(x, parent, *args, **kw):
        composed.append(int((np.asarray(parent) < 0).sum()))  # trees = roots
        return real(x, parent, *args, **kw)

    monkeypatch.setattr(socher, "compose", counting)
    system, train, b = _sampling_system(16)
    drawn = []
    draw = system.draw_negatives
    monkeypatch.setattr(system, "draw_negatives", lambda epoch: drawn.append(draw(epoch)) or drawn[-1])
    for _ in range(3):
        _step_loss(system, train, b)
    M = len(system._negatives.sentences)
    for n_trees, (cs, ci) in zip(composed, drawn):
        assert len(cs) == len(ci) == 16
        want = len(np.union1d(np.searchsorted(system._negatives.sentences, b), cs))
        assert n_trees == want <= len(b) + 16 < M
    assert len(composed) == 3
    composed.clear()
    exact, train, b = _sampling_system(0)
    _step_loss(exact, train, b)
    assert composed == [M]


def test_sampled_negatives_are_a_function_of_seed_epoch_and_step():
    """Same seed: the same draws and losses step by step; another step, epoch or seed draws otherwise; a
    fresh system (a run resumed at epoch 1) draws at epoch 1 what the uninterrupted one drew there."""
    a, train, b = _sampling_system(10)
    a2, *_ = _sampling_system(10)
    la = [_step_loss(a, train, b, e)[1]["hinge"] for e in (0, 0, 0, 1, 1)]
    assert la == [_step_loss(a2, train, b, e)[1]["hinge"] for e in (0, 0, 0, 1, 1)]
    assert len(set(la)) == 5
    resumed, *_ = _sampling_system(10)
    assert [_step_loss(resumed, train, b, 1)[1]["hinge"] for _ in range(2)] == la[3:]
    other, *_ = _sampling_system(10, seed=1)
    d0, d1 = _sampling_system(10)[0].draw_negatives(0), other.draw_negatives(0)
    assert not (np.array_equal(d0[0], d1[0]) and np.array_equal(d0[1], d1[1]))


def test_sampled_negatives_resume_after_a_kill_equals_uninterrupted(tiny_full, tmp_path):
    """The trainer: a DT-RNN with sampled negatives, killed after 2 epochs and resumed, ends as an
    uninterrupted run (metrics, history), and two runs of one seed agree."""
    from fraglib.run.train import resolve_run, train

    from conftest import tiny_params

    spec = resolve_run(tiny_params(r={"system": "socher", "negatives": 7}), "r")
    cpu = torch.device("cpu")
    train(DataPaths(tiny_full), tmp_path / "a", spec, tiny_eval(), device=cpu, progress=False)
    train(DataPaths(tiny_full), tmp_path / "b", spec, tiny_eval(), device=cpu, progress=False)
    assert train(DataPaths(tiny_full), tmp_path / "c", spec, tiny_eval(), device=cpu, progress=False, stop_after=2) == {
        "stopped_at_epoch": 2
    }
    train(DataPaths(tiny_full), tmp_path / "c", spec, tiny_eval(), device=cpu, progress=False)
    for f in ("metrics.json", "history.csv"):
        assert (tmp_path / "b" / f).read_text() == (tmp_path / "a" / f).read_text()
        assert (tmp_path / "c" / f).read_text() == (tmp_path / "a" / f).read_text()


@pytest.mark.parametrize(
    "over, why",
    [
        ({"negatives": -1}, "out of range"),
        ({"negatives": 2.5}, "expected int"),
        ({"negatives": True}, "expected int"),
        ({"negatives": 64, "loss": "squared"}, "loss: squared has no negatives"),
    ],
)
def test_bad_negatives_are_refused_by_name(over, why):
    from fraglib.core.config import ConfigError
    from fraglib.run.train import resolve_run

    from conftest import tiny_params

    with pytest.raises(ConfigError, match=rf"systems\.socher\.negatives=.*{why}"):
        resolve_run(tiny_params(r={"system": "socher"}), "r", extra=over)
    with pytest.raises(ConfigError, match=r"runs\.r\.negatives|systems\.socher\.negatives"):
        resolve_run(tiny_params(r={"system": "socher", **over}), "r")
    assert resolve_run(tiny_params(r={"system": "socher"}), "r").system_config.negatives == 0  # the paper's Eq. 5


def test_cca_recovers_known_canonical_correlations():
    """x1 ~ N(0,1), y1 = ρ1 x1 + sqrt(1-ρ1²) e; x2, y2 likewise with ρ2; other dimensions
    independent noise: the canonical correlations are ρ1 > ρ2 > 0 (in that order)."""
    from fraglib.systems.kcca import cca

    rng = np.random.default_rng(0)
    n, r1, r2 = 20000, 0.9, 0.5
    x = rng.standard_normal((n, 5))
    y = rng.standard_normal((n, 4))
    y[:, 0] = r1 * x[:, 0] + np.sqrt(1 - r1**2) * rng.standard_normal(n)
    y[:, 1] = r2 * x[:, 1] + np.sqrt(1 - r2**2) * rng.standard_normal(n)
    mix_x, mix_y = rng.standard_normal((5, 5)), rng.standard_normal((4, 4))  # CCA is invariant to these
    A, B, rho = cca(x @ mix_x, y @ mix_y, reg=1e-8, p=3)
    np.testing.assert_allclose(rho[:2], [r1, r2], atol=0.01)
    assert rho[2] < 0.05
    u, v = (x @ mix_x - (x @ mix_x).mean(0)) @ A, (y @ mix_y - (y @ mix_y).mean(0)) @ B
    np.testing.assert_allclose(np.corrcoef(u[:, 0], v[:, 0])[0, 1], r1, atol=0.01)
    np.testing.assert_allclose(u.T @ u / n, np.eye(3), atol=0.02)  # unit variance, uncorrelated


@pytest.mark.parametrize("dx, dy", [(30, 12), (12, 30)])
def test_cca_equals_the_inverse_square_root_reference(dx, dy):
    """The Cholesky-whitened solution equals C^{-1/2} whitening + SVD written from the equations: the same ρ
    and, up to each direction's sign, the same canonical variates (both orientations of M)."""
    from fraglib.systems.kcca import cca

    rng = np.random.default_rng(1)
    z = rng.standard_normal((500, 4))
    X = np.tanh(np.c_[z, rng.standard_normal((500, 3))] @ rng.standard_normal((7, dx)))
    Y = np.c_[z, rng.standard_normal((500, 2))] @ rng.standard_normal((6, dy)) + 0.1 * rng.standard_normal((500, dy))
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    Cxx, Cyy, Cxy = Xc.T @ Xc / 500, Yc.T @ Yc / 500, Xc.T @ Yc / 500
    Cxx, Cyy = (C + 0.1 * np.trace(C) / len(C) * np.eye(len(C)) for C in (Cxx, Cyy))

    def inv_sqrt(C):
        w, V = np.linalg.eigh(C)
        return V @ np.diag(w**-0.5) @ V.T

    U, rho_ref, Vt = np.linalg.svd(inv_sqrt(Cxx) @ Cxy @ inv_sqrt(Cyy))
    A_ref, B_ref = inv_sqrt(Cxx) @ U[:, :5], inv_sqrt(Cyy) @ Vt[:5].T
    A, B, rho = cca(X, Y, reg=0.1, p=5)
    np.testing.assert_allclose(rho, rho_ref[:5], rtol=1e-9)
    for got, ref, V in ((A, A_ref, Xc), (B, B_ref, Yc)):
        sign = np.sign(((V @ got) * (V @ ref)).sum(0))
        np.testing.assert_allclose(V @ got * sign, V @ ref, atol=1e-8)


def squared_dtrnn(dataset_dir, **over):
    """A float64 squared-loss DT-RNN (settings ``over``) prepared on ``dataset_dir``'s training split:
    (system, train split, run spec, system class, dims)."""
    from fraglib.run.inputs import load_splits
    from fraglib.run.train import resolve_run
    from fraglib.systems import SYSTEMS

    from conftest import tiny_params

    spec = resolve_run(tiny_params(r={"system": "socher", "encoder": "dtrnn", "loss": "squared", **over}), "r")
    cls = SYSTEMS["socher"]
    splits, dims, _ = load_splits(DataPaths(dataset_dir), cls.views(spec.system_config), torch.device("cpu"))
    system = cls(spec.system_config, dims, 0).double()
    tr = splits["train"]
    system.prepare(tr)
    system.use_training_split(tr)
    return system, tr, spec, cls, dims


def test_squared_loss_alternates_between_the_image_map_and_the_sentence_model(tiny_full):
    """Table 2's scheme: W_I alone in even epochs (sentence vectors fixed), θ alone in odd ones;
    the loss is the batch's mean ‖v − y‖² + λ‖trained part‖², scores are −‖v − y‖."""
    from fraglib.run.inputs import make_batches
    from fraglib.run.train import TrainConfig, make_optimizer

    system, tr, spec, cls, dims = squared_dtrnn(tiny_full, alternate_epochs=2, lam=0.5)
    assert [system.phase(e) for e in range(5)] == [
        "image map",
        "image map",
        "sentence model",
        "sentence model",
        "image map",
    ]
    b = make_batches(tr, 6, seed=0, epoch=0)[0]
    opt = make_optimizer(TrainConfig(optimizer="adagrad", lr=0.1), system.parameters())
    for epoch, moved, kept in ((0, ["W_I"], ["W", "W_v"]), (2, ["W", "W_v"], ["W_I"])):
        before = {n: p.detach().clone() for n, p in system.named_parameters()}
        imgs, sents = (
            system.encode_images(tr.images.take(tr.sentence_image[b])),
            system.encode_sentences(tr.sentences.take(b)),
        )
        cost, parts = system.loss(imgs, sents, epoch)
        v, y = imgs.vec.detach(), sents.vec.detach()
        want_sq = sum(float(((v[p] - y[p]) ** 2).sum()) for p in range(len(b))) / len(b)
        want_reg = sum(float((before[n] ** 2).sum()) for n in moved)
        assert parts["squared"] == pytest.approx(want_sq) and parts["reg"] == pytest.approx(want_reg)
        assert float(cost.detach()) == pytest.approx(want_sq + 0.5 * want_reg)
        opt.zero_grad(set_to_none=True)
        cost.backward()
        opt.step()
        after = dict(system.named_parameters())
        assert all(not torch.equal(after[n], before[n]) for n in moved)
        assert all(torch.equal(after[n], before[n]) for n in kept)
        S = system.scores(imgs, sents)
        assert float(S.detach()[1, 2]) == pytest.approx(-float((v[1] - y[2]).norm()))
    bow = cls(dataclasses.replace(spec.system_config, encoder="bow"), dims, 0)
    assert {bow.phase(e) for e in range(6)} == {"image map"}  # θ is empty for BoW


def test_ridge_image_map_is_the_minimiser_of_the_squared_loss_over_all_pairs(tiny_full):
    """``w_step: ridge``: before each round W_I is the exact minimiser of (1/N) Σ_p ‖W z_p − y_p‖² + λ‖W‖²
    over the training pairs (y from the current θ): the objective's gradient in W_I vanishes, a lstsq of
    the stacked system gives the same W, and every epoch then trains θ alone."""
    from fraglib.core.batches import mean_rows
    from fraglib.systems.socher import ridge_map

    system, tr, *_ = squared_dtrnn(tiny_full, w_step="ridge", alternate_epochs=2, lam=0.3)
    assert {system.phase(e) for e in range(4)} == {"sentence model"}
    before = system.W_I.detach().clone()
    with torch.no_grad():
        system.begin_epoch(1)  # mid-round: nothing
    assert torch.equal(system.W_I, before)
    with torch.no_grad():
        system.begin_epoch(2)
    ok = np.nonzero(tr.usable_sentences())[0]
    W = system.W_I.detach().clone().requires_grad_(True)
    imgs = tr.images.take(tr.sentence_image[ok])
    z = (mean_rows(imgs.data["x"], imgs.owner, imgs.n).double() - system.img_mean) / system.img_std
    y = system.encode_sentences(tr.sentences.take(ok)).vec.detach()
    J = ((z @ W.T - y) ** 2).sum(1).mean() + 0.3 * (W**2).sum()
    J.backward()
    assert float(W.grad.abs().max()) < 1e-9 * max(1.0, float(W.abs().max()))
    N, d = z.shape
    stacked = torch.cat([z, (N * 0.3) ** 0.5 * torch.eye(d, dtype=z.dtype)])  # [Z; √(Nλ) I] Wᵀ ≈ [Y; 0]
    want = torch.linalg.lstsq(stacked, torch.cat([y, y.new_zeros((d, y.shape[1]))])).solution.T
    torch.testing.assert_close(system.W_I.detach(), want, rtol=1e-7, atol=1e-9)
    one = ridge_map(torch.tensor([[2.0]]), torch.tensor([3]), torch.tensor([[3.0, -6.0]]), 0.0)  # by hand: 3 pairs
    torch.testing.assert_close(one, torch.tensor([[0.5], [-1.0]]))  # z = 2, y = (1, −2): W = y / z
