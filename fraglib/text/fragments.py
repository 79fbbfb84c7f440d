"""Sentence fragments: dependency triplets in one relation inventory, BOW and bigram fragments.

**Relation inventory** (docs/method.md, "Sentence fragments"), modelled on Stanford's *collapsed* dependencies. Both label
schemes are normalised by the rules below, then the same multiword-preposition pass runs:

=====================  ================================  =====================================
result                 ClearNLP (spaCy)                  UD v2 (stanza)
=====================  ================================  =====================================
``prep_<p>(h, o)``     ``prep(h, p)`` + ``pobj(p, o)``   ``nmod|obl|acl|advcl(h, o)`` + ``case|mark(o, p)``
``prep_<p_fixed>``     —                                 ``case(o, p)`` + ``fixed(p, x)``... → ``prep_p_x``
``agent(v, o)``        ``agent(v, by)`` + ``pobj(by, o)``  ``obl:agent(v, o)`` + ``case(o, by)``
``conj_<cc>(a, b)``    ``conj(a, b)`` + ``cc(a, cc)``      ``conj(a, b)`` + ``cc(b, cc)``
``dobj``               ``dobj``                          ``obj``
``nsubjpass``          ``nsubjpass``                     ``nsubj:pass``
``auxpass``            ``auxpass``                       ``aux:pass``
``poss``               ``poss``                          ``nmod:poss``
``relcl``              ``relcl``                         ``acl:relcl``
``prt``                ``prt``                           ``compound:prt``
``tmod``               ``npadvmod``(time) / —            ``obl:tmod``, ``nmod:tmod``
``npadvmod``           ``npadvmod``                      ``obl:npmod``, ``nmod:npmod``
``predet``             ``predet``                        ``det:predet``
``compound``           ``compound``                      ``compound``, ``flat``
other labels           kept                              subtype dropped (``nmod:x`` → ``nmod``)
=====================  ================================  =====================================

Dropped: punctuation (``punct``), the root, ``case``/``fixed``/``cc`` edges consumed above.
Multiword prepositions (both schemes, after the rules): ``prep_a(h, n)`` + ``prep_b(n, o)`` with
``(a, n, b)`` in :data:`MULTIWORD_3` (``in front of``, ``on top of`` ...) → ``prep_a_n_b(h, o)``;
``advmod(h, w)`` + ``prep_p(w, o)`` with ``(w, p)`` in :data:`MULTIWORD_2` (``next to`` ...) →
``prep_w_p(h, o)``. Words are lower-cased.

**Fragments** of a caption, as three int arrays ``rel``, ``w1``, ``w2`` (word rows of the GloVe
table) plus CSR ``offsets`` over captions:

* ``dependency`` — one per triplet whose relation survives the frequency filter and whose two
  words are in the dictionary;
* ``bow`` — one per dictionary word (``w1 = w2``; relation ``bow``);
* ``bigram`` — one per pair of consecutive words, both in the dictionary (relation ``bigram``).
Tokens for BOW and bigrams are the parser's tokens without punctuation, so all modes share one
tokenisation.

**Tokens** (:func:`encode_tokens`, the view of the sentence encoders that learn their own word
embeddings, e.g. the GRU of Peri's VSE baseline): one row per token, in caption order; ``rel`` is the
token's id in a vocabulary built on the *train* split (words seen more than ``min_count - 1`` times,
most frequent first; id 0 = ``<unk>``), ``relations`` is that vocabulary (the names of ``rel`` ids),
and ``w1 = w2`` the token's GloVe row (-1 when the dictionary lacks it) for a GloVe initialisation.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from fraglib.core.config import check_choice, check_range
from fraglib.data.dataset import open_npz, save_npz
from fraglib.text.parse import ParsedCaption, Token

MODES = ("dependency", "bow", "bigram")
SCHEMES = ("clearnlp", "ud")
MULTIWORD_3 = {
    ("in", "front", "of"),
    ("on", "top", "of"),
    ("in", "middle", "of"),
    ("in", "back", "of"),
    ("on", "side", "of"),
    ("in", "spite", "of"),
    ("in", "place", "of"),
    ("in", "addition", "to"),
}
MULTIWORD_2 = {
    ("next", "to"),
    ("close", "to"),
    ("out", "of"),
    ("because", "of"),
    ("ahead", "of"),
    ("instead", "of"),
    ("due", "to"),
    ("along", "with"),
    ("away", "from"),
    ("together", "with"),
}
UD_RENAME = {
    "obj": "dobj",
    "nsubj:pass": "nsubjpass",
    "aux:pass": "auxpass",
    "csubj:pass": "csubjpass",
    "nmod:poss": "poss",
    "acl:relcl": "relcl",
    "compound:prt": "prt",
    "obl:tmod": "tmod",
    "nmod:tmod": "tmod",
    "obl:npmod": "npadvmod",
    "nmod:npmod": "npadvmod",
    "det:predet": "predet",
    "flat": "compound",
    "obl:agent": "agent",
}
UD_PREP_HOSTS = ("nmod", "obl", "acl", "advcl")
PUNCT = {"punct"}

Triplet = tuple[str, str, str]


def lower(t: Token) -> str:
    """The token's word, lower-cased (fragments and trees use the same spelling)."""
    return t.form.lower()


def _children(tokens: Sequence[Token]) -> dict[int, list[Token]]:
    ch: dict[int, list[Token]] = {}
    for t in tokens:
        ch.setdefault(t.head, []).append(t)
    return ch


def edges_clearnlp(tokens: Sequence[Token]) -> list[tuple[str, int, int]]:
    by_id = {t.id: t for t in tokens}
    ch = _children(tokens)
    out: list[tuple[str, int, int]] = []
    for t in tokens:
        rel = t.deprel
        if t.head == 0 or rel in PUNCT or rel == "root":
            continue
        if rel in ("pobj", "cc"):
            parent = by_id.get(t.head)
            if rel == "pobj" and parent is not None and parent.deprel in ("prep", "agent") and parent.head != 0:
                continue  # consumed by its preposition below
            if rel == "cc":
                continue  # consumed by conj
        if rel in ("prep", "agent"):
            objs = [c for c in ch.get(t.id, []) if c.deprel == "pobj"]
            if objs:
                name = "agent" if rel == "agent" else f"prep_{lower(t)}"
                out.extend((name, t.head, o.id) for o in objs)
                continue
        if rel == "conj":
            ccs = [c for c in ch.get(t.head, []) if c.deprel == "cc"]
            rel = f"conj_{lower(ccs[0])}" if ccs else "conj"
        out.append((rel, t.head, t.id))
    return out


def edges_ud(tokens: Sequence[Token]) -> list[tuple[str, int, int]]:
    ch = _children(tokens)
    out: list[tuple[str, int, int]] = []
    for t in tokens:
        rel = t.deprel
        if t.head == 0 or rel in PUNCT or rel == "root" or rel in ("case", "fixed", "cc"):
            continue
        if rel == "mark":
            parent = next((p for p in tokens if p.id == t.head), None)
            if parent is not None and parent.deprel.split(":")[0] in ("acl", "advcl"):
                continue  # consumed as a preposition of its clause
        base = rel.split(":")[0]
        if rel == "obl:agent":
            out.append(("agent", t.head, t.id))
            continue
        if base in UD_PREP_HOSTS and rel not in UD_RENAME:
            markers = [
                c for c in ch.get(t.id, []) if c.deprel == "case" or (base in ("acl", "advcl") and c.deprel == "mark")
            ]
            if markers:
                m = markers[0]
                words = [lower(m)] + [
                    lower(f) for f in sorted(ch.get(m.id, []), key=lambda x: x.id) if f.deprel == "fixed"
                ]
                out.append(("prep_" + "_".join(words), t.head, t.id))
                continue
        if base == "conj":
            ccs = [c for c in ch.get(t.id, []) if c.deprel == "cc"]
            out.append((f"conj_{lower(ccs[0])}" if ccs else "conj", t.head, t.id))
            continue
        out.append((UD_RENAME.get(rel, UD_RENAME.get(base, base)), t.head, t.id))
    return out


def _multiword(r1: str, middle: str, r2: str) -> str | None:
    """The one preposition that ``r1(h, n) + r2(n, o)`` with ``words[n] = middle`` form, or None."""
    if not r2.startswith("prep_"):
        return None
    if r1.startswith("prep_") and (r1[5:], middle, r2[5:]) in MULTIWORD_3:
        return f"{r1}_{middle}_{r2[5:]}"
    if r1 == "advmod" and (middle, r2[5:]) in MULTIWORD_2:
        return f"prep_{middle}_{r2[5:]}"
    return None


def collapse_multiword(edges: list[tuple[str, int, int]], words: dict[int, str]) -> list[tuple[str, int, int]]:
    """prep_a(h, n) + prep_b(n, o), (a, n, b) in MULTIWORD_3 -> prep_a_n_b(h, o); same for
    advmod(h, w) + prep_p(w, o), (w, p) in MULTIWORD_2 -> prep_w_p(h, o). One merge at a time, the
    first pair in edge order; linear per merge (edges indexed by head), so long captions stay fast."""
    edges = list(edges)
    while True:
        by_head: dict[int, list[int]] = {}
        for j, (_, h, _) in enumerate(edges):
            by_head.setdefault(h, []).append(j)
        merge = next(
            (
                (i, j, new)
                for i, (r1, _, n) in enumerate(edges)
                for j in by_head.get(n, [])
                if i != j and (new := _multiword(r1, words[n], edges[j][0]))
            ),
            None,
        )
        if merge is None:
            return edges
        i, j, new = merge
        (_, h, n), o = edges[i], edges[j][2]
        # the middle word's own modifiers (det "the") go with it
        edges = [e for k, e in enumerate(edges) if k not in (i, j) and e[1] != n] + [(new, h, o)]


def triplets(tokens: Sequence[Token], scheme: str) -> list[Triplet]:
    """Normalised, lower-cased triplets ``(relation, head word, dependent word)`` of one caption."""
    check_choice("scheme", scheme, SCHEMES)
    if not tokens:
        return []
    words = {t.id: lower(t) for t in tokens}
    edges = edges_clearnlp(tokens) if scheme == "clearnlp" else edges_ud(tokens)
    edges = collapse_multiword(edges, words)
    return [(r, words[h], words[d]) for r, h, d in sorted(edges, key=lambda e: (e[2], e[1], e[0]))]


def words_of(tokens: Sequence[Token]) -> list[str]:
    """Lower-cased tokens without punctuation (BOW and bigram modes)."""
    return [
        lower(t) for t in tokens if t.deprel not in PUNCT and t.upos != "PUNCT" and any(ch.isalnum() for ch in t.form)
    ]


# ----------------------------------------------------------------------------- encoding
@dataclasses.dataclass
class Fragments:
    """Fragments of N captions. ``rel, w1, w2``: int32 (F,); ``offsets``: int64 (N+1,), caption
    ``n`` owns rows ``offsets[n]:offsets[n+1]``; ``sentid``: int64 (N,); ``relations``: names of
    ``rel`` ids; ``reasons[n]``: why caption n has no fragment ('' when it has some); ``columns``:
    further int arrays (F,) of a mode (the tree views: ``parent``, ``side`` ... — fraglib.text.trees)."""

    mode: str
    rel: np.ndarray
    w1: np.ndarray
    w2: np.ndarray
    offsets: np.ndarray
    sentid: np.ndarray
    relations: list[str]
    reasons: list[str]
    columns: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)

    def of(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = self.offsets[n], self.offsets[n + 1]
        return self.rel[a:b], self.w1[a:b], self.w2[a:b]

    def save(self, path: str | Path) -> None:
        """Write the ``.npz`` file ``path`` atomically."""
        save_npz(
            path,
            mode=np.array(self.mode),
            rel=self.rel,
            w1=self.w1,
            w2=self.w2,
            offsets=self.offsets,
            sentid=self.sentid,
            relations=np.array(self.relations, dtype=str),
            reasons=np.array(self.reasons, dtype=str),
            **{f"col_{k}": v for k, v in self.columns.items()},
        )

    @classmethod
    def load(cls, path: str | Path) -> "Fragments":
        z, _ = open_npz(path, "text fragments not found (run python -m fraglib.text fragments)")
        return cls(
            str(z["mode"]),
            z["rel"],
            z["w1"],
            z["w2"],
            z["offsets"],
            z["sentid"],
            [str(r) for r in z["relations"]],
            [str(r) for r in z["reasons"]],
            {k[4:]: z[k] for k in z.files if k.startswith("col_")},
        )


UNK = "<unk>"


def vocabulary(token_lists: Iterable[Sequence[str]], min_count: int) -> list[str]:
    """``[<unk>] +`` the words seen at least ``min_count`` times, most frequent first (ties by word)."""
    check_range("text.min_word_count", min_count, 1, 1_000_000, int)
    counts = Counter(w for ws in token_lists for w in ws)
    return [UNK] + sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))


def encode_tokens(parsed: Sequence[ParsedCaption], vocab: Sequence[str], word_index: dict[str, int]) -> Fragments:
    """The ``tokens`` view of every caption (module docstring): ``rel`` = vocabulary id, 0 for a word
    outside ``vocab``; ``w1 = w2`` = GloVe row or -1."""
    vid = {w: i for i, w in enumerate(vocab)}
    if vid.get(UNK) != 0:
        raise ValueError(f"encode_tokens: the vocabulary must start with {UNK!r}")
    rel, w1, offsets, reasons = [], [], [0], []
    for p in parsed:
        ws = words_of(p.tokens)
        rel += [vid.get(w, 0) for w in ws]
        w1 += [word_index.get(w, -1) for w in ws]
        reasons.append("" if ws else "empty" if not p.tokens else "no_words")
        offsets.append(len(rel))
    w = np.array(w1, np.int32)
    return Fragments(
        "tokens",
        np.array(rel, np.int32),
        w,
        w.copy(),
        np.array(offsets, np.int64),
        np.array([p.sentid for p in parsed], np.int64),
        list(vocab),
        reasons,
    )


def relation_inventory(triplet_lists: Iterable[Sequence[Triplet]]) -> Counter:
    return Counter(r for ts in triplet_lists for r, _, _ in ts)


def frequent_relations(counts: Counter, min_share: float) -> list[str]:
    """Relation types with at least ``min_share`` of all triplets, most frequent first (ties by name)."""
    check_range("text.min_relation_share", min_share, 0.0, 1.0, float)
    total = sum(counts.values())
    keep = [r for r, c in counts.items() if total and c / total >= min_share]
    return sorted(keep, key=lambda r: (-counts[r], r))


def encode(
    parsed: Sequence[ParsedCaption],
    scheme: str,
    mode: str,
    word_index: dict[str, int],
    relations: Sequence[str] | None = None,
) -> Fragments:
    """Fragments of every caption in ``parsed`` (``relations``: the kept types, dependency mode)."""
    check_choice("text.fragment_mode", mode, MODES)
    if mode == "dependency" and relations is None:
        raise ValueError("encode(mode='dependency') needs the kept relation types (frequent_relations)")
    rel_names = list(relations) if mode == "dependency" else [mode]
    rel_id = {r: i for i, r in enumerate(rel_names)}
    rel, w1, w2, offsets, reasons = [], [], [], [0], []
    for p in parsed:
        n_before = len(rel)
        reason = ""
        if not p.tokens:
            reason = "empty"
        elif mode == "dependency":
            ts = triplets(p.tokens, scheme)
            known = [t for t in ts if t[1] in word_index and t[2] in word_index]
            kept = [t for t in known if t[0] in rel_id]
            for r, a, b in kept:
                rel.append(rel_id[r])
                w1.append(word_index[a])
                w2.append(word_index[b])
            if not kept:
                reason = "no_edges" if not ts else "oov_words" if not known else "rare_relations"
        else:
            ws = [w for w in words_of(p.tokens) if w in word_index] if mode == "bow" else words_of(p.tokens)
            pairs = (
                [(w, w) for w in ws]
                if mode == "bow"
                else [(a, b) for a, b in zip(ws, ws[1:]) if a in word_index and b in word_index]
            )
            for a, b in pairs:
                rel.append(0)
                w1.append(word_index[a])
                w2.append(word_index[b])
            if not pairs:
                reason = (
                    "no_words"
                    if not words_of(p.tokens)
                    else "oov_words"
                    if mode == "bow" or len(ws) > 1
                    else "single_word"
                )
        reasons.append(reason if len(rel) == n_before else "")
        offsets.append(len(rel))
    return Fragments(
        mode,
        np.array(rel, np.int32),
        np.array(w1, np.int32),
        np.array(w2, np.int32),
        np.array(offsets, np.int64),
        np.array([p.sentid for p in parsed], np.int64),
        rel_names,
        reasons,
    )
