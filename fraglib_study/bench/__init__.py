"""Benchmarks: ``python -m fraglib_study bench [names...]`` updates ``benchmarks/results.json``.

Each entry: ``{"name", "value", "unit", "reference", "ratio", "machine", ...extra}``. Entries are
merged by name, so later benchmarks add to the file without erasing the others. The file is checked
before anything is measured; a merge that fails (a damaged file, another machine's entries without
``--overwrite``, a full disk) keeps the new entries in ``results.pending.json`` (appended to any there). Figures are
medians over repeats, measured in one run; nothing here is asserted on — tests never time code.

One module per area: :mod:`~fraglib_study.bench.pipeline` (generator, `dvc repro`, float bits),
:mod:`~fraglib_study.bench.text`, :mod:`~fraglib_study.bench.vision`, :mod:`~fraglib_study.bench.systems` (steps,
epochs with their FLOPs and critical paths, evaluation), :mod:`~fraglib_study.bench.scale` (COCO size,
growth curves); :mod:`~fraglib_study.bench.common` holds the schema and the random inputs.
``python -m fraglib_study bench timeline record|draw`` (:mod:`~fraglib_study.bench.timeline`) records and draws a command's
timeline: its DVC stages and the cores' use over time (`make` records ``benchmarks/timeline.json``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from fraglib.core.outputs import command, updates

__all__ = ["BENCHMARKS", "OPT_IN", "main", "merge"]


def _registers() -> tuple[dict[str, Callable[[], list[dict[str, Any]]]], dict[str, Callable[[], list[dict[str, Any]]]]]:
    """The benchmarks by name, imported on first use (every module of the package imports torch):
    ``python -m fraglib_study bench timeline``, which `make` runs around ``dvc repro``, starts without them."""
    if "BENCHMARKS" in globals():
        return globals()["BENCHMARKS"], globals()["OPT_IN"]
    from fraglib_study.bench.pipeline import (
        bench_kernel_bits,
        bench_repro,
        bench_repro_pascal1k,
        bench_startup,
        bench_synthetic,
    )
    from fraglib_study.bench.rehearsal import bench_rehearsal
    from fraglib_study.bench.scale import (
        bench_coco_eval,
        bench_epoch_growth,
        bench_growth,
        bench_memory,
        bench_socher_growth,
    )
    from fraglib_study.bench.systems import (
        bench_amp,
        bench_epoch,
        bench_eval,
        bench_peri,
        bench_profile,
        bench_socher,
        bench_stt,
        bench_systems_device,
        bench_train_step,
    )
    from fraglib_study.bench.text import bench_parse
    from fraglib_study.bench.vision import bench_feature_parts, bench_features, bench_rcnn_recall

    benchmarks: dict[str, Callable[[], list[dict[str, Any]]]] = {  # `make bench` (the default list)
        "train_step": bench_train_step,
        "epoch": bench_epoch,
        "eval": bench_eval,
        "synthetic": bench_synthetic,
        "startup": bench_startup,
        "parse": bench_parse,
        "features": bench_features,
    }
    opt_in: dict[str, Callable[[], list[dict[str, Any]]]] = {  # by name only: long, or need the Pascal1K study
        "systems_device": bench_systems_device,
        "rcnn_recall": bench_rcnn_recall,
        "feature_parts": bench_feature_parts,
        "repro": bench_repro,
        "repro_pascal1k": bench_repro_pascal1k,
        "kernel_bits": bench_kernel_bits,
        "socher": bench_socher,
        "coco_eval": bench_coco_eval,
        "growth": bench_growth,
        "socher_growth": bench_socher_growth,
        "epoch_growth": bench_epoch_growth,
        "memory": bench_memory,
        "rehearsal": bench_rehearsal,
        "peri": bench_peri,
        "stt": bench_stt,
        "profile": bench_profile,
        "amp": bench_amp,
    }
    globals().update(BENCHMARKS=benchmarks, OPT_IN=opt_in)
    return benchmarks, opt_in


def __getattr__(name: str) -> Any:
    """``BENCHMARKS`` (what `make bench` runs), ``OPT_IN`` (by name only) and ``merge``, imported on first use."""
    if name in ("BENCHMARKS", "OPT_IN"):
        return dict(zip(("BENCHMARKS", "OPT_IN"), _registers()))[name]
    if name == "merge":
        from fraglib_study.bench.common import merge

        return merge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@command
def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["timeline"]:  # `make`'s timeline (fraglib_study/bench/timeline.py), without torch
        from fraglib_study.bench.timeline import main as timeline

        return timeline(argv[1:])
    from fraglib_study.bench.common import RESULTS, merge
    from fraglib_study.report.loading import read_register

    BENCHMARKS, OPT_IN = _registers()
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="python -m fraglib_study bench timeline record|draw ...: a command's timeline (fraglib_study/bench/timeline.py)",
    )
    ap.add_argument(
        "names",
        nargs="*",
        help=f"benchmarks to run (default: {', '.join(BENCHMARKS)}; by name only: {', '.join(OPT_IN)})",
    )
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument(
        "--in-place", action="store_true", help="repro_pascal1k: time the out-of-date stages of this checkout"
    )
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="replace entries of --out measured on another machine "
        "(entries of this machine are always updated; others are kept)",
    )
    args = ap.parse_args(argv)
    known = {**BENCHMARKS, **OPT_IN}
    unknown = [n for n in args.names if n not in known]
    if unknown:
        raise SystemExit(f"unknown benchmark {unknown[0]!r}; known: {', '.join(known)}")
    try:
        read_register(Path(args.out))  # a damaged register stops us before, not after, measuring
    except ValueError as exc:
        ap.error(str(exc))
    updates(Path(args.out), Path(args.out).with_suffix(".pending.json"))  # a register: this machine's entries
    new: list[dict[str, Any]] = []
    for name in args.names or list(BENCHMARKS):
        print(f"[bench] {name} ...", flush=True)
        run = (lambda: known[name](in_place=True)) if name == "repro_pascal1k" and args.in_place else known[name]
        for e in run():
            print(
                f"[bench]   {e['name']} = {e['value']} {e['unit']}" + (f" (ratio {e['ratio']})" if e["ratio"] else "")
            )
            new.append(e)
    try:
        merge(new, Path(args.out), args.overwrite)
    except (OSError, ValueError) as exc:  # the new entries are kept in a pending file
        raise SystemExit(f"fraglib_study.bench: {exc}") from None
    print(f"wrote {args.out}")
