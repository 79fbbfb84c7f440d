"""Hostile or damaged inputs of the explorer page and the index page: only data reaches a page's scripts, markup
read from a register shows as text, ``--overwrite`` never deletes a script the command did not write, and bad
explorer data are refused naming the file and the field."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from conftest import ROOT

HEAD = "(window.EXPLORER_ALIGN = window.EXPLORER_ALIGN || {})["


def _explorer(tmp_path: Path, change=None, aligned: bool = False) -> Path:
    """A small explorer data folder (2 images, 2 sentences, k = 1), optionally with run ``full``'s alignments."""
    d = tmp_path / "data"
    (d / "thumbs").mkdir(parents=True)
    for i in (7, 8):
        (d / "thumbs" / f"{i}.jpg").write_bytes(b"jpeg")
    data = {
        "dataset": "synthetic", "seed": 0, "k": 1, "aligned": ["full"] if aligned else [],
        "runs": {"full": {"label": "Our model", "image_top": [[0], [1]], "sentence_top": [[0], [1]]}},
        "images": [{"id": 7, "thumb": "thumbs/7.jpg", "w": 256, "h": 256},
                   {"id": 8, "thumb": "thumbs/8.jpg", "w": 256, "h": 256}],
        "sentences": [{"id": 70, "image": 0, "text": "a dog"}, {"id": 80, "image": 1, "text": "a cat"}],
        "maps": {"full": {"method": "t-SNE", "images": [[0.0, 1.0], [0.5, 0.5]], "sentences": [[1.0, 0.0], [0.2, 0.3]],
                          "n_images": [1, 1], "n_sentences": [1, 1]}},
    }  # fmt: skip
    if change:
        change(data)
    (d / "explorer.json").write_text(json.dumps(data))
    if aligned:
        A = {
            "boxes": [[[0, 0, 10, 10], [5, 5, 20, 20]], [[0, 0, 30, 30]]],
            "fragments": {"0": ["amod(big, dog)"], "1": ["det(a, cat)"]},
            "pairs": {"0,0": [1, 42], "1,1": [0, 17]},
        }
        (d / "alignments_full.json").write_text(json.dumps(A))
    return d


# 1. an alignments file is parsed and re-serialised: a script in it never runs
@pytest.mark.parametrize(
    "text, match",
    [
        ("alert(document.cookie)", "not valid JSON"),
        ('{"boxes": [], "fragments": {}, "pairs": {}}; alert(1)', "not valid JSON"),
        ('["alert(1)"]', "expected an object with boxes, fragments, pairs, got list"),
        ('{"boxes": [[[0,0,1,1]]], "fragments": {}, "pairs": {}}', r"boxes: 1 images, expected 2"),
        ('{"boxes": [[], []], "fragments": {"0": ["x"]}, "pairs": {"0,0": [0, NaN]}}', "NaN is no JSON number"),
        ('{"boxes": [[], []], "fragments": {"0": ["x"]}, "pairs": {"0,0": [3, 1]}}', r"pairs\.0,0: a box outside"),
        ('{"boxes": [[], []], "fragments": {}, "pairs": {"0,9": []}}', r"pairs\.0,9: not an image,sentence pair"),
    ],
)
def test_an_alignments_file_that_is_not_alignment_data_is_refused_naming_it(tmp_path, capsys, text, match):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path, aligned=True)
    (d / "alignments_full.json").write_text(text)
    html = tmp_path / "out" / "explorer.html"
    with pytest.raises(SystemExit) as exc:
        main([str(d), str(html)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{d / 'alignments_full.json'}: " in err
    assert re.search(match, err), err
    assert not (html.parent / "explorer_files" / "align_full.js").exists()


def test_the_alignment_script_holds_only_the_data_re_serialised(tmp_path):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path, aligned=True)
    A = json.loads((d / "alignments_full.json").read_text())
    A["fragments"]["0"] = ["</script><script>alert(1)</script>"]
    (d / "alignments_full.json").write_text(json.dumps(A, indent=2))  # spaces: re-serialised, not copied
    html = tmp_path / "out" / "explorer.html"
    main([str(d), str(html)])
    text = (html.parent / "explorer_files" / "align_full.js").read_text()
    head = HEAD + '"full"] = '
    assert text.startswith(head) and text.endswith(";\n") and "</" not in text
    assert json.loads(text[len(head) : -2].replace("<\\/", "</")) == A
    assert "\n  " not in text


# 2. the index page: a register's fields are escaped
def test_a_register_entry_holding_markup_shows_as_text_on_the_index(tmp_path, monkeypatch):
    from fraglib_study.pages.index import build

    evil = "<img src=x onerror=alert(1)>"

    def e(stage, n, v, **kw):
        return {"name": f"rehearsal_{stage}_n{n}_s", "stage": stage, "images": n, "value": v, "peak_rss_mb": 10,
                "machine": "m", "threads": evil, **kw}  # fmt: skip

    entries = [
        e("train_x", 100, 50.0, epochs=evil, epoch_s=20.0, test_r1=[evil, 4.0], commit="abc", date=evil),
        e("train_x", 400, 90.0, epochs=1, epoch_s=80.0, test_r1=[evil, 7.25], commit="abc1234", date=evil),
        {"name": "epoch_full", "value": evil, "ratio": None, "machine": "m", "threads": evil, "repeats": evil,
         "views": "v", "gflop": evil, "before": {"value": evil}},
        {"name": "epoch_full_cuda", "value": 1.0, "ratio": 0.1, "machine": "m", "device": "G",
         "critical_path_s": evil, "seconds_over_critical_path": evil},
        {"name": "train_step_ms_cuda", "value": evil, "objective": "o", "ratio": evil, "device": "G"},
        {"name": "pascal1k_train_cuda", "device": "G", "runs": {"full": {"train_seconds": evil, "epochs": evil}}},
        {"name": "amp_full", "value": 1, "device": "G", "seeds": [0], "ratio": evil,
         "fp32": {"annotation_r1": evil, "annotation_r1_sd": 1, "search_r1": 1},
         "bf16": {"annotation_r1": 1, "annotation_r1_sd": 1, "search_r1": evil}},
        {"name": "profile_full_cuda", "value": 1, "ms_per_step": evil, "device_busy_share": 0.5,
         "launches_per_step": 3, "syncs_per_step": 1, "device": "G"},
        {"name": "coco5k_scores_vse_s", "value": evil, "unit": "s", "peak_rss_mb": evil, "measured_tiles": "7/7"},
        {"name": "coco5k_scores_vse_s_cuda", "value": evil, "unit": "s", "peak_gpu_mb": evil, "device": "G"},
        {"name": "make_synthetic", "value": evil, "unit": evil, "note": evil, "machine": evil, "commit": evil,
         "date": evil, "stages_minutes": {evil: evil}},
    ]  # fmt: skip
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "results.json").write_text(json.dumps(entries))
    monkeypatch.chdir(tmp_path)
    page = build(tmp_path / "reports" / "index.html").read_text()
    assert evil not in page and "<img src=x" not in page and page.count("&lt;img src=x onerror=alert(1)&gt;") > 20
    assert "abc1234, &lt;img src=x onerror=alert(1)&gt;</td>" in page  # the rehearsal's date, as text


# 3. --overwrite deletes only the alignment scripts the command wrote
def test_overwrite_keeps_a_users_own_align_script(tmp_path):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path, aligned=True)
    html = tmp_path / "out" / "explorer.html"
    main([str(d), str(html)])
    files = html.parent / "explorer_files"
    mine = files / "align_mine.js"
    mine.write_text("console.log('my own script');\n")
    # a run no longer aligned: its script (written here) goes, the user's stays
    (files / "align_old.js").write_text((files / "align_full.js").read_text().replace('"full"', '"old"'))
    main([str(d), str(html), "--overwrite"])
    assert mine.read_text() == "console.log('my own script');\n"
    assert not (files / "align_old.js").exists() and (files / "align_full.js").read_text().startswith(HEAD)
    d2 = _explorer(tmp_path / "b", change=lambda x: x.update(aligned=[]))
    main([str(d2), str(html), "--overwrite"])  # no run aligned now: the tool's script goes, the user's stays
    assert mine.is_file() and not (files / "align_full.js").exists()


def test_a_users_file_where_a_script_goes_is_never_replaced(tmp_path, capsys):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path, aligned=True)
    html = tmp_path / "out" / "explorer.html"
    files = html.parent / "explorer_files"
    files.mkdir(parents=True)
    (files / "align_full.js").write_text("mine\n")
    with pytest.raises(SystemExit) as exc:
        main([str(d), str(html), "--overwrite"])
    assert exc.value.code == 2 and f"{files / 'align_full.js'}: not an alignment script" in capsys.readouterr().err
    assert (files / "align_full.js").read_text() == "mine\n"


def test_a_users_align_script_alone_does_not_block_the_page(tmp_path):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path)
    html = tmp_path / "out" / "explorer.html"
    (html.parent / "explorer_files").mkdir(parents=True)
    (html.parent / "explorer_files" / "align_mine.js").write_text("mine\n")
    main([str(d), str(html)])  # not a file of this command: no --overwrite needed, and kept
    assert (html.parent / "explorer_files" / "align_mine.js").read_text() == "mine\n"


# 4. bad explorer data are refused naming the file and the field
def _set_top(key, value):
    return lambda d: d["runs"]["full"].update({key: value})


@pytest.mark.parametrize(
    "change, match",
    [
        (_set_top("image_top", [[5], [1]]), r"image_top\[0\] holds 5: not a position among the 2 sentences"),
        (_set_top("sentence_top", [[0], ["1"]]), r"runs\.full\.sentence_top\[1\] holds '1'"),
        (_set_top("sentence_top", [[0], [-1]]), r"runs\.full\.sentence_top\[1\] holds -1"),
        (_set_top("image_top", [[0], [True]]), r"runs\.full\.image_top\[1\] holds True"),
        (_set_top("image_top", [[0]]), r"runs\.full\.image_top: 1 rows, expected one per query \(2\)"),
        (_set_top("image_top", [[0, 1], [1, 0]]), r"runs\.full\.image_top\[0\]=\[0, 1\]: expected a list of k=1"),
        (lambda d: d.update(k=0), r"explorer\.k=0: expected at least 1"),
        (lambda d: d.update(k=-3), r"explorer\.k=-3"),
        (lambda d: d["maps"]["full"]["images"].__setitem__(0, [float("nan"), 0.5]), r"maps\.full\.images\[0\]=\[nan"),
        (lambda d: d["maps"]["full"]["sentences"].__setitem__(1, [None, 0.5]), r"maps\.full\.sentences\[1\]=\[None"),
        (lambda d: d["maps"]["full"]["sentences"].__setitem__(1, None), r"maps\.full\.sentences\[1\]=None"),
        (lambda d: d["maps"]["full"]["images"].pop(), r"maps\.full\.images: 1 points, expected 2"),
        (lambda d: d["maps"]["full"].update(n_images=[1, -1]), r"maps\.full\.n_images: expected 2 counts"),
        (lambda d: d["maps"].update(gone=d["maps"]["full"]), r"maps\.gone: not among its runs"),
        (lambda d: d.update(maps=[]), r"explorer\.maps=\[\]: expected an object"),
        (lambda d: d.update(aligned=["../x"], runs={**d["runs"], "../x": d["runs"]["full"]}), r"not a run name"),
    ],
)
def test_bad_explorer_data_are_refused_naming_the_file_and_the_field(tmp_path, capsys, change, match):
    assert_refused(tmp_path, capsys, change, match)


def assert_refused(tmp_path, capsys, change, match):
    """The explorer page of data changed by ``change`` is refused (exit 2) naming the file and matching ``match``,
    and no page is written."""
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path, change)
    html = tmp_path / "out" / "explorer.html"
    with pytest.raises(SystemExit) as exc:
        main([str(d), str(html)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"{d / 'explorer.json'}: " in err and re.search(match, err), err
    assert not html.exists()


def test_the_small_data_pass(tmp_path):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path, aligned=True)
    main([str(d), str(tmp_path / "out" / "explorer.html")])
    assert (tmp_path / "out" / "explorer_files" / "align_full.js").is_file()


@pytest.mark.parametrize("folder", sorted(p.parent for p in ROOT.glob("runs/*/explorer/explorer.json")), ids=str)
def test_the_committed_explorer_data_pass(folder, tmp_path):
    """Every committed explorer (data and alignments) passes the checks and makes its page."""
    from fraglib_study.pages.explorer_page import build

    html, js = build(folder, tmp_path / "explorer.html")
    data = json.loads(js.read_text()[len("window.EXPLORER = ") : -2])
    assert all(math.isfinite(x) for M in data["maps"].values() for p in M["images"] + M["sentences"] for x in p)
    for run in data["aligned"]:
        text = (js.parent / f"align_{run}.js").read_text()
        found = json.loads(text[len(HEAD + json.dumps(run) + "] = ") : -2].replace("<\\/", "</"))
        assert found == json.loads((folder / f"alignments_{run}.json").read_text())
    shutil.rmtree(js.parent)
