"""Figures shared by the reports (matplotlib/seaborn; functions return the figure)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from PIL import Image


def draw_boxes(ax, image: Image.Image | np.ndarray, boxes: Sequence[Sequence[float]],
               labels: Sequence[str] | None = None, colours: Sequence[str] | None = None, lw: float = 1.5) -> None:
    """Show ``image`` on ``ax`` with boxes ``[x0, y0, x1, y1]`` (pixels) and optional labels."""
    ax.imshow(image)
    for k, box in enumerate(boxes):
        c = colours[k % len(colours)] if colours else "yellow"
        x0, y0, x1, y1 = box
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, ec=c, lw=lw))
        if labels:
            ax.text(x0 + 1, y0 + 1, labels[k], color="black", fontsize=7, va="top",
                    bbox=dict(fc=c, ec="none", alpha=0.8, pad=1))
    ax.set_axis_off()


def synthetic_samples(records: list[dict[str, Any]], image_dir: str | Path, ncols: int = 4,
                      wrap: int = 48) -> plt.Figure:
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
        lines = [f"{rec['filename']} ({rec['split']}, {rec['scene']}"
                 + (f", twin of {rec['twin_of']:06d}" if rec["twin_of"] is not None else "") + ")"]
        lines += labels
        for c in rec["captions"]:
            refs = " ".join(f"[#{m['object']}]" for m in c["mentions"])
            lines.append("\n".join(textwrap.wrap(f"- {c['raw']} {refs}", wrap)))
        ax.text(0, -0.02, "\n".join(lines), transform=ax.transAxes, va="top", fontsize=7.5, family="monospace")
    fig.subplots_adjust(hspace=0.95, wspace=0.08, top=0.98, bottom=0.02)
    return fig
