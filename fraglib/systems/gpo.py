"""VSE∞'s Generalized Pooling Operator (GPO; Chen et al., CVPR 2021, "Learning the Best Pooling Strategy for
Visual Semantic Embedding", §3; the authors' ``lib/modules/aggr/gpo.py`` in github.com/woodfrog/vse_infty).

A set of K feature vectors φ_1 … φ_K ∈ R^D (an image's regions, a caption's words) pools to one vector by a
weighted sum, dimension by dimension, of the values **sorted in descending order** over the set::

    v_d = Σ_{k=1..K} θ_k · max_k({φ_{1,d}, …, φ_{K,d}})        (max_k: the k-th largest; Σ_k θ_k = 1)

so mean pooling (θ_k = 1/K), max pooling (θ_1 = 1) and K-max pooling are special cases. The weights depend on
the position k and the set size K only, never on the features; they come from a small generator:

    p_k = PE(k − 1) ∈ R^{d_pe}                   sine / cosine positional encoding of the position (below)
    h_k = ½ (GRU→(p_1 … p_K)_k + GRU←(p_1 … p_K)_k)   a bidirectional GRU over the K encodings, d_hidden each
                                                  way, the two directions averaged (the authors' code)
    θ_k = softmax_k(w · h_k / τ)                  a linear score without bias, softmax over the K positions
                                                  with temperature τ = 0.1 (the authors' code)

K enters through the sequence the GRU reads: its backward direction starts at position K, so the same position k
gets another weight in a longer set. ``PE(k)_{2i} = sin(k / 10000^{2i/d_pe})``, ``PE(k)_{2i+1} = cos(…)`` (the
Transformer's). Items of one batch have their own K: positions past an item's K take weight 0, and its values are
sorted among its own K rows only.

Exactness (tests/test_gpo.py): a loop over items and dimensions written from these equations (float64, 1e-12);
the authors' module, loaded from its source at test time with our parameters copied in (pooled vectors and
weights, float64 and float32); gradcheck. Differences from their code that change no value: the weights are
computed once per distinct K in the batch (they run the GRU once per item), padding is sorted as −∞ (theirs:
−10000, so a value below −10000 sorts after their padding), the encoding table is computed in float64 and
rounded to the working dtype (theirs: in float32 arithmetic, ~1e-7 · k apart). The state dict has their names
(``gru.*``, ``linear.weight``), so their trained GPO weights load as they are. Not here: their training-time
"size augmentation" (dropping a random 20% of an image's regions).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def positional_encoding(length: int, dim: int, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
    """(length, dim) sine / cosine encodings of positions 0 … length − 1 (``dim`` even): column 2i is
    ``sin(k · 10000^(−2i/dim))``, column 2i + 1 its cosine; computed in float64, returned in ``dtype``."""
    if dim % 2:
        raise ValueError(f"the sine/cosine positional encoding needs an even dimension, got {dim}")
    k = torch.arange(length, dtype=torch.float64)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float64) * (-math.log(10000.0) / dim))
    pe = torch.stack([torch.sin(k * freq), torch.cos(k * freq)], dim=2).reshape(length, dim)
    return pe.to(dtype=dtype, device=device)


class GPO(nn.Module):
    """The Generalized Pooling Operator (module docstring): ``GPO(d_pe, d_hidden, temperature)``; the authors use
    ``GPO(32, 32)`` for images and text, τ = 0.1. Parameters: ``gru`` (a bidirectional one-layer GRU,
    d_pe → d_hidden per direction) and ``linear`` (d_hidden → 1, no bias), PyTorch's default initialisation."""

    def __init__(self, d_pe: int = 32, d_hidden: int = 32, temperature: float = 0.1) -> None:
        super().__init__()
        if d_pe % 2:
            raise ValueError(f"GPO: d_pe must be even (sine/cosine pairs), got {d_pe}")
        self.d_pe, self.d_hidden, self.temperature = d_pe, d_hidden, temperature
        self.gru = nn.GRU(d_pe, d_hidden, 1, batch_first=True, bidirectional=True)
        self.linear = nn.Linear(d_hidden, 1, bias=False)

    def pool_weights(self, lengths: torch.Tensor, device=None) -> torch.Tensor:
        """(B, Kmax) the weights θ of every item, Kmax = max(lengths): row b holds θ_1 … θ_K for K = lengths[b]
        (summing to 1) and zeros after. ``lengths`` (B,) integers ≥ 1, best on the CPU (the GRU's packing reads
        them there); the result is on ``device`` (default: the parameters'). The generator runs once per
        distinct length."""
        lengths = torch.as_tensor(lengths).cpu().long()
        if lengths.numel() == 0:
            raise ValueError("GPO: no items")
        if int(lengths.min()) < 1:
            raise ValueError(f"GPO: every item needs at least one row, got a length {int(lengths.min())}")
        w = self.gru.weight_ih_l0
        device = w.device if device is None else device
        kmax = int(lengths.max())
        sizes, which = torch.unique(lengths, return_inverse=True)  # ascending
        pe = positional_encoding(kmax, self.d_pe, w.dtype, w.device).expand(len(sizes), kmax, self.d_pe)
        packed = pack_padded_sequence(pe, sizes, batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=kmax)  # (U, Kmax, 2 d_hidden)
        h = (out[..., : self.d_hidden] + out[..., self.d_hidden :]) / 2
        scores = self.linear(h)[..., 0] / self.temperature  # (U, Kmax)
        real = torch.arange(kmax, device=scores.device)[None, :] < sizes.to(scores.device)[:, None]
        theta = torch.softmax(scores.masked_fill(~real, float("-inf")), dim=1)
        return theta.to(device)[which.to(device)]

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``features`` (B, K, D), rows past an item's length ignored (any values); ``lengths`` (B,) integers in
        [1, K] → (pooled (B, D), weights θ (B, Kmax)), Kmax = max(lengths) (the authors' forward returns the
        same pair, their weights (B, Kmax, 1))."""
        theta = self.pool_weights(lengths, features.device).to(features.dtype)
        kmax = theta.shape[1]
        if kmax > features.shape[1]:
            raise ValueError(f"GPO: a length {kmax} exceeds the {features.shape[1]} rows given")
        n = torch.as_tensor(lengths).to(features.device)
        pad = (torch.arange(kmax, device=features.device)[None, :] >= n[:, None])[..., None]  # (B, Kmax, 1)
        x = features[:, :kmax].masked_fill(pad, float("-inf"))
        x = x.sort(dim=1, descending=True).values.masked_fill(pad, 0.0)  # each dimension, largest first
        return (x * theta[..., None]).sum(1), theta
