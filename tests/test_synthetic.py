import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from fraglib.core.config import ConfigError
from fraglib.data.synthetic import RELATION_PHRASES, SynthConfig, spatial_relation, tokenize, write_benchmark


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_same_seed_same_bytes_other_seed_other_data(tmp_path, tiny_synth):
    first, cfg = tiny_synth
    write_benchmark(cfg, tmp_path / "again", progress=False)
    assert _digest(first) == _digest(tmp_path / "again")
    other = SynthConfig(**{**cfg.__dict__, "seed": cfg.seed + 1})
    write_benchmark(other, tmp_path / "other", progress=False)
    a, b = _digest(first), _digest(tmp_path / "other")
    assert a.keys() == b.keys()
    assert sum(a[k] != b[k] for k in a if k.startswith("images/")) == len([k for k in a if k.startswith("images/")])
    assert a["dataset.json"] != b["dataset.json"]


def test_existing_benchmark_never_replaced_without_overwrite(tmp_path):
    write_benchmark(SynthConfig(n_train=6, n_val=1, n_test=1), tmp_path, progress=False)
    before = _digest(tmp_path)
    with pytest.raises(FileExistsError, match="--overwrite"):
        write_benchmark(SynthConfig(n_train=3, n_val=1, n_test=1), tmp_path, progress=False)
    assert _digest(tmp_path) == before  # nothing deleted, nothing rewritten
    mine = tmp_path / "user" / "images"
    mine.mkdir(parents=True)
    (mine / "holiday.png").write_bytes(b"not ours")
    # a user's own picture is not the benchmark's: neither refused nor touched (the benchmark writes beside it)
    write_benchmark(SynthConfig(n_train=3, n_val=1, n_test=1), tmp_path / "user", progress=False)
    assert (mine / "holiday.png").read_bytes() == b"not ours"
    write_benchmark(SynthConfig(n_train=3, n_val=1, n_test=1), tmp_path, progress=False, overwrite=True)
    assert len(list((tmp_path / "images").glob("*.png"))) == 5  # the explicit flag replaces it completely


def test_karpathy_format_and_splits(tiny_synth):
    out, cfg = tiny_synth
    d = json.loads((out / "dataset.json").read_text())
    assert d["dataset"] == "synthetic"
    splits = [im["split"] for im in d["images"]]
    assert splits == ["train"] * cfg.n_train + ["val"] * cfg.n_val + ["test"] * cfg.n_test
    sentids = [s["sentid"] for im in d["images"] for s in im["sentences"]]
    assert sentids == list(range(cfg.n_images * cfg.captions_per_image))
    for im in d["images"]:
        assert im["sentids"] == [s["sentid"] for s in im["sentences"]]
        assert all(s["imgid"] == im["imgid"] for s in im["sentences"])
        assert all(s["tokens"] == tokenize(s["raw"]) and s["tokens"] for s in im["sentences"])
        assert (out / "images" / im["filename"]).exists()


def test_images_are_rgb_of_configured_size(tiny_synth):
    from PIL import Image

    out, cfg = tiny_synth
    im = Image.open(out / "images" / "000000.png")
    assert im.mode == "RGB" and im.size == (cfg.image_size, cfg.image_size)
    assert np.asarray(im).std() > 10  # a real picture, not a flat colour


def test_ground_truth_spans_boxes_and_relations(tiny_synth):
    out, cfg = tiny_synth
    gt = json.loads((out / "ground_truth.json").read_text())
    n_mentions = 0
    for rec in gt["images"]:
        objs = rec["objects"]
        assert cfg.min_objects <= len(objs) <= cfg.max_objects
        for i, a in enumerate(objs):  # inside the image, no overlap
            x0, y0, x1, y1 = a["box"]
            assert 0 <= x0 < x1 <= cfg.image_size and 0 <= y0 < y1 <= cfg.image_size
            for b in objs[i + 1 :]:
                assert (
                    a["box"][2] <= b["box"][0]
                    or b["box"][2] <= a["box"][0]
                    or a["box"][3] <= b["box"][1]
                    or b["box"][3] <= a["box"][1]
                )
        for cap in rec["captions"]:
            assert 1 <= len(cap["mentions"]) <= cfg.max_mentions
            for m in cap["mentions"]:
                n_mentions += 1
                obj = objs[m["object"]]
                head = cap["raw"][m["head"][0] : m["head"][1]]
                assert head.lower() == obj["shape"]
                phrase = cap["raw"][m["span"][0] : m["span"][1]].lower()
                if "colour" in m["attributes"]:
                    assert obj["colour"] in phrase
                # no other object's colour is named inside this phrase
                assert not any(c in phrase.split() for c in gt["colours"] if c != obj["colour"])
            for r in cap["relations"]:
                assert spatial_relation(objs[r["subject"]], objs[r["object"]], cfg.image_size) == r["relation"]
                assert any(p in cap["raw"] for p in RELATION_PHRASES[r["relation"]]) or "topped by" in cap["raw"]
    assert n_mentions > 0


def test_twins_share_layout_with_colours_permuted(tiny_synth):
    out, _ = tiny_synth
    gt = json.loads((out / "ground_truth.json").read_text())["images"]
    twins = [r for r in gt if r["twin_of"] is not None]
    assert twins, "twin_fraction=0.5 must produce twins"
    for t in twins:
        src = gt[t["twin_of"]]
        assert src["split"] == t["split"] and src["twin_of"] is None
        assert [o["box"] for o in t["objects"]] == [o["box"] for o in src["objects"]]
        assert [o["shape"] for o in t["objects"]] == [o["shape"] for o in src["objects"]]
        assert sorted(o["colour"] for o in t["objects"]) == sorted(o["colour"] for o in src["objects"])
        assert all(a["colour"] != b["colour"] for a, b in zip(t["objects"], src["objects"]))


def test_spatial_relation_by_hand():
    a = {"box": [0, 0, 20, 20]}
    assert spatial_relation(a, {"box": [0, 100, 20, 120]}, 256) == "above"
    assert spatial_relation({"box": [0, 100, 20, 120]}, a, 256) == "below"
    assert spatial_relation(a, {"box": [100, 0, 120, 20]}, 256) == "left"
    assert spatial_relation({"box": [100, 0, 120, 20]}, a, 256) == "right"
    assert spatial_relation(a, {"box": [22, 5, 42, 25]}, 256) == "near"


@pytest.mark.parametrize(
    "override, name",
    [
        ({"max_objects": 9}, "synthetic.max_objects"),
        ({"min_objects": 5, "max_objects": 3}, "synthetic.max_objects"),
        ({"twin_fraction": 0.8}, "synthetic.twin_fraction"),
        ({"image_size": "big"}, "synthetic.image_size"),
        ({"n_test": 0}, "synthetic.n_test"),
    ],
)
def test_impossible_settings_name_the_parameter(override, name):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        SynthConfig(**override).validate()


def test_statistics_show_partial_mention_and_small_objects(tiny_synth):
    out, cfg = tiny_synth
    stats = json.loads((out / "stats.json").read_text())
    assert stats["images"] == cfg.n_images
    assert stats["mentions_per_caption_mean"] < stats["objects_per_image_mean"]  # partial mention
    assert 0 < stats["small_object_share"] < 1


def test_an_interrupted_benchmark_leaves_no_cut_picture(tmp_path, monkeypatch):
    """Pictures were drawn straight into images/: a kill while saving one left it cut short."""
    from PIL import Image

    save, calls = Image.Image.save, []

    def dies_on_the_third(self, fp, *args, **kwargs):
        calls.append(fp)
        if len(calls) == 3:
            Path(fp).write_bytes(b"\x89PNG cut")
            raise OSError(28, "No space left on device")
        save(self, fp, *args, **kwargs)

    monkeypatch.setattr(Image.Image, "save", dies_on_the_third)
    with pytest.raises(OSError, match="No space"):
        write_benchmark(SynthConfig(n_train=3, n_val=1, n_test=1), tmp_path, progress=False)
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == ["000000.png", "000001.png"]


def test_test_galleries_are_written_and_no_twin_opens_one(tmp_path):
    """``synthetic.gallery``: the test images carry their gallery (consecutive blocks), the other splits none,
    and the first image of each gallery is never a twin (a twin's pair is always ranked in its gallery)."""
    cfg = SynthConfig(n_train=4, n_val=2, n_test=6, gallery=2, seed=5, twin_fraction=0.5)
    write_benchmark(cfg, tmp_path, progress=False)
    images = json.loads((tmp_path / "dataset.json").read_text())["images"]
    assert [im.get("gallery") for im in images] == [None] * 6 + [0, 0, 1, 1, 2, 2]
    gt = json.loads((tmp_path / "ground_truth.json").read_text())["images"]
    assert all(gt[i]["twin_of"] is None for i in (6, 8, 10))
    twins = [r for r in gt[6:] if r["twin_of"] is not None]
    assert all(images[t["twin_of"]]["gallery"] == images[t["imgid"]]["gallery"] for t in twins)
    one = SynthConfig(n_train=4, n_val=2, n_test=6, seed=5, twin_fraction=0.5)  # gallery 0: no field
    write_benchmark(one, tmp_path / "one", progress=False)
    assert all("gallery" not in im for im in json.loads((tmp_path / "one" / "dataset.json").read_text())["images"])


@pytest.mark.parametrize("gallery", [4, -1, 7])
def test_galleries_that_do_not_cut_the_test_split_are_refused(gallery):
    with pytest.raises(ConfigError, match=r"synthetic\.gallery"):
        SynthConfig(n_test=6, gallery=gallery).validate()
