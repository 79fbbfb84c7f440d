"""Peri's (2018) Show, Translate and Tell: the VSE baseline (or, with ``similarity: attention``, the
region–word attention model: STT-ATT) plus one GRU decoder that both captions the image and
paraphrases caption A into caption B (docs/systems.md, "Show, Translate and Tell").

**Sample**: each training caption A once per epoch (the trainer's batches), with its image and a
caption B drawn uniformly from the image's *other* training captions by a hash of (seed, epoch, A) —
stateless, so a resumed run draws the same B (an image with one usable caption: B = A).

**Decoder** (one, shared by both heads): ``h_0 = tanh(W_init u)`` with u the unit joint-space vector —
the image's (STT-ATT: the mean of its unit region vectors) or caption A's (its final GRU state
mapped to D, as in the baseline); inputs ``<s>, B_1 … B_L`` (teacher forcing) through the encoder's
word embedding (shared) and a 1-layer GRU, outputs ``B_1 … B_L, </s>`` from ``W_out h_t`` over the
vocabulary + ``</s>`` (id ``n_vocab``). ``<unk>`` (id 0) is an ordinary output word.

**Loss** (Eq. 12): ``λ_ic L_IC + λ_para L_para + λ_sim L_sim`` — each CE summed over a caption's tokens
and ``</s>`` (Eqs. 10–11), averaged over the batch; ``L_sim`` the baseline's hinge summed over the batch.

**Decoding**: :func:`greedy` and :func:`beam_search` (batched over items, deterministic; beam width 1
is greedy), at most ``max_len`` words.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from fraglib.core.batches import Rows
from fraglib.core.config import ConfigError, check_range
from fraglib.systems import vse
from fraglib.systems.gru import packed_gru

Step = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Embed = Callable[[torch.Tensor], torch.Tensor]


@dataclasses.dataclass(frozen=True)
class Config(vse.Config):
    """``params.yaml: systems.stt``: the baseline's keys (:class:`fraglib.systems.vse.Config`) and the decoder's."""

    dec_hidden: int = 1024  # decoder GRU state (Peri: 1024, not stated for the decoder)
    lambda_ic: float = 1.0  # λ1: image captioning
    lambda_para: float = 1.0  # λ2: paraphrasing
    lambda_sim: float = 1.0  # λ3: retrieval hinge
    dec_lr_scale: float = 1.0  # the decoder's learning rate = train.lr x this (the encoders': train.lr)
    max_len: int = 20  # decoding: at most this many words
    beam: int = 1  # decoding: 1 = greedy
    SECTION: ClassVar[str] = "systems.stt"
    TEXT_ONLY: ClassVar[bool] = True  # the paraphrasing branch alone (checked below)

    def validate(self) -> "Config":
        super().validate()
        p = self.SECTION
        check_range(f"{p}.dec_hidden", self.dec_hidden, 1, 100_000, int)
        for k in ("lambda_ic", "lambda_para", "lambda_sim"):
            check_range(f"{p}.{k}", getattr(self, k), 0.0, 1e4, float)
        check_range(f"{p}.dec_lr_scale", self.dec_lr_scale, 0.0, 1e4, float)
        check_range(f"{p}.max_len", self.max_len, 1, 1000, int)
        check_range(f"{p}.beam", self.beam, 1, 100, int)
        if self.lambda_ic == 0 and self.lambda_para == 0:
            raise ConfigError(f"{p}: lambda_ic and lambda_para are both 0 — nothing trains the decoder")
        if self.images == "none" and (self.lambda_ic or self.lambda_sim):
            raise ConfigError(
                f"{p}: images 'none' (text only) has no image to caption or retrieve: "
                f"set lambda_ic and lambda_sim to 0 (now {self.lambda_ic}, {self.lambda_sim})"
            )
        return self


@dataclasses.dataclass
class Sentences:
    """STT's sentence encoding: the baseline's (``enc``), the (m, D) unit caption vectors ``c`` (the
    decoder's input) and the captions' split positions ``index`` (caption B is drawn from them)."""

    enc: Any
    c: torch.Tensor
    index: np.ndarray


def draw_targets(sentence_image: np.ndarray, usable: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """(n_sent,) caption B of every caption A of a split: uniform among the other usable captions of A's
    image, by a hash of (seed, epoch, A); A itself when its image has no other."""
    u = np.random.default_rng([seed, epoch, 7411]).random(len(sentence_image))
    out = np.arange(len(sentence_image))
    order = np.argsort(sentence_image, kind="stable")
    bounds = np.flatnonzero(np.diff(sentence_image[order])) + 1
    for group in np.split(order, bounds):
        ok = group[usable[group]]
        for a in group:
            others = ok[ok != a]
            if len(others):
                out[a] = others[min(int(u[a] * len(others)), len(others) - 1)]
    return out


def teacher_forced_nll(logits: torch.Tensor, targets: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """(m,) −Σ_t log P(target_t) over each caption's first ``lengths + 1`` positions (its words and
    ``</s>``). ``logits`` (m, L+1, V+1), ``targets`` (m, L+1) with ``</s>`` at position ``lengths``."""
    logp = torch.log_softmax(logits, -1, dtype=torch.promote_types(logits.dtype, torch.float32))
    logp = logp.gather(-1, targets[..., None])[..., 0]
    keep = torch.arange(targets.shape[1], device=targets.device)[None, :] <= lengths[:, None]
    return -(logp * keep).sum(1)


@torch.no_grad()
def greedy(step: Step, embed: Embed, h: torch.Tensor, bos: torch.Tensor, eos: int, max_len: int) -> list[list[int]]:
    """Word ids (``</s>`` excluded) of n captions decoded greedily from states ``h`` (n, H):
    ``step(x, h)`` maps inputs (n, E) and states to (log-probabilities (n, V+1), new states), ``embed``
    word ids to inputs, ``bos`` (E,) is the first input. Stops at ``</s>`` or after ``max_len`` words."""
    return beam_search(step, embed, h, bos, eos, max_len, 1)


@torch.no_grad()
def beam_search(
    step: Step, embed: Embed, h: torch.Tensor, bos: torch.Tensor, eos: int, max_len: int, beam: int
) -> list[list[int]]:
    """Beam search over n items at once (n·beam states per step; arguments as :func:`greedy`): the
    caption with the highest sum of log-probabilities (``</s>`` included) among the beams, no length
    normalisation; a finished beam keeps its score. Ties go to the lower (beam, word) index, so
    ``beam = 1`` is greedy decoding."""
    n, k = h.shape[0], beam
    hs = h.repeat_interleave(k, 0)  # (n k, H)
    x = bos.expand(n * k, -1)
    score = torch.full((n, k), float("-inf"), device=h.device, dtype=torch.promote_types(h.dtype, torch.float32))
    score[:, 0] = 0.0
    done = torch.zeros((n, k), dtype=torch.bool, device=h.device)
    words = torch.zeros((n, k, 0), dtype=torch.long, device=h.device)
    for _ in range(max_len + 1):
        logp, hs = step(x, hs)
        logp = logp.to(torch.promote_types(logp.dtype, torch.float32)).reshape(n, k, -1)
        V = logp.shape[-1]
        stay = torch.full_like(logp, float("-inf"))
        stay[..., eos] = 0.0
        logp = torch.where(done[..., None], stay, logp)  # finished: only </s>, free
        score, flat = torch.topk((score[..., None] + logp).reshape(n, k * V), k, dim=1)  # sorted
        src, w = flat // V, flat % V
        words = torch.cat([words.gather(1, src[..., None].expand(-1, -1, words.shape[2])), w[..., None]], 2)
        done = done.gather(1, src) | (w == eos)
        hs = hs.reshape(n, k, -1).gather(1, src[..., None].expand(-1, -1, hs.shape[-1])).reshape(n * k, -1)
        if bool(done.all()):
            break
        x = embed(torch.where(w == eos, 0, w).reshape(-1))  # finished beams' input is never read
    out = []
    for seq in words[:, 0].tolist():  # beam 0: the best
        out.append((seq[: seq.index(eos)] if eos in seq else seq)[:max_len])
    return out


class SttSystem(vse.VseSystem):
    """The baseline of :class:`fraglib.systems.vse.VseSystem` plus the decoder (module docstring).
    Encodings: images as the baseline's; sentences a :class:`Sentences`. Generation:
    :meth:`image_vectors`, :meth:`sentence_vectors` and :meth:`decode`."""

    NAME = "stt"
    Config = Config
    GENERATES = True

    def __init__(self, cfg: Config, dims: dict[str, int], seed: int = 0) -> None:
        super().__init__(cfg, dims, seed)
        self.seed = seed
        self.eos = dims["n_relations"]  # output id of </s>
        self.init = nn.Linear(cfg.embed_dim, cfg.dec_hidden)
        nn.init.normal_(self.init.weight, 0.0, 1.0)  # u is a unit vector: W u ~ N(0, 1), h_0 = O(1)
        nn.init.zeros_(self.init.bias)
        self.dec = nn.GRU(cfg.word_dim, cfg.dec_hidden, batch_first=True)
        self.out = nn.Linear(cfg.dec_hidden, dims["n_relations"] + 1)
        self.bos = nn.Parameter(torch.empty(cfg.word_dim).uniform_(-0.1, 0.1))
        self._train_split: Any = None
        self._targets: tuple[int, np.ndarray] | None = None

    def use_training_split(self, train: Any) -> None:
        super().use_training_split(train)
        self._train_split = train

    def lr_groups(self) -> list[tuple[float, list[nn.Parameter]]]:
        """The decoder's own parameters (not the shared word embedding) at ``dec_lr_scale``, the rest as the base's."""
        dec = [self.bos, *self.init.parameters(), *self.dec.parameters(), *self.out.parameters()]
        ids = {id(p) for p in dec}
        return [(k, [p for p in ps if id(p) not in ids]) for k, ps in super().lr_groups()] + [
            (self.cfg.dec_lr_scale, dec)
        ]

    # -------------------------------------------------------------- encoders
    def encode_sentences(self, rows: Rows) -> Sentences:
        out, last, lengths = self.text(rows)
        c = self._unit(self._caption_vectors(rows, out, last))
        if self.cfg.similarity != "attention":
            return Sentences(c, c, rows.index)
        E = self._unit(self.txt(out))
        mask = torch.arange(E.shape[1], device=E.device)[None, :] < lengths.clamp(min=1)[:, None]
        return Sentences((E * mask[..., None], mask), c, rows.index)

    def scores(self, images: Any, sentences: Sentences) -> torch.Tensor:
        return super().scores(images, sentences.enc)

    def sentence_scores(self, a: Sentences, b: Sentences) -> torch.Tensor:
        return super().sentence_scores(a.c, b.c)

    def image_vectors(self, images: Any) -> torch.Tensor:
        """(n, D) the decoder's image input: the unit image vector, or the mean unit region vector."""
        v, mask = images[0], images[1]
        if mask is None:
            return v
        return (v * mask[..., None]).sum(1) / mask.sum(1, keepdim=True).clamp_min(1)

    @staticmethod
    def sentence_vectors(sentences: Sentences) -> torch.Tensor:
        """(m, D) the decoder's caption input (caption A's unit vector)."""
        return sentences.c

    # -------------------------------------------------------------- decoder
    def decoder_logits(self, u: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """(m, L+1, V+1) teacher-forced logits for inputs ``<s>, tokens`` (m, L) from vectors ``u`` (m, D);
        only the first ``lengths + 1`` steps of each caption run (packed), the rest are 0."""
        x = torch.cat([self.bos.expand(len(tokens), 1, -1), self.text.embed(tokens)], 1)
        h0 = torch.tanh(self.init(u))[None]
        packed = pack_padded_sequence(self.text.drop(x), (lengths + 1).cpu(), batch_first=True, enforce_sorted=False)
        y, _ = packed_gru(self.dec, packed, h0.contiguous())
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return self.out(self.text.drop(y))

    def decoder_step(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoding step (the ``step`` of :func:`beam_search`): inputs (n, E), states (n, H) →
        (log-probabilities (n, V+1), new states)."""
        y, h2 = self.dec(x[:, None], h[None].contiguous())
        return torch.log_softmax(self.out(y[:, 0]), -1), h2[0]

    @torch.no_grad()
    def decode(self, u: torch.Tensor, beam: int | None = None, max_len: int | None = None) -> list[list[int]]:
        """Word ids of one caption per row of ``u`` (n, D): greedy (``beam`` 1) or beam search."""
        self.eval()
        h = torch.tanh(self.init(u))
        return beam_search(
            self.decoder_step,
            self.text.embed,
            h,
            self.bos,
            self.eos,
            max_len or self.cfg.max_len,
            beam or self.cfg.beam,
        )

    # -------------------------------------------------------------- training
    def targets(self, index: np.ndarray, epoch: int) -> Rows:
        """Caption B (as token rows) of the training captions at split positions ``index``."""
        tr = self._train_split
        if tr is None:
            raise RuntimeError("stt: use_training_split was not called before the loss")
        if self._targets is None or self._targets[0] != epoch:
            self._targets = (epoch, draw_targets(tr.sentence_image, tr.usable_sentences(), self.seed, epoch))
        return tr.sentences.take(self._targets[1][np.asarray(index)])

    def caption_nll(self, u: torch.Tensor, rows: Rows) -> torch.Tensor:
        """(h·m,) Eq. 10/11: −log P(caption | u) of the m captions ``rows`` (teacher forcing) from each of
        the h·m rows of ``u`` (h heads stacked: rows k, m + k, … all decode caption k). The output layer
        and its softmax run on the real positions only (the packed sequence: each caption's words and
        ``</s>``), never on padding; :meth:`caption_nll_padded` is the same on the padded grid."""
        tok, lengths, targets = self._teacher_forcing(u, rows)
        steps = (lengths + 1).cpu()
        x = torch.cat([self.bos.expand(len(tok), 1, -1), self.text.embed(tok)], 1)
        packed = pack_padded_sequence(self.text.drop(x), steps, batch_first=True, enforce_sorted=False)
        y, _ = packed_gru(self.dec, packed, torch.tanh(self.init(u))[None].contiguous())
        logits = self.out(self.text.drop(y.data))  # (Σ steps, V+1)
        pick = lambda t: pack_padded_sequence(t, steps, batch_first=True, enforce_sorted=False).data  # noqa: E731
        logp = torch.log_softmax(logits, -1, dtype=torch.promote_types(logits.dtype, torch.float32))
        logp = logp.gather(1, pick(targets)[:, None])[:, 0]
        owner = pick(torch.arange(len(tok), device=tok.device)[:, None].expand_as(targets))
        return -logp.new_zeros(len(tok)).index_add_(0, owner, logp)

    def caption_nll_padded(self, u: torch.Tensor, rows: Rows) -> torch.Tensor:
        """:meth:`caption_nll` on the padded (h·m, L+1) grid (:meth:`decoder_logits`, :func:`teacher_forced_nll`):
        its exactness reference."""
        tok, lengths, targets = self._teacher_forcing(u, rows)
        return teacher_forced_nll(self.decoder_logits(u, tok, lengths), targets, lengths)

    def _teacher_forcing(self, u: torch.Tensor, rows: Rows) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(inputs (h·m, L) token ids, lengths (h·m,), targets (h·m, L+1) with ``</s>`` at each length)."""
        tok, mask = vse.padded(rows.data["rel"], rows.owner, rows.n, rows.cpu("owner"))
        heads = len(u) // max(rows.n, 1)
        tok, lengths = tok.repeat(heads, 1), mask.sum(1).repeat(heads)
        targets = torch.cat([tok, tok.new_zeros((len(tok), 1))], 1)
        targets[torch.arange(len(tok)), lengths] = self.eos
        return tok, lengths, targets

    def loss(self, images: Any, sentences: Sentences, epoch: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Eq. 12; a term weighted 0 is not computed (text-only runs: ``lambda_ic = lambda_sim = 0``)."""
        c = self.cfg
        sim, parts = super().loss(images, sentences, epoch) if c.lambda_sim > 0 else (None, {})
        heads = [
            (k, lam, u)
            for k, lam, u in (
                ("L_IC", c.lambda_ic, lambda: self.image_vectors(images)),
                ("L_para", c.lambda_para, lambda: sentences.c),
            )
            if lam > 0
        ]
        nll = self.caption_nll(torch.cat([u() for _, _, u in heads]), self.targets(sentences.index, epoch))
        nll = nll.view(len(heads), -1)  # one decoder, one row per input kind
        cost = c.lambda_sim * sim if sim is not None else 0.0
        for h, (k, lam, _) in enumerate(heads):
            term = nll[h].mean()
            cost, parts[k] = cost + lam * term, float(term.detach())
        return cost, parts
