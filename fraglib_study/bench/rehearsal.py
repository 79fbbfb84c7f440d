"""A Flickr30K-size rehearsal (issue #61, item 4; docs/scale.md "Flickr30K-size rehearsal"): made data in
VSE++/SCAN's precomputed layout at Flickr30K's sizes (29,000 / 1,014 / 1,000 images, 36 regions × 2,048
float16 each, five captions per image from the synthetic grammar) taken through docs/own_data.md's commands —
``fraglib.data precomp`` → ``fraglib.text parse`` → ``fraglib.text fragments`` → ``fraglib_study.experiments.study`` per run (its
training and its 1K test) → ``fraglib.run.evaluate`` (re-scored, the 5-fold protocol too) → the results page
(``notebooks/results_report.ipynb``) — each a fresh process
whose seconds and peak RSS are recorded. ``fractions`` of the sizes (default 1/16, 1/4, 1) make the growth
curve of every stage on the same kind of data; entries ``rehearsal_<stage>_n<images>_s``.

The region features are made, not learned: each image gets a layout and scene of the synthetic benchmark
(``params.yaml: synthetic``; no pictures), and its first regions are one per object — the sum of fixed random
codes of its shape, colour and pattern plus Gaussian noise — then two regions of its scene's code, the rest
noise. So a system that learns anything ranks above chance, and a rehearsal that ranks at chance is broken.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.core.outputs import write_text
from fraglib_study.bench.common import entry, fresh
from fraglib_study.bench.scale import report_page

SIZES = {"train": 29_000, "dev": 1_014, "test": 1_000}  # Flickr30K's Karpathy split, as SCAN's precomp files
REGIONS, DIM = 36, 2048
NOISE = 1.5  # sd of each region's noise, against codes of sd 1 per dimension


def made_sizes(fraction: float) -> dict[str, int]:
    """Images per precomp split at ``fraction`` of Flickr30K's (at least 10 each; the test split a multiple of 5,
    for the 5-fold protocol)."""
    sizes = {s: max(10, round(n * fraction)) for s, n in SIZES.items()}
    return {**sizes, "test": max(10, 5 * round(SIZES["test"] * fraction / 5))}


def _codes(seed: int) -> dict[str, np.ndarray]:
    """A fixed random code (DIM,) float32 for every shape, colour, pattern and scene of the synthetic grammar."""
    from fraglib.data.synthetic import COLOURS, PATTERNS, SCENES, SHAPES

    rng = np.random.default_rng([seed, 7])
    names = [*SHAPES, *COLOURS, *PATTERNS, *(f"scene:{s}" for s in SCENES)]
    return dict(zip(names, rng.standard_normal((len(names), DIM), dtype=np.float32)))


def _scenes(cfg, split: str, a: int, b: int, seed: int) -> list[tuple[str, list[dict[str, Any]], list[str]]]:
    """(scene, objects, captions) of made images ``a`` … ``b`` − 1 of ``split``: the synthetic grammar's layouts
    and captions, image k from its own generator (so blocks of any size give the same images)."""
    from fraglib.data.synthetic import SCENES, _sample_layout, make_caption

    out = []
    for k in range(a, b):
        rng = np.random.default_rng([seed, list(SIZES).index(split), k])
        objects = _sample_layout(rng, cfg)
        scene = str(rng.choice(SCENES))
        out.append(
            (scene, objects, [make_caption(rng, scene, objects, cfg)["raw"] for _ in range(cfg.captions_per_image)])
        )
    return out


def _regions(scenes: list, codes: dict[str, np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """(len(scenes), REGIONS, DIM) float16: one region per object, two of the scene, noise everywhere."""
    R = NOISE * rng.standard_normal((len(scenes), REGIONS, DIM), dtype=np.float32)
    for i, (scene, objects, _) in enumerate(scenes):
        for j, o in enumerate(objects):
            R[i, j] += codes[o["shape"]] + codes[o["colour"]] + 0.5 * codes[o["pattern"]]
        R[i, len(objects) : len(objects) + 2] += codes[f"scene:{scene}"]
    return R.astype(np.float16)


def make_precomp(root: Path, sizes: dict[str, int], synthetic: dict[str, Any], seed: int = 0, block: int = 256) -> int:
    """``{split}_ims.npy`` (n, REGIONS, DIM) float16 and ``{split}_caps.txt`` (five lines per image) of every
    split in ``sizes`` under ``root``, written block by block; returns the arrays' bytes."""
    from fraglib.data.dataset import Chunks, write_npy
    from fraglib.data.synthetic import SynthConfig

    cfg = SynthConfig(**synthetic).validate()
    codes = _codes(seed)
    root.mkdir(parents=True, exist_ok=True)
    total = 0
    for split, n in sizes.items():
        captions: list[str] = []

        def blocks(split=split, n=n, captions=captions):
            for a in range(0, n, block):
                scenes = _scenes(cfg, split, a, min(n, a + block), seed)
                captions.extend(c for _, _, caps in scenes for c in caps)
                yield _regions(scenes, codes, np.random.default_rng([seed, 11, list(SIZES).index(split), a]))

        with (root / f"{split}_ims.npy").open("wb") as f:
            write_npy(f, Chunks((n, REGIONS, DIM), np.dtype(np.float16), blocks), f"made {split}_ims.npy")
        write_text(root / f"{split}_caps.txt", "\n".join(captions) + "\n")
        total += (root / f"{split}_ims.npy").stat().st_size
    return total


def rehearsal_params(params: dict[str, Any], root: str, runs: tuple[str, ...], epochs: int) -> dict[str, Any]:
    """``params`` with docs/own_data.md's ``flickr30k`` section for the made data (``epochs`` for every trainable
    system, one training per run: the runs' own ``replicates`` and ``seeds`` dropped) and ``study.jobs: 1`` (each
    training in the measured process)."""
    import copy

    from fraglib.systems import get_system

    p = copy.deepcopy(params)
    p["study"]["jobs"] = 1
    systems = {}
    for r in runs:
        p["runs"][r] = {k: v for k, v in p["runs"][r].items() if k not in ("replicates", "seeds")}
        name = p["runs"][r]["system"]
        if get_system(name).TRAINABLE:
            systems[name] = {"epochs": epochs}
    p["flickr30k"] = {"root": root, "splits": [0], "train": {"epochs": epochs}, "systems": systems, "runs": list(runs)}
    return p


def _cli(module: str, argv: list[str]) -> None:
    """A fresh process: ``python -m module argv`` as its ``main``."""
    import importlib

    importlib.import_module(module).main(argv)


def rehearse(
    work: Path,
    sizes: dict[str, int],
    runs: tuple[str, ...],
    epochs: int = 2,
    params: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """docs/own_data.md's commands on made data of ``sizes`` under ``work``, each stage in a fresh process:
    entries ``rehearsal_<stage>_n<images>_s`` (seconds, peak RSS; a training's epoch seconds and test R@1)."""
    import yaml

    from fraglib_study.schema import read_checked

    params = params if params is not None else read_checked("params.yaml")
    n = sum(sizes.values())
    root, data, models, out = work / "precomp", work / "flickr30k", work / "models", work / "runs"
    P = work / "params.yaml"
    work.mkdir(parents=True, exist_ok=True)
    write_text(P, yaml.safe_dump(rehearsal_params(params, str(root), runs, epochs), sort_keys=False))
    entries: list[dict[str, Any]] = []

    def record(stage: str, measured: tuple[float, float, Any], **extra: Any) -> None:
        t, peak, _ = measured
        entries.append(
            entry(
                f"rehearsal_{stage}_n{n}_s",
                round(t, 1),
                "s",
                stage=stage,
                images=n,
                sizes=sizes,
                peak_rss_mb=round(peak),
                threads=os.environ.get("FRAGLIB_BENCH_THREADS", "all"),
                **extra,
            )
        )
        print(f"[rehearsal] {n} images, {stage}: {t:.1f} s, peak {peak:.0f} MB", flush=True)

    m = fresh(make_precomp, root, sizes, params["synthetic"])
    record("make", m, input_gb=round(m[2] / 1e9, 2), note="made data (not a user's stage)")
    record("import", fresh(_cli, "fraglib.data.__main__", ["precomp", "--root", str(root), "--out", str(data)]))
    shutil.rmtree(root)  # the made input: the import's output is what the rest reads
    for cmd in ("parse", "fragments"):
        record(cmd, fresh(_cli, "fraglib.text.build", [cmd, "--dataset-dir", str(data), "--params", str(P)]))
    for run in runs:
        rd, md = out / run, models / run
        argv = ["--run", run, "--dataset", "flickr30k", "--dataset-dir", str(data), "--out", str(rd)]
        m = fresh(_cli, "fraglib_study.experiments.study", [*argv, "--models-dir", str(md), "--params", str(P)])
        timing = (
            json.loads((md / "seed0" / "timing.json").read_text()) if (md / "seed0" / "timing.json").exists() else {}
        )
        test = json.loads((rd / "metrics.json").read_text())
        ep = timing.get("epochs") or 0
        record(
            f"train_{run}",
            m,
            epochs=ep,
            train_seconds=timing.get("train_seconds"),
            epoch_s=round(timing["train_seconds"] / ep, 3) if ep else None,
            test_r1=[round(test["annotation"]["r1"], 1), round(test["search"]["r1"], 1)],
            note="fraglib_study.experiments.study: loading, training, validation each epoch, the test evaluation (1,000 resamples, "
            "hubness); epoch_s = the training loop's seconds per epoch; test_r1 = annotation, search R@1",
        )
        rescore = ["--split", "test", "--params", str(P), "--set", "test_folds=5", "--out", str(work / f"{run}.json")]
        record(f"rescore_{run}", fresh(_cli, "fraglib.run.evaluate", [str(md / "seed0"), *rescore, "--overwrite"]))
    page = work / "results.html"
    argv = [
        "notebooks/results_report.ipynb", str(page),
        "-p", "runs_dir", str(out), "-p", "dataset_dir", str(data), "-p", "truth_file", '""',
        "-p", "parse_file", str(data / "parse.conllu"), "-p", "params_file", str(P),
        "-p", "dataset_label", f"Flickr30K-size rehearsal ({n:,} images, made regions)", "-p", "base", runs[0],
    ]  # fmt: skip
    t, peak, kernel = fresh(report_page, argv)
    record("report", (t, max(peak, kernel), None), runs=len(runs), page_kb=round(page.stat().st_size / 1024),
           note="the results page (notebooks/results_report.ipynb) of the rehearsal's runs; peak: the kernel's")  # fmt: skip
    return entries


def bench_rehearsal() -> list[dict[str, Any]]:
    """The rehearsal at ``FRAGLIB_REHEARSAL_FRACTIONS`` of Flickr30K's sizes (default 1/16, 1/4, 1), runs
    ``FRAGLIB_REHEARSAL_RUNS`` (default ``params.yaml: bench.rehearsal_runs``), ``FRAGLIB_REHEARSAL_EPOCHS`` epochs (default 2), under
    ``FRAGLIB_REHEARSAL_DIR`` (default the system's temporary folder; ≈ 24 GB at full size), removed after."""
    env = os.environ.get
    fractions = [float(x) for x in env("FRAGLIB_REHEARSAL_FRACTIONS", "0.0625,0.25,1").split(",") if x]
    from fraglib_study.schema import read_checked

    default = ",".join((read_checked("params.yaml").get("bench") or {}).get("rehearsal_runs") or [])
    runs = tuple(x for x in env("FRAGLIB_REHEARSAL_RUNS", default).split(",") if x)
    epochs = int(env("FRAGLIB_REHEARSAL_EPOCHS", "2"))
    out: list[dict[str, Any]] = []
    for f in fractions:
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(dir=env("FRAGLIB_REHEARSAL_DIR")) as tmp:
            out += rehearse(Path(tmp), made_sizes(f), runs, epochs)
        print(f"[rehearsal] fraction {f}: {time.perf_counter() - t0:.0f} s in all", flush=True)
    return out
