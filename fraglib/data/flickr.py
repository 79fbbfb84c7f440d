"""Caption token files (Flickr8K, Flickr30K): the parsing their readers share (:mod:`fraglib.data.readers`).

Token files hold one caption a line, ``<image file>#<n><TAB><caption>`` (Flickr8K:
``Flickr8k.token.txt``; Flickr30K: ``results_20130124.token``). Splits:

* Flickr8K — the official lists ``Flickr_8k.{train,dev,test}Images.txt`` (6000/1000/1000); images
  in the token file but in no list are left out and counted;
* Flickr30K — no official lists: Karpathy's ``dataset_flickr30k.json`` holds the standard split (read
  it with :func:`fraglib.data.read_karpathy_json`); from the token file alone, 1000 val and 1000
  test images are drawn from ``split_seed`` and the rest is train.

Every line that does not parse is skipped and counted (with its line number), images listed but
missing from ``image_dir`` are dropped and counted, and the counts come back in ``report``. With
``image_dir=None`` the dataset is **text only** (every listed image kept, none read): the captions
of the paraphrasing branch (systems read its images in the view ``none``, docs/formats.md).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from fraglib.data import Dataset

LINE = re.compile(r"^(?P<file>[^#\t]+\.(?:jpe?g|png))#(?P<n>\d+)\t(?P<caption>.*)$", re.IGNORECASE)


def read_token_file(path: str | Path) -> tuple[dict[str, list[tuple[int, str]]], dict[str, Any]]:
    """file -> [(n, caption)] in file order, and a report of skipped lines."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: caption token file not found")
    caps: dict[str, list[tuple[int, str]]] = {}
    seen: dict[tuple[str, int], int] = {}
    bad: list[int] = []
    undecodable = 0
    # utf-8-sig: a byte-order mark once glued itself to the first file name and lost that caption
    for i, line in enumerate(path.read_text(encoding="utf-8-sig", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        m = LINE.match(line.rstrip("\r"))
        if not m:
            bad.append(i)
            continue
        key = (m["file"], int(m["n"]))
        if key in seen:
            raise ValueError(f"{path}:{i}: caption {m['file']}#{m['n']} appears twice (first on line {seen[key]})")
        seen[key] = i
        undecodable += "\ufffd" in m["caption"]
        caps.setdefault(m["file"], []).append((int(m["n"]), m["caption"].strip()))
    return caps, {
        "lines_skipped": len(bad),
        "first_skipped_lines": bad[:10],
        "captions_with_undecodable_bytes": undecodable,
    }


def read_flickr(
    name: str,
    token_file: str | Path,
    image_dir: str | Path | None,
    split_files: dict[str, str | Path] | None = None,
    split_seed: int = 0,
    n_val: int = 1000,
    n_test: int = 1000,
) -> tuple[Dataset, dict[str, Any]]:
    """A Flickr dataset in the internal form, and the report of what was skipped."""
    from fraglib.data.synthetic import tokenize

    caps, report = read_token_file(token_file)
    files = sorted(caps)
    if split_files:
        split_of: dict[str, str] = {}
        for split, f in split_files.items():
            for line in Path(f).read_text().split():
                split_of[line.strip()] = split
        unlisted = [f for f in files if f not in split_of]
        report["images_in_no_split_list"] = len(unlisted)
        files = [f for f in files if f in split_of]
        listed_missing = sorted(set(split_of) - set(caps))
        report["listed_without_captions"] = len(listed_missing)
    else:
        if len(files) <= n_val + n_test:
            raise ValueError(
                f"{token_file}: {len(files)} images, too few for {n_val} val + {n_test} test images "
                "and a train split; pass smaller n_val / n_test"
            )
        rng = np.random.default_rng(split_seed)
        order = rng.permutation(len(files))
        split_of = {files[i]: "val" for i in order[:n_val]}
        split_of.update({files[i]: "test" for i in order[n_val : n_val + n_test]})
        split_of.update({files[i]: "train" for i in order[n_val + n_test :]})
    if image_dir is None:
        report["images_on_disk"] = "not read (text only)"
    else:
        image_dir = Path(image_dir)
        if not image_dir.is_dir():
            raise FileNotFoundError(f"{image_dir}: image folder not found")
        present = set(p.name for p in image_dir.iterdir())
        missing = [f for f in files if f not in present]
        report["images_missing_on_disk"] = len(missing)
        report["first_missing"] = missing[:5]
        report["extra_files_in_image_dir"] = len(present - set(caps))
        files = [f for f in files if f in present]
    images, sentences = [], []
    for imgid, f in enumerate(files):
        images.append({"imgid": imgid, "filename": f, "split": split_of[f]})
        for _, text in sorted(caps[f]):
            sentences.append({"sentid": len(sentences), "imgid": imgid, "raw": text, "tokens": tokenize(text)})
    report["images"] = len(images)
    report["captions"] = len(sentences)
    report["empty_captions"] = sum(not s["raw"] for s in sentences)
    return Dataset(name, image_dir, images, sentences), report
