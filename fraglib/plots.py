"""Figures shared by the reports (matplotlib/seaborn; functions return the figure)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image

from fraglib.metrics import DIRECTIONS
from fraglib.pagetext import figure_text


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


def differences_figure(diffs) -> plt.Figure:
    """Paired differences (``results.differences_from``) as points with CIs, one panel per direction;
    red where the CI excludes 0."""
    n = diffs.groupby("direction").size().max()
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.45 * n + 1), sharey=True)
    for ax, d in zip(axes, DIRECTIONS):
        sub = diffs[diffs.direction == d].reset_index(drop=True)
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
        ax.set_yticks(
            range(len(sub)), [figure_text(f"{r['run']}  {r['metric']}") for _, r in sub.iterrows()], fontsize=8
        )
        ax.set(title=f"image {d}: run − base (points)", xlabel="difference with 95% CI (red: excludes 0)")
    fig.tight_layout()
    return fig


def breakdown_figure(sub, base_label: str, order: list[str], direction: str, by: str) -> plt.Figure:
    """Left: the metric per group for each run; right: base minus each other run."""
    import pandas as pd
    import seaborn as sns

    sub = sub.assign(run=sub["run"].map(figure_text), group=sub["group"].map(figure_text))  # labels drawn as written
    base_label, order = figure_text(base_label), [figure_text(g) for g in order]
    wide = sub.pivot(index="group", columns="run", values="value")
    diff = pd.DataFrame({f"base − {c}": wide[base_label] - wide[c] for c in wide.columns if c != base_label})
    fig, axes = plt.subplots(1, 2, figsize=(15, 0.5 * len(order) + 2.0), sharey=True, layout="constrained")
    sns.barplot(data=sub, y="group", x="value", hue="run", order=order, ax=axes[0], orient="h")
    axes[0].set(xlabel=f"{direction} R@5 (%)", ylabel=by, title=f"{direction}: R@5 by {by}")
    axes[0].legend(fontsize=7, loc="best", framealpha=0.85)
    diff.loc[order].plot.barh(ax=axes[1])
    axes[1].axvline(0, color="k", lw=0.8)
    axes[1].set(xlabel="difference (points)", title=f"base ({base_label}) minus each run")
    axes[1].legend(fontsize=7, loc="best", framealpha=0.85)
    return fig


def curves_figure(hist) -> plt.Figure:
    """Validation R-sum and training cost per epoch, one line per run (mean ± sd over seeds); the legend below
    both plots, in as many columns as it needs to stay short (56 runs: 4 columns of 14), never over the data."""
    import seaborn as sns

    hist = hist.assign(run=hist["run"].map(figure_text))  # labels drawn as written
    runs = list(dict.fromkeys(hist["run"]))
    ncol = max(1, min(4, -(-len(runs) // 8)))
    fig, axes = plt.subplots(1, 2, figsize=(15, 4 + 0.16 * -(-len(runs) // ncol)), layout="constrained")
    palette = dict(zip(runs, sns.color_palette("husl", len(runs)) if len(runs) > 10 else sns.color_palette()))
    sns.lineplot(data=hist, x="epoch", y="val_rsum", hue="run", ax=axes[0], errorbar="sd", palette=palette)
    axes[0].set(ylabel="val R@1+5+10, both directions")
    handles, names = axes[0].get_legend_handles_labels()
    axes[0].get_legend().remove()
    fig.legend(handles, names, loc="outside lower center", ncol=ncol, fontsize=7, frameon=False)
    if "train_cost" in hist:
        sns.lineplot(
            data=hist, x="epoch", y="train_cost", hue="run", ax=axes[1], legend=False, errorbar="sd", palette=palette
        )
        axes[1].set(yscale="log", ylabel="training cost per pair")
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
    on several machines has a line per machine (its first word in the label)."""
    several = len({str(e.get("machine", "")) for e in entries}) > 1
    lines: dict[str, list[tuple[int, float, float]]] = {}
    for e in entries:
        comp = e["name"][len("growth_") :].rsplit("_x", 1)[0]
        if several:
            comp += f" ({(str(e.get('machine', '')).split() or ['?'])[0]})"
        lines.setdefault(comp, []).append((e["images"], e["value"], e["peak_rss_mb"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for comp, pts in sorted(lines.items()):
        pts.sort()
        x = [p[0] for p in pts]
        for ax, k in zip(axes, (1, 2)):
            ax.plot(x, [p[k] for p in pts], marker="o", label=figure_text(comp))
    for ax, label in zip(axes, ("seconds", "peak RSS (MB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("images in the synthetic benchmark")
        ax.set_ylabel(label)
    axes[1].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def occurrence_figure(study: dict[str, Any], runs: list[str], labels: dict[str, str], k: int = 10) -> plt.Figure:
    """Hubness at a glance: per direction, the share of candidates (%, log scale) that appear in at least
    x queries' top k, for each run (units pooled). Hubs make a long right tail; the value at x = 1 is the
    share of candidates retrieved at all (100 − never %)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), dpi=72)  # line art: small enough for a page
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
    axes[1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def collapse_figure(hist) -> plt.Figure:
    """The hardest-negative collapse per epoch (``history.csv`` columns of ``hinge_diagnostics``, the mean
    over seeds): the share of negatives within the margin, and the share of hardest negatives whose image
    is of the positive's category against that share among all negatives (dashed: chance)."""
    have = [c for c in ("train_violating", "train_hardest_same_group") if c in hist]
    fig, axes = plt.subplots(1, len(have), figsize=(5.2 * len(have), 3.4), squeeze=False)
    mean = hist.groupby(["run", "epoch"], sort=False).mean(numeric_only=True).reset_index()
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
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def fusion_figure(curves: dict[str, dict[str, float]]) -> plt.Figure:
    """Validation R-sum against the fusion weight ``w`` of the first run (``fraglib.fusion``: label ->
    {str(w): R-sum}); w = 0 is the second run alone, w = 1 the first; a dot marks each curve's choice."""
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for label, by_w in curves.items():
        w = np.array([float(k) for k in by_w])
        v = np.array(list(by_w.values()), dtype=float)
        (line,) = ax.plot(w, v, marker="o", ms=3, label=figure_text(label))
        ax.plot(w[v.argmax()], v.max(), "o", ms=8, color=line.get_color(), mfc="none")
    ax.set_xlabel("w (weight of the first run's standardised score)")
    ax.set_ylabel("validation R-sum")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
