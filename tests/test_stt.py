"""Show, Translate and Tell: the caption loss against a hand-summed reference, caption B, decoding."""

import numpy as np
import pytest
import torch

from fraglib.core.batches import Rows
from fraglib.systems.stt import Config, SttSystem, draw_targets, greedy, teacher_forced_nll

DIMS = {"n_relations": 9, "n_words": 3, "word_dim": 4, "img_dim": 5}


def tiny_stt(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = Config(**{"embed_dim": 6, "word_dim": 5, "hidden": 7, "dec_hidden": 8, "dropout": 0.0, **kw}).validate()
    return SttSystem(cfg, DIMS, seed).double().eval()


def token_rows(captions):
    owner = torch.tensor([k for k, c in enumerate(captions) for _ in c], dtype=torch.long)
    rel = torch.tensor([t for c in captions for t in c], dtype=torch.long)
    return Rows({"rel": rel}, owner, len(captions), np.arange(len(captions)))


def test_teacher_forced_loss_equals_the_hand_summed_reference():
    m = tiny_stt()
    captions = [[3, 1, 4], [1, 5], [2, 6, 5, 3, 0]]  # different lengths: padding and packing
    u = torch.nn.functional.normalize(torch.randn(3, 6, dtype=torch.float64), dim=1)
    got = m.caption_nll(u, token_rows(captions))
    for k, cap in enumerate(captions):  # Eq. 10: -sum_t log P(S_t | S_<t, u), one step at a time
        h = torch.tanh(m.init(u[k : k + 1]))
        x = m.bos[None]
        want = 0.0
        for t in cap + [m.eos]:
            logp, h = m.decoder_step(x, h)
            want -= float(logp[0, t].detach())
            x = m.text.embed(torch.tensor([t])) if t != m.eos else None
        assert float(got[k].detach()) == pytest.approx(want, rel=1e-10)
    # two heads stacked: the same captions decoded from two sets of vectors
    both = m.caption_nll(torch.cat([u, u.flip(0)]), token_rows(captions))
    torch.testing.assert_close(both[:3], got)
    assert not torch.allclose(both[3:], got)


def test_packed_caption_loss_equals_the_padded_grid():
    """The output layer on real positions only (packed) gives the padded grid's loss and gradients."""
    m = tiny_stt(seed=3)
    captions = [[3, 1, 4], [1, 5], [2, 6, 5, 3, 0], [7]]
    u = torch.nn.functional.normalize(torch.randn(8, 6, dtype=torch.float64), dim=1).requires_grad_()
    got, want = m.caption_nll(u, token_rows(captions)), m.caption_nll_padded(u, token_rows(captions))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    params = [u, *m.parameters()]
    for a, b in zip(
        torch.autograd.grad(got.sum(), params, allow_unused=True),
        torch.autograd.grad(want.sum(), params, allow_unused=True),
    ):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_nll_by_hand_on_known_logits():
    logits = torch.zeros(1, 3, 4, dtype=torch.float64)
    logits[0, 0, 2] = np.log(3.0)  # P(2) = 3/6 at step 0
    targets = torch.tensor([[2, 1, 0]])
    got = teacher_forced_nll(logits, targets, torch.tensor([1]))  # steps 0 and 1 count, step 2 is padding
    assert float(got[0]) == pytest.approx(-np.log(0.5) - np.log(0.25))


def scripted(seq, eos, V=6):
    """A step function whose state counts steps and emits ``seq`` then </s> (probability 0.9 each)."""
    calls = []

    def step(x, h):
        calls.append(1)
        t = h[:, 0].long()
        logp = torch.full((len(h), V), np.log(0.1 / (V - 1)), dtype=torch.float64)
        want = torch.tensor([seq[i] if i < len(seq) else eos for i in t.tolist()])
        logp[torch.arange(len(h)), want] = np.log(0.9)
        return logp, h + 1

    return step, calls


def test_greedy_is_deterministic_and_stops_at_the_end_token():
    step, calls = scripted([3, 1, 4], eos=5)
    embed = lambda w: torch.zeros(len(w), 2, dtype=torch.float64)  # noqa: E731
    h = torch.zeros(4, 1, dtype=torch.float64)
    out = greedy(step, embed, h, torch.zeros(2, dtype=torch.float64), eos=5, max_len=10)
    assert out == [[3, 1, 4]] * 4 and len(calls) == 4  # three words, then </s>: four steps
    assert greedy(step, embed, h, torch.zeros(2), eos=5, max_len=2) == [[3, 1]] * 4  # cut at max_len


def test_beam_one_is_greedy_and_a_wider_beam_scores_at_least_as_well():
    m = tiny_stt(seed=1)
    with torch.no_grad():
        m.out.bias[m.eos] = 0.5  # captions end within max_len, so they compare
    u = torch.nn.functional.normalize(torch.randn(6, 6, dtype=torch.float64), dim=1)
    g = greedy(m.decoder_step, m.text.embed, torch.tanh(m.init(u)), m.bos, m.eos, 7)
    assert m.decode(u, beam=1, max_len=7) == g == m.decode(u, beam=1, max_len=7)
    b = m.decode(u, beam=4, max_len=7)

    def logprob(k, cap):
        full = cap + [m.eos] if len(cap) < 7 else cap
        return -float(m.caption_nll(u[k : k + 1], token_rows([cap]))) if full[-1] == m.eos else None

    compared = 0
    for k in range(6):
        lg, lb = logprob(k, g[k]), logprob(k, b[k])
        if lg is not None and lb is not None:  # both ended with </s> within max_len
            assert lb >= lg - 1e-9
            compared += 1
    assert compared > 0 and any(g[k] != b[k] for k in range(6))  # the wider beam found another caption


def test_caption_b_is_another_caption_of_the_image():
    image = np.array([0, 0, 0, 1, 1, 2, 3, 3])
    usable = np.array([True, True, True, True, True, True, True, False])
    draws = np.stack([draw_targets(image, usable, seed=0, epoch=e) for e in range(40)])
    for a in range(len(image)):
        others = {j for j in range(len(image)) if image[j] == image[a] and j != a and usable[j]}
        got = set(draws[:, a].tolist())
        assert got == (others or {a})  # uniform among the others: all seen in 40 draws
    assert (draw_targets(image, usable, 0, 3) == draws[3]).all()  # stateless: a resumed run draws the same
    assert any((draw_targets(image, usable, 1, e) != draws[e]).any() for e in range(40))  # the seed matters


def test_decoding_when_some_captions_end_before_others():
    """</s> has no input embedding: a finished beam must not look it up (it once raised IndexError)."""
    m = tiny_stt(seed=2)
    u = torch.nn.functional.normalize(torch.randn(8, 6, dtype=torch.float64), dim=1)
    lengths = set()
    with torch.no_grad():
        for bias in (0.0, 1.0, 2.0, 3.0):
            m.out.bias[m.eos] = bias
            for beam in (1, 3):
                caps = m.decode(u, beam=beam, max_len=6)
                assert len(caps) == 8 and all(len(c) <= 6 and m.eos not in c for c in caps)
                lengths |= {len(c) for c in caps}
    assert len(lengths) > 1  # some captions did end early


def test_the_decoder_trains_at_its_own_learning_rate_and_every_parameter_once():
    from fraglib.run.train import TrainConfig, make_optimizer, set_lr

    s = tiny_stt(dec_lr_scale=4.0)
    groups = s.lr_groups()
    ids = [id(p) for _, ps in groups for p in ps]
    assert sorted(ids) == sorted(id(p) for p in s.parameters())  # each parameter in one group
    scaled = {id(p) for k, ps in groups if k == 4.0 for p in ps}
    assert id(s.bos) in scaled and id(s.dec.weight_hh_l0) in scaled and id(s.out.weight) in scaled
    assert id(s.text.embed.weight) not in scaled  # the shared embedding: encoder lr
    tc = TrainConfig(optimizer="adam", lr=1e-3, epochs=10, lr_drop=0.1, lr_drop_epochs=2)
    opt = make_optimizer(tc, groups)
    assert sorted(g["lr"] for g in opt.param_groups) == pytest.approx([1e-3, 4e-3])
    set_lr(tc, opt, 9)  # a dropped epoch: both x 0.1
    assert sorted(g["lr"] for g in opt.param_groups) == pytest.approx([1e-4, 4e-4])


def test_a_term_weighted_zero_is_not_computed_and_text_only_needs_it():
    """λ_ic = λ_sim = 0 (text only): the cost is λ_para L_para alone, the image encoder gets no gradient."""
    from fraglib.systems.vse import VseSystem

    full, para = tiny_stt(), tiny_stt(lambda_ic=0.0, lambda_sim=0.0)
    para.load_state_dict(full.state_dict())
    rows = token_rows([[1, 2, 3], [4, 5], [6, 7, 8], [2]])
    img = Rows({"x": torch.randn(4, 5, dtype=torch.double)}, torch.arange(4), 4, np.arange(4))
    tr = type("Split", (), {})()
    tr.sentence_image, tr.usable_sentences = np.array([0, 0, 1, 1]), lambda: np.ones(4, bool)
    tr.sentences = type(
        "S", (), {"take": staticmethod(lambda b: token_rows([[[1, 2, 3], [4, 5], [6, 7, 8], [2]][k] for k in b]))}
    )()
    for s in (full, para):
        s.use_training_split(tr)
    cost_f, parts_f = full.loss(full.encode_images(img), full.encode_sentences(rows), 0)
    cost_p, parts_p = para.loss(para.encode_images(img), para.encode_sentences(rows), 0)
    assert set(parts_p) == {"L_para"} and "L_IC" in parts_f
    assert float(cost_p) == pytest.approx(parts_f["L_para"], rel=1e-12)  # the same decoder, same targets
    sim = VseSystem.loss(full, full.encode_images(img), full.encode_sentences(rows), 0)[0]  # the hinge alone
    assert float(cost_f) == pytest.approx(float(sim) + parts_f["L_IC"] + parts_f["L_para"], rel=1e-12)
    cost_p.backward()
    assert all(p.grad is None for p in para.img.parameters())  # no image term, no image gradient
    with pytest.raises(ValueError, match="images 'none'.*lambda_ic and lambda_sim to 0"):
        Config(images="none").validate()
    with pytest.raises(ValueError, match="both 0"):
        Config(lambda_ic=0.0, lambda_para=0.0).validate()
