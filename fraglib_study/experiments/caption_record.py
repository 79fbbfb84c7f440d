"""What a captions record holds, read without the decoder: the metrics and tasks of ``captions.json`` and a seed's
``captions/seed<N>.json`` (:mod:`fraglib_study.experiments.captions` writes them; the pages read them here, loading
no system and no torch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

METRICS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")  # pycocoevalcap's, CIDEr-D last
TASKS = ("captioning", "paraphrasing")


def read_record(path: str | Path) -> dict[str, Any]:
    """A seed's ``<name>/seed<N>.json`` with inputs and references as text again (either format)."""
    rec = json.loads(Path(path).read_text())
    if "texts" not in rec:
        return rec
    t = rec.pop("texts")
    rec["paraphrasing"] = [
        {**p, "input": t[p["input"]], "references": [t[r] for r in p["references"]]} for p in rec["paraphrasing"]
    ]
    rec["captioning"] = [{**c, "references": [t[r] for r in c["references"]]} for c in rec["captioning"]]
    return rec
