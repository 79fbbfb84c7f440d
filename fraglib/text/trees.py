"""Sentence trees for the recursive sentence encoders of Socher et al. 2014 (docs/systems.md).

One tree per caption, built from the cached CoNLL-U parse:

* **basic** (DT-RNN; every word a node): the parse without punctuation; a punctuation token's
  children are re-attached to its head; a caption the parser split into several sentences keeps
  its first root, and every later root becomes that root's rightmost child (relation ``dep``).
* **collapsed** (SDT-RNN): the edges of the project's relation inventory
  (:func:`fraglib.text.fragments.triplets` — ``prep_<p>``, ``agent``, ``conj_<cc>`` ...), so
  prepositions, conjunctions and case markers are labels, not nodes. Words that no edge reaches from
  the root are dropped (counted by the caller).

A tree is a :class:`Tree`: nodes in sentence order, ``parent`` (-1 at the root), ``rel`` labels.
Pure functions give what the encoders need: each child's *slot* (side and nearest-first rank among
same-side siblings: ``l1``, ``r2`` ...), subtree sizes ℓ (Eq. 4 of the paper), node heights (the
level-batched encoder's schedule), and a head-outward binarisation for the CT-RNN.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from fraglib.text.fragments import PUNCT, Fragments, collapse_multiword, edges_clearnlp, edges_ud, lower
from fraglib.text.parse import ParsedCaption, Token


@dataclasses.dataclass
class Tree:
    """``words`` (lower-cased), ``parent`` (int, -1 for the root; exactly one root), ``rel``
    (the label of the edge to the parent; ``root`` at the root). Nodes in sentence order."""

    words: list[str]
    parent: np.ndarray
    rel: list[str]

    def __len__(self) -> int:
        return len(self.words)


def _is_punct(t: Token) -> bool:
    return t.deprel in PUNCT or t.upos == "PUNCT" or not any(ch.isalnum() for ch in t.form)


def basic_tree(tokens: Sequence[Token]) -> Tree | None:
    """The basic dependency tree without punctuation (module docstring); None when no word is left."""
    by_id = {t.id: t for t in tokens}
    keep = [t for t in tokens if not _is_punct(t)]
    if not keep:
        return None
    pos = {t.id: n for n, t in enumerate(keep)}

    def head_of(t: Token) -> int:
        seen = set()
        h = t.head
        while h in by_id and h not in pos and h not in seen:  # through punctuation to a word
            seen.add(h)
            h = by_id[h].head
        return pos.get(h, -1)

    parent = np.array([head_of(t) for t in keep], np.int64)
    rel = [t.deprel.lower() if parent[n] >= 0 else "root" for n, t in enumerate(keep)]
    roots = np.nonzero(parent < 0)[0]
    for r in roots[1:]:  # a caption split into sentences: one tree per caption
        parent[r], rel[r] = roots[0], "dep"
    return Tree([lower(t) for t in keep], parent, rel)


def collapsed_tree(tokens: Sequence[Token], scheme: str) -> Tree | None:
    """The collapsed tree in the project's relation inventory (module docstring); None when empty."""
    keep = [t for t in tokens if not _is_punct(t)]
    if not keep:
        return None
    words = {t.id: lower(t) for t in tokens}
    edges = collapse_multiword(edges_clearnlp(tokens) if scheme == "clearnlp" else edges_ud(tokens), words)
    root = next((t.id for t in keep if t.head == 0), keep[0].id)
    head = {d: (h, r) for r, h, d in edges if d != root}
    children: dict[int, list[int]] = {}
    for d, (h, _) in head.items():
        children.setdefault(h, []).append(d)
    nodes, stack = {root}, [root]
    while stack:  # the words reached from the root
        for c in children.get(stack.pop(), []):
            if c not in nodes:
                nodes.add(c)
                stack.append(c)
    order = sorted(nodes)
    pos = {i: n for n, i in enumerate(order)}
    parent = np.array([pos[head[i][0]] if i != root else -1 for i in order], np.int64)
    return Tree([words[i] for i in order], parent, [head[i][1] if i != root else "root" for i in order])


def slots(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(side, rank) of every node: side 0 = left of its parent, 1 = right; rank 0 = nearest
    same-side sibling ... (the paper's l1 = (0, 0), r2 = (1, 1)); (-1, -1) at the root."""
    n = len(parent)
    side, rank = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    for p in range(n):
        kids = np.nonzero(parent == p)[0]
        left, right = sorted(kids[kids < p], reverse=True), sorted(kids[kids > p])
        for s, group in ((0, left), (1, right)):
            for k, c in enumerate(group):
                side[c], rank[c] = s, k
    return side, rank


def subtree_sizes(parent: np.ndarray) -> np.ndarray:
    """ℓ(i): the number of nodes in the subtree of i (itself included)."""
    ell = np.ones(len(parent), np.int64)
    for i in np.argsort(-depths(parent), kind="stable"):  # deepest first
        if parent[i] >= 0:
            ell[parent[i]] += ell[i]
    return ell


def depths(parent: np.ndarray) -> np.ndarray:
    """Distance of every node from the root (root 0). Raises ValueError on a cycle."""
    d = np.full(len(parent), -1, np.int64)
    for i in range(len(parent)):
        path, j = [], i
        while j >= 0 and d[j] < 0:
            if j in path:
                raise ValueError(f"parent array {parent.tolist()} has a cycle")
            path.append(j)
            j = parent[j]
        base = d[j] if j >= 0 else -1
        for k, node in enumerate(reversed(path), 1):
            d[node] = base + k
    return d


def heights(parent: np.ndarray) -> np.ndarray:
    """Height of every node (leaves 0, a parent one more than its highest child): nodes of equal
    height can be computed together once all lower ones are."""
    h = np.zeros(len(parent), np.int64)
    for i in np.argsort(-depths(parent), kind="stable"):
        if parent[i] >= 0:
            h[parent[i]] = max(h[parent[i]], h[i] + 1)
    return h


def binarize_head_outward(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A binary tree over the words for the CT-RNN: the head joins its right dependents nearest
    first, then its left dependents nearest first ("A man rides a bike" -> ((A man) (rides (a bike)))).
    Returns ``(left, right)`` (n - 1,) of the internal nodes in bottom-up order; a child id < n is
    word i, id n + k is internal node k; the last internal node is the root (none for one word).
    Depth-first with an explicit stack, so a chain of any length works (no recursion limit)."""
    n = len(parent)
    kids: list[list[int]] = [[] for _ in range(n)]
    for c, p in enumerate(parent.tolist()):
        if p >= 0:
            kids[p].append(c)

    def joining_order(h: int) -> Iterator[int]:
        return iter([c for c in kids[h] if c > h] + [c for c in reversed(kids[h]) if c < h])

    left: list[int] = []
    right: list[int] = []
    top = list(range(n))  # top[h]: h joined with the dependents done so far
    root = int(np.nonzero(parent < 0)[0][0])
    stack = [(root, joining_order(root))]
    while stack:
        h, todo = stack[-1]
        c = next(todo, None)
        if c is not None:  # build c's subtree first
            stack.append((c, joining_order(c)))
            continue
        stack.pop()
        if stack:  # h's subtree is done: join it to its head
            p = stack[-1][0]
            a, b = (top[p], top[h]) if h > p else (top[h], top[p])
            left.append(a)
            right.append(b)
            top[p] = n + len(left) - 1
    return np.array(left, np.int64), np.array(right, np.int64)


TREE_VIEWS = ("tree_basic", "tree_collapsed")
COLUMNS = ("parent", "side", "rank", "ell", "bin_left", "bin_right")


def encode_trees(parsed: Sequence[ParsedCaption], scheme: str, view: str, word_index: dict[str, int]) -> Fragments:
    """One tree per caption as rows of a fragment file (one row per node, in sentence order):
    ``w1 = w2`` the node's GloVe row (-1: out of the dictionary — the node stays, with a zero vector),
    ``rel`` its label id (``relations``: every label of the dataset's trees, text only), and the
    columns ``parent`` (row within the caption, -1 at the root), ``side``/``rank`` (:func:`slots`),
    ``ell`` (:func:`subtree_sizes`) and the head-outward binarisation: row k < n - 1 holds internal
    node k's ``bin_left``/``bin_right`` (:func:`binarize_head_outward`), the last row -1."""
    from fraglib.core.config import check_choice

    check_choice("sentence view", view, TREE_VIEWS)
    trees = [
        (basic_tree(p.tokens) if view == "tree_basic" else collapsed_tree(p.tokens, scheme)) if p.tokens else None
        for p in parsed
    ]
    labels = sorted({r for t in trees if t is not None for r in t.rel})
    rel_id = {r: i for i, r in enumerate(labels)}
    cols: dict[str, list[np.ndarray]] = {k: [] for k in COLUMNS}
    rel, words, offsets, reasons = [], [], [0], []
    for p, t in zip(parsed, trees):
        if t is None:
            reasons.append("empty" if not p.tokens else "no_words")
            offsets.append(offsets[-1])
            continue
        n = len(t)
        side, rank = slots(t.parent)
        left, right = binarize_head_outward(t.parent)
        for k, v in (
            ("parent", t.parent),
            ("side", side),
            ("rank", rank),
            ("ell", subtree_sizes(t.parent)),
            ("bin_left", np.concatenate([left, [-1]])),
            ("bin_right", np.concatenate([right, [-1]])),
        ):
            cols[k].append(np.asarray(v, np.int32))
        rel.extend(rel_id[r] for r in t.rel)
        words.extend(word_index.get(w, -1) for w in t.words)
        reasons.append("")
        offsets.append(offsets[-1] + n)
    w = np.array(words, np.int32)
    return Fragments(
        view,
        np.array(rel, np.int32),
        w,
        w.copy(),
        np.array(offsets, np.int64),
        np.array([p.sentid for p in parsed], np.int64),
        labels,
        reasons,
        {k: np.concatenate(v) if v else np.zeros(0, np.int32) for k, v in cols.items()},
    )
