"""The sentence encoder of Peri's systems (VSE baseline, region–word attention): learned word
embeddings and a 1-layer GRU over the ``tokens`` view (:func:`fraglib.text.fragments.encode_tokens`).

PyTorch's GRU applies the reset gate after the recurrent matrix (``r ⊙ (U_h h + b)``), TensorFlow's
GRUCell (Peri's) before it; the difference is immaterial. Padded positions never reach the recurrence
(packed sequences), so a caption encodes the same alone or in a padded batch.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from fraglib.systems.base import Rows


def padded_tokens(rows: Rows) -> tuple[torch.Tensor, torch.Tensor]:
    """(m, L) int64 vocabulary ids of the m captions of ``rows`` (``data["rel"]``, rows of an item
    contiguous and in order), zero-padded, and their (m,) lengths."""
    lengths = torch.bincount(rows.owner, minlength=rows.n)
    starts = torch.cumsum(lengths, 0) - lengths
    pos = torch.arange(len(rows.owner), device=rows.owner.device) - starts[rows.owner]
    tok = torch.zeros((rows.n, max(int(lengths.max()) if len(rows.owner) else 1, 1)), dtype=torch.long,
                      device=rows.owner.device)
    tok[rows.owner, pos] = rows.data["rel"]
    return tok, lengths


class TokenGRU(nn.Module):
    """Embedding (n_vocab, word_dim), U(±0.1) as in VSE++, and GRU(word_dim → hidden), dropout on
    the embeddings and the outputs."""

    def __init__(self, n_vocab: int, word_dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(n_vocab, word_dim)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        self.gru = nn.GRU(word_dim, hidden, batch_first=True)
        self.drop = nn.Dropout(dropout)

    @torch.no_grad()
    def init_from_glove(self, train_rows: dict[str, torch.Tensor], words: torch.Tensor) -> int:
        """Copy the GloVe vector of every vocabulary word found in the training rows (``rel`` vocabulary
        ids, ``w1`` rows of ``words``; an all-zero row = not in GloVe); ``<unk>`` stays random.
        Returns the number of words initialised."""
        if words.shape[1] != self.embed.weight.shape[1]:
            raise ValueError(f"word_init=glove needs word_dim = {words.shape[1]} (the GloVe table's), "
                             f"got {self.embed.weight.shape[1]}")
        rel, w1 = train_rows["rel"], train_rows["w1"]
        ok = (rel > 0) & (words[w1].abs().sum(1) > 0)
        self.embed.weight[rel[ok]] = words[w1[ok]].to(self.embed.weight.dtype)
        return int(torch.unique(rel[ok]).numel())

    def forward(self, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(outputs (m, L, hidden) zero past each caption's end, final states (m, hidden), lengths (m,)).
        A caption without tokens is read as one ``<unk>`` (its scores are -inf in evaluation anyway)."""
        tok, lengths = padded_tokens(rows)
        x = self.drop(self.embed(tok))
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=tok.shape[1])
        return self.drop(out), self.drop(h[-1]), lengths
