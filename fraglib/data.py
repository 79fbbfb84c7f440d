"""Datasets in one internal form, read from Karpathy's ``dataset.json`` format (DESIGN.md §2).

Like neuraltalk's data provider: one small object per dataset holding images, sentences and the
explicit sentence -> image index that every evaluation uses (never a positional 5-per-image rule).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.config import ConfigError, check_choice

SPLITS = ("train", "val", "test")
# name -> default location (relative to the project root) of its dataset.json and images/
DATASETS = {"synthetic": "data/synthetic"}


@dataclasses.dataclass
class Dataset:
    """Images and sentences of one dataset (or one split of it).

    ``images``: list of ``{"imgid", "filename", "split"}``; ``sentences``: list of
    ``{"sentid", "imgid", "raw", "tokens"}``; ``sentence_image[j]`` is the row in ``images`` of
    sentence ``j``'s image (int64, shape ``(n_sentences,)``).
    """

    name: str
    image_dir: Path
    images: list[dict[str, Any]]
    sentences: list[dict[str, Any]]

    def __post_init__(self) -> None:
        row = {im["imgid"]: r for r, im in enumerate(self.images)}
        missing = [s["sentid"] for s in self.sentences if s["imgid"] not in row]
        if missing:
            raise ValueError(f"{self.name}: sentences {missing[:5]} refer to images not in the dataset")
        self.sentence_image = np.array([row[s["imgid"]] for s in self.sentences], dtype=np.int64)

    def split(self, split: str) -> "Dataset":
        """The images of ``split`` and their sentences."""
        check_choice("split", split, SPLITS)
        images = [im for im in self.images if im["split"] == split or (split == "train" and im["split"] == "restval")]
        keep = {im["imgid"] for im in images}
        return Dataset(f"{self.name}/{split}", self.image_dir, images,
                       [s for s in self.sentences if s["imgid"] in keep])

    def image_path(self, row: int) -> Path:
        return self.image_dir / self.images[row]["filename"]

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self.images)} images, {len(self.sentences)} sentences)"


def read_karpathy_json(path: str | Path, image_dir: str | Path | None = None) -> Dataset:
    """Read a Karpathy-format ``dataset.json``; images are looked up in ``image_dir``
    (default: ``images/`` beside the file)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: dataset file not found")
    data = json.loads(path.read_text())
    images, sentences = [], []
    for im in data["images"]:
        split = im.get("split", "train")
        if split not in SPLITS + ("restval",):
            raise ValueError(f"{path}: image {im.get('filename')} has unknown split {split!r}")
        images.append({"imgid": im["imgid"], "filename": im["filename"], "split": split})
        for s in im["sentences"]:
            sentences.append({"sentid": s["sentid"], "imgid": im["imgid"], "raw": s["raw"],
                              "tokens": list(s.get("tokens", []))})
    return Dataset(data.get("dataset", path.stem), Path(image_dir) if image_dir else path.parent / "images",
                   images, sentences)


def load_dataset(name: str, root: str | Path | None = None) -> Dataset:
    """Dataset ``name`` from ``root`` (default: its location under ``data/``)."""
    check_choice("dataset", name, tuple(DATASETS))
    root = Path(root or DATASETS[name])
    return read_karpathy_json(root / "dataset.json", root / "images")
