"""The fragment embedding model (DESIGN.md §1.1-1.2) and its DeViSE-style baseline.

* sentence fragment: ``s = ReLU(W_R [W_e w1 ; W_e w2] + b_R)``, one ``(W_R, b_R)`` per relation type
  (the BOW and bigram modes have a single type, so one shared W), ``W_e`` fixed;
* image fragment: ``v = W_m x + b_m`` on the standardised CNN descriptor ``x``;
* DeViSE (``devise=True``, DESIGN.md §8): the sentence is one fragment, the mean of its
  L2-normalised word vectors, mapped linearly; the image is one fragment, the mean of its
  detections' descriptors (plus the full frame), mapped linearly.
"""
from __future__ import annotations

import math

import torch
from torch import nn


class FragmentModel(nn.Module):
    """Embeds fragments into ``embed_dim`` dimensions.

    ``words``: (n_words, word_dim) fixed vectors (rows referenced by ``w1``/``w2``);
    ``img_mean``/``img_std``: (img_dim,) standardisation of CNN descriptors (train statistics).
    """

    def __init__(self, words: torch.Tensor, n_relations: int, img_mean: torch.Tensor, img_std: torch.Tensor,
                 embed_dim: int = 1000, devise: bool = False) -> None:
        super().__init__()
        self.devise = devise
        wd = words.shape[1]
        self.register_buffer("words", words.float())
        self.register_buffer("img_mean", img_mean.float())
        self.register_buffer("img_std", img_std.float().clamp_min(1e-6))
        in_dim = wd if devise else 2 * wd
        n_rel = 1 if devise else n_relations
        bound = 1.0 / math.sqrt(in_dim)
        self.W_R = nn.Parameter(torch.empty(n_rel, embed_dim, in_dim).uniform_(-bound, bound))
        self.b_R = nn.Parameter(torch.zeros(n_rel, embed_dim))
        self.img = nn.Linear(img_mean.shape[0], embed_dim)
        nn.init.uniform_(self.img.weight, -1.0 / math.sqrt(img_mean.shape[0]), 1.0 / math.sqrt(img_mean.shape[0]))
        nn.init.zeros_(self.img.bias)

    # ----------------------------------------------------------------- sentences
    def embed_sentences(self, rel: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        """(F,) relation ids and word rows -> (F, embed_dim) sentence-fragment embeddings.

        Fragments are grouped by relation type (a loop over the ≤ ~20 types, never over pairs)."""
        x = torch.cat([self.words[w1], self.words[w2]], dim=1)
        if self.W_R.shape[0] == 1:
            return torch.relu(x @ self.W_R[0].T + self.b_R[0])
        order = torch.argsort(rel, stable=True)
        counts = torch.bincount(rel, minlength=self.W_R.shape[0]).tolist()
        pieces = []
        for r, part in enumerate(torch.split(x[order], counts)):
            if len(part):
                pieces.append(torch.relu(part @ self.W_R[r].T + self.b_R[r]))
        out = torch.cat(pieces) if pieces else x.new_zeros((0, self.W_R.shape[1]))
        inv = torch.empty_like(order)
        inv[order] = torch.arange(len(order), device=order.device)
        return out[inv]

    def embed_devise_sentences(self, w: torch.Tensor, owner: torch.Tensor, n: int) -> torch.Tensor:
        """Mean of L2-normalised word vectors per sentence, mapped linearly -> (n, embed_dim)."""
        e = nn.functional.normalize(self.words[w], dim=1)
        s = e.new_zeros((n, e.shape[1])).index_add_(0, owner, e)
        cnt = torch.bincount(owner, minlength=n).clamp_min(1).to(e.dtype)
        return (s / cnt[:, None]) @ self.W_R[0].T + self.b_R[0]

    # ----------------------------------------------------------------- images
    def embed_images(self, x: torch.Tensor) -> torch.Tensor:
        """(F, img_dim) CNN descriptors -> (F, embed_dim) image-fragment embeddings."""
        return self.img((x - self.img_mean) / self.img_std)

    def regularizer(self) -> torch.Tensor:
        """||θ||² over the weight matrices (biases are not regularised)."""
        return (self.W_R ** 2).sum() + (self.img.weight ** 2).sum()
