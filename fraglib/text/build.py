"""Captions -> CoNLL-U parses -> sentence-fragment arrays (the two text stages of the pipeline).

    python -m fraglib.text parse     --dataset-dir data/synthetic            # -> parse.conllu
    python -m fraglib.text fragments --dataset-dir data/synthetic            # -> fragments/*.npz

``fragments`` writes, into ``<dataset-dir>/fragments/``: ``dependency.npz``, ``bow.npz``,
``bigram.npz``, ``tokens.npz`` (see :class:`fraglib.text.fragments.Fragments`), the two tree views,
``relations.json`` (the inventory
before and after the frequency filter, with counts) and ``text_stats.json`` (a DVC metric).
The relation filter and the token vocabulary are computed on the *train* split only and applied to
every split.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.core.config import check_choice, check_range, load_section
from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, write_text
from fraglib.data import read_karpathy_json
from fraglib.text.fragments import (
    MODES,
    Fragments,
    encode,
    encode_tokens,
    frequent_relations,
    relation_inventory,
    triplets,
    vocabulary,
    words_of,
)
from fraglib.text.parse import PARSERS, clean_text, make_parser, parse_captions, read_conllu, write_conllu
from fraglib.text.trees import TREE_VIEWS, encode_trees

LONG_CAPTION = 200  # tokens


@dataclasses.dataclass(frozen=True)
class TextConfig:
    """``params.yaml`` section ``text``."""

    parser: str = "spacy"  # spacy | stanza
    stanza_dir: str = "stanza_resources"  # where stanza's English models were downloaded
    min_relation_share: float = 0.01  # relation types below this share of train triplets are dropped
    min_word_count: int = 4  # tokens view: vocabulary = train words seen >= this often (Peri: > 3)
    batch_size: int = 512  # captions per parser batch

    def validate(self) -> "TextConfig":
        check_choice("text.parser", self.parser, PARSERS)
        check_range("text.min_relation_share", self.min_relation_share, 0.0, 1.0, float)
        check_range("text.min_word_count", self.min_word_count, 1, 1_000_000, int)
        check_range("text.batch_size", self.batch_size, 1, 1_000_000, int)
        return self


def run_parse(
    dataset_dir: str | Path, cfg: TextConfig, out: str | Path | None = None, progress: bool = True
) -> dict[str, Any]:
    """Parse every caption of the dataset; write the CoNLL-U cache. Returns timing."""
    ds = read_karpathy_json(Path(dataset_dir) / "dataset.json")
    parser = make_parser(
        cfg.parser, **({"batch_size": cfg.batch_size} if cfg.parser == "spacy" else {"model_dir": cfg.stanza_dir})
    )
    t0 = time.perf_counter()
    parsed = parse_captions(parser, [s["sentid"] for s in ds.sentences], [s["raw"] for s in ds.sentences], progress)
    seconds = time.perf_counter() - t0
    out = Path(out) if out else Path(dataset_dir) / "parse.conllu"
    write_conllu(out, parsed, parser.name, parser.scheme)
    return {
        "captions": len(parsed),
        "seconds": seconds,
        "captions_per_s": len(parsed) / max(seconds, 1e-9),
        "parser": parser.name,
    }


def read_parsed(dataset_dir: Path, parse_file: str | Path | None = None) -> tuple[Any, dict[str, str], list[Any]]:
    """(dataset, CoNLL-U header, parses in the dataset's sentence order), refusing a stale or partial parse."""
    ds = read_karpathy_json(dataset_dir / "dataset.json")
    parse_file = Path(parse_file or dataset_dir / "parse.conllu")
    header, parsed = read_conllu(parse_file)
    by_sentid = {p.sentid: p for p in parsed}
    missing = [s["sentid"] for s in ds.sentences if s["sentid"] not in by_sentid]
    if missing:
        raise ValueError(f"{parse_file}: no parse for sentids {missing[:5]} (re-run the parse stage)")
    parsed = [by_sentid[s["sentid"]] for s in ds.sentences]  # dataset order, always
    stale = [
        (s["sentid"], clean_text(s["raw"]), p.text)
        for s, p in zip(ds.sentences, parsed)
        if clean_text(s["raw"]) != p.text
    ]
    if stale:
        sid, now, then = stale[0]
        raise ValueError(
            f"{parse_file} is stale: {len(stale)} caption(s) of {dataset_dir / 'dataset.json'} changed since "
            f"it was parsed (sentid {sid}: {now!r} now, {then!r} parsed); re-run the parse stage"
        )
    return ds, header, parsed


def run_tokens(
    dataset_dir: str | Path, vocab: list[str], out: str | Path, parse_file: str | Path | None = None
) -> dict[str, Any]:
    """The ``tokens`` view of a dataset's captions in *another* vocabulary (a trained model's), for
    text-only transfer (``python -m fraglib_study captions --parse-file``): every word looked up by its
    string, a word outside ``vocab`` becomes ``<unk>`` (id 0) and is counted. Writes ``out``; returns the counts."""
    from fraglib.text.vectors import load_glove

    ds, _, parsed = read_parsed(Path(dataset_dir), parse_file)
    frags = encode_tokens(parsed, vocab, load_glove()[0])
    frags.save(out)
    n_tok = len(frags.rel)
    return {
        "vocabulary_size": len(vocab),
        "captions": len(parsed),
        "tokens": n_tok,
        "unk_tokens": int((frags.rel == 0).sum()),
        "unk_share": float((frags.rel == 0).mean()) if n_tok else 0.0,
        "captions_without_fragments": int((frags.counts() == 0).sum()),
    }


def run_fragments(
    dataset_dir: str | Path, cfg: TextConfig, parse_file: str | Path | None = None, out_dir: str | Path | None = None
) -> dict[str, Any]:
    """Encode the three fragment modes and the two tree views; write npz files, relations.json and text_stats.json.

    Every file is computed before the first is written (each atomically), so a failure on the way
    leaves the folder's old files as they were."""
    from fraglib.text.vectors import load_glove

    dataset_dir = Path(dataset_dir)
    ds, header, parsed = read_parsed(dataset_dir, parse_file)
    scheme = header["scheme"]
    word_index, _ = load_glove()
    train_imgs = {im["imgid"] for im in ds.split("train").images}
    trip = [triplets(p.tokens, scheme) for p in parsed]
    before = relation_inventory(t for t, s in zip(trip, ds.sentences) if s["imgid"] in train_imgs)
    known_train = relation_inventory(
        [x for x in t if x[1] in word_index and x[2] in word_index]
        for t, s in zip(trip, ds.sentences)
        if s["imgid"] in train_imgs
    )
    kept = frequent_relations(known_train, cfg.min_relation_share)
    out_dir = Path(out_dir) if out_dir else dataset_dir / "fragments"
    arrays: dict[str, Fragments] = {}  # file name -> fragments, written at the end
    stats: dict[str, Any] = {"parser": header.get("parser", "?"), "scheme": scheme, "captions": len(parsed)}
    for mode in MODES:
        frags = encode(parsed, scheme, mode, word_index, kept if mode == "dependency" else None)
        arrays[f"{mode}.npz"] = frags
        counts = frags.counts()
        stats[mode] = {
            "fragments_per_caption_mean": float(counts.mean()) if len(counts) else 0.0,
            "fragments_per_caption_max": int(counts.max()) if len(counts) else 0,
            "captions_without_fragments": int((counts == 0).sum()),
            "reasons": dict(sorted(Counter(r for r in frags.reasons if r).items())),
        }
    for view in TREE_VIEWS:
        frags = encode_trees(parsed, scheme, view, word_index)
        arrays[f"{view}.npz"] = frags
        counts, c = frags.counts(), frags.columns
        stats[view] = {
            "nodes_per_caption_mean": float(counts.mean()) if len(counts) else 0.0,
            "nodes_per_caption_max": int(counts.max()) if len(counts) else 0,
            "captions_without_tree": int((counts == 0).sum()),
            "nodes_out_of_dictionary": int((frags.w1 < 0).sum()),
            "relation_types": len(frags.relations),
            "max_children_per_side": int(c["rank"].max()) + 1 if len(counts) and c["rank"].max() >= 0 else 0,
            "reasons": dict(sorted(Counter(r for r in frags.reasons if r).items())),
        }
    tokens = [words_of(p.tokens) for p in parsed]
    n_tok = sum(map(len, tokens))
    vocab = vocabulary((t for t, s in zip(tokens, ds.sentences) if s["imgid"] in train_imgs), cfg.min_word_count)
    frags = encode_tokens(parsed, vocab, word_index)
    arrays["tokens.npz"] = frags
    counts, in_train = frags.counts(), np.repeat([s["imgid"] in train_imgs for s in ds.sentences], frags.counts())
    stats["tokens"] = {
        "vocabulary_size": len(vocab),
        "min_word_count": cfg.min_word_count,
        "tokens_per_caption_mean": float(counts.mean()) if len(counts) else 0.0,
        "tokens_per_caption_max": int(counts.max()) if len(counts) else 0,
        "unk_share_train": float((frags.rel[in_train] == 0).mean()) if in_train.any() else 0.0,
        "unk_share_other": float((frags.rel[~in_train] == 0).mean()) if (~in_train).any() else 0.0,
        "captions_without_fragments": int((counts == 0).sum()),
        "reasons": dict(sorted(Counter(r for r in frags.reasons if r).items())),
    }
    all_trip = [x for t in trip for x in t]
    stats.update(
        {
            "relation_types_before_filter": len(before),
            "relation_types_after_filter": len(kept),
            "min_relation_share": cfg.min_relation_share,
            "token_dictionary_coverage": sum(w in word_index for ws in tokens for w in ws) / max(n_tok, 1),
            "triplets": len(all_trip),
            "triplet_dictionary_coverage": sum(a in word_index and b in word_index for _, a, b in all_trip)
            / max(len(all_trip), 1),
            "bad_input": {
                "empty": sum(not p.text.strip() for p in parsed),
                "non_ascii": sum(not p.text.isascii() for p in parsed),
                f"over_{LONG_CAPTION}_tokens": sum(len(p.tokens) > LONG_CAPTION for p in parsed),
            },
        }
    )
    relations = (
        json.dumps(
            {
                "computed_on": "train split",
                "min_relation_share": cfg.min_relation_share,
                "before_filter": dict(before.most_common()),
                "in_dictionary": dict(known_train.most_common()),
                "kept": kept,
            },
            indent=1,
        )
        + "\n"
    )
    text_stats = json.dumps(stats, indent=1, sort_keys=True) + "\n"
    for name, frags in arrays.items():
        frags.save(out_dir / name)
    write_text(out_dir / "relations.json", relations)
    write_text(out_dir / "text_stats.json", text_stats)
    return stats


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["parse", "fragments"])
    ap.add_argument("--dataset-dir", required=True)
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--parse-file", help="CoNLL-U cache (default <dataset-dir>/parse.conllu)")
    ap.add_argument("--out-dir", help="fragments output folder (default <dataset-dir>/fragments)")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    cfg = load_section(args.params, "text", TextConfig)
    if args.command == "parse":
        out = [Path(args.parse_file or Path(args.dataset_dir) / "parse.conllu")]
    else:
        d = Path(args.out_dir or Path(args.dataset_dir) / "fragments")
        out = [d / f"{v}.npz" for v in (*MODES, *TREE_VIEWS, "tokens")] + [d / "relations.json", d / "text_stats.json"]
    claim_cli(ap, out, out, args.overwrite, f"fraglib.text {args.command}")
    if args.command == "parse":
        r = run_parse(args.dataset_dir, cfg, args.parse_file)
        print(
            f"parsed {r['captions']} captions with {r['parser']} in {r['seconds']:.1f} s "
            f"({r['captions_per_s']:.0f} captions/s)"
        )
    else:
        s = run_fragments(args.dataset_dir, cfg, args.parse_file, args.out_dir)
        print(
            f"relation types {s['relation_types_before_filter']} -> {s['relation_types_after_filter']}; "
            + "; ".join(
                f"{m}: {s[m]['fragments_per_caption_mean']:.1f}/caption, "
                f"{s[m]['captions_without_fragments']} captions without"
                for m in MODES
            )
        )
