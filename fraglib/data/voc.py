"""PASCAL VOC bounding-box annotations (one XML file per image).

Only top-level ``<object>`` elements are read (a person's ``<part>`` boxes are not objects).
VOC boxes are 1-based and inclusive; fraglib boxes are ``[x0, y0, x1, y1)`` in 0-based pixels, so
``x0 = xmin - 1, y0 = ymin - 1, x1 = xmax, y1 = ymax``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np


def read_voc(path: str | Path) -> list[dict[str, Any]]:
    """Objects of one annotation file: ``{"name", "box", "difficult", "truncated"}``."""
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise ValueError(f"{path}: not a readable VOC annotation ({exc})") from exc
    out = []
    for obj in root.findall("object"):  # direct children only: parts are nested deeper
        bb = obj.find("bndbox")
        if bb is None:
            raise ValueError(f"{path}: object without <bndbox>")
        xmin, ymin, xmax, ymax = (float(bb.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
        out.append(
            {
                "name": obj.findtext("name", "").strip(),
                "box": [xmin - 1, ymin - 1, xmax, ymax],
                "difficult": obj.findtext("difficult", "0").strip() == "1",
                "truncated": obj.findtext("truncated", "0").strip() == "1",
            }
        )
    return out


def voc_truth(
    annotations_dir: str | Path, images: list[dict[str, Any]], include_difficult: bool = False
) -> dict[int, np.ndarray]:
    """imgid -> float32 (M, 4) boxes of the non-difficult objects of each image (missing files raise)."""
    d = Path(annotations_dir)
    out = {}
    for im in images:
        path = d / (Path(im["filename"]).stem + ".xml")
        if not path.exists():
            raise FileNotFoundError(f"{path}: no VOC annotation for {im['filename']}")
        objs = [o for o in read_voc(path) if include_difficult or not o["difficult"]]
        out[int(im["imgid"])] = np.array([o["box"] for o in objs], np.float32).reshape(-1, 4)
    return out
