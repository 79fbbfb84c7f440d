"""fraglib.systems.gru.packed_gru: bit-identical to torch.nn.GRU on packed sequences (outputs and every gradient)."""

import itertools

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from fraglib.systems import gru as gru_mod
from fraglib.systems.gru import packed_gru


def _run(fn, g, x, lengths, h0, use_y, use_hn):
    """Outputs and gradients (x, every GRU parameter, h0) of one forward + backward through ``fn``."""
    g.zero_grad()
    x.grad = None
    if h0 is not None:
        h0.grad = None
    p = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    y, hn = fn(p, h0)
    gen = torch.Generator().manual_seed(1)
    loss = 0.0
    if use_y:
        loss = loss + (y.data * torch.randn(y.data.shape, generator=gen)).sum()
    if use_hn:
        loss = loss + (hn * torch.randn(hn.shape, generator=gen)).sum()
    loss.backward()
    grads = [x.grad] + [p_.grad for p_ in g.parameters()] + ([h0.grad] if h0 is not None else [])
    return [y.data.detach(), hn.detach()] + [t.clone() for t in grads]


# (batch, input, hidden, longest caption): hidden sizes that are and are not multiples of the SIMD width
SHAPES = [(7, 5, 6, 4), (33, 17, 19, 9), (1, 3, 4, 5), (128, 100, 256, 20)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("use_h0,use_y,use_hn", [c for c in itertools.product([False, True], repeat=3) if c[1] or c[2]])
def test_packed_gru_is_bit_identical_to_nn_gru(shape, use_h0, use_y, use_hn, monkeypatch):
    B, I, H, L = shape
    torch.manual_seed(B + L)
    g = nn.GRU(I, H, batch_first=True)
    x = torch.randn(B, L, I, requires_grad=True)
    lengths = torch.randint(1, L + 1, (B,))
    lengths[0] = L
    h0 = torch.randn(1, B, H, requires_grad=True) if use_h0 else None
    calls = []
    backward = gru_mod._Recurrence.backward
    monkeypatch.setattr(
        gru_mod._Recurrence, "backward", staticmethod(lambda ctx, *a: calls.append(1) or backward(ctx, *a))
    )
    ref = _run(lambda p, h: g(p, h), g, x, lengths, h0, use_y, use_hn)
    new = _run(lambda p, h: packed_gru(g, p, h), g, x, lengths, h0, use_y, use_hn)
    assert calls == [1]  # the linear-time recurrence ran, not nn.GRU
    names = ["outputs", "final states", "x.grad"] + [n for n, _ in g.named_parameters()] + ["h0.grad"]
    for name, a, b in zip(names, ref, new):
        assert torch.equal(a, b), f"{name}: max |diff| {(a - b).abs().max().item()}"


def test_packed_gru_without_gradients_is_the_module_itself():
    torch.manual_seed(0)
    g = nn.GRU(4, 6, batch_first=True)
    p = pack_padded_sequence(torch.randn(3, 5, 4), torch.tensor([5, 2, 3]), batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        y, hn = packed_gru(g, p)
        y2, hn2 = g(p)
    assert torch.equal(y.data, y2.data) and torch.equal(hn, hn2)


def test_sentence_encoder_uses_packed_gru_exactly(monkeypatch):
    """TokenGRU (VSE, attention, STT encoders) gives the gradients it gave with nn.GRU called directly."""
    from fraglib.core.batches import Rows
    from fraglib.systems.vse import TokenGRU

    torch.manual_seed(0)
    enc = TokenGRU(50, 8, 12, 0.0)
    owner = torch.repeat_interleave(torch.arange(6), torch.tensor([3, 1, 5, 2, 4, 4]))
    rows = Rows({"rel": torch.randint(1, 50, (len(owner),))}, owner, 6, np.arange(6))

    def grads():
        enc.zero_grad()
        out, last, _ = enc(rows)
        (out.sum() + 2 * last.sum()).backward()
        return [p.grad.clone() for p in enc.parameters()]

    new = grads()
    monkeypatch.setattr("fraglib.systems.vse.packed_gru", lambda g, p, h0=None: g(p, h0))
    ref = grads()
    assert all(torch.equal(a, b) for a, b in zip(ref, new))


def test_packed_gru_refuses_a_weight_changed_before_backward():
    """A weight edited in place between forward and backward is an error, not a silently wrong gradient."""
    torch.manual_seed(0)
    g = nn.GRU(4, 6, batch_first=True)
    p = pack_padded_sequence(torch.randn(3, 5, 4), torch.tensor([5, 2, 3]), batch_first=True, enforce_sorted=False)
    y, _ = packed_gru(g, p)
    with torch.no_grad():
        g.weight_hh_l0.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.data.sum().backward()
