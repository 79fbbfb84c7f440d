import json

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
    data = {"dataset": "toy", "images": [
        {"imgid": 7, "filename": "a.jpg", "split": "test", "sentences": [
            {"raw": f"s{k}", "tokens": [f"s{k}"], "imgid": 7, "sentid": k} for k in range(6)]},
        {"imgid": 9, "filename": "b.jpg", "split": "restval", "sentences": [
            {"raw": "t", "tokens": ["t"], "imgid": 9, "sentid": 6}]},
    ]}
    (tmp_path / "dataset.json").write_text(json.dumps(data))
    ds = read_karpathy_json(tmp_path / "dataset.json")
    np.testing.assert_array_equal(ds.sentence_image, [0] * 6 + [1])
    assert len(ds.split("train").images) == 1  # restval counts as train (Karpathy splits)


def test_missing_file_and_bad_split(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_karpathy_json(tmp_path / "nope.json")
    (tmp_path / "d.json").write_text(json.dumps({"images": [
        {"imgid": 0, "filename": "x.jpg", "split": "holdout", "sentences": []}]}))
    with pytest.raises(ValueError, match="unknown split 'holdout'"):
        read_karpathy_json(tmp_path / "d.json")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["images"][1].update(imgid=d["images"][0]["imgid"]), "duplicate imgid"),
    (lambda d: d["images"][1]["sentences"][0].update(sentid=d["images"][0]["sentences"][0]["sentid"]), "duplicate sentid"),
    (lambda d: d["images"][0].update(imgid="7"), r"images\[0\]\.imgid='7': expected an integer"),
    (lambda d: d["images"][0].pop("filename"), r"images\[0\] has no filename"),
    (lambda d: d["images"][0]["sentences"][0].update(raw=None), r"images\[0\]\.sentences\[0\]\.raw=None: expected the caption's text"),
    (lambda d: d["images"][1]["sentences"][0].update(raw=12345), r"images\[1\]\.sentences\[0\]\.raw=12345"),
    (lambda d: d["images"][0]["sentences"][0].update(tokens="a dog"), r"sentences\[0\]\.tokens: expected a list of strings"),
    (lambda d: d["images"][0].update(sentences="a dog"), r"images\[0\]: expected an object with a 'sentences' list"),
])
def test_malformed_dataset_json_names_the_field(tmp_path, mutate, message):
    import json

    from fraglib.data import read_karpathy_json

    d = {"images": [{"imgid": i, "filename": f"{i}.png", "split": "train",
                     "sentences": [{"sentid": 2 * i, "raw": "a dog", "tokens": ["a", "dog"]}]} for i in range(2)]}
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
        data[len(data) // 3] ^= 0x10                     # inside the features array
        path.write_bytes(bytes(data))
        z, _ = open_npz(path, "run the features stage")
        with pytest.raises(ValueError, match=r"rcnn.npz: array 'features' is damaged.*run the features stage"):
            z["features"]
    else:
        np.savez(path, something=np.zeros(2))
        z, meta = open_npz(path, "run the features stage")
        with pytest.raises(ValueError, match=r"rcnn.npz: no array 'features' \(has something\)"):
            z["features"]
