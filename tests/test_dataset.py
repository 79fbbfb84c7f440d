import json
import re

import numpy as np
import pytest

from fraglib.data import read_karpathy_json


def test_reads_synthetic_with_explicit_sentence_index(tiny_synth):
    out, cfg = tiny_synth
    ds = read_karpathy_json(out / "dataset.json")
    assert len(ds.images) == cfg.n_images and len(ds.sentences) == cfg.n_images * cfg.captions_per_image
    test = ds.split("test")
    assert len(test.images) == cfg.n_test
    # sentence -> image rows are explicit and refer to the split's own rows
    for j, s in enumerate(test.sentences):
        assert test.images[test.sentence_image[j]]["imgid"] == s["imgid"]
    assert test.image_path(0).exists()


def test_uneven_sentences_per_image(tmp_path):
    data = {
        "dataset": "toy",
        "images": [
            {
                "imgid": 7,
                "filename": "a.jpg",
                "split": "test",
                "sentences": [{"raw": f"s{k}", "tokens": [f"s{k}"], "imgid": 7, "sentid": k} for k in range(6)],
            },
            {
                "imgid": 9,
                "filename": "b.jpg",
                "split": "restval",
                "sentences": [{"raw": "t", "tokens": ["t"], "imgid": 9, "sentid": 6}],
            },
        ],
    }
    (tmp_path / "dataset.json").write_text(json.dumps(data))
    ds = read_karpathy_json(tmp_path / "dataset.json")
    np.testing.assert_array_equal(ds.sentence_image, [0] * 6 + [1])
    assert len(ds.split("train").images) == 1  # restval counts as train (Karpathy splits)


def test_missing_file_and_bad_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_karpathy_json(tmp_path / "nope.json")
    (tmp_path / "d.json").write_text(
        json.dumps({"images": [{"imgid": 0, "filename": "x.jpg", "split": "holdout", "sentences": []}]})
    )
    with pytest.raises(ValueError, match="unknown split 'holdout'"):
        read_karpathy_json(tmp_path / "d.json")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["images"][1].update(imgid=d["images"][0]["imgid"]), "duplicate imgid"),
        (
            lambda d: d["images"][1]["sentences"][0].update(sentid=d["images"][0]["sentences"][0]["sentid"]),
            "duplicate sentid",
        ),
        (lambda d: d["images"][0].update(imgid="7"), r"images\[0\]\.imgid='7': expected an integer"),
        (lambda d: d["images"][0].pop("filename"), r"images\[0\] has no filename"),
        (
            lambda d: d["images"][0]["sentences"][0].update(raw=None),
            r"images\[0\]\.sentences\[0\]\.raw=None: expected the caption's text",
        ),
        (lambda d: d["images"][1]["sentences"][0].update(raw=12345), r"images\[1\]\.sentences\[0\]\.raw=12345"),
        (
            lambda d: d["images"][0]["sentences"][0].update(tokens="a dog"),
            r"sentences\[0\]\.tokens: expected a list of strings",
        ),
        (
            lambda d: d["images"][0].update(sentences="a dog"),
            r"images\[0\]: expected an object with a 'sentences' list",
        ),
        (lambda d: d["images"][1].update(gallery=-1), r"images\[1\]\.gallery=-1: expected a non-negative integer"),
        (lambda d: d["images"][0].update(gallery="0"), r"images\[0\]\.gallery='0'"),
    ],
)
def test_malformed_dataset_json_names_the_field(tmp_path, mutate, message):
    import json

    from fraglib.data import read_karpathy_json

    d = {
        "images": [
            {
                "imgid": i,
                "filename": f"{i}.png",
                "split": "train",
                "sentences": [{"sentid": 2 * i, "raw": "a dog", "tokens": ["a", "dog"]}],
            }
            for i in range(2)
        ]
    }
    mutate(d)
    p = tmp_path / "dataset.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match=message):
        read_karpathy_json(p)


@pytest.mark.parametrize("damage", ["truncate", "flip", "foreign"])
def test_damaged_npz_is_named(tmp_path, damage):
    """A truncated or bit-flipped feature cache was a bare BadZipFile / zlib traceback."""
    from fraglib.data import open_npz

    path = tmp_path / "rcnn.npz"
    np.savez(path, features=np.arange(4096, dtype=np.float32), meta=np.array('{"detector": "rcnn"}'))
    z, meta = open_npz(path, "run the features stage")
    assert meta == {"detector": "rcnn"} and z["features"].sum() == np.arange(4096).sum()
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(ValueError, match=r"rcnn.npz: not a readable .npz archive.*run the features stage"):
            open_npz(path, "run the features stage")
    elif damage == "flip":
        data[len(data) // 3] ^= 0x10  # inside the features array
        path.write_bytes(bytes(data))
        z, _ = open_npz(path, "run the features stage")
        with pytest.raises(ValueError, match=r"rcnn.npz: array 'features' is damaged.*run the features stage"):
            z["features"]
    else:
        np.savez(path, something=np.zeros(2))
        z, meta = open_npz(path, "run the features stage")
        with pytest.raises(ValueError, match=r"rcnn.npz: no array 'features' \(has something\)"):
            z["features"]


def _two_images(tmp_path, name, **extra):
    d = {
        "images": [
            {
                "imgid": i,
                "filename": f,
                "split": "train",
                **(extra if i == 1 else {}),
                "sentences": [{"sentid": 10 + i, "raw": "a dog", "tokens": ["a", "dog"]}],
            }
            for i, f in enumerate(["0.png", name])
        ]
    }
    (tmp_path / "dataset.json").write_text(json.dumps(d))
    return tmp_path / "dataset.json"


@pytest.mark.parametrize(
    "name, extra",
    [("../../../etc/passwd", {}), ("/etc/passwd", {}), ("a/../../x.png", {}), ("x.png", {"filepath": "../other"})],
)
def test_image_names_leading_outside_the_image_folder_are_refused(tmp_path, name, extra):
    """dataset.json's file names were joined to the image folder as given: ../../../etc/passwd was opened."""
    shown = f"{extra['filepath']}/{name}" if extra else name
    with pytest.raises(
        ValueError,
        match=rf"dataset.json: images\[1\] \(imgid 1\): file name '{re.escape(shown)}' "
        r"leads outside the image folder",
    ):
        read_karpathy_json(_two_images(tmp_path, name, **extra))


def test_an_image_link_out_of_the_image_folder_is_never_read(tmp_path):
    (tmp_path / "images" / "sub").mkdir(parents=True)
    (tmp_path / "images" / "0.png").write_bytes(b"inside")
    (tmp_path / "secret.png").write_bytes(b"outside")
    (tmp_path / "images" / "sub" / "evil.png").symlink_to(tmp_path / "secret.png")
    (tmp_path / "images" / "alias.png").symlink_to(tmp_path / "images" / "0.png")  # a link within: fine
    ds = read_karpathy_json(_two_images(tmp_path, "sub/evil.png"))
    assert ds.image_path(0).read_bytes() == b"inside"
    with pytest.raises(
        ValueError,
        match=r"image row 1 \(imgid 1\), file name 'sub/evil.png': it is .*secret.png, "
        r"outside the image folder .*images; not read",
    ):
        ds.image_path(1)
    assert read_karpathy_json(_two_images(tmp_path, "alias.png")).image_path(1).read_bytes() == b"inside"
    (tmp_path / "linked").symlink_to(tmp_path / "images", target_is_directory=True)  # the folder itself a link
    assert read_karpathy_json(tmp_path / "dataset.json", tmp_path / "linked").image_path(0).read_bytes() == b"inside"


def test_save_npz_is_atomic_keeps_the_name_and_the_bytes(tmp_path, monkeypatch):
    from fraglib.data.dataset import save_npz

    arrays = {"x": np.arange(5.0), "names": np.array(["a", "bc"]), "meta": np.array("{}")}
    np.savez(tmp_path / "ref.npz", **arrays)
    save_npz(tmp_path / "new.npz", **arrays)
    assert (tmp_path / "new.npz").read_bytes() == (tmp_path / "ref.npz").read_bytes()
    save_npz(tmp_path / "model", **arrays)  # no .npz added to a name without it
    assert (tmp_path / "model").read_bytes() == (tmp_path / "ref.npz").read_bytes()

    def cut(file, **kw):
        file.write(b"PK half an archive")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", cut)
    with pytest.raises(OSError, match="No space"):
        save_npz(tmp_path / "new.npz", **arrays)
    assert (tmp_path / "new.npz").read_bytes() == (tmp_path / "ref.npz").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "new.npz", "ref.npz"]


# ------------------------------------------------------------------ arrays too large to hold (Chunks)
def _blocks_of(x, sizes):
    from fraglib.data.dataset import Chunks

    cuts = np.cumsum([0, *sizes])
    return Chunks(x.shape, x.dtype, lambda: (x[a:b] for a, b in zip(cuts[:-1], cuts[1:])))


def test_save_npz_of_chunks_writes_np_savez_of_the_stacked_array(tmp_path):
    import zipfile

    from fraglib.data.dataset import save_npz

    x = np.random.default_rng(0).standard_normal((10, 3, 4)).astype(np.float32)
    small = {"names": np.array(["a", "bc"]), "meta": np.array("{}")}
    np.savez(tmp_path / "ref.npz", features=x, **small)
    save_npz(tmp_path / "new.npz", features=_blocks_of(x, [4, 0, 5, 1]), **small)
    with zipfile.ZipFile(tmp_path / "ref.npz") as ref, zipfile.ZipFile(tmp_path / "new.npz") as new:
        assert ref.namelist() == new.namelist()
        for name in ref.namelist():
            assert ref.read(name) == new.read(name), name  # the .npy bytes: header and data
            assert ref.getinfo(name).compress_type == new.getinfo(name).compress_type == zipfile.ZIP_STORED


@pytest.mark.parametrize(
    "sizes, dtype, match",
    [
        ([4, 5], np.float32, r"the blocks hold 9 rows; expected 10"),
        ([4, 7], np.float32, r"the blocks hold 11\+ rows; expected 10"),
        ([10], np.float64, r"a block of float64 \(10, 3, 4\); expected float32"),
    ],
)
def test_save_npz_refuses_blocks_that_are_not_the_array_and_leaves_no_file(tmp_path, sizes, dtype, match):
    from fraglib.data.dataset import Chunks, save_npz

    x = np.zeros((11, 3, 4), dtype)
    stream = _blocks_of(x, sizes)
    with pytest.raises(ValueError, match=rf"new.npz: array 'features': {match}"):
        save_npz(tmp_path / "new.npz", features=Chunks((10, 3, 4), np.dtype(np.float32), stream.blocks))
    assert list(tmp_path.iterdir()) == []


def test_npy_and_npz_chunks_read_every_row_in_blocks(tmp_path, monkeypatch):
    import fraglib.data.dataset as dataset
    from fraglib.data.dataset import npy_chunks, npz_chunks

    monkeypatch.setattr(dataset, "BLOCK_BYTES", 100)  # 3 rows of 32 bytes per block
    x = np.arange(10 * 8, dtype=np.float32).reshape(10, 2, 4)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", other=np.ones(3), x=x)
    for stream in (npy_chunks(lambda: (tmp_path / "x.npy").open("rb"), "x.npy"), npz_chunks(tmp_path / "x.npz", "x")):
        blocks = list(stream)
        assert [len(b) for b in blocks] == [3, 3, 3, 1] and stream.shape == x.shape and stream.dtype == x.dtype
        np.testing.assert_array_equal(np.concatenate(blocks), x)
        assert np.concatenate(list(stream)).tobytes() == x.tobytes()  # iterated again: read again
    (tmp_path / "cut.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:-40])
    with pytest.raises(ValueError, match=r"cut.npy: cut short \(it ends within rows 6..9 of 10\)"):
        list(npy_chunks(lambda: (tmp_path / "cut.npy").open("rb"), "cut.npy"))
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    with pytest.raises(ValueError, match="f.npy: a Fortran-order array; expected C order"):
        npy_chunks(lambda: (tmp_path / "f.npy").open("rb"), "f.npy")


def test_nonfinite_rows_of_an_array_and_of_its_blocks_agree():
    from fraglib.data.dataset import nonfinite_rows

    x = np.ones((9, 2, 3), np.float32)
    x[[1, 7], 1, 2] = [np.nan, -np.inf]
    assert nonfinite_rows(x).tolist() == nonfinite_rows(_blocks_of(x, [2, 5, 2])).tolist() == [1, 7]


def test_select_and_take_of_a_stream_are_numpy_indexing():
    """select keeps a stream (nothing read until iterated) of increasing rows; take reads any rows in one pass: both
    are x[rows], whatever the blocks; rows out of order or out of range are refused by select."""
    x = np.random.default_rng(1).standard_normal((12, 2, 3)).astype(np.float32)
    stream = _blocks_of(x, [5, 0, 4, 3])
    picked = np.array([0, 4, 5, 9, 11])
    sel = stream.select(picked)
    assert sel.shape == (5, 2, 3) and sel.dtype == x.dtype
    np.testing.assert_array_equal(np.concatenate(list(sel)), x[picked])
    for rows in ([11, 0, 3, 3, 8], [], [6]):
        got = stream.take(np.array(rows, np.int64))
        np.testing.assert_array_equal(got, x[rows])
        assert got.shape == (len(rows), 2, 3) and got.flags.writeable
    np.testing.assert_array_equal(sel.take(np.array([4, 1])), x[[11, 4]])  # a selection taken from again
    for bad in ([3, 2], [1, 1], [12]):
        with pytest.raises(ValueError, match="rows must increase within 0..11"):
            stream.select(np.array(bad))
