"""The relation mapping table (both label schemes), the frequency filter and the encoders."""

from collections import Counter

import numpy as np
import pytest

from fraglib.text.fragments import Fragments, encode, frequent_relations, triplets
from fraglib.text.parse import ParsedCaption, Token, read_conllu, stanza_tokens, write_conllu


def conllu_tokens(block: str) -> list[Token]:
    """Tokens from CoNLL-U lines `id form upos head deprel` (whitespace separated)."""
    out = []
    for line in block.strip().splitlines():
        i, form, upos, head, rel = line.split()
        out.append(Token(int(i), form, form.lower(), upos, "_", int(head), rel))
    return out


# ------------------------------------------------------------------ ClearNLP (spaCy) scheme
CLEAR_IN_FRONT = conllu_tokens("""
1 A DET 3 det
2 black ADJ 3 amod
3 dog NOUN 4 nsubj
4 sits VERB 0 root
5 in ADP 4 prep
6 front NOUN 5 pobj
7 of ADP 6 prep
8 the DET 9 det
9 house NOUN 7 pobj
10 . PUNCT 4 punct
""")

CLEAR_PASSIVE = conllu_tokens("""
1 A DET 2 det
2 square NOUN 4 nsubjpass
3 is AUX 4 auxpass
4 topped VERB 0 root
5 by ADP 4 agent
6 a DET 8 det
7 red ADJ 8 amod
8 star NOUN 5 pobj
9 and CCONJ 8 cc
10 a DET 11 det
11 ring NOUN 8 conj
""")

CLEAR_NEXT_TO = conllu_tokens("""
1 A DET 2 det
2 circle NOUN 0 root
3 next ADV 2 advmod
4 to ADP 3 prep
5 a DET 6 det
6 star NOUN 4 pobj
""")


def test_clearnlp_multiword_preposition_in_front_of():
    t = triplets(CLEAR_IN_FRONT, "clearnlp")
    assert ("prep_in_front_of", "sits", "house") in t
    assert not any(w == "front" for _, h, d in t for w in (h, d))
    assert ("amod", "dog", "black") in t and ("nsubj", "sits", "dog") in t
    assert not any(r == "punct" for r, _, _ in t)


def test_clearnlp_passive_agent_and_conj():
    t = set(triplets(CLEAR_PASSIVE, "clearnlp"))
    assert {
        ("nsubjpass", "topped", "square"),
        ("auxpass", "topped", "is"),
        ("agent", "topped", "star"),
        ("amod", "star", "red"),
        ("conj_and", "star", "ring"),
    } <= t
    assert not any(r in ("cc", "pobj", "prep") for r, _, _ in t)


def test_clearnlp_two_word_preposition_next_to():
    t = triplets(CLEAR_NEXT_TO, "clearnlp")
    assert ("prep_next_to", "circle", "star") in t
    assert not any(r == "advmod" for r, _, _ in t)


# ------------------------------------------------------------------ UD (stanza) scheme, via stanza Documents
UD_PASSIVE_FIXED = """# text = A dog is chased by a child in front of a house.
1	A	a	DET	DT	_	2	det	_	_
2	dog	dog	NOUN	NN	_	4	nsubj:pass	_	_
3	is	be	AUX	VBZ	_	4	aux:pass	_	_
4	chased	chase	VERB	VBN	_	0	root	_	_
5	by	by	ADP	IN	_	7	case	_	_
6	a	a	DET	DT	_	7	det	_	_
7	child	child	NOUN	NN	_	4	obl:agent	_	_
8	in	in	ADP	IN	_	11	case	_	_
9	front	front	NOUN	NN	_	8	fixed	_	_
10	of	of	ADP	IN	_	8	fixed	_	_
11	house	house	NOUN	NN	_	4	obl	_	_
12	.	.	PUNCT	.	_	4	punct	_	_

"""

UD_NMOD_CHAIN = """# text = The man's black dog sees a cat on top of the car and a bird.
1	The	the	DET	DT	_	2	det	_	_
2	man	man	NOUN	NN	_	5	nmod:poss	_	_
3	's	's	PART	POS	_	2	case	_	_
4	black	black	ADJ	JJ	_	5	amod	_	_
5	dog	dog	NOUN	NN	_	6	nsubj	_	_
6	sees	see	VERB	VBZ	_	0	root	_	_
7	a	a	DET	DT	_	8	det	_	_
8	cat	cat	NOUN	NN	_	6	obj	_	_
9	on	on	ADP	IN	_	10	case	_	_
10	top	top	NOUN	NN	_	8	nmod	_	_
11	of	of	ADP	IN	_	13	case	_	_
12	the	the	DET	DT	_	13	det	_	_
13	car	car	NOUN	NN	_	10	nmod	_	_
14	and	and	CCONJ	CC	_	16	cc	_	_
15	a	a	DET	DT	_	16	det	_	_
16	bird	bird	NOUN	NN	_	8	conj	_	_
17	.	.	PUNCT	.	_	6	punct	_	_

"""


def ud(conllu: str) -> list[Token]:
    from stanza.utils.conll import CoNLL

    return stanza_tokens(CoNLL.conll2doc(input_str=conllu))


def test_ud_passive_agent_and_fixed_multiword_case():
    t = set(triplets(ud(UD_PASSIVE_FIXED), "ud"))
    assert {
        ("nsubjpass", "chased", "dog"),
        ("auxpass", "chased", "is"),
        ("agent", "chased", "child"),
        ("prep_in_front_of", "chased", "house"),
        ("det", "child", "a"),
    } <= t
    assert not any(r in ("case", "fixed", "punct", "obl", "obl:agent") for r, _, _ in t)


def test_ud_renames_poss_obj_conj_and_collapses_nmod_chain():
    t = set(triplets(ud(UD_NMOD_CHAIN), "ud"))
    assert {
        ("poss", "dog", "man"),
        ("dobj", "sees", "cat"),
        ("conj_and", "cat", "bird"),
        ("prep_on_top_of", "cat", "car"),
        ("amod", "dog", "black"),
    } <= t
    assert not any(w == "top" for _, h, d in t for w in (h, d))


def test_both_schemes_agree_on_the_passive():
    """The same passive sentence in both schemes gives the same core triplets."""
    clear = set(triplets(CLEAR_PASSIVE[:8], "clearnlp"))
    ud_t = set(
        triplets(
            ud("""# text = A square is topped by a red star
1	A	a	DET	DT	_	2	det	_	_
2	square	square	NOUN	NN	_	4	nsubj:pass	_	_
3	is	be	AUX	VBZ	_	4	aux:pass	_	_
4	topped	top	VERB	VBN	_	0	root	_	_
5	by	by	ADP	IN	_	8	case	_	_
6	a	a	DET	DT	_	8	det	_	_
7	red	red	ADJ	JJ	_	8	amod	_	_
8	star	star	NOUN	NN	_	4	obl:agent	_	_

"""),
            "ud",
        )
    )
    assert clear == ud_t


def test_spacy_backend_on_real_parses():
    from fraglib.text.parse import SpacyParser

    p = SpacyParser()
    toks = list(p.parse(["A red circle is in front of a brick wall.", "A dog runs next to a cat."]))
    assert ("prep_in_front_of", "is", "wall") in triplets(toks[0], p.scheme)
    assert any(r == "prep_next_to" for r, _, _ in triplets(toks[1], p.scheme))


# ------------------------------------------------------------------ filter, encoding, bad input
def test_frequency_filter_threshold_is_inclusive():
    counts = Counter({"det": 90, "amod": 9, "prep_on": 1})
    assert frequent_relations(counts, 0.01) == ["det", "amod", "prep_on"]
    assert frequent_relations(counts, 0.02) == ["det", "amod"]


def test_encode_modes_and_reasons():
    index = {
        w: i
        for i, w in enumerate(
            ["a", "black", "dog", "sits", "the", "house", "square", "topped", "is", "by", "red", "star", "and", "ring"]
        )
    }
    parsed = [
        ParsedCaption(0, "A black dog sits in front of the house.", CLEAR_IN_FRONT),
        ParsedCaption(1, "", []),
        ParsedCaption(2, "Zyx", conllu_tokens("1 Zyx X 0 root")),
        ParsedCaption(3, "A square is topped by a red star and a ring", CLEAR_PASSIVE),
    ]
    dep = encode(parsed, "clearnlp", "dependency", index, ["det", "amod", "nsubj", "agent"])
    assert dep.reasons == ["", "empty", "no_edges", ""]
    assert list(dep.counts()) == [4, 0, 0, 5]  # caption 0: its prep_in_front_of type was not kept
    r, w1, w2 = dep.of(0)
    names = {(dep.relations[a], b, c) for a, b, c in zip(r, w1, w2)}
    assert (dep.relations.index("amod"), index["dog"], index["black"]) in {(a, b, c) for a, b, c in zip(r, w1, w2)}
    assert len(names) == 4
    bow = encode(parsed, "clearnlp", "bow", index)
    assert list(bow.counts()) == [6, 0, 0, 11] and np.all(bow.w1 == bow.w2)
    assert bow.reasons[2] == "oov_words"
    big = encode(parsed, "clearnlp", "bigram", index)
    # "in", "front", "of" are not in this toy dictionary: pairs touching them are dropped
    assert list(big.counts())[0] == 4 and big.reasons[2] == "single_word"


def test_oov_and_rare_reasons_and_roundtrip(tmp_path):
    index = {"a": 0, "black": 1, "dog": 2}
    parsed = [ParsedCaption(0, "A black dog sits in front of the house.", CLEAR_IN_FRONT)]
    assert encode(parsed, "clearnlp", "dependency", {}, ["det"]).reasons == ["oov_words"]
    assert encode(parsed, "clearnlp", "dependency", index, ["nsubj"]).reasons == ["rare_relations"]
    f = encode(parsed, "clearnlp", "dependency", index, ["det", "amod"])
    f.save(tmp_path / "f.npz")
    g = Fragments.load(tmp_path / "f.npz")
    assert g.relations == f.relations and g.reasons == f.reasons and g.mode == "dependency"
    np.testing.assert_array_equal(g.offsets, f.offsets)


def test_conllu_roundtrip_keeps_header_and_empty_captions(tmp_path):
    parsed = [ParsedCaption(5, "A dog.", conllu_tokens("1 A DET 2 det\n2 dog NOUN 0 root")), ParsedCaption(6, "", [])]
    write_conllu(tmp_path / "p.conllu", parsed, "test-parser 1.0", "clearnlp")
    header, back = read_conllu(tmp_path / "p.conllu")
    assert header == {"parser": "test-parser 1.0", "scheme": "clearnlp"}
    assert [(p.sentid, p.text, p.tokens) for p in back] == [(p.sentid, p.text, p.tokens) for p in parsed]


def test_stanza_without_models_says_how_to_get_them(tmp_path):
    from fraglib.text.parse import StanzaParser

    with pytest.raises(RuntimeError, match=r"stanza\.download\('en'"):
        StanzaParser(model_dir=tmp_path / "none")


def test_messy_captions_do_not_crash():
    from fraglib.text.parse import SpacyParser, parse_captions
    from fraglib.text.vectors import load_glove

    raws = ["", "   ", "Un café près de la fenêtre — naïve façade.", " ".join(["dog"] * 250), "A", "!!!"]
    parsed = parse_captions(SpacyParser(), list(range(len(raws))), raws, progress=False)
    index, _ = load_glove()
    f = encode(parsed, "clearnlp", "dependency", index, ["det", "amod", "nsubj", "compound", "dobj"])
    assert f.reasons[0] == f.reasons[1] == "empty"
    assert len(parsed[3].tokens) == 250
    assert all(r in ("", "empty", "no_edges", "oov_words", "rare_relations") for r in f.reasons)
