"""Figures shared by the reports (matplotlib/seaborn; functions return the figure)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image

from fraglib.metrics.retrieval import DIRECTIONS
from fraglib_study.report.pagetext import figure_text


def draw_boxes(
    ax,
    image: Image.Image | np.ndarray,
    boxes: Sequence[Sequence[float]],
    labels: Sequence[str] | None = None,
    colours: Sequence[str] | None = None,
    lw: float = 1.5,
) -> None:
    """Show ``image`` on ``ax`` with boxes ``[x0, y0, x1, y1]`` (pixels) and optional labels."""
    ax.imshow(image)
    for k, box in enumerate(boxes):
        c = colours[k % len(colours)] if colours else "yellow"
        x0, y0, x1, y1 = box
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec=c, lw=lw))
        if labels:
            ax.text(
                x0 + 1,
                y0 + 1,
                figure_text(labels[k]),
                color="black",
                fontsize=7,
                va="top",
                bbox=dict(fc=c, ec="none", alpha=0.8, pad=1),
            )
    ax.set_axis_off()


def synthetic_samples(
    records: list[dict[str, Any]], image_dir: str | Path, ncols: int = 4, wrap: int = 48
) -> plt.Figure:
    """Grid: each image with its true boxes (numbered) and its captions underneath; the
    objects a caption mentions are listed after it as ``[#k]``."""
    n = len(records)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 6.2 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    palette = ["#ffe119", "#42d4f4", "#f032e6", "#bfef45", "#fabed4", "#ffffff"]
    for ax, rec in zip(axes.flat, records):
        img = Image.open(Path(image_dir) / rec["filename"]).convert("RGB")
        labels = [f"#{i} {o['size']} {o['colour']} {o['pattern']} {o['shape']}" for i, o in enumerate(rec["objects"])]
        draw_boxes(ax, img, [o["box"] for o in rec["objects"]], [f"#{i}" for i in range(len(labels))], palette)
        lines = [
            f"{rec['filename']} ({rec['split']}, {rec['scene']}"
            + (f", twin of {rec['twin_of']:06d}" if rec["twin_of"] is not None else "")
            + ")"
        ]
        lines += labels
        for c in rec["captions"]:
            refs = " ".join(f"[#{m['object']}]" for m in c["mentions"])
            lines.append("\n".join(textwrap.wrap(f"- {c['raw']} {refs}", wrap)))
        ax.text(
            0, -0.02, figure_text("\n".join(lines)), transform=ax.transAxes, va="top", fontsize=7.5, family="monospace"
        )
    fig.subplots_adjust(hspace=0.95, wspace=0.08, top=0.98, bottom=0.02)
    return fig


PALETTE = ["#ffe119", "#42d4f4", "#f032e6", "#bfef45", "#fabed4", "#ffffff"]


def difference_label(row, base: str | None = "base", group: str | None = "group", wrap: int = 60) -> str:
    """A row of paired differences named by both sides: ``[<group>: ]<run>`` then, on its own line(s),
    ``− <base>  (<metric>)``; without a ``base`` entry (an older table), ``<run>  <metric>`` as before. Each side
    wrapped at ``wrap`` characters so a long run label stays beside its row."""
    has = lambda key: bool(key) and key in row.index and row[key] is not None and row[key] == row[key]  # noqa: E731
    left = (f"{row[group]}: " if has(group) else "") + str(row["run"])
    if not has(base):
        return figure_text(left + (f"  {row['metric']}" if has("metric") else ""))
    right = f"− {row[base]}" + (f"  ({row['metric']})" if has("metric") else "")
    lines = textwrap.wrap(left, wrap, subsequent_indent="  ") + textwrap.wrap(right, wrap, subsequent_indent="    ")
    return figure_text("\n".join(lines))


def differences_caption(
    diffs, base: str | None = "base", group: str | None = "group", group_name: str | None = None
) -> str:
    """The rows of :func:`differences_figure` of ``diffs`` in words, top to bottom, for the page under the picture
    (a reader, a screen reader and a test read there what the picture's labels say): every difference by both its
    sides, "run − base", and its metrics ("… − each of: b1; b2" when one run meets every base, "… per <group>: g1;
    g2" when one pair is split by group, ``group_name`` its word). Plain text: put it on a page through
    :mod:`fraglib_study.report.pagetext`."""
    has = lambda row, key: bool(key) and key in row.index and row[key] == row[key]  # noqa: E731
    pairs: dict[tuple[str, str, str], list[str]] = {}
    for _, r in diffs.iterrows():
        key = (str(r[group]) if has(r, group) else "", str(r["run"]), str(r[base]) if has(r, base) else "")
        metrics = pairs.setdefault(key, [])
        if has(r, "metric") and str(r["metric"]) not in metrics:
            metrics.append(str(r["metric"]))
    if not pairs:
        return ""
    same = len({tuple(m) for m in pairs.values()}) == 1
    tail = lambda m: f" ({', '.join(m)})" if m and not same else ""  # noqa: E731
    groups, sides = list(dict.fromkeys(g for g, _, _ in pairs)), list(dict.fromkeys((a, b) for _, a, b in pairs))
    runs = list(dict.fromkeys(a for _, a, _ in pairs))
    if len(sides) == 1 and groups != [""]:
        ((a, b),) = sides
        text = (
            f"{a}"
            + (f" − {b}" if b else "")
            + f", per {group_name or group}: "
            + "; ".join(g + tail(m) for (g, _, _), m in pairs.items())
        )
    elif len(runs) == 1 and groups == [""] and all(b for _, _, b in pairs):
        text = f"{runs[0]} − each of: " + "; ".join(b + tail(m) for (_, _, b), m in pairs.items())
    else:
        text = "; ".join(
            (f"{g}: " if g else "") + a + (f" − {b}" if b else "") + tail(m) for (g, a, b), m in pairs.items()
        )
    metrics = next(iter(pairs.values()))
    return text + (
        f" (rows: {' then '.join(metrics)} of each)"
        if same and len(metrics) > 1
        else f" ({metrics[0]})"
        if same and metrics
        else ""
    )


def differences_figure(diffs, base: str | None = "base", group: str | None = "group", wrap: int = 60) -> plt.Figure:
    """Paired differences (``results.paired_differences``, ``results.group_differences``: a − b) as points with
    95 % CIs, one panel per direction, red where the CI excludes 0; every row names both sides of its difference
    (:func:`difference_label`: the ``run`` column minus the ``base`` column, after the ``group`` column where
    there is one). The first row on top. Panels whose rows are the same side by side with one set of labels;
    otherwise one under the other, each with its own."""
    dirs = [d for d in DIRECTIONS if (diffs.direction == d).any()] or list(DIRECTIONS)
    paired = bool(base) and base in diffs
    subs = {d: diffs[diffs.direction == d].reset_index(drop=True) for d in dirs}
    names = {d: [difference_label(r, base, group, wrap) for _, r in s.iterrows()] for d, s in subs.items()}
    shared = all(names[d] == names[dirs[0]] for d in dirs)
    row_h = {d: [0.13 * (1 + n.count("\n")) + 0.2 for n in names[d]] for d in dirs}
    height = {d: sum(h) + 1.0 for d, h in row_h.items()}
    if shared:
        fig, axes = plt.subplots(
            1, len(dirs), figsize=(15, height[dirs[0]]), sharey=True, squeeze=False, layout="constrained"
        )
    else:
        fig, axes = plt.subplots(
            len(dirs),
            1,
            figsize=(12, sum(height.values())),
            squeeze=False,
            layout="constrained",
            height_ratios=[height[d] for d in dirs],
        )
    for ax, d in zip(axes.flat, dirs):
        sub = subs[d]
        for y, r in sub.iterrows():
            ax.errorbar(
                r["diff"],
                y,
                xerr=[[r["diff"] - r["lo"]], [r["hi"] - r["diff"]]],
                fmt="o",
                color="C3" if r["excludes_zero"] else "grey",
                capsize=3,
            )
        ax.axvline(0, color="k", lw=1)
        ax.set_yticks(range(len(sub)), names[d], fontsize=8)
        ax.set_ylim(len(sub) - 0.5, -0.5)  # the first row on top, as in the table
        ax.set(
            title=f"image {d}: " + ("each row's run − the run after “−” (points)" if paired else "run − base (points)"),
            xlabel="difference with 95% CI (red: excludes 0)",
        )
    return fig


def breakdown_figure(sub, base_label: str, order: list[str], direction: str, by: str) -> plt.Figure:
    """Left: the metric per group for each run; right: base minus each other run; each legend under its panel."""
    import pandas as pd
    import seaborn as sns

    sub = sub.assign(run=sub["run"].map(figure_text), group=sub["group"].map(figure_text))  # labels drawn as written
    base_label, order = figure_text(base_label), [figure_text(g) for g in order]
    wide = sub.pivot(index="group", columns="run", values="value")
    runs = list(dict.fromkeys(sub["run"]))
    colour = dict(zip(runs, sns.color_palette(n_colors=len(runs))))  # a run's colour in both panels
    others = [c for c in runs if c != base_label]
    diff = pd.DataFrame({f"{base_label} − {c}": wide[base_label] - wide[c] for c in others})
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.5 * len(order) + 2.0), sharey=True, layout="constrained")
    sns.barplot(
        data=sub, y="group", x="value", hue="run", hue_order=runs, palette=colour, order=order, ax=axes[0], orient="h"
    )
    axes[0].set(xlabel=f"{direction} R@5 (%)", ylabel=by, title=f"{direction}: R@5 by {by}")
    diff.loc[order].plot.barh(ax=axes[1], color=[colour[c] for c in others])
    axes[1].axvline(0, color="k", lw=0.8)
    axes[1].set(xlabel="difference (points)")
    axes[1].set_title("\n".join(textwrap.wrap(f"base ({base_label}) minus each run", 80)))
    for ax in axes:  # each panel's legend under it, off the bars
        ax.legend(
            fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.5 / fig.get_figheight() - 0.06), frameon=False
        )
    return fig


def curve_panels(
    runs: list[str], groups: dict[str, str] | None = None, per_panel: int = 8
) -> list[tuple[str, list[str]]]:
    """The panels of :func:`curves_figure`: (title, runs) per group of ``runs`` in their order — ``groups[run]``
    (e.g. the run's system), else the run label's head before ": " ("Our model", "Peri", …) — a group of more
    than ``per_panel`` runs split evenly over as few panels as keep each at most ``per_panel`` ("vse (1/2)")."""
    by: dict[str, list[str]] = {}
    for r in runs:
        g = (groups or {}).get(r) or (r.split(": ", 1)[0] if ": " in r else "other runs")
        by.setdefault(str(g), []).append(r)
    panels = []
    for g, rs in by.items():
        k = -(-len(rs) // max(1, per_panel))
        size = -(-len(rs) // k)
        panels += [(g + (f" ({i + 1}/{k})" if k > 1 else ""), rs[i * size : (i + 1) * size]) for i in range(k)]
    return panels


def curves_figure(hist, groups: dict[str, str] | None = None, per_panel: int = 8) -> plt.Figure:
    """Validation R-sum and training cost per epoch (mean ± sd over seeds), one row of panels per group of runs
    (:func:`curve_panels`: ``groups`` maps a run label to its group, e.g. its system; by default a ``system``
    column of ``hist``, else the label's head), at most ``per_panel`` lines a panel in distinct colours, each
    row's legend to its right, off the data. Runs validated once per fit (closed-form fits, the random ranking) share
    the last panels, a point (mean ± sd over fits) each."""
    import seaborn as sns
    from matplotlib.lines import Line2D

    if groups is None and "system" in hist:
        groups = dict(zip(hist["run"], hist["system"]))
    groups = {figure_text(k): v for k, v in (groups or {}).items()}
    hist = hist.assign(run=hist["run"].map(figure_text))  # labels drawn as written
    runs = list(dict.fromkeys(hist["run"]))
    once = set(hist.groupby("run")["epoch"].nunique().loc[lambda n: n == 1].index)  # fitted once: no curve
    panels = curve_panels([r for r in runs if r not in once], groups, per_panel)
    panels += curve_panels([r for r in runs if r in once], {r: "one fit each (no epochs)" for r in once}, per_panel)
    cost = "train_cost" in hist and bool(hist["train_cost"].notna().any())
    fig, axes = plt.subplots(
        len(panels), 2 if cost else 1, figsize=(15, 2.8 * len(panels) + 0.4), squeeze=False, layout="constrained"
    )
    for (title, runs), row in zip(panels, axes):
        h = hist[hist["run"].isin(runs)]
        palette = dict(zip(runs, sns.color_palette(n_colors=len(runs))))
        row[0].set(title=f"{title}: validation R@1+5+10, both directions", ylabel="val R-sum")
        if runs[0] in once:  # a point per run: mean ± sd over its fits
            for i, r in enumerate(runs):
                v = h.loc[h["run"] == r, "val_rsum"]
                row[0].errorbar(i, v.mean(), yerr=v.std(ddof=0), fmt="o", color=palette[r], capsize=3)
            row[0].set(xticks=[], xlim=(-0.5, len(runs) - 0.5), xlabel="run (one validation per fit)")
            for ax in row[1:]:
                ax.set_axis_off()
        else:
            kw = dict(data=h, x="epoch", hue="run", hue_order=runs, palette=palette, errorbar="sd", legend=False)
            sns.lineplot(y="val_rsum", ax=row[0], marker="o", ms=3, **kw)
            if cost:
                if h["train_cost"].notna().any():
                    sns.lineplot(y="train_cost", ax=row[1], **kw)
                    row[1].set(yscale="log")
                row[1].set(title=f"{title}: training cost", ylabel="training cost per pair")
        handles = [Line2D([], [], color=palette[r], lw=2, label="\n".join(textwrap.wrap(r, 48))) for r in runs]
        row[-1].legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, fontsize=7, frameon=False
        )
    return fig


def retrieval_figure(panels: list[dict[str, Any]]) -> plt.Figure:
    """One column per test image: the image (with labelled boxes if any) and its top sentences.
    ``panels``: dicts with ``image`` (array), ``title``, ``lines`` (text), ``boxes``, ``labels``."""
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 8), squeeze=False)
    for ax, p in zip(axes[0], panels):
        draw_boxes(ax, p["image"], p.get("boxes", []), p.get("labels", []), PALETTE)
        ax.text(
            0,
            -0.02,
            figure_text("\n".join(textwrap.fill(t, 62, subsequent_indent="     ") for t in p["lines"])),
            transform=ax.transAxes,
            va="top",
            fontsize=8,
            family="monospace",
        )
        ax.set_title(figure_text(p["title"]), fontsize=9)
    fig.subplots_adjust(bottom=0.3, wspace=0.08)
    return fig


def crops_figure(crops: list[tuple[np.ndarray, str]], title: str) -> plt.Figure:
    """A row of image crops with captions (scores)."""
    fig, axes = plt.subplots(1, max(1, len(crops)), figsize=(2.6 * max(1, len(crops)), 2.9), squeeze=False)
    for ax, (img, label) in zip(axes[0], crops):
        ax.imshow(img)
        ax.set_title(figure_text(label), fontsize=9)
    for ax in axes[0]:
        ax.set_axis_off()
    fig.suptitle(figure_text(title))
    fig.tight_layout()
    return fig


def growth_figure(entries: list[dict[str, Any]]) -> plt.Figure:
    """Seconds and peak RSS against images on log-log axes, one line per component (``growth_*`` benchmark
    entries: name ``growth_<component>_x<scale>_s``, ``images``, ``peak_rss_mb``, ``machine``); a component measured
    on several machines has a line per machine (its first word in the label). Ten colours, then each again with
    another line style and marker; the legend below both plots."""
    several = len({str(e.get("machine", "")) for e in entries}) > 1
    lines: dict[str, list[tuple[int, float, float]]] = {}
    for e in entries:
        comp = e["name"][len("growth_") :].rsplit("_x", 1)[0]
        if several:
            comp += f" ({(str(e.get('machine', '')).split() or ['?'])[0]})"
        lines.setdefault(comp, []).append((e["images"], e["value"], e["peak_rss_mb"]))
    ncol = max(1, min(4, -(-len(lines) // 6)))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4 + 0.15 * -(-len(lines) // ncol)), layout="constrained")
    for i, (comp, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        x = [p[0] for p in pts]
        style = dict(color=f"C{i % 10}", ls=("-", "--", ":", "-.")[i // 10 % 4], marker="os^D"[i // 10 % 4])
        for ax, k in zip(axes, (1, 2)):
            ax.plot(x, [p[k] for p in pts], ms=4, label=figure_text(comp), **style)
    for ax, label in zip(axes, ("seconds", "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("images in the synthetic benchmark")
        ax.set_ylabel(label)
    if lines:  # below both plots, never over a line
        fig.legend(
            *axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=ncol, fontsize=7, frameon=False
        )
    return fig


def occurrence_figure(study: dict[str, Any], runs: list[str], labels: dict[str, str], k: int = 10) -> plt.Figure:
    """Hubness at a glance: per direction, the share of candidates (%, log scale) that appear in at least
    x queries' top k, for each run (units pooled). Hubs make a long right tail; the value at x = 1 is the
    share of candidates retrieved at all (100 − never %). The legend below both plots."""
    ncol = max(1, min(3, -(-len(runs) // 5)))
    fig, axes = plt.subplots(
        1, 2, figsize=(11, 3.6 + 0.16 * -(-len(runs) // ncol)), dpi=72, layout="constrained"
    )  # line art: small enough for a page
    for ax, d, cand in zip(axes, DIRECTIONS, ("sentences", "images")):
        for i, r in enumerate(runs):
            occ = np.concatenate(study[r]["occurrence"][d])
            x = np.arange(occ.max() + 1)
            ax.step(
                x,
                100.0 * (occ[None, :] >= x[:, None]).mean(axis=1),
                where="post",
                color=f"C{i % 10}",
                ls="-" if i < 10 else "--",
                label=figure_text(labels.get(r, r)),
            )
        ax.set_yscale("log")
        ax.set(
            title=f"image {d}: candidates are {cand}",
            xlabel=f"x = number of queries with the candidate in their top {k}",
            ylabel="% of candidates with N ≥ x",
        )
    if runs:  # below both plots: the right-hand tails are the data to read
        fig.legend(
            *axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=ncol, fontsize=7, frameon=False
        )
    return fig


def collapse_figure(hist) -> plt.Figure:
    """The hardest-negative collapse per epoch (``history.csv`` columns of ``hinge_diagnostics``, the mean
    over seeds): the share of negatives within the margin, and the share of hardest negatives whose image
    is of the positive's category against that share among all negatives (dashed: chance)."""
    from matplotlib.lines import Line2D

    have = [c for c in ("train_violating", "train_hardest_same_group") if c in hist]
    mean = hist.groupby(["run", "epoch"], sort=False).mean(numeric_only=True).reset_index()
    n = mean["run"].nunique() + 1
    ncol = max(1, min(2, -(-n // 4)))
    fig, axes = plt.subplots(
        1, len(have), figsize=(5.2 * len(have), 3.4 + 0.16 * -(-n // ncol)), squeeze=False, layout="constrained"
    )
    for ax, col in zip(axes[0], have):
        for run, g in mean.groupby("run", sort=False):
            if g[col].notna().any():
                (line,) = ax.plot(g.epoch, 100 * g[col], marker="o", ms=3, label=figure_text(run))
                if col == "train_hardest_same_group" and "train_same_group_negatives" in g:
                    ax.plot(g.epoch, 100 * g.train_same_group_negatives, ls="--", color=line.get_color(), lw=1)
        ax.set_xlabel("epoch")
        ax.set_ylabel(
            {
                "train_violating": "% of negatives within the margin",
                "train_hardest_same_group": "% hardest negatives, same category",
            }[col]
        )
    handles, names = axes[0][0].get_legend_handles_labels()
    if "train_hardest_same_group" in have:
        handles.append(Line2D([], [], color="grey", ls="--", lw=1))
        names.append("dashed: share among all negatives (chance)")
    if handles:  # below the plots, off the curves
        fig.legend(handles, names, loc="outside lower center", ncol=ncol, fontsize=7, frameon=False)
    return fig


def fusion_figure(curves: dict[str, dict[str, float]]) -> plt.Figure:
    """Validation R-sum against the fusion weight ``w`` of the first run (``fraglib_study.experiments.fusion``: label ->
    {str(w): R-sum}); w = 0 is the second run alone, w = 1 the first; a dot marks each curve's choice. The legend
    below the plot."""
    fig, ax = plt.subplots(figsize=(6.4, 3.4 + 0.16 * len(curves)), layout="constrained")
    for label, by_w in curves.items():
        w = np.array([float(k) for k in by_w])
        v = np.array(list(by_w.values()), dtype=float)
        (line,) = ax.plot(w, v, marker="o", ms=3, label=figure_text(label))
        ax.plot(w[v.argmax()], v.max(), "o", ms=8, color=line.get_color(), mfc="none")
    ax.set_xlabel("w (weight of the first run's standardised score)")
    ax.set_ylabel("validation R-sum")
    if curves:  # below the plot, off the curves
        fig.legend(loc="outside lower center", fontsize=7, frameon=False)
    return fig


def split_strips(rows: list[dict[str, Any]]) -> Any:
    """R@1 of every training per split and run, one panel per direction (``rows``: dicts of run, split, direction,
    R@1): seaborn's strip plot, its jitter drawn with a fixed seed -- seaborn draws it from numpy's global generator,
    so unseeded the page's image changed at every render. The generator's state is restored afterwards."""
    import pandas as pd
    import seaborn as sns

    state = np.random.get_state()
    np.random.seed(0)
    try:
        return sns.catplot(
            data=pd.DataFrame(rows),
            x="split",
            y="R@1",
            hue="run",
            col="direction",
            kind="strip",
            dodge=True,
            height=3.6,
            aspect=1.6,
        )
    finally:
        np.random.set_state(state)


def stage_label(name: str) -> str:
    """A stage's address, shorter: ``studies/synthetic/dvc.yaml:train@full`` -> ``synthetic:train@full``."""
    folder, _, stage = name.rpartition(":")
    return f"{Path(folder).parent.name}:{stage}" if folder.endswith("dvc.yaml") and "/" in folder else stage or name


def timeline_lanes(units: list[dict[str, Any]]) -> list[int]:
    """The lane of each unit (sorted by start): the first whose last unit ended by its start."""
    ends: list[float] = []
    out = []
    for u in units:
        lane = next((i for i, e in enumerate(ends) if e <= u["start"]), len(ends))
        if lane == len(ends):
            ends.append(0.0)
        ends[lane] = u["end"]
        out.append(lane)
    return out


def timeline_figure(rec: dict[str, Any], title: str) -> Any:
    """The timeline of a record (:mod:`fraglib_study.bench.timeline`) under ``title``: a bar per stage (DVC checking it, light; running it, dark; restored from the run
    cache, green) with its minutes and idle share, the training units in lanes, and the share of the cores busy."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import PercentFormatter

    stages, units = rec["stages"], sorted(rec["units"], key=lambda u: u["start"])
    lane = timeline_lanes(units)
    n_lanes = max(lane, default=-1) + 1
    rows = len(stages) + n_lanes
    fig, (ax, cpu) = plt.subplots(
        2,
        1,
        sharex=True,
        figsize=(11, 2.6 + 0.19 * max(rows, 4)),
        height_ratios=[max(rows, 4) * 0.19, 1.5],
        layout="constrained",
    )
    m = 1 / 60
    colors = {"ran": "C0", "restored": "C2", "skipped": "C0"}
    labels = []
    for y, s in enumerate(stages):
        ax.barh(y, (s["start"] - s["check_from"]) * m, left=s["check_from"] * m, height=0.7, color="0.82")
        if s["end"] > s["start"]:
            ax.barh(y, (s["end"] - s["start"]) * m, left=s["start"] * m, height=0.7, color=colors[s["status"]])
        idle, mine = s.get("idle_core_fraction"), s.get("command_idle_core_fraction")
        what = "skipped" if s["status"] == "skipped" else f"{s['seconds'] * m:.1f} min"
        if idle is not None:
            what += f", idle {idle:.0%}" + ("" if mine is None else f" | {mine:.0%}")
        labels.append(f"{stage_label(s['name'])}  ({what})")
    for u, k in zip(units, lane):
        ax.barh(len(stages) + k, (u["end"] - max(u["start"], 0)) * m, left=max(u["start"], 0) * m, height=0.7,
                color="C1", edgecolor="white", linewidth=0.5)  # fmt: skip
    labels += [f"training units, lane {k + 1}" for k in range(n_lanes)]
    ax.set_yticks(range(rows), labels, fontsize=6.5)
    ax.set_ylim(max(rows, 1) - 0.5, -0.5)
    ax.grid(axis="x", color="0.92")
    ax.set_axisbelow(True)

    samples = [s for s in rec["samples"] if s[1] is not None]
    if samples:
        t = [0.0] + [s[0] * m for s in samples]
        busy = [samples[0][1]] + [s[1] for s in samples]
        mine = [samples[0][2]] + [s[2] for s in samples]
        cpu.fill_between(t, busy, 1, step="pre", color="0.88", linewidth=0)
        cpu.fill_between(t, 0, busy, step="pre", color="C3", alpha=0.55, linewidth=0)
        cpu.step(t, mine, where="pre", color="black", linewidth=0.8)
        for s in stages:
            if s["status"] != "skipped":
                cpu.axvline(s["start"] * m, color="white", linewidth=0.6)
    else:
        cpu.text(0.5, 0.5, "no CPU counters (no /proc/stat)", transform=cpu.transAxes, ha="center", va="center")
    cpu.set_ylim(0, 1)
    cpu.set_xlim(0, rec["seconds"] * m)
    cpu.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    cpu.set_ylabel(f"of {rec['cores']} cores", fontsize=8)
    cpu.set_xlabel("minutes since the start")
    seen = {s["status"] for s in stages}
    handles = [
        Patch(color="0.82", label="DVC checks the stage"),
        *([Patch(color="C0", label="the stage runs")] if seen & {"ran"} else []),
        *([Patch(color="C2", label="restored from the run cache")] if "restored" in seen else []),
        *([Patch(color="C1", label="a training unit (train + test)")] if units else []),
        Patch(color="C3", alpha=0.55, label="cores busy (every process)"),
        plt.Line2D([], [], color="black", linewidth=0.8, label="cores busy (the command's processes)"),
        Patch(color="0.88", label="cores idle"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=8.5)
    return fig
