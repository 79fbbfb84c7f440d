"""A one-layer GRU over a packed sequence whose CPU backward takes time linear in the sequence length.

``torch.nn.GRU`` on the CPU runs its recurrence as a loop of ATen ops (``aten/src/ATen/native/RNN.cpp``:
the input projection of every token at once, then one cell per time step on a narrowed slice of it).
Autograd then takes each step's slice gradient as a zero-filled tensor of the *whole* packed sequence
and adds it to the others: O(T²) fills and adds for T steps, ~15 % of an STT training step
(docs/scale.md). :func:`packed_gru` runs the same forward ops and writes each step's gradient into
place instead. It repeats every floating-point operation of the ATen path in the same order, with the
same operand layouts, so outputs and gradients are **bit-identical** to ``nn.GRU``'s
(tests/test_gru.py). The cell (``r``, ``z`` gates, new gate ``n``)::

    r = σ(W_hr h + b_hr + gi_r)    z = σ(W_hz h + b_hz + gi_z)    n = tanh(gi_n + r ⊙ (W_hn h + b_hn))
    h' = (h − n) ⊙ z + n           with gi = W_i x + b_i for every token at once

On other devices (cuDNN's fused kernels), under autocast, without gradients, or for other GRU
shapes it calls the module itself.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence


def packed_gru(gru: nn.GRU, x: PackedSequence, h0: torch.Tensor | None = None) -> tuple[PackedSequence, torch.Tensor]:
    """``gru(x, h0)`` for a one-layer, one-direction ``gru`` with biases: (outputs as a PackedSequence
    (Σ steps, H), final states (1, B, H) in the caller's order); ``h0`` (1, B, H) or None (zeros)."""
    d = x.data
    if (
        d.device.type != "cpu"
        or d.dtype != torch.float32
        or not torch.is_grad_enabled()
        or torch.is_autocast_enabled("cpu")
        or gru.num_layers != 1
        or gru.bidirectional
        or not gru.bias
        or getattr(gru, "proj_size", 0)
    ):
        return gru(x, h0)
    sizes = [int(s) for s in x.batch_sizes]
    if h0 is None:
        h = d.new_zeros(sizes[0], gru.hidden_size)
    else:
        h = (h0 if x.sorted_indices is None else h0.index_select(1, x.sorted_indices))[0]  # as nn.GRU permutes
    gi = nn.functional.linear(d, gru.weight_ih_l0, gru.bias_ih_l0)  # every token's input gates at once
    y, hn = _Recurrence.apply(gi, h, gru.weight_hh_l0, gru.bias_hh_l0, sizes)
    hn = hn[None]
    if x.unsorted_indices is not None:
        hn = hn.index_select(1, x.unsorted_indices)
    return PackedSequence(y, x.batch_sizes, x.sorted_indices, x.unsorted_indices), hn


class _Recurrence(torch.autograd.Function):
    """The GRU recurrence over packed input gates ``gi`` (Σ, 3H) from states ``h`` (B, H) with ``w`` (3H, H),
    ``b`` (3H,) and the packed ``sizes`` (rows per step, non-increasing): (outputs (Σ, H), final states
    (B, H)). Forward and backward repeat ATen's ops and its autograd's order of sums (module docstring)."""

    @staticmethod
    def forward(ctx, gi, h, w, b, sizes):  # type: ignore[override]
        ctx.save_for_backward(w, h)  # their version counters guard against in-place edits
        ctx.set_materialize_grads(False)  # an unused output's gradient is None, not zeros
        wt = w.t()
        outs, finals, steps = [], [], []
        off, last = 0, sizes[0]
        for bs in sizes:
            if bs < last:  # sequences that ended: their final states
                finals.append(h.narrow(0, bs, last - bs))
                h = h.narrow(0, 0, bs)
            hg = torch.addmm(b, h, wt)
            hr, hz, hn = hg.unsafe_chunk(3, 1)
            ir, iz, i_n = gi.narrow(0, off, bs).unsafe_chunk(3, 1)
            r = hr.add_(ir).sigmoid_()
            z = hz.add_(iz).sigmoid_()
            hn0 = hn.clone()  # autograd's copy of mul_'s input
            n = i_n.add(hn.mul_(r)).tanh_()
            diff = h - n
            steps.append((h, r, z, n, hn0, diff))
            h = (diff * z).add_(n)
            outs.append(h)
            off, last = off + bs, bs
        finals.append(h)
        ctx.sizes, ctx.steps = sizes, steps
        return torch.cat(outs, 0), torch.cat(finals[::-1], 0)

    @staticmethod
    def backward(ctx, dy, dhn):  # type: ignore[override]
        (w, _), sizes, steps = ctx.saved_tensors, ctx.sizes, ctx.steps
        ctx.steps = None
        starts = [0]
        for bs in sizes[:-1]:
            starts.append(starts[-1] + bs)
        dgi = w.new_empty(starts[-1] + sizes[-1], w.shape[0])
        gw = gb = dh = None
        sub = mm = None  # step t+1's two gradients for its input state
        for t in reversed(range(len(sizes))):
            bs, nxt = sizes[t], (sizes[t + 1] if t + 1 < len(sizes) else 0)
            a = None if dy is None else dy.narrow(0, starts[t], bs)
            fin = None if dhn is None or nxt == bs else dhn.narrow(0, nxt, bs - nxt)  # rows that end here
            if sub is None:  # the last step: its output and the final state
                g = _add(a, fin)
            elif nxt == bs:  # state read whole by step t+1: three terms in turn
                g = sub + mm if a is None else (a + sub) + mm
            else:  # read through two slices (narrow): summed apart
                top, bottom = sub + mm, fin
                if a is not None:
                    top, bottom = a.narrow(0, 0, nxt) + top, _add(a.narrow(0, nxt, bs - nxt), bottom)
                if bottom is None:
                    bottom = top.new_zeros(bs - nxt, top.shape[1])
                g = torch.cat([top, bottom], 0)
            h, r, z, n, hn0, diff = steps[t]
            d_diff = g * z
            dz = g * diff
            da = torch.ops.aten.tanh_backward(g + d_diff.neg(), n)
            d_hn = da * r
            dar = torch.ops.aten.sigmoid_backward(da * hn0, r)
            daz = torch.ops.aten.sigmoid_backward(dz, z)
            dhg = torch.cat([dar, daz, d_hn], 1)
            torch.cat([dar, daz, da], 1, out=dgi.narrow(0, starts[t], bs))
            g_w, g_b = dhg.t().mm(h), dhg.sum(0)
            gw, gb = (g_w, g_b) if gw is None else (gw + g_w, gb + g_b)
            sub, mm = d_diff, (dhg.mm(w) if t or ctx.needs_input_grad[1] else None)
            if t == 0 and ctx.needs_input_grad[1]:
                dh = sub + mm
        return dgi, dh, gw, gb, None


def _add(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return a if b is None else b if a is None else a + b
