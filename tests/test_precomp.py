"""Large-dataset inputs: Karpathy's dataset_coco.json (filepath + filename) and the VSE++/SCAN precomputed
layout ({split}_ims.npy + {split}_caps.txt), on small files written here."""

import json
import os

import numpy as np
import pytest
import torch

from fraglib.core.batches import Views
from fraglib.data import read_karpathy_json
from fraglib.data.__main__ import main as convert
from fraglib.data.cache import FeatureCache
from fraglib.data.precomp import read_precomp
from fraglib.run.inputs import DataPaths, load_splits


def write_precomp(root, split, ims, captions):
    root.mkdir(parents=True, exist_ok=True)
    np.save(root / f"{split}_ims.npy", ims)
    (root / f"{split}_caps.txt").write_text("\n".join(captions) + "\n")


def test_karpathy_coco_json_joins_filepath_and_filename(tmp_path):
    (tmp_path / "dataset_coco.json").write_text(
        json.dumps(
            {
                "dataset": "coco",
                "images": [
                    {
                        "imgid": 0,
                        "filepath": "val2014",
                        "filename": "COCO_val2014_1.jpg",
                        "split": "test",
                        "sentences": [{"sentid": 0, "raw": "A dog runs.", "tokens": ["a", "dog", "runs"]}],
                    },
                    {
                        "imgid": 1,
                        "filepath": "train2014",
                        "filename": "COCO_train2014_2.jpg",
                        "split": "restval",
                        "sentences": [{"sentid": 1, "raw": "A cat.", "tokens": ["a", "cat"]}],
                    },
                ],
            }
        )
    )
    ds = read_karpathy_json(tmp_path / "dataset_coco.json", tmp_path / "coco")
    assert ds.image_path(0) == tmp_path / "coco" / "val2014" / "COCO_val2014_1.jpg"
    assert [len(ds.split(s).images) for s in ("train", "test")] == [1, 1]  # restval joins train


def test_global_precomp_becomes_a_dataset_and_a_fullframe_cache(tmp_path):
    rng = np.random.default_rng(0)
    root = tmp_path / "f30k_precomp"
    caps = lambda n: [f"a photo number {k} of a thing ." for k in range(n)]  # noqa: E731
    write_precomp(root, "train", rng.standard_normal((4, 6)).astype(np.float32), caps(20))
    write_precomp(root, "dev", rng.standard_normal((2, 6)).astype(np.float32), caps(10))
    test_ims = rng.standard_normal((2, 6)).astype(np.float32)
    write_precomp(root, "test", test_ims, caps(10))
    convert(["precomp", "--root", str(root), "--out", str(tmp_path / "out")])
    ds = read_karpathy_json(tmp_path / "out" / "dataset.json")
    assert len(ds.images) == 8 and len(ds.sentences) == 40
    assert [im["split"] for im in ds.images] == ["train"] * 4 + ["val"] * 2 + ["test"] * 2
    assert ds.sentences[5]["imgid"] == 1 and ds.sentences[5]["tokens"][:2] == ["a", "photo"]
    c = FeatureCache.load(tmp_path / "out" / "features" / "rcnn.npz", ds)
    assert c.features.shape == (8, 6) and c.is_full.all()
    np.testing.assert_array_equal(c.fullframe().features[6:], test_ims)
    assert not (tmp_path / "out" / "features" / "top36.npz").exists()


def test_region_precomp_keeps_regions_and_adds_their_mean_as_the_frame(tmp_path):
    rng = np.random.default_rng(1)
    root = tmp_path / "coco_precomp"
    ims = rng.standard_normal((3, 4, 5)).astype(np.float32)
    write_precomp(root, "testall", ims, [f"caption {k}" for k in range(3)])  # one caption per image
    ds, stream, counts = read_precomp(root, ["testall"])
    assert counts.tolist() == [5, 5, 5] and [im["split"] for im in ds.images] == ["test"] * 3
    feats = np.concatenate(list(stream))
    assert stream.shape == feats.shape == (15, 5)
    np.testing.assert_allclose(feats[4], ims[0].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(feats[5:9], ims[1])


def test_precomp_features_feed_the_systems(tiny_text, tmp_path):
    """The cache written from the precomp layout loads in the views the systems read."""
    import shutil

    from fraglib.data.precomp import write_cache

    src, _ = tiny_text
    out = tmp_path / "d"
    shutil.copytree(src, out)
    ds = read_karpathy_json(out / "dataset.json")
    n = len(ds.images)
    write_cache(ds, np.random.default_rng(0).standard_normal((n * 3, 7)).astype(np.float32), np.full(n, 3), out)
    for view, rows in (("top36", 3), ("rcnn", 3), ("fullframe", 1)):
        splits, dims, _ = load_splits(DataPaths(out), Views(view, "dependency"), torch.device("cpu"))
        assert dims["img_dim"] == 7 and set(splits["test"].images.counts().tolist()) == {rows}
    rcnn, top36 = out / "features" / "rcnn.npz", out / "features" / "top36.npz"
    assert os.path.samefile(rcnn, top36)  # one file on disk, two names (a COCO import: 37 GB once)


def test_region_cache_is_copied_where_links_fail(tiny_text, tmp_path, monkeypatch):
    """A file system without hard links gets a copy of the same bytes, and no temporary file is left."""
    import shutil

    from fraglib.data import precomp

    src, _ = tiny_text
    out = tmp_path / "d"
    shutil.copytree(src, out)
    ds = read_karpathy_json(out / "dataset.json")
    n = len(ds.images)

    def no_links(a, b):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(precomp.os, "link", no_links)
    precomp.write_cache(ds, np.ones((n * 2, 3), np.float32), np.full(n, 2), out)
    rcnn, top36 = out / "features" / "rcnn.npz", out / "features" / "top36.npz"
    assert not os.path.samefile(rcnn, top36) and rcnn.read_bytes() == top36.read_bytes()
    assert sorted(q.name for q in (out / "features").iterdir()) == ["rcnn.npz", "top36.npz"]


@pytest.mark.parametrize(
    "problem,match",
    [
        ("ratio", "7 captions for 2 images"),
        ("empty", "empty caption on line"),
        ("missing", "not found"),
        ("shape", "train_ims.npy: shape \\(4,\\); expected \\(N, D\\) or \\(N, R, D\\)"),
        ("nan", r"train_ims.npy: 1 image row\(s\) hold NaN or Inf \(first: row 1\)"),
        ("inf", r"train_ims.npy: 1 image row\(s\) hold NaN or Inf \(first: row 0\)"),
        ("mixed", r"dev_ims.npy: shape \(2, 4, 3\) \(regions per image\) but train_ims.npy: one descriptor per image"),
        ("dims", r"the splits' descriptors differ in size: train_ims.npy has 3, dev_ims.npy has 5"),
        ("garbage", r"train_ims.npy: not a readable .npy array"),
    ],
)
def test_precomp_refuses_bad_files_naming_them(tmp_path, problem, match):
    root = tmp_path / "p"
    ims = np.zeros((2, 3), np.float32) if problem != "shape" else np.zeros(4, np.float32)
    caps = [f"c {k}" for k in range(7 if problem == "ratio" else 4)]
    if problem == "empty":
        caps[1] = "  "
    if problem == "nan":
        ims[1, 2] = np.nan
    if problem == "inf":
        ims[0, 0] = -np.inf
    write_precomp(root, "train", ims, caps)
    if problem == "missing":
        (root / "train_caps.txt").unlink()
    if problem == "garbage":
        (root / "train_ims.npy").write_bytes(b"not an array")
    splits = ["train"]
    if problem in ("mixed", "dims"):
        write_precomp(root, "dev", np.zeros((2, 4, 3) if problem == "mixed" else (2, 5), np.float32), ["c"] * 4)
        splits.append("dev")
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        read_precomp(root, splits)


def test_a_feature_cache_with_nan_is_refused_where_it_enters(tiny_text, tmp_path):
    """NaN / Inf in a cache (once: training died later with "cost is nan" or "SVD did not converge")."""
    import shutil

    from fraglib.data.precomp import write_cache

    src, _ = tiny_text
    out = tmp_path / "d"
    shutil.copytree(src, out)
    ds = read_karpathy_json(out / "dataset.json")
    feats = np.ones((len(ds.images), 7), np.float32)
    feats[3, 2] = np.inf
    write_cache(ds, feats, np.ones(len(ds.images), np.int64), out)
    with pytest.raises(
        ValueError,
        match=rf"rcnn.npz: 1 feature row\(s\) hold NaN or Inf \(first in image "
        rf"{ds.images[3]['filename']}\)",
    ):
        load_splits(DataPaths(out), Views("fullframe", "dependency"), torch.device("cpu"))


@pytest.mark.parametrize(
    "ims, match",
    [
        (
            np.array(["a", "b"]),
            r"train_ims.npy: dtype <U1: not a plain numeric array, so it is not loaded; expected "
            r"image features saved with numpy.save: a float16/float32 array",
        ),
        (np.array([["0.5", "1"]]), r"train_ims.npy: dtype <U3: not a plain numeric array"),
        (
            np.array([[{"x": 1}, None]], dtype=object),
            r"train_ims.npy: dtype object: not a plain numeric array \(it holds "
            r"Python objects\), so it is not loaded; expected .*float16/float32",
        ),
        ("pickle", r"train_ims.npy: not a readable .npy array \(.*magic string.*\); expected .*float16/float32"),
    ],
)
def test_precomp_refuses_what_is_not_an_array_of_numbers(tmp_path, capsys, ims, match):
    """Text arrays got "could not convert string to float" or a shape error; an object array or a pickle
    got numpy's advice to load it with allow_pickle=True (running the pickle)."""
    import pickle

    root = tmp_path / "p"
    write_precomp(root, "train", np.zeros((2, 3), np.float32), ["c 0", "c 1"])
    if isinstance(ims, str):
        (root / "train_ims.npy").write_bytes(pickle.dumps([[1.0, 2.0]]))
    else:
        np.save(root / "train_ims.npy", ims, allow_pickle=True)
    with pytest.raises(ValueError, match=match) as err:
        read_precomp(root, ["train"])
    assert "allow_pickle" not in str(err.value)
    with pytest.raises(SystemExit) as exit_:
        convert(["precomp", "--root", str(root), "--splits", "train", "--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "train_ims.npy: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _held_reference(root, splits):
    """The cache rows as the importer made them before it streamed: every split whole in memory."""
    whole = []
    for s in splits:
        x = np.load(root / f"{s}_ims.npy").astype(np.float32)
        if x.ndim == 3:
            x = np.concatenate([x, x.mean(axis=1, keepdims=True)], axis=1)
        whole.append(x.reshape(-1, x.shape[-1]))
    return np.concatenate(whole)


def test_streamed_precomp_import_equals_the_whole_array_import(tmp_path, monkeypatch):
    """float16 regions (SCAN's release) of two splits, read and written in blocks of 2 images: the caches
    hold exactly the rows of the in-memory import (regions, then their float32 mean), in both views."""
    import fraglib.data.dataset as dataset

    rng = np.random.default_rng(3)
    root = tmp_path / "coco_precomp"
    write_precomp(root, "train", rng.standard_normal((5, 3, 8)).astype(np.float16), [f"t {k}" for k in range(10)])
    write_precomp(root, "testall", rng.standard_normal((3, 3, 8)).astype(np.float16), [f"c {k}" for k in range(3)])
    monkeypatch.setattr(dataset, "BLOCK_BYTES", 2 * 3 * 8 * 2)  # 2 images of the float16 input per block
    convert(["precomp", "--root", str(root), "--splits", "train,testall", "--out", str(tmp_path / "out")])
    want = _held_reference(root, ["train", "testall"])
    ds = read_karpathy_json(tmp_path / "out" / "dataset.json")
    for view in ("rcnn", "top36"):
        c = FeatureCache.load(tmp_path / "out" / "features" / f"{view}.npz", ds)
        assert c.features.dtype == np.float32 and c.features.tobytes() == want.tobytes()
        assert c.offsets.tolist() == list(range(0, 33, 4)) and c.is_full.nonzero()[0].tolist() == list(range(3, 32, 4))


def test_precomp_import_memory_does_not_grow_with_the_array(tmp_path):
    """A fresh process imports a 88 MB float16 region file (182 MB of float32 rows per cache) in 4 MB
    blocks: its peak resident memory grows by far less than one copy of the array (the whole-array import
    held three: the float32 copy, the rows with the means, their concatenation)."""
    import subprocess
    import sys

    root = tmp_path / "p"
    write_precomp(root, "train", np.ones((600, 36, 2048), np.float16), [f"c {k}" for k in range(600)])
    code = (
        "import resource, sys\n"
        "import fraglib.data.dataset as d\n"
        "from fraglib.data.__main__ import main\n"
        "d.BLOCK_BYTES = 4 << 20\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        f"main(['precomp', '--root', {str(root)!r}, '--splits', 'train', '--out', {str(tmp_path / 'out')!r}])\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    grown_mb = float(out.strip().splitlines()[-1])
    assert (tmp_path / "out" / "features" / "top36.npz").stat().st_size > 600 * 37 * 2048 * 4
    assert grown_mb < 60, f"peak RSS grew {grown_mb:.0f} MB during the import"


def test_blank_lines_at_the_end_of_a_captions_file_are_counted_and_reported(tmp_path, capsys):
    """Never dropped unsaid: trailing blank lines are skipped with their count and the file on stderr."""
    rng = np.random.default_rng(0)
    root = tmp_path / "p"
    write_precomp(root, "train", rng.standard_normal((2, 3)).astype(np.float32), ["a dog ."] * 10)
    caps = root / "train_caps.txt"
    caps.write_text(caps.read_text() + "\n\n  \n")
    ds, _, _ = read_precomp(root, ["train"])
    assert len(ds.sentences) == 10
    assert f"{caps}: 3 blank line(s) at its end skipped" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--images", "x"], ["--token", "t"], ["--json", "j"], ["--split-seed", "3"]])
def test_an_option_the_converter_does_not_read_is_refused(tmp_path, capsys, extra):
    """precomp read neither --images, --token, --json nor --split-seed: given, they were silently ignored."""
    rng = np.random.default_rng(0)
    write_precomp(tmp_path / "p", "train", rng.standard_normal((2, 3)).astype(np.float32), ["a dog ."] * 10)
    with pytest.raises(SystemExit):
        convert(["precomp", "--root", str(tmp_path / "p"), "--splits", "train", "--out", str(tmp_path / "o"), *extra])
    assert f"unrecognized arguments: {extra[0]}" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_captions_that_are_not_utf8_are_named(tmp_path):
    rng = np.random.default_rng(0)
    write_precomp(tmp_path / "p", "train", rng.standard_normal((2, 3)).astype(np.float32), ["a dog ."] * 10)
    (tmp_path / "p" / "train_caps.txt").write_bytes(b"a caf\xe9\n" * 10)
    with pytest.raises(ValueError, match=r"train_caps.txt: not UTF-8 text"):
        read_precomp(tmp_path / "p", ["train"])
