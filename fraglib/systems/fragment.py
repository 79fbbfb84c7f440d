"""The fragment embedding model of Karpathy, Joulin & Fei-Fei (2014) and its ablations (docs/method.md).

* sentence fragment: ``s = ReLU(W_R [W_e w1 ; W_e w2] + b_R)``, one ``(W_R, b_R)`` per relation type
  (the BOW and bigram views have a single type), ``W_e`` fixed GloVe vectors;
* image fragment: ``v = W_m x + b_m`` on the standardised CNN descriptor ``x`` of a detection;
* image–sentence score ``S_kl`` and the objectives C_0 / C_F (MIL) / C_G: :mod:`fraglib.systems.objectives`.

Every ablation of the paper's Table 2 is a setting of :class:`Config` (docs/systems.md lists them).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from fraglib.core.batches import FRAGMENT_VIEWS, IMAGE_SIGNAL_VIEWS, Rows, Views
from fraglib.core.config import ConfigError, check_choice, check_range
from fraglib.core.device import to_device
from fraglib.systems.base import System, add_input_buffers, check_finetune, fill_input_buffers, image_map
from fraglib.systems.cnn import tuned_cnn
from fraglib.systems.objectives import bag_entries, fragment_scores, pair_scores, total_cost


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.fragment``."""

    images: str = "rcnn"  # rcnn | groundtruth | fullframe | top36 (the image view)
    detections: int = 0  # > 0: the view's first k detections per image (its ranking) + full frame
    sentences: str = "dependency"  # dependency | bow | bigram (the sentence view)
    embed_dim: int = 1000  # h: dimension of the joint space
    dense_epochs: int = 10  # C_0 for these epochs, then C_F (MIL); >= epochs: never MIL
    fragment_weight: float = 1.0  # weight of C_0 / C_F; 0: global objective only
    beta: float = 1.0  # weight of C_G; 0: fragment objective only
    alpha: float = 1e-5  # weight of ||θ||² (weight matrices, not biases)
    margin: float = 1.0  # Δ of C_G
    smooth: float = 5.0  # n of S_kl
    accumulate: str = "sum"  # sum (paper) | max (released code)
    normalize: bool = True  # per-sentence-fragment normalisation of C_0 / C_F
    cosine_scale: float = 0.0  # 0: raw inner products (paper); > 0: unit-norm fragments, M = scale · cosine
    hardest: bool = False  # C_G with the hardest negative per image / sentence only (VSE++)
    hardest_after: int = 0  # with hardest: epochs of the summed C_G first (VSE++'s warm-up)
    tune_words: bool = False  # word vectors train too (from GloVe; their offset counts in α ||θ||²)
    finetune: int = 0  # > 0: the CNN's last N blocks train with the system (pixels, no cache)
    finetune_lr_scale: float = 0.1  # their learning rate, × train.lr

    def validate(self) -> "Config":
        p = "systems.fragment"
        check_choice(f"{p}.images", self.images, IMAGE_SIGNAL_VIEWS)
        check_choice(f"{p}.sentences", self.sentences, FRAGMENT_VIEWS)
        check_choice(f"{p}.accumulate", self.accumulate, ("sum", "max"))
        check_range(f"{p}.embed_dim", self.embed_dim, 1, 100_000, int)
        check_range(f"{p}.detections", self.detections, 0, 10_000, int)
        check_range(f"{p}.dense_epochs", self.dense_epochs, 0, 10_000, int)
        check_range(f"{p}.hardest_after", self.hardest_after, 0, 10_000, int)
        for name in ("fragment_weight", "beta", "alpha", "margin", "smooth"):
            check_range(f"{p}.{name}", getattr(self, name), 0.0, 1e6, float)
        check_range(f"{p}.cosine_scale", self.cosine_scale, 0.0, 1e6, float)
        for name in ("normalize", "hardest", "tune_words"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{p}.{name}={getattr(self, name)!r}: expected true or false")
        check_finetune(p, self)
        if self.fragment_weight == 0 and self.beta == 0:
            raise ConfigError(f"{p}.fragment_weight and {p}.beta are both 0: nothing to train")
        return self


@dataclasses.dataclass
class Fragments:
    """Encoded fragments of n items: ``x`` (R, h), ``owner`` (R,) in [0, n), ``owner_cpu`` the same on
    the CPU (the loss's index bookkeeping runs there, :meth:`~fraglib.core.batches.Rows.cpu`)."""

    x: torch.Tensor
    owner: torch.Tensor
    n: int
    owner_cpu: torch.Tensor | None = None


class FragmentSystem(System):
    """The fragment model. ``dims``: n_words, word_dim, n_relations, img_dim (docs/systems.md)."""

    NAME = "fragment"
    Config = Config

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, cfg.sentences, cfg.finetune > 0, cfg.detections)

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        wd, img_dim = dims["word_dim"], dims["img_dim"]
        add_input_buffers(self, dims)
        bound = 1.0 / math.sqrt(2 * wd)
        self.W_R = nn.Parameter(torch.empty(dims["n_relations"], cfg.embed_dim, 2 * wd).uniform_(-bound, bound))
        self.b_R = nn.Parameter(torch.zeros(dims["n_relations"], cfg.embed_dim))
        self.img = image_map(img_dim, cfg.embed_dim)
        self.cnn = tuned_cnn(cfg, dims)
        self.word_offset = nn.Parameter(torch.zeros(dims["n_words"], wd)) if cfg.tune_words else None

    def prepare(self, train: Any) -> None:
        fill_input_buffers(self, train)

    def phase(self, epoch: int) -> str:
        return "dense" if epoch < self.cfg.dense_epochs else "mil"

    # ----------------------------------------------------------------- encoders
    def unit(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` rescaled to length sqrt(cosine_scale) when it is > 0 (then ``v·s = scale · cos``;
        a zero row stays zero), else ``x`` unchanged."""
        s = self.cfg.cosine_scale
        return x if not s else torch.nn.functional.normalize(x, dim=1) * math.sqrt(s)

    def embed_images(self, x: torch.Tensor) -> torch.Tensor:
        """(R, img_dim) CNN descriptors -> (R, h) image-fragment embeddings."""
        return self.unit(self.img((x - self.img_mean) / self.img_std))

    def embed_sentences(
        self, rel: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, rel_cpu: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(F,) relation ids and word-table rows -> (F, h) sentence-fragment embeddings, never a loop over
        fragments: on a CPU one exact-size product per relation type, on a GPU one batched product of the
        types padded to the most frequent (:func:`relation_maps`; ``rel_cpu``: the ids on the CPU)."""
        words = self.words if self.word_offset is None else self.words + self.word_offset
        x = torch.cat([words[w1], words[w2]], dim=1)
        if self.W_R.shape[0] == 1:
            return self.unit(torch.relu(x @ self.W_R[0].T + self.b_R[0]))
        return self.unit(relation_maps(x, rel, self.W_R, self.b_R, grouped=x.is_cuda, rel_cpu=rel_cpu))

    def encode_images(self, rows: Rows) -> Fragments:
        return Fragments(self.embed_images(self.image_rows(rows)), rows.owner, rows.n, rows.cpu("owner"))

    def encode_sentences(self, rows: Rows) -> Fragments:
        d = rows.data
        return Fragments(
            self.embed_sentences(d["rel"], d["w1"], d["w2"], rows.cpu("rel")), rows.owner, rows.n, rows.cpu("owner")
        )

    def join(self, encs: list[Fragments]) -> Fragments:
        """Fragments of consecutive item lists as one: owners shifted by the items before them."""
        start = np.cumsum([0] + [e.n for e in encs])
        shift = lambda key: torch.cat([getattr(e, key) + int(a) for e, a in zip(encs, start)])  # noqa: E731
        return Fragments(
            torch.cat([e.x for e in encs]),
            shift("owner"),
            int(start[-1]),
            shift("owner_cpu") if all(e.owner_cpu is not None for e in encs) else None,
        )

    # ----------------------------------------------------------------- scores and loss
    def scores(self, images: Fragments, sentences: Fragments) -> torch.Tensor:
        M = fragment_scores(images.x, sentences.x)
        return pair_scores(
            M, images.owner, sentences.owner, images.n, sentences.n, self.cfg.smooth, self.cfg.accumulate
        )

    def regularizer(self) -> torch.Tensor:
        """||θ||² over the weight matrices and the word vectors' offset from GloVe (biases are not regularised)."""
        reg = (self.W_R**2).sum() + (self.img.weight**2).sum()
        return reg if self.word_offset is None else reg + (self.word_offset**2).sum()

    def loss(self, images: Fragments, sentences: Fragments, epoch: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(w_F C_{0|F} + β C_G) / B + α ||θ||²`` for B pairs: per pair, so the learning rate does not
        depend on the batch size."""
        c = self.cfg
        bags = None
        if images.owner_cpu is not None and sentences.owner_cpu is not None and c.fragment_weight:
            sizes = tuple(torch.bincount(f.owner_cpu, minlength=images.n) for f in (images, sentences))
            bags = bag_entries(images.owner, sentences.owner, images.n, sizes)
        cost, parts = total_cost(
            images.x,
            sentences.x,
            images.owner,
            sentences.owner,
            dense=self.phase(epoch) == "dense",
            fragment_weight=c.fragment_weight,
            beta=c.beta,
            margin=c.margin,
            smooth=c.smooth,
            accumulate=c.accumulate,
            normalize=c.normalize,
            hardest=c.hardest and epoch >= c.hardest_after,
            n=images.n,
            bags=bags,
        )
        cost = cost / images.n
        if c.alpha:
            reg = self.regularizer()
            parts["reg"] = reg.detach()
            cost = cost + c.alpha * reg
        return cost, parts


def relation_maps(
    x: torch.Tensor,
    rel: torch.Tensor,
    W: torch.Tensor,
    b: torch.Tensor,
    grouped: bool,
    rel_cpu: torch.Tensor | None = None,
) -> torch.Tensor:
    """``ReLU(W[rel_i] x_i + b[rel_i])`` for every row: ``x`` (F, d), ``rel`` (F,) in [0, T), ``W`` (T, h, d),
    ``b`` (T, h) -> (F, h). Two exact forms of the same sums (equal to float rounding; tests/test_systems.py):

    * ``grouped=False`` (CPU): rows sorted by type, one (count_r, d) @ (d, h) product per type present;
      each matrix is taken once by ``unbind`` (its backward is one stack; ``W[r]`` in the loop gave every
      type a zero-filled gradient of all of ``W``);
    * ``grouped=True`` (GPU): the rows scattered into a zero-padded (T, max count, d) block and one batched
      product: a constant number of kernels where the loop launches several per type (the GPU step is
      bound by launches, not arithmetic), for the padding's extra FLOPs. The types' sizes are counted on
      ``rel_cpu`` (``rel`` on the CPU) when given, so the host never waits for the device."""
    if grouped:
        counts = torch.bincount(rel if rel_cpu is None else rel_cpu, minlength=W.shape[0])
        widest = max(int(counts.max()) if len(rel) else 0, 1)
        counts = to_device(counts, rel.device)
        order = torch.argsort(rel, stable=True)
        pos = torch.empty_like(order)
        pos[order] = torch.arange(len(rel), device=rel.device) - (torch.cumsum(counts, 0) - counts)[rel[order]]
        P = x.new_zeros((W.shape[0], widest, x.shape[1]))
        P = P.index_put((rel, pos), x)
        return torch.relu(torch.baddbmm(b[:, None, :], P, W.transpose(1, 2))[rel, pos])
    order = torch.argsort(rel, stable=True)
    counts = torch.bincount(rel, minlength=W.shape[0]).tolist()
    Ws, bs = W.unbind(0), b.unbind(0)
    pieces = [torch.relu(part @ Ws[r].T + bs[r]) for r, part in enumerate(torch.split(x[order], counts)) if len(part)]
    out = torch.cat(pieces) if pieces else x.new_zeros((0, W.shape[1]))
    inv = torch.empty_like(order)
    inv[order] = torch.arange(len(order), device=order.device)
    return out[inv]
