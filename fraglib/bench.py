"""Benchmarks: ``python -m fraglib.bench [names...]`` updates ``benchmarks/results.json``.

Each entry: ``{"name", "value", "unit", "reference", "ratio", "machine", ...extra}``. Entries are
merged by name, so later benchmarks add to the file without erasing the others. Figures are
medians over repeats, measured in one run; nothing here is asserted on — tests never time code.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path("benchmarks/results.json")


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}; {os.cpu_count()} cores; torch {torch.__version__} ({torch.get_num_threads()} threads); " \
           f"Python {platform.python_version()}"


def entry(name: str, value: float, unit: str, reference: float | None = None, ratio: float | None = None,
          **extra: Any) -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "reference": reference, "ratio": ratio,
            "machine": machine(), **extra}


def bench_synthetic(repeats: int = 3, n_images: int = 60) -> list[dict[str, Any]]:
    """Synthetic generator throughput (images/s incl. PNG writing), median of ``repeats`` runs."""
    from fraglib.synthetic import SynthConfig, write_benchmark

    cfg = SynthConfig(n_train=n_images - 20, n_val=10, n_test=10, seed=0)
    rates = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            write_benchmark(cfg, tmp, progress=False)
            rates.append(n_images / (time.perf_counter() - t0))
    return [entry("synthetic_images_per_s", round(statistics.median(rates), 2), "images/s",
                  repeats=repeats, images_per_repeat=n_images, image_size=cfg.image_size,
                  all_runs=[round(r, 2) for r in rates])]


def _caption_corpus() -> tuple[list[str], str]:
    """Pascal1K's ~5,000 sentences when ../shared/data is present, else synthetic captions."""
    pascal = Path(os.environ.get("FRAGLIB_PASCAL1K", "../shared/data/pascal1k")) / "sentences.json"
    if pascal.exists():
        raw = json.loads(pascal.read_text())
        return [s for v in raw.values() for s in v["sentences"]], "pascal1k sentences"
    from fraglib.synthetic import SynthConfig, generate

    cfg = SynthConfig(n_train=980, n_val=10, n_test=10)
    return [c["raw"] for _, _, r in generate(cfg, progress=False) for c in r["captions"]], "synthetic captions"


def bench_parse(repeats: int = 3) -> list[dict[str, Any]]:
    """Parse + triplet extraction throughput (spaCy; stanza too where its models exist)."""
    from fraglib.fragments import triplets
    from fraglib.parse import SpacyParser, StanzaParser, parse_captions

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
        out.append(entry(name, round(statistics.median(rates), 1), "sentences/s", corpus=corpus,
                         sentences=len(texts), parser=parser.name, includes="parse + triplet extraction",
                         all_runs=[round(r, 1) for r in rates]))
    return out


BENCHMARKS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "synthetic": bench_synthetic,
    "parse": bench_parse,
}


def merge(new: list[dict[str, Any]], path: Path = RESULTS) -> list[dict[str, Any]]:
    old = json.loads(path.read_text()) if path.exists() else []
    names = {e["name"] for e in new}
    merged = [e for e in old if e["name"] not in names] + new
    merged.sort(key=lambda e: e["name"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=1) + "\n")
    return merged


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {', '.join(BENCHMARKS)})")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    new: list[dict[str, Any]] = []
    for name in args.names or list(BENCHMARKS):
        print(f"[bench] {name} ...", flush=True)
        for e in BENCHMARKS[name]():
            print(f"[bench]   {e['name']} = {e['value']} {e['unit']}" + (f" (ratio {e['ratio']})" if e["ratio"] else ""))
            new.append(e)
    merge(new, Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
