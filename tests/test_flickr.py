"""Flickr token-file loaders on fixtures the test builds, and on the real Flickr8K text."""

import json
from collections import Counter

import pytest

from fraglib.data import read_karpathy_json
from fraglib.data.__main__ import main as data_main
from fraglib.data.readers.flickr8k import read_flickr8k
from fraglib.data.readers.flickr30k import read_flickr30k

from conftest import shared_data


def _fixture(tmp_path, n_images=12):
    text = tmp_path / "text"
    images = tmp_path / "images"
    text.mkdir()
    images.mkdir()
    lines = []
    for i in range(n_images):
        for n in range(5):
            lines.append(f"{1000 + i}_abc.jpg#{n}\tA dog number {i} runs , caption {n} .")
    lines.insert(3, "this line is garbage")
    lines.insert(7, "1000_abc.jpg\tno caption number")
    lines.append("")
    (text / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    names = [f"{1000 + i}_abc.jpg" for i in range(n_images)]
    (text / "Flickr_8k.trainImages.txt").write_text("\n".join(names[:8]) + "\n")
    (text / "Flickr_8k.devImages.txt").write_text("\n".join(names[8:10]) + "\n")
    (text / "Flickr_8k.testImages.txt").write_text(names[10] + "\n")  # names[11]: in no list
    for f in names[1:]:  # names[0] missing on disk
        (images / f).write_bytes(b"stand-in")
    (images / "notes.txt").write_text("an extra file")
    return text, images


def test_flickr8k_fixture_counts_every_skip(tmp_path):
    text, images = _fixture(tmp_path)
    ds, rep = read_flickr8k(text, images)
    assert rep["lines_skipped"] == 2 and rep["first_skipped_lines"] == [4, 8]
    assert rep["images_in_no_split_list"] == 1 and rep["images_missing_on_disk"] == 1
    assert rep["extra_files_in_image_dir"] == 1
    assert Counter(im["split"] for im in ds.images) == {"train": 7, "val": 2, "test": 1}
    assert len(ds.sentences) == 50 and ds.sentences[0]["tokens"][:3] == ["a", "dog", "number"]


def test_flickr30k_seeded_split_and_cli(tmp_path):
    text, images = _fixture(tmp_path, n_images=30)
    token = text / "Flickr8k.token.txt"
    ds, rep = read_flickr30k(token, images, split_seed=1, n_val=5, n_test=5)
    assert rep["images_missing_on_disk"] == 1
    ds2, _ = read_flickr30k(token, images, split_seed=1, n_val=5, n_test=5)
    assert [im["split"] for im in ds.images] == [im["split"] for im in ds2.images]
    assert Counter(im["split"] for im in ds.images) == {"train": 19, "val": 5, "test": 5}  # one image not on disk
    # 30 images cannot hold the default 1000 + 1000: once every image silently went to val
    with pytest.raises(ValueError, match="30 images, too few for 1000 val"):
        read_flickr30k(token, images)
    data_main(["flickr8k", "--root", str(text), "--images", str(images), "--out", str(tmp_path / "out")])
    back = read_karpathy_json(tmp_path / "out" / "dataset.json")
    assert (
        len(back.images) == 10 and json.loads((tmp_path / "out" / "conversion.json").read_text())["lines_skipped"] == 2
    )


def test_bom_and_duplicate_caption_index(tmp_path):
    """A UTF-8 byte-order mark lost the first caption; a repeated `file#n` was accepted."""
    text, images = _fixture(tmp_path)
    token = text / "Flickr8k.token.txt"
    token.write_bytes(b"\xef\xbb\xbf" + token.read_bytes())
    ds, rep = read_flickr8k(text, images)
    assert rep["lines_skipped"] == 2 and len(ds.sentences) == 50  # the same as without the BOM
    assert ds.sentences[0]["raw"].startswith("A dog number 1 ")
    token.write_text(token.read_text(encoding="utf-8-sig") + "1003_abc.jpg#2\tAnother caption two .\n")
    with pytest.raises(
        ValueError, match=r"Flickr8k.token.txt:\d+: caption 1003_abc.jpg#2 appears twice \(first on line \d+\)"
    ):
        read_flickr8k(text, images)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="Flickr_8k.trainImages.txt"):
        read_flickr8k(tmp_path, tmp_path)


def test_real_flickr8k_text_with_stand_in_images(tmp_path):
    root = shared_data("flickr8k")
    images = tmp_path / "images"
    images.mkdir()
    names = sorted(
        {line.split("#")[0] for line in (root / "Flickr8k.token.txt").read_text().splitlines() if "#" in line}
    )
    for f in names[5:]:
        (images / f).write_bytes(b"")
    ds, rep = read_flickr8k(root, images)
    assert rep["lines_skipped"] == 0
    assert len(ds.images) + rep["images_missing_on_disk"] == 8000
    assert Counter(im["split"] for im in ds.images)["test"] <= 1000
    assert Counter(Counter(s["imgid"] for s in ds.sentences).values()) == {5: len(ds.images)}


def test_text_only_keeps_every_listed_image_and_says_so(tmp_path):
    text, _ = _fixture(tmp_path)
    ds, rep = read_flickr8k(text, None)
    assert rep["images_on_disk"] == "not read (text only)" and "images_missing_on_disk" not in rep
    assert Counter(im["split"] for im in ds.images) == {"train": 8, "val": 2, "test": 1}  # names[0] kept
    data_main(["flickr8k", "--root", str(text), "--text-only", "--out", str(tmp_path / "out")])
    back = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert "image_root" not in back and len(back["images"]) == 11
    with pytest.raises(SystemExit):  # --text-only with --images: refused
        data_main(
            ["flickr8k", "--root", str(text), "--text-only", "--images", str(tmp_path), "--out", str(tmp_path / "o2")]
        )
