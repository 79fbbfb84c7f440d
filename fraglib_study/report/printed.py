"""The papers' tables as printed (``fraglib_study/reference/published_results.yaml``), laid out as ours for the
notebooks: Karpathy et al.'s rows, Peri's retrieval and caption rows; never our numbers."""

from __future__ import annotations

import pandas as pd

from fraglib.metrics.retrieval import DIRECTIONS
from fraglib_study.report.pagetext import metric_label

# Socher et al. 2014's task names (published_results.yaml) -> ours; "similarity" ranks sentences
# against sentences (systems with a sentence space only)
PAPER_TASKS = {"sentence_similarity": "similarity", "image_search": "search", "describing_images": "annotation"}


def published_table(dataset: str) -> pd.DataFrame:
    """The paper's rows for ``dataset`` (Karpathy et al. 2014), same layout, numbers as printed."""
    from fraglib_study.reference import published

    t = published()["karpathy2014_defrag"][dataset]
    rank = metric_label(f"{t['rank']}_rank")
    rows = {}
    for name, r in t["rows"].items():
        rows[f"paper: {name}"] = {
            (d, m): r[d][k]
            for d in DIRECTIONS
            for m, k in (("R@1", "r1"), ("R@5", "r5"), ("R@10", "r10"), (rank, "rank"))
        }
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df


def peri_published_table() -> pd.DataFrame:
    """Peri's (2018) retrieval rows as printed, on MSCOCO and Flickr30K (data we do not have: never
    comparable with our rows). Columns: (direction, metric) with annotation = Peri's sentence retrieval."""
    from fraglib_study.reference import published

    t = published()["peri2018_thesis"]
    rows = {}
    for data in ("mscoco_5k_test", "flickr30k_1k_test"):
        for name, r in t[data].items():
            rows[f"{data}: {name}"] = {
                (d, m): r[k][key]
                for d, k in (("annotation", "i2t"), ("search", "t2i"))
                for m, key in (
                    ("R@1", "r1"),
                    ("R@5", "r5"),
                    ("R@10", "r10"),
                    (metric_label("median_rank_vsepp"), "med"),
                    (metric_label("mean_rank"), "mean"),
                )
            }
    df = pd.DataFrame(rows).T
    df.columns = pd.MultiIndex.from_tuples(df.columns)
    return df


def peri_caption_published() -> pd.DataFrame:
    """Peri's (2018) captioning and paraphrasing rows as printed (MSCOCO 1K / Flickr30K: not our data), ×100."""
    from fraglib_study.reference import published

    t = published()["peri2018_thesis"]
    rows = {}
    for key, table in t.items():
        if key.startswith(("captioning", "paraphrasing")):
            for name, r in table.items():
                rows[(key, name)] = {m: round(100 * v, 1) for m, v in r.items()}
    return pd.DataFrame(rows).T
