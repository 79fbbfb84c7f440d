"""Published numbers of the three papers (facts quoted with their sources, to print beside ours)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

PUBLISHED = Path(__file__).parent / "published_results.yaml"
PAPERS = ("karpathy2014_defrag", "socher2014_dtrnn", "peri2018_thesis")
# the printed figures' names: wherever one of these keys appears, its value is a finite number
FIGURES = frozenset({"r1", "r5", "r10", "rank", "mean", "med", "mean_rank", "b1", "b2", "b3", "b4", "meteor", "cider"})


def check_published(data: Any, path: str | Path = PUBLISHED) -> dict[str, Any]:
    """``data`` (the parsed ``published_results.yaml``) checked: a mapping holding each of :data:`PAPERS` with a
    ``source``, every printed figure (:data:`FIGURES`) a finite number (a table's ``rank``: mean or median) and
    every other leaf a number, a string, a boolean or a list of them. ValueError naming the file and the field."""
    import math

    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of papers at the top level, got a {type(data).__name__}")
    for paper in PAPERS:
        if not isinstance(data.get(paper), dict) or not isinstance(data[paper].get("source"), str):
            raise ValueError(f"{path}: {paper}: missing, or without its 'source' string")

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def walk(node: Any, where: str, key: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{where}.{k}", str(k))
        elif key in FIGURES and not number(node) and not (key == "rank" and node in ("mean", "median")):
            raise ValueError(f"{path}: {where}={node!r}: a printed figure must be a finite number")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}[{i}]", key)
        elif not (number(node) or isinstance(node, (str, bool))):
            raise ValueError(f"{path}: {where}={node!r}: expected a finite number, a string or a boolean")

    for paper in data:
        walk(data[paper], str(paper), str(paper))
    return data


@functools.lru_cache(maxsize=1)
def published() -> dict[str, Any]:
    """The tables of ``published_results.yaml`` (Karpathy 2014, Socher 2014, Peri 2018), checked
    (:func:`check_published`); ValueError naming the file and the field when it is damaged."""
    try:
        data = yaml.safe_load(PUBLISHED.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{PUBLISHED}: malformed YAML: {exc}") from None
    return check_published(data)
