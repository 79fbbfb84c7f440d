"""Benchmarks of the text side: parsing and triplet extraction."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from fraglib_study.bench.common import entry


def _caption_corpus() -> tuple[list[str], str]:
    """Pascal1K's ~5,000 sentences when ../shared/data is present, else synthetic captions."""
    pascal = Path(os.environ.get("FRAGLIB_PASCAL1K", "../shared/data/pascal1k")) / "sentences.json"
    if pascal.exists():
        raw = json.loads(pascal.read_text())
        return [s for v in raw.values() for s in v["sentences"]], "pascal1k sentences"
    from fraglib.data.synthetic import SynthConfig, generate

    cfg = SynthConfig(n_train=980, n_val=10, n_test=10)
    return [c["raw"] for _, _, r in generate(cfg, progress=False) for c in r["captions"]], "synthetic captions"


def bench_parse(repeats: int = 3) -> list[dict[str, Any]]:
    """Parse + triplet extraction throughput (spaCy; stanza too where its models exist)."""
    from fraglib.text.fragments import triplets
    from fraglib.text.parse import SpacyParser, StanzaParser, parse_captions

    texts, corpus = _caption_corpus()
    ids = list(range(len(texts)))
    out = []
    parsers = [("parse_sentences_per_s", SpacyParser)]
    stanza_dir = Path(os.environ.get("FRAGLIB_STANZA_DIR", "stanza_resources"))
    if (stanza_dir / "en").is_dir():
        parsers.append(("parse_sentences_per_s_stanza", lambda: StanzaParser(stanza_dir)))
    else:
        print(f"[bench]   stanza models not in {stanza_dir}/en: parse_sentences_per_s_stanza not measured")
    for name, make in parsers:
        parser = make()
        list(parser.parse(texts[:64]))  # warm-up
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            parsed = parse_captions(parser, ids, texts, progress=False)
            for p in parsed:
                triplets(p.tokens, parser.scheme)
            rates.append(len(texts) / (time.perf_counter() - t0))
        out.append(
            entry(
                name,
                round(statistics.median(rates), 1),
                "sentences/s",
                corpus=corpus,
                sentences=len(texts),
                parser=parser.name,
                includes="parse + triplet extraction",
                all_runs=[round(r, 1) for r in rates],
            )
        )
    return out
