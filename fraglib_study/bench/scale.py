"""Benchmarks of scale: COCO-size scoring, and growth curves (cost against data size)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from fraglib.core.outputs import write_text
from fraglib_study.bench.common import REGIONS, entry, fresh, gpu_absent, random_split, sentence_rows


def _coco_child(q, name: str, settings: dict[str, Any], budget_s: float) -> None:
    """A fresh process: one system of ``params.yaml``'s settings scores COCO's 5K test (5,000 images x
    25,000 sentences) from random inputs on the selected device; sentence tiles until ``budget_s`` is spent,
    the rest extrapolated."""
    import resource

    import torch

    from fraglib.core.device import select_device
    from fraglib.run.evaluate import score_matrix
    from fraglib.systems import get_system

    dev, dev_name = select_device()
    cls = get_system(name)
    cfg = cls.Config(**settings).validate()
    regions = REGIONS[cls.views(cfg).images]
    split, dims = random_split(5000, 5, regions=regions, seed=1, device=dev)
    dims = {**dims, "n_relations": 40}
    torch.manual_seed(0)
    system = cls(cfg, dims, 0).to(dev)
    system.prepare(split)
    if not cls.TRAINABLE:
        small, _ = random_split(500, 5, regions=regions, seed=2, device=dev)
        system.fit(small)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tile, tiles, t0 = 4096, 0, time.perf_counter()
    n_tiles = -(-split.n_sentences // tile)
    for a in range(0, split.n_sentences, tile):  # the evaluator's loop, one sentence tile per call
        sub = dataclasses.replace(
            split,
            sentences=sentence_rows(split, a, min(a + tile, split.n_sentences)),
            sentence_image=split.sentence_image[a : a + tile],
        )
        score_matrix(system, sub, 64, tile)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        tiles += 1
        if time.perf_counter() - t0 > budget_s:
            break
    t = (time.perf_counter() - t0) * n_tiles / tiles
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gpu = (
        {"device": dev_name, "peak_gpu_mb": round(torch.cuda.max_memory_allocated(dev) / 2**20)}
        if dev.type == "cuda"
        else {}
    )
    q.put((t, tiles, n_tiles, peak / 1024, (peak - base) / 1024, regions, dev.type, gpu))


def _ranks_child(q) -> None:
    """Ranks of both directions, the 1K fold protocol and 1,000 bootstrap CIs on a 5,000 x 25,000 matrix."""
    import resource

    import numpy as np
    import torch

    from fraglib.metrics.retrieval import evaluate_scores, fold_metrics

    S = torch.randn(5000, 25000)
    si = np.repeat(np.arange(5000), 5)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    evaluate_scores(S, si, 1000)
    fold_metrics(S, si, 5)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    q.put((time.perf_counter() - t0, peak / 1024, (peak - base) / 1024))


def bench_coco_eval(budget_s: float = 90.0) -> list[dict[str, Any]]:
    """Every system (its ``params.yaml`` settings, random weights and inputs) scoring COCO's 5K test,
    5,000 images x 25,000 sentences, in the evaluator's tiles, each in a fresh process: seconds (the
    sentence tiles a budget allows, scaled to all of them: ``measured_tiles``) and peak RSS; plus
    the ranks, 5K and 1K protocols and bootstrap CIs from the matrix."""
    import multiprocessing as mp

    from fraglib.systems import SYSTEMS
    from fraglib_study.schema import read_checked

    params = read_checked("params.yaml")
    cases = [(n, dict(params["systems"].get(n) or {})) for n in SYSTEMS]
    cases.append(("vse", {**(params["systems"].get("vse") or {}), "similarity": "attention", "images": "top36"}))
    ctx, out = mp.get_context("spawn"), []
    for name, settings in cases:
        settings = {
            k: v for k, v in settings.items() if k in {f.name for f in dataclasses.fields(SYSTEMS[name].Config)}
        }
        q = ctx.Queue()
        p = ctx.Process(target=_coco_child, args=(q, name, settings, budget_s))
        p.start()
        t, tiles, n_tiles, peak, growth, regions, dev_type, gpu = q.get()
        p.join()
        label = name + ("_attention" if settings.get("similarity") == "attention" else "")
        suffix = "" if dev_type == "cpu" else f"_{dev_type}"
        out.append(
            entry(
                f"coco5k_scores_{label}_s{suffix}",
                round(t, 1),
                "s",
                measured_tiles=f"{tiles}/{n_tiles}",
                peak_rss_mb=round(peak),
                growth_during_scoring_mb=round(growth),
                regions_per_image=regions,
                memory_aim_mb=8192,
                note="5,000 images x 25,000 sentences, random inputs and weights; "
                "seconds scaled from the sentence tiles measured",
                **gpu,
            )
        )
        print(f"[bench]   {out[-1]['name']}: {t:.1f} s ({tiles}/{n_tiles} tiles)", flush=True)
    q = ctx.Queue()
    p = ctx.Process(target=_ranks_child, args=(q,))
    p.start()
    t, peak, growth = q.get()
    p.join()
    out.append(
        entry(
            "coco5k_ranks_s",
            round(t, 1),
            "s",
            peak_rss_mb=round(peak),
            growth_mb=round(growth),
            note="annotation + search ranks, 1,000 bootstrap CIs each, and the 5-fold 1K protocol",
        )
    )
    return out + gpu_absent("coco5k_gpu", "coco_eval")


def _growth_data(params: dict[str, Any], scale: int, out: str) -> None:
    from fraglib.data.synthetic import SynthConfig, write_benchmark
    from fraglib.text.build import TextConfig, run_fragments, run_parse

    sc = {**params["synthetic"], "n_train": params["synthetic"]["n_train"] * scale}  # val and test: the protocol's
    write_benchmark(SynthConfig(**sc), out, progress=False)
    tc = TextConfig(**params["text"])
    run_parse(out, tc, progress=False)
    run_fragments(out, tc)


CHEAP_VISION = {"proposal_size": 64, "image_size": 128}  # per image the same rows and descriptor sizes, ≈ 1/4 the time


def _growth_features(params: dict[str, Any], out: str, cheap: bool = False) -> None:
    from fraglib.data import read_karpathy_json
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract
    from fraglib.vision.rcnn import VisionConfig

    extract(
        read_karpathy_json(Path(out) / "dataset.json"),
        VisionConfig(**{**params["vision"], **(CHEAP_VISION if cheap else {})}),
        Path(out) / "features",
        synthetic_truth(Path(out) / "ground_truth.json"),
        progress=False,
        region_views=True,
    )


def growth_params(params: dict[str, Any], runs: list[str], negatives: dict[str, int]) -> dict[str, Any]:
    """``params`` for the growth's studies: one training of each of ``runs`` (seed 0, no replicates), one epoch
    for a trainable system, ``study.jobs: 1`` (the training in the measured process); ``negatives`` (run →
    sampled negatives per step) replaces a Socher run's exact Eq. 5 where it would be quadratic."""
    import copy

    from fraglib.systems import get_system

    p = copy.deepcopy(params)
    p["study"] = {**p["study"], "jobs": 1, "seeds": [0], "replicates": 1}
    for r in runs:
        spec = {k: v for k, v in p["runs"][r].items() if k not in ("replicates", "seeds")}
        if get_system(spec["system"]).TRAINABLE:
            spec["epochs"] = 1
        if r in negatives:
            spec["negatives"] = negatives[r]
        p["runs"][r] = spec
    return p


def _study(argv: list[str]) -> dict[str, float]:
    """``python -m fraglib_study study argv`` in this process: its timing.json (training loop and test evaluation seconds)."""
    from fraglib_study.experiments.study import main

    main(argv)
    return json.loads((Path(argv[argv.index("--out") + 1]) / "seeds" / "seed0" / "timing.json").read_text())


def report_page(argv: list[str]) -> float:
    """``python -m fraglib_study notebook argv`` (the results page) in this process; returns the kernel's peak RSS (MB)."""
    import resource

    from fraglib_study.report.notebook import main

    main(argv)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def bench_growth(
    scales: tuple[int, ...] = (1, 4, 16), exact_max_scale: int = 4, negatives: int = 256
) -> list[dict[str, Any]]:
    """Cost against data size on the synthetic benchmark: its training split × scale (``params.yaml: synthetic``;
    validation and test keep their sizes, as the papers' protocols keep theirs — Flickr8K/30K's 1,000 and COCO's
    5,000 test images whatever the training split), each stage a fresh process timed with its peak RSS:
    ``data`` (generation, parse, fragments), ``features`` (every view, true boxes; ``FRAGLIB_GROWTH_VISION=cheap``:
    proposals on 64 px and the backbone on 128 px, lines ``features_cheap``), then for every run of
    ``params.yaml: bench.growth_runs`` (or ``FRAGLIB_GROWTH_RUNS``) ``fraglib_study.experiments.study`` with one training of one
    epoch: lines ``epoch_<run>`` (the training loop's seconds; a closed-form system ``fit_<run>``: the study
    less its test evaluation, i.e. loading and the fit) and ``eval_<run>`` (the test evaluation: scores, ranks,
    1,000-resample CIs, hubness), and last ``report``, the results page (``notebooks/results_report.ipynb``) of those runs. A Socher run with Eq. 5's exact sum is
    timed to ``exact_max_scale`` and with ``negatives`` sampled negatives above it (lines ``…_neg<n>``).
    ``FRAGLIB_GROWTH_SCALES`` (e.g. ``1,4``) picks the scales, ``FRAGLIB_BENCH_THREADS`` the threads."""
    import yaml

    from fraglib_study.schema import read_checked

    env = os.environ.get
    scales = tuple(int(x) for x in env("FRAGLIB_GROWTH_SCALES", ",".join(map(str, scales))).split(","))
    cheap = env("FRAGLIB_GROWTH_VISION", "") == "cheap"
    params = read_checked("params.yaml")
    default = ",".join((params.get("bench") or {}).get("growth_runs") or [])
    runs = [r for r in env("FRAGLIB_GROWTH_RUNS", default).split(",") if r]
    out: list[dict[str, Any]] = []
    for scale in scales:
        n = scale * params["synthetic"]["n_train"] + params["synthetic"]["n_val"] + params["synthetic"]["n_test"]
        exact = {
            r: negatives
            for r in runs
            if scale > exact_max_scale
            and params["runs"][r]["system"] == "socher"
            and not params["runs"][r].get("negatives")
        }
        name = {r: f"{r}_neg{exact[r]}" if r in exact else r for r in runs}
        with tempfile.TemporaryDirectory() as tmp:
            data, P = str(Path(tmp) / "synth"), Path(tmp) / "params.yaml"
            write_text(P, yaml.safe_dump(growth_params(params, runs, exact), sort_keys=False))

            def add(what: str, t: float, peak: float, **extra: Any) -> None:
                out.append(
                    entry(
                        f"growth_{what}_x{scale}_s",
                        round(t, 2),
                        "s",
                        scale=scale,
                        images=n,
                        train_images=scale * params["synthetic"]["n_train"],
                        peak_rss_mb=round(peak),
                        threads=env("FRAGLIB_BENCH_THREADS", "all"),
                        **extra,
                    )
                )
                print(f"[growth] x{scale} {what}: {t:.1f} s, peak {peak:.0f} MB", flush=True)

            add("data", *fresh(_growth_data, params, scale, data)[:2])
            t, peak, _ = fresh(_growth_features, params, data, cheap)
            if cheap:
                add("features_cheap", t, peak, vision="proposals 64 px, backbone 128 px")
            else:
                add("features", t, peak)
            for run in runs:
                rd, md = Path(tmp) / "runs" / run, Path(tmp) / "models" / run
                argv = ["--run", run, "--dataset-dir", data, "--out", str(rd), "--models-dir", str(md), "--params", str(P)]  # fmt: skip
                t, peak, timing = fresh(_study, argv)
                if timing.get("epochs"):
                    add(f"epoch_{name[run]}", timing["train_seconds"] / timing["epochs"], peak, study_s=round(t, 1))
                else:  # a closed form, not clocked by the trainer: the study's seconds less its test evaluation
                    add(f"fit_{name[run]}", t - timing["eval_seconds"], peak, study_s=round(t, 1))
                add(f"eval_{name[run]}", timing["eval_seconds"], peak, study_s=round(t, 1))
            page = Path(tmp) / "results.html"
            argv = [
                "notebooks/results_report.ipynb", str(page),
                "-p", "runs_dir", str(Path(tmp) / "runs"), "-p", "dataset_dir", data,
                "-p", "truth_file", f"{data}/ground_truth.json", "-p", "parse_file", f"{data}/parse.conllu",
                "-p", "params_file", str(P), "-p", "dataset_label", f"synthetic benchmark x{scale}",
            ]  # fmt: skip
            t, peak, kernel = fresh(report_page, argv)
            add("report", t, max(peak, kernel), runs=len(runs), page_kb=round(page.stat().st_size / 1024))
    return out


def bench_socher_growth(
    scales: tuple[int, ...] = (1, 4, 16), negatives: int = 256, run: str = "dtrnn", exact_max_scale: int = 4
) -> list[dict[str, Any]]:
    """Eq. 5's epoch cost against data size, exact (``negatives: 0``, every training tree composed every step:
    O(data²) per epoch) and sampled (``negatives`` = 256: linear), for the DT-RNN run: one epoch of the trainer's
    loop per point, each in a fresh process (seconds, peak RSS), on random inputs of the synthetic benchmark's
    size × scale (:func:`_random_epoch`). Entries ``growth_epoch_<run>_neg<n>_x<scale>_s``, so the index page's
    growth table shows them with their slope beside ``python -m fraglib_study bench growth``'s lines (real synthetic
    data, exact Eq. 5: ``growth_epoch_<run>_x<scale>_s``). The exact form is timed up to ``exact_max_scale``
    only (``FRAGLIB_SOCHER_GROWTH_EXACT_MAX``; at 16× it would take ~5–6 min on 2 cores); ``FRAGLIB_GROWTH_SCALES``
    and ``FRAGLIB_SOCHER_GROWTH_NEGATIVES`` choose the scales and n."""
    from fraglib_study.pages.index import growth_slope
    from fraglib_study.schema import read_checked

    scales = tuple(int(x) for x in os.environ.get("FRAGLIB_GROWTH_SCALES", ",".join(map(str, scales))).split(","))
    negatives = int(os.environ.get("FRAGLIB_SOCHER_GROWTH_NEGATIVES", negatives))
    exact_max_scale = int(os.environ.get("FRAGLIB_SOCHER_GROWTH_EXACT_MAX", exact_max_scale))
    params = read_checked("params.yaml")
    n_total = sum(params["synthetic"][k] for k in ("n_train", "n_val", "n_test"))
    out: list[dict[str, Any]] = []
    for n in (0, negatives):
        points = []
        for scale in scales:
            if n == 0 and scale > exact_max_scale:
                continue
            _, peak, r = fresh(_random_epoch, run, scale, n, None)
            epoch, steps, trees = r["seconds"], r["steps"], r["sentences"]
            points.append((scale, epoch))
            out.append(
                entry(
                    f"growth_epoch_{run}_neg{n}_x{scale}_s",
                    round(epoch, 2),
                    "s",
                    scale=scale,
                    images=n_total * scale,
                    peak_rss_mb=round(peak),
                    threads=os.environ.get("FRAGLIB_BENCH_THREADS", "all"),
                    negatives=n,
                    steps=steps,
                    train_sentences=trees,
                    inputs="random trees and descriptors (bench.common.random_split) of "
                    "the synthetic benchmark's training size x scale; fraglib.run.train.train_epoch's seconds",
                )
            )
            print(
                f"[socher_growth] x{scale} negatives={n}: {epoch:.1f} s ({steps} steps), peak {peak:.0f} MB", flush=True
            )
        note = "least-squares b of epoch seconds ∝ size^b"
        slope = growth_slope(points)
        out.append(_slope_entry(f"socher_growth_slope_{run}_neg{n}", slope, "exponent", [s for s, _ in points], note))
    return out


def _random_epoch(run: str, scale: int, negatives: int | None, threads: int | None = 1) -> dict[str, Any]:
    """One training epoch of ``run`` (params.yaml; ``negatives`` overrides ``systems.socher.negatives``) on random
    inputs of the run's views at Pascal1K's training size × ``scale`` (:func:`random_split`: 800 × scale images,
    5 captions each; a run's cost depends on the sizes, not the values), by the trainer's own
    :func:`fraglib.run.train.train_epoch` on ``threads`` threads (None: torch's default); a closed-form system's fit
    instead. Returns its seconds and sizes."""
    import torch

    from fraglib.core import distributed
    from fraglib.run.inputs import pool_images
    from fraglib.run.train import Step, make_optimizer, resolve_run, train_epoch
    from fraglib.systems import get_system
    from fraglib_study.bench.systems import _rows_per_image
    from fraglib_study.schema import read_checked

    if threads is not None:
        torch.set_num_threads(threads)
    spec = resolve_run(read_checked("params.yaml"), run, extra=None if negatives is None else {"negatives": negatives})
    cls, cfg, tc = get_system(spec.system), spec.system_config, spec.train_config
    views = cls.views(cfg)
    rows = _rows_per_image(views)
    split, dims = random_split(800 * scale, 5, regions=rows, n_rel=1000 if views.sentences == "tokens" else 40)
    if views.pooled:
        split = pool_images(split)
    torch.manual_seed(tc.seed)
    system = cls(cfg, dims, tc.seed)
    system.prepare(split)
    t0 = time.perf_counter()
    if not cls.TRAINABLE:
        system.fit(split)
        return {
            "seconds": time.perf_counter() - t0,
            "steps": 0,
            "fit": True,
            "rows_per_image": rows,
            "sentences": split.n_sentences,
        }
    system.use_training_split(split)  # before the clock, as in fraglib.run.train
    opt = make_optimizer(tc, system.lr_groups())
    t0 = time.perf_counter()
    _, steps, _ = train_epoch(Step(system, distributed.Context()), system, opt, split, tc, 0, torch.device("cpu"))
    return {
        "seconds": time.perf_counter() - t0,
        "steps": steps,
        "fit": False,
        "rows_per_image": rows,
        "sentences": split.n_sentences,
    }


def bench_epoch_growth(
    scales: tuple[int, ...] = (1, 4, 16, 32), exact_max_scale: int = 4, negatives: int = 256
) -> list[dict[str, Any]]:
    """Every system's epoch against data size up to Flickr30K's (32 × 800 = 25,600 training images, 128,000
    captions): one epoch of each run of ``params.yaml: bench.growth_runs`` on random inputs of its views
    (:func:`_random_epoch`), each point a fresh process (seconds of the epoch, peak RSS), one thread.
    Entries ``growth_epoch_<run>_random_x<scale>_s`` beside :func:`bench_growth`'s real-data lines (which need
    the features, ≈ 1 h at 16× on 2 cores). A Socher run's exact Eq. 5 (every training tree composed every step,
    O(data²) per epoch) is timed to ``exact_max_scale`` only; the linear form (``negatives`` sampled trees,
    ``systems.socher.negatives``) at every scale, as ``<run>_neg<n>``. ``FRAGLIB_GROWTH_SCALES`` chooses the scales."""
    from fraglib_study.pages.index import growth_slope
    from fraglib_study.schema import read_checked

    scales = tuple(int(x) for x in os.environ.get("FRAGLIB_GROWTH_SCALES", ",".join(map(str, scales))).split(","))
    params = read_checked("params.yaml")
    n_total = sum(params["synthetic"][k] for k in ("n_train", "n_val", "n_test"))
    out: list[dict[str, Any]] = []
    for run in (params.get("bench") or {}).get("growth_runs") or []:
        socher = params["runs"][run]["system"] == "socher"
        for neg in (None, negatives) if socher else (None,):
            name = f"{run}_random" if neg is None else f"{run}_neg{neg}_random"
            points = []
            for scale in scales:
                if socher and neg is None and scale > exact_max_scale:
                    continue
                _, peak, r = fresh(_random_epoch, run, scale, neg)
                points.append((scale, r["seconds"]))
                out.append(
                    entry(
                        f"growth_{'fit' if r['fit'] else 'epoch'}_{name}_x{scale}_s",
                        round(r["seconds"], 2),
                        "s",
                        scale=scale,
                        images=n_total * scale,
                        train_images=800 * scale,
                        peak_rss_mb=round(peak),
                        threads=1,
                        steps=r["steps"],
                        rows_per_image=r["rows_per_image"],
                        inputs="random inputs of the run's views (bench.common.random_split), Pascal1K's training "
                        "size x scale; fraglib.run.train.train_epoch's seconds (a closed form: its fit)",
                    )
                )
                print(f"[epoch_growth] {name} x{scale}: {r['seconds']:.1f} s, peak {peak:.0f} MB", flush=True)
            slope = growth_slope(points)
            note = "least-squares b of epoch seconds ∝ size^b, random inputs"
            out.append(_slope_entry(f"slope_epoch_growth_{name}", slope, "exponent", [s for s, _ in points], note))
    return out


def repeat_dataset(ds, truth: dict[int, Any], scale: int):
    """(dataset, truth) with each picture of ``ds`` listed ``scale`` times: copy r of an image or sentence has id
    + r · step (step above every id; same file, same captions), ``truth`` (imgid -> boxes; may hold other images too) given for every copy."""
    from fraglib.data import Dataset

    step = 1 + max([im["imgid"] for im in ds.images] + [s["sentid"] for s in ds.sentences])
    images = [{**im, "imgid": r * step + im["imgid"]} for r in range(scale) for im in ds.images]
    sents = [
        {**s, "sentid": r * step + s["sentid"], "imgid": r * step + s["imgid"]}
        for r in range(scale)
        for s in ds.sentences
    ]
    ids = [im["imgid"] for im in ds.images]
    return Dataset(ds.name, ds.image_dir, images, sents), {r * step + k: truth[k] for r in range(scale) for k in ids}


def _memory_features(data: str, out: str, n: int | None = None, scale: int = 1) -> None:
    """The features stage (every view, true boxes) on the first ``n`` images of the synthetic set ``data`` (default
    all); with ``scale`` > 1 on each listed ``scale`` times (:func:`repeat_dataset`), proposals on 64 px and the
    backbone on 128 px: ≈ 0.07 s per image on 2 cores instead of 0.25, and per image the same rows and descriptor
    sizes, which is what the stage's memory could grow with."""
    from fraglib.data import Dataset, read_karpathy_json
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract
    from fraglib.vision.rcnn import VisionConfig
    from fraglib_study.schema import read_checked

    ds = read_karpathy_json(Path(data) / "dataset.json")
    truth = synthetic_truth(Path(data) / "ground_truth.json")
    if n is not None:
        keep = {im["imgid"] for im in ds.images[:n]}
        ds = Dataset(ds.name, ds.image_dir, ds.images[:n], [s for s in ds.sentences if s["imgid"] in keep])
    settings = read_checked("params.yaml")["vision"]
    if scale > 1:
        ds, truth = repeat_dataset(ds, truth, scale)
        settings = {**settings, **CHEAP_VISION}
    extract(ds, VisionConfig(**settings), out, truth, progress=False, region_views=True)


def _memory_precomp(root: str, out: str) -> None:
    from fraglib.data.__main__ import main as convert

    convert(["precomp", "--root", root, "--splits", "train", "--out", out])


def _made_precomp(root: Path, n: int, regions: int = 36, dim: int = 2048) -> int:
    """``train_ims.npy`` (n, regions, dim) float16 (SCAN's layout; one random block of images repeated) and
    five captions per image under ``root``; returns the array file's bytes."""
    import numpy as np

    from fraglib.data.dataset import Chunks, write_npy

    root.mkdir(parents=True, exist_ok=True)
    tile = np.random.default_rng(0).standard_normal((64, regions, dim)).astype(np.float16)
    blocks = lambda: (tile[: min(64, n - a)] for a in range(0, n, 64))  # noqa: E731
    with (root / "train_ims.npy").open("wb") as f:
        write_npy(f, Chunks((n, regions, dim), tile.dtype, blocks), "made precomp")
    with (root / "train_caps.txt").open("w") as f:
        f.writelines(f"a made caption number {k} of image {k // 5} .\n" for k in range(5 * n))
    return (root / "train_ims.npy").stat().st_size


def _slope_entry(name: str, slope: float | None, unit: str, xs: list[int], note: str) -> dict[str, Any]:
    return entry(name, None if slope is None else round(slope, 4), unit, scales=xs, note=note)


def bench_memory() -> list[dict[str, Any]]:
    """Peak memory against data size of the two stages that read every image (issue #61, item 3), each run
    in a fresh process: the features stage on the first n images of a synthetic benchmark
    (``FRAGLIB_MEMORY_FEATURE_IMAGES``, default 250,500,1000; ``FRAGLIB_MEMORY_DATASET`` names a made one, else
    ``params.yaml: synthetic`` is generated), and the precomp import of made SCAN-layout files, n images × 36
    regions × 2,048 float16 (``FRAGLIB_MEMORY_PRECOMP_IMAGES``, default 7,700,15,400,30,800: 1/16 to 1/4 of
    COCO's 123,287; the full size needs ≈ 18 GB in and 37 GB out on disk), and with ``FRAGLIB_MEMORY_FEATURE_SCALES``
    (e.g. 32: ≈ 45,000 images, ≈ 1 h on 2 cores) the features stage on each picture listed that many times
    (:func:`_memory_features`), written under
    ``FRAGLIB_MEMORY_DIR`` (default the system's temporary folder) and removed after. Entries
    ``memory_<stage>_n<n>_mb`` (peak RSS, seconds) and ``memory_<stage>_mb_per_image`` (the fitted slope)."""
    import shutil

    from fraglib_study.pages.index import least_squares_slope
    from fraglib_study.schema import read_checked

    env = os.environ.get
    feature_ns = [int(x) for x in env("FRAGLIB_MEMORY_FEATURE_IMAGES", "250,500,1000").split(",") if x]
    feature_scales = [int(x) for x in env("FRAGLIB_MEMORY_FEATURE_SCALES", "").split(",") if x]
    precomp_ns = [int(x) for x in env("FRAGLIB_MEMORY_PRECOMP_IMAGES", "7700,15400,30800").split(",") if x]
    out: list[dict[str, Any]] = []

    def record(stage: str, points: list[tuple[int, float]]) -> None:
        if not points:
            return
        slope = least_squares_slope(points)
        note = "least-squares slope of peak RSS against images (scales: images)"
        out.append(_slope_entry(f"memory_{stage}_mb_per_image", slope, "MB/image", [n for n, _ in points], note))

    with tempfile.TemporaryDirectory(dir=env("FRAGLIB_MEMORY_DIR")) as tmp:
        data = env("FRAGLIB_MEMORY_DATASET")
        if (feature_ns or feature_scales) and not data:
            data = str(Path(tmp) / "synth")
            fresh(_growth_data, read_checked("params.yaml"), 1, data)
        points = []
        for n in feature_ns:
            t, peak, _ = fresh(_memory_features, data, str(Path(tmp) / f"features{n}"), n)
            shutil.rmtree(Path(tmp) / f"features{n}")
            points.append((n, peak))
            out.append(entry(f"memory_features_n{n}_mb", round(peak), "MB", images=n, seconds=round(t, 1)))
            print(f"[memory] features, {n} images: peak {peak:.0f} MB, {t:.0f} s", flush=True)
        record("features", points)
        for x in feature_scales:
            dest = Path(tmp) / f"features_x{x}"
            t, peak, _ = fresh(_memory_features, data, str(dest), None, x)
            stats = json.loads((dest / "features_stats.json").read_text())
            written = sum(p.stat().st_size for p in dest.glob("*.npz"))
            shutil.rmtree(dest)
            out.append(
                entry(
                    f"memory_features_x{x}_mb",
                    round(peak),
                    "MB",
                    images=stats["images"],
                    seconds=round(t, 1),
                    workers_peak_rss_mb=round(stats["peak_rss_workers_mb"]),
                    written_gb=round(written / 1e9, 2),
                    note="features stage (4 views, true boxes) on each synthetic picture listed x times, proposals "
                    "on 64 px, backbone on 128 px (per image the same rows); fresh process's peak RSS, workers apart",
                )
            )
            print(f"[memory] features x{x} ({stats['images']} images): peak {peak:.0f} MB, {t:.0f} s", flush=True)
        points = []
        for n in precomp_ns:
            root, dest = Path(tmp) / f"precomp{n}", Path(tmp) / f"imported{n}"
            size = _made_precomp(root, n)
            t, peak, _ = fresh(_memory_precomp, str(root), str(dest))
            files = {(st.st_dev, st.st_ino): st.st_size for st in (p.stat() for p in (dest / "features").glob("*.npz"))}
            written = sum(files.values())  # bytes on disk: a cache linked under two names counts once
            shutil.rmtree(root)
            shutil.rmtree(dest)
            points.append((n, peak))
            out.append(
                entry(
                    f"memory_precomp_n{n}_mb",
                    round(peak),
                    "MB",
                    images=n,
                    seconds=round(t, 1),
                    input_gb=round(size / 1e9, 2),
                    written_gb=round(written / 1e9, 2),
                    cache_files=len(files),
                    note="made train_ims.npy (n, 36, 2048) float16 + 5 captions per image; fresh process's peak RSS",
                )
            )
            print(f"[memory] precomp, {n} images ({size / 1e9:.1f} GB): peak {peak:.0f} MB, {t:.0f} s", flush=True)
        record("precomp", points)
    return out
