"""Published numbers of the three papers (facts quoted with their sources, to print beside ours)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml


@functools.lru_cache(maxsize=1)
def published() -> dict[str, Any]:
    """The tables of ``published_results.yaml`` (Karpathy 2014, Socher 2014, Peri 2018)."""
    return yaml.safe_load((Path(__file__).parent / "published_results.yaml").read_text())
