"""Socher et al. 2014 (TACL), *Grounded Compositional Semantics*: the DT-RNN, the SDT-RNN and the
paper's trained baselines (BoW, chain RNN, CT-RNN) as settings of one system (docs/systems.md).

* **Sentence side** (``encoder``), on fixed 50-d GloVe vectors divided by one global scalar (the
  table's standard deviation) so that tanh does not saturate at the leaves; out-of-dictionary words
  stay as nodes with a zero vector. The hidden size is the word size (50, as in the paper):
  ``bow`` — mean of the word vectors (no sentence parameters); ``chain`` — ``h_t = tanh(W_x x_t +
  W_h h_{t-1})``, the last state; ``ctrnn`` — ``h = tanh(W_l c_1 + W_r c_2)`` over the head-outward
  binarisation of the parse, the word vectors as leaves; ``dtrnn`` — Eq. 4 on the basic tree, one
  matrix per child slot (side × nearest-first rank; ranks counted on the whole dataset's parses);
  ``sdtrnn`` — Eq. 4 on the collapsed tree, one matrix per relation of the project's inventory
  (no frequency filter). ``length_weighting: false`` drops ℓ (the paper's ablation). All
  composition matrices start at identity + N(0, ``init_noise``²). The math:
  :mod:`fraglib.systems.recursive`.
* **Image side**: ``v = W_I z``, z the standardised full-frame CNN descriptor (1280-d EfficientNet-Lite
  instead of the paper's 4,096-d network) or the mean of the detections (``images: rcnn``);
  ``W_I ~ N(0, 1/dim z)``, no bias.
* **Objective**: Eq. 5 with *all* training sentences and images as negatives (margin Δ), the mean
  over the batch's pairs, ``+ λ (‖θ‖² + ‖W_I‖²)`` with θ the composition matrices; scores are inner
  products. Train with ``train.optimizer: adagrad`` and ``adagrad_reset: 5`` (the paper's AdaGrad
  with the squared-gradient sums reset every 5 epochs).
* **Sampled negatives** (``negatives: n``, a labelled departure from the paper; default 0 = the exact
  Eq. 5 above). Eq. 5 sums over *every* training sentence and image, so each step composes every
  training tree and an epoch costs O(data²). With n > 0 each step draws n training sentences and n
  training images uniformly **without replacement** from the usable training split (all of them when
  n ≥ the split) and multiplies the sentence sum by M/n and the image sum by N/n (M, N: the split's
  sentences and images): an unbiased estimate of Eq. 5's sums, so the balance of Δ and λ is kept
  (the estimate is noisier, not smaller). Exclusions are Eq. 5's: a drawn sentence of the pair's image
  and the pair's own image are not negatives. A step composes only the batch's and the drawn trees
  (each once), so an epoch's cost is linear in the data. The draw is a function of (seed, epoch, step
  within the epoch) (:meth:`SocherSystem.draw_negatives`), so runs repeat exactly and a run resumed
  after a kill draws what the uninterrupted one drew. ``loss: squared`` has no negatives and refuses
  ``negatives`` > 0 (a :class:`ConfigError` naming ``systems.socher.negatives``). Measured effect:
  docs/systems.md (Socher section).
* **Table 2 variant** (``loss: squared``): ``(1/b) Σ_p ‖v_p − y_p‖²`` over the batch's pairs, scored
  by ``−‖v − y‖`` (also between sentences), trained by the paper's alternation: ``alternate_epochs``
  epochs of ``W_I`` alone (sentence vectors held fixed), then as many of θ alone (image vectors
  held fixed), and so on; λ applies to the parameters being trained. For ``bow`` θ is empty and
  every epoch trains ``W_I`` (a ridge regression onto the mean word vector, by AdaGrad).
  ``w_step: ridge`` solves the ``W_I`` step in closed form instead (:func:`ridge_map`: the same objective
  over all training pairs, y fixed) at the start of every round of ``alternate_epochs`` θ epochs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from torch import nn

from fraglib.core.batches import Rows, Views, mean_rows
from fraglib.core.config import ConfigError, check_choice, check_range
from fraglib.systems.base import System, add_input_buffers, fill_input_buffers
from fraglib.systems.recursive import Plan, compose, hinge_all_negatives, neg_euclidean, plan, squared_loss

ENCODERS = ("bow", "chain", "ctrnn", "dtrnn", "sdtrnn")
LOSSES = ("margin", "squared")
SENTENCE_VIEW = {
    "bow": "bow",
    "chain": "tree_basic",
    "ctrnn": "tree_basic",
    "dtrnn": "tree_basic",
    "sdtrnn": "tree_collapsed",
}


@dataclasses.dataclass(frozen=True)
class Config:
    """``params.yaml: systems.socher``."""

    encoder: str = "dtrnn"  # bow | chain | ctrnn | dtrnn | sdtrnn
    images: str = "fullframe"  # fullframe (paper: one global descriptor) | rcnn (mean of detections)
    margin: float = 3.0  # Δ of Eq. 5
    lam: float = 0.08  # λ on ‖θ‖² + ‖W_I‖²
    length_weighting: bool = True  # Eq. 4's ℓ (dtrnn, sdtrnn)
    init_noise: float = 0.01  # σ of the noise on the identity initialisation
    loss: str = "margin"  # margin (Eq. 5, inner products) | squared (Table 2: ‖v − y‖², −Euclidean)
    alternate_epochs: int = 1  # squared: epochs per phase of the W_I / θ alternation
    w_step: str = "adagrad"  # squared: W_I phase by AdaGrad epochs | ridge (closed form, then θ epochs)
    sentence_cosine: bool = False  # sentence similarity on unit vectors (cosine) instead of the raw measure
    negatives: int = 0  # margin: Eq. 5's negatives per step: 0 = every training sentence and image (the
    # paper); n = n sentences and n images drawn per step (without replacement), sums x M/n, N/n

    def validate(self) -> "Config":
        p = "systems.socher"
        check_choice(f"{p}.encoder", self.encoder, ENCODERS)
        check_choice(f"{p}.images", self.images, ("fullframe", "rcnn", "groundtruth"))
        check_range(f"{p}.margin", self.margin, 0.0, 1e6, float)
        check_range(f"{p}.lam", self.lam, 0.0, 1e6, float)
        check_choice(f"{p}.length_weighting", self.length_weighting, (True, False))
        check_range(f"{p}.init_noise", self.init_noise, 0.0, 10.0, float)
        check_choice(f"{p}.loss", self.loss, LOSSES)
        check_range(f"{p}.alternate_epochs", self.alternate_epochs, 1, 10_000, int)
        check_choice(f"{p}.w_step", self.w_step, ("adagrad", "ridge"))
        check_choice(f"{p}.sentence_cosine", self.sentence_cosine, (True, False))
        check_range(f"{p}.negatives", self.negatives, 0, 1_000_000_000, int)
        if self.negatives and self.loss != "margin":
            raise ConfigError(
                f"{p}.negatives={self.negatives}: sampled negatives belong to Eq. 5 (loss: margin); "
                f"loss: {self.loss} has no negatives, so set negatives: 0 with it"
            )
        return self


@dataclasses.dataclass
class Encoded:
    """n items' positions in their split (``index``) and their vectors ``vec`` (n, 50). In a training step
    of the margin loss ``vec`` is None: Eq. 5 finds the batch's vectors by position in its encoding of the
    whole training split, so the batch is not encoded apart (evaluation runs the system in eval mode)."""

    index: np.ndarray
    vec: torch.Tensor | None


@dataclasses.dataclass
class Negatives:
    """Eq. 5's negatives, the usable training split, fixed for a run: the images' and sentences' split
    positions (``images``, ``sentences``, sorted), their rows, the sentences' :class:`Structure` (None for
    ``bow`` and with sampled negatives), each sentence's image as a position in ``images`` (``image_of``), and what does not depend on
    parameters, computed once: the standardised image descriptors ``z`` (n, d) and, for ``bow``, the
    sentence vectors ``y_fixed`` (m, 50). ``source``: the split's sentences, from which a step with sampled
    negatives (``negatives`` > 0) takes the rows of only the sentences it composes."""

    images: np.ndarray
    sentences: np.ndarray
    image_rows: Rows
    sentence_rows: Rows
    structure: "Structure | None"
    image_of: torch.Tensor
    z: torch.Tensor
    y_fixed: torch.Tensor | None
    source: Any = None


@dataclasses.dataclass
class Structure:
    """What an encoder needs besides parameters, for one batch of sentences: the forest
    (``parent``, ``slot``, its :class:`Plan`), Eq. 4 weights, CT-RNN raw leaves and extra nodes,
    the root node of each item (``roots``, at items ``root_items``), and the word-table rows the
    nodes read: ``vocab`` (V,) the distinct ones, ``word_of_node`` (N,) each node's position in
    ``vocab`` (CT-RNN's binary nodes: V, a zero input)."""

    parent: np.ndarray
    slot: np.ndarray
    plan: Plan
    ell: torch.Tensor | None
    raw: np.ndarray | None
    n_extra: int
    roots: np.ndarray
    root_items: torch.Tensor
    vocab: torch.Tensor
    word_of_node: torch.Tensor


def ridge_map(Z: torch.Tensor, counts: torch.Tensor, Ysum: torch.Tensor, lam: float) -> torch.Tensor:
    """(k, d) W minimising ``(1/N) Σ_p ‖W z_p − y_p‖² + λ ‖W‖²_F`` over N pairs, from each image's
    descriptor ``Z`` (n, d), its number of pairs ``counts`` (n,) and the sum of its pairs' targets
    ``Ysum`` (n, k): ``W = (Σ_p y_p z_pᵀ)(Σ_p z_p z_pᵀ + N λ I)⁻¹`` (in float64)."""
    Z64, c = Z.double(), counts.double()
    A = (Z64 * c[:, None]).T @ Z64 + float(c.sum()) * lam * torch.eye(Z.shape[1], dtype=torch.float64, device=Z.device)
    return torch.linalg.solve(A, Z64.T @ Ysum.double()).T.to(Z.dtype)


def _identity_plus_noise(k: int, n: int, sigma: float, g: torch.Generator) -> torch.Tensor:
    return torch.eye(n).expand(k, n, n) + sigma * torch.randn(k, n, n, generator=g)


class SocherSystem(System):
    """``dims``: n_words, word_dim, img_dim, n_relations and (tree views) max_rank."""

    NAME = "socher"
    Config = Config
    SENTENCE_SPACE = True

    @staticmethod
    def views(cfg: Config) -> Views:
        return Views(cfg.images, SENTENCE_VIEW[cfg.encoder], pooled=True)

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        n, img_dim = dims["word_dim"], dims["img_dim"]
        g = torch.Generator().manual_seed(seed)
        add_input_buffers(self, dims)
        self.register_buffer("word_scale", torch.ones(()))
        self.W_I = nn.Parameter(torch.randn(n, img_dim, generator=g) / img_dim**0.5)
        n_mats = {
            "bow": 0,
            "chain": 1,
            "ctrnn": 2,
            "dtrnn": 2 * dims.get("max_rank", 1),
            "sdtrnn": dims["n_relations"],
        }[cfg.encoder]
        if cfg.encoder in ("chain", "dtrnn", "sdtrnn"):
            self.W_v = nn.Parameter(_identity_plus_noise(1, n, cfg.init_noise, g)[0])
        if n_mats:
            self.W = nn.Parameter(_identity_plus_noise(n_mats, n, cfg.init_noise, g))
        self.max_rank = dims.get("max_rank", 1)
        self._negatives: Negatives | None = None
        self._seed = int(seed)
        self._draws = (-1, 0)  # (epoch, steps drawn in it): sampled negatives (negatives > 0)

    # ------------------------------------------------------------------ inputs
    def prepare(self, train: Any) -> None:
        fill_input_buffers(self, train)
        self.word_scale.copy_(train.words.std().clamp_min(1e-6))

    def use_training_split(self, train: Any) -> None:
        """Keep every usable training image and sentence (Eq. 5's negatives), with the sentences'
        tree structure computed once (the squared loss needs them only for the ridge W_I step)."""
        if self.cfg.loss != "margin" and self.cfg.w_step != "ridge":
            return
        ok = np.nonzero(train.usable_sentences())[0]
        imgs = np.unique(train.sentence_image[ok])
        sents, img_rows = train.sentences.take(ok), train.images.take(imgs)
        bow = self.cfg.encoder == "bow"
        whole = not bow and not self.cfg.negatives  # sampled negatives: structures per step
        with torch.no_grad():
            self._negatives = Negatives(
                imgs,
                ok,
                img_rows,
                sents,
                self.structure(sents) if whole else None,
                torch.from_numpy(np.searchsorted(imgs, train.sentence_image[ok])).to(self.words.device),
                self._standardised(img_rows),
                self._sentence_vectors(sents, None) if bow else None,
                train.sentences,
            )

    # ------------------------------------------------------------------ encoders
    def encode_images(self, rows: Rows) -> Encoded:
        return Encoded(rows.index, None if self._positions_only() else self._image_vectors(rows))

    def _image_vectors(self, rows: Rows) -> torch.Tensor:
        return self._standardised(rows) @ self.W_I.T

    def _standardised(self, rows: Rows) -> torch.Tensor:
        """(n, d) each image's mean descriptor, standardised (no parameters)."""
        return (mean_rows(rows.data["x"], rows.owner, rows.n) - self.img_mean) / self.img_std

    def encode_sentences(self, rows: Rows, structure: Structure | None = None) -> Encoded:
        """(m, 50): the root vector of each sentence's tree (the mean for ``bow``; zeros without rows)."""
        return Encoded(rows.index, None if self._positions_only() else self._sentence_vectors(rows, structure))

    def _positions_only(self) -> bool:
        """A training step of the margin loss reads only the batch's positions (:class:`Encoded`)."""
        return self.training and self.cfg.loss == "margin"

    def _sentence_vectors(self, rows: Rows, st: Structure | None) -> torch.Tensor:
        """The encoder's roots. ``W_v x`` is taken once per distinct word, not once per node (the same
        floats for every node; only W_v's gradient is summed per word first)."""
        if self.cfg.encoder == "bow":
            return mean_rows(self.words[rows.data["w1"]] / self.word_scale, rows.owner, rows.n)
        st = st or self.structure(rows)
        x = self.words[st.vocab] / self.word_scale  # (V, 50)
        if self.cfg.encoder == "ctrnn":  # raw word leaves, zero input at binary nodes
            x = torch.cat([x, x.new_zeros((1, x.shape[1]))])
        else:
            x = x @ self.W_v.T
        weight = st.ell.to(x) if st.ell is not None else None
        h = compose(
            x,
            st.parent,
            st.slot,
            self.W,
            weight,
            None if weight is None else 1.0 / weight,
            st.raw,
            schedule=st.plan,
            roots_only=True,
            rows=st.word_of_node,
        )
        return x.new_zeros((rows.n, x.shape[1])).index_copy(0, st.root_items, h)

    def structure(self, rows: Rows) -> Structure:
        """The forest of ``rows`` for this system's encoder (no parameters involved)."""
        dev = rows.owner.device
        owner = rows.owner.cpu().numpy()
        R = len(owner)
        counts = np.bincount(owner, minlength=rows.n)
        start = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        col = {k: v.cpu().numpy() for k, v in rows.data.items() if k not in ("w1", "w2")}
        ell, raw, n_extra, node_owner = None, None, 0, owner
        if self.cfg.encoder == "chain":  # each word's parent is the next word
            parent = np.append(np.where(owner[1:] == owner[:-1], np.arange(1, R), -1), -1)[:R]
            slot = np.zeros(R, np.int64)
        elif self.cfg.encoder == "ctrnn":  # words (raw leaves), then the binary nodes
            inner = col["bin_left"] >= 0  # row k < m - 1 of an item holds internal node k
            n_inner = np.maximum(counts - 1, 0)
            istart = R + np.concatenate([[0], np.cumsum(n_inner)[:-1]]).astype(np.int64)
            node = istart[owner] + (np.arange(R) - start[owner])
            m = counts[owner]
            glob = lambda ids: np.where(ids < m, start[owner] + ids, istart[owner] + ids - m)  # noqa: E731
            n_extra = int(n_inner.sum())
            parent, slot = np.full(R + n_extra, -1, np.int64), np.zeros(R + n_extra, np.int64)
            left, right = glob(col["bin_left"])[inner], glob(col["bin_right"])[inner]
            parent[left], parent[right], slot[right] = node[inner], node[inner], 1
            raw = np.arange(R + n_extra) < R
            node_owner = np.concatenate([owner, np.repeat(np.arange(rows.n), n_inner)])
        else:
            parent = np.where(col["parent"] >= 0, col["parent"] + start[owner], -1)
            slot = np.maximum(
                col["side"] * self.max_rank + col["rank"] if self.cfg.encoder == "dtrnn" else col["rel"], 0
            )
            if self.cfg.length_weighting:
                ell = torch.from_numpy(col["ell"]).to(dev)
        roots = np.nonzero(parent < 0)[0]
        vocab, word_of_node = np.unique(rows.data["w1"].cpu().numpy(), return_inverse=True)
        word_of_node = np.concatenate([word_of_node.ravel(), np.full(n_extra, len(vocab))])
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64)).to(dev)  # noqa: E731
        return Structure(
            parent,
            slot,
            plan(parent, slot, dev, raw),
            ell,
            raw,
            n_extra,
            roots,
            t(node_owner[roots]),
            t(vocab),
            t(word_of_node),
        )

    # ------------------------------------------------------------------ scores and loss
    def _similarity(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b.T if self.cfg.loss == "margin" else neg_euclidean(a, b)

    def scores(self, images: Encoded, sentences: Encoded) -> torch.Tensor:
        """(n, m) inner products, or −‖v − y‖ under the squared loss."""
        return self._similarity(images.vec, sentences.vec)

    def sentence_scores(self, a: Encoded, b: Encoded) -> torch.Tensor:
        """The same measure between sentence vectors (the paper's nearest neighbours); ``sentence_cosine``:
        between their unit vectors (inner products → cosines), the variant that removes the vectors' norms."""
        if self.cfg.sentence_cosine:
            return self._similarity(nn.functional.normalize(a.vec, dim=1), nn.functional.normalize(b.vec, dim=1))
        return self._similarity(a.vec, b.vec)

    def phase(self, epoch: int) -> str:
        """``train`` (margin); under the squared loss ``image map`` or ``sentence model`` (θ); with
        ``w_step: ridge`` every epoch trains θ (``bow``: W_I), after :meth:`begin_epoch`'s closed-form W_I."""
        if self.cfg.loss == "margin":
            return "train"
        if self.cfg.encoder == "bow":
            return "image map"
        theta = self.cfg.w_step == "ridge" or (epoch // self.cfg.alternate_epochs) % 2 == 1
        return "sentence model" if theta else "image map"

    def begin_epoch(self, epoch: int) -> None:
        """``w_step: ridge``: W_I ← :func:`ridge_map` of the training pairs, their sentence vectors from the
        current θ, at the start of every ``alternate_epochs`` epochs."""
        if self.cfg.loss != "squared" or self.cfg.w_step != "ridge" or epoch % self.cfg.alternate_epochs:
            return
        if self._negatives is None:
            raise RuntimeError("socher: use_training_split(train) must be called before training (the ridge W_I step)")
        neg = self._negatives
        y = neg.y_fixed if neg.y_fixed is not None else self._sentence_vectors(neg.sentence_rows, neg.structure)
        Ysum = y.new_zeros((len(neg.images), y.shape[1])).index_add_(0, neg.image_of, y)
        counts = torch.bincount(neg.image_of, minlength=len(neg.images))
        self.W_I.copy_(ridge_map(neg.z, counts, Ysum, self.cfg.lam))

    def regulariser(self, params=None) -> torch.Tensor:
        return sum((p**2).sum() for p in (self.parameters() if params is None else params))

    def draw_negatives(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The next step's sampled negatives (``negatives`` = n > 0): positions in the usable training split
        of min(n, M) sentences and min(n, N) images (sorted), each set drawn uniformly *without* replacement.
        The draw is a function of (seed, epoch, step within the epoch) only — not of any generator's state —
        so a run is the same every time and a run resumed at an epoch boundary draws what the uninterrupted
        one drew; the step counter restarts when ``epoch`` changes."""
        neg = self._negatives
        e, step = self._draws
        step = step if e == epoch else 0
        self._draws = (epoch, step + 1)
        rng = np.random.default_rng([self._seed, int(epoch), step, 5])  # 5: Eq. 5's stream
        M, N, n = len(neg.sentences), len(neg.images), self.cfg.negatives
        return np.sort(rng.choice(M, min(n, M), replace=False)), np.sort(rng.choice(N, min(n, N), replace=False))

    def _sampled_hinge(self, images: Encoded, sentences: Encoded, epoch: int) -> torch.Tensor:
        """Eq. 5 with sampled negatives (:meth:`draw_negatives`): the n sentences' sum × M/n and the n images'
        × N/n, an unbiased estimate of the full sums; composes the batch's trees and the drawn ones only (each
        tree once), so a step's cost does not grow with the training split."""
        neg = self._negatives
        cs, ci = self.draw_negatives(epoch)
        dev = neg.z.device
        k = np.searchsorted(neg.images, images.index)
        j = np.searchsorted(neg.sentences, sentences.index)
        if neg.y_fixed is not None:  # bow: no parameters
            y = neg.y_fixed.index_select(0, torch.from_numpy(np.concatenate([j, cs])).to(dev))
        else:
            need, inv = np.unique(np.concatenate([j, cs]), return_inverse=True)
            y = self._sentence_vectors(neg.source.take(neg.sentences[need]), None)
            y = y.index_select(0, torch.from_numpy(inv.ravel()).to(dev))
        v = neg.z.index_select(0, torch.from_numpy(np.concatenate([k, ci])).to(dev)) @ self.W_I.T
        b = len(j)
        ci_t = torch.from_numpy(ci).to(dev)
        return hinge_all_negatives(
            v[:b],
            y[:b],
            v[b:],
            y[b:],
            torch.from_numpy(k).to(dev),
            neg.image_of.index_select(0, torch.from_numpy(cs).to(dev)),
            self.cfg.margin,
            image_ids=ci_t,
            sentence_weight=len(neg.sentences) / len(cs),
            image_weight=len(neg.images) / len(ci),
        )

    def loss(self, images: Encoded, sentences: Encoded, epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 5 for the batch's pairs against every training image and sentence (``negatives: 0``) or an
        unbiased sample of them (:meth:`_sampled_hinge`), + λ R; or the squared loss of the batch's pairs for
        the side trained in this epoch's phase, + λ R of it."""
        if self.cfg.loss == "squared":
            v, y = images.vec, sentences.vec
            if self.phase(epoch) == "image map":
                y, params = y.detach(), [self.W_I]
            else:
                v, params = v.detach(), [p for name, p in self.named_parameters() if name != "W_I"]
            sq, reg = squared_loss(v, y), self.regulariser(params)
            return sq + self.cfg.lam * reg, {
                "squared": float(sq.detach()),
                "reg": float(reg.detach()),
                "norm_v": float(v.detach().norm(dim=1).mean()),
                "norm_y": float(y.detach().norm(dim=1).mean()),
            }
        if self._negatives is None:
            raise RuntimeError("socher: use_training_split(train) must be called before training (Eq. 5's negatives)")
        neg = self._negatives
        if self.cfg.negatives:
            hinge = self._sampled_hinge(images, sentences, epoch)
            reg = self.regulariser()
            return hinge + self.cfg.lam * reg, {"hinge": float(hinge.detach()), "reg": float(reg.detach())}
        v_all = neg.z @ self.W_I.T
        y_all = neg.y_fixed if neg.y_fixed is not None else self._sentence_vectors(neg.sentence_rows, neg.structure)
        dev = v_all.device
        k = torch.from_numpy(np.searchsorted(neg.images, images.index)).to(dev)
        j = torch.from_numpy(np.searchsorted(neg.sentences, sentences.index)).to(dev)
        hinge = hinge_all_negatives(
            v_all.index_select(0, k), y_all.index_select(0, j), v_all, y_all, k, neg.image_of, self.cfg.margin
        )
        reg = self.regulariser()
        return hinge + self.cfg.lam * reg, {"hinge": float(hinge.detach()), "reg": float(reg.detach())}
