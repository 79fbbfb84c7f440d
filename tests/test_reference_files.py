"""Damaged reference and explorer files give errors naming the file and the field, never a bare exception
(issue #76, item 6): published_results.yaml, claims.yaml, an explorer's explorer.json."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from fraglib_study import reference
from fraglib_study.reference import PUBLISHED, check_published, published


def test_the_committed_published_results_pass_their_check():
    assert set(reference.PAPERS) <= set(published())


@pytest.mark.parametrize(
    "damage, match",
    [
        (
            lambda d: d["karpathy2014_defrag"]["pascal1k"]["rows"]["devise"]["search"].update(r1="21.6%"),
            r"karpathy2014_defrag\.pascal1k\.rows\.devise\.search\.r1='21\.6%': a printed figure must be a finite number",
        ),
        (
            lambda d: d["socher2014_dtrnn"]["pascal1k_mean_rank"]["image_search"].update(kcca=float("nan")),
            r"socher2014_dtrnn\.pascal1k_mean_rank\.image_search\.kcca=nan: expected a finite number",
        ),
        (lambda d: d.pop("peri2018_thesis"), r"peri2018_thesis: missing"),
        (
            lambda d: d["peri2018_thesis"]["flickr30k_1k_test"]["stt_1024"]["t2i"].update(mean=None),
            r"peri2018_thesis\.flickr30k_1k_test\.stt_1024\.t2i\.mean=None",
        ),
    ],
)
def test_a_damaged_published_table_names_the_file_and_the_field(damage, match):
    data = copy.deepcopy(published())
    damage(data)
    with pytest.raises(ValueError, match=rf"published_results.yaml: {match}"):
        check_published(data, PUBLISHED)


def test_malformed_published_yaml_names_the_file(tmp_path, monkeypatch):
    bad = tmp_path / "published_results.yaml"
    bad.write_text("karpathy2014_defrag: {source: [unclosed\n")
    monkeypatch.setattr(reference, "PUBLISHED", bad)
    published.cache_clear()
    try:
        with pytest.raises(ValueError, match=rf"{bad}: malformed YAML"):
            published()
    finally:
        published.cache_clear()


def test_a_row_the_paper_does_not_print_is_named():
    from fraglib_study.audit.claims import published_row

    with pytest.raises(KeyError, match=r"karpathy2014_defrag\.pascal1k:no_such_row \(search\)"):
        published_row("karpathy2014_defrag.pascal1k:no_such_row", "search")


def _claims_file(tmp_path, change):
    from fraglib_study.audit.claims import CLAIMS

    data = yaml.safe_load(CLAIMS.read_text())
    change(data["claims"])
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda cs: cs.__setitem__(0, "a claim as a string"), r"claims\[0\]: expected a mapping"),
        (lambda cs: cs[0].update(tasks="search"), r"tasks='search': expected a list"),
        (lambda cs: cs[0].pop("metric"), r"no 'metric'"),
        (lambda cs: cs[0].update(runs=["full", "devise"]), r"runs=\['full', 'devise'\]: expected a mapping"),
        (lambda cs: cs[1].update(id=cs[0]["id"]), r"claim ids given twice"),
    ],
)
def test_a_damaged_claims_file_names_the_file_and_the_field(tmp_path, change, match):
    from fraglib_study.audit.claims import read_claims

    path = _claims_file(tmp_path, change)
    with pytest.raises(ValueError, match=match) as exc:
        read_claims(path)
    assert str(path) in str(exc.value)


def _explorer(tmp_path, change=None):
    d = tmp_path / "data"
    (d / "thumbs").mkdir(parents=True)
    (d / "thumbs" / "7.jpg").write_bytes(b"jpeg")
    data = {
        "dataset": "synthetic", "seed": 0, "k": 1, "aligned": [],
        "runs": {"full": {"label": "Our model", "image_top": [[0]], "sentence_top": [[0]]}},
        "images": [{"id": 7, "thumb": "thumbs/7.jpg"}],
        "sentences": [{"id": 70, "image": 0, "text": "a dog"}],
    }  # fmt: skip
    if change:
        change(data)
    (d / "explorer.json").write_text(json.dumps(data))
    return d


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.pop("images"), r"explorer\.images=None: expected a list"),
        (lambda d: d["images"][0].update(thumb="../../etc/passwd.jpg"), r"images\[0\]\.thumb=.*not a thumbs/<id>\.jpg"),
        (lambda d: d["sentences"][0].update(image=3), r"sentences\[0\]\.image=3: no such image \(the data holds 1\)"),
        (lambda d: d["runs"]["full"].pop("label"), r"runs\.full\.label=None: expected a str"),
        (lambda d: d.update(aligned=["gone"]), r"aligned names 'gone'"),
    ],
)
def test_a_damaged_explorer_json_names_the_file_and_the_field(tmp_path, change, match):
    from fraglib_study.pages.explorer_page import page_data

    d = _explorer(tmp_path, change)
    with pytest.raises(ValueError, match=match) as exc:
        page_data(d, tmp_path / "explorer.html")
    assert str(d / "explorer.json") in str(exc.value)


def test_a_cut_explorer_json_ends_the_page_command_with_its_name(tmp_path, capsys):
    from fraglib_study.pages.explorer_page import main

    d = _explorer(tmp_path)
    (d / "explorer.json").write_text('{"dataset": "synth')
    with pytest.raises(SystemExit) as exc:
        main([str(d), str(tmp_path / "explorer.html")])
    assert exc.value.code == 2
    assert f"{d / 'explorer.json'}: not valid JSON" in capsys.readouterr().err
    assert page_ok(tmp_path)


def page_ok(tmp_path):
    from fraglib_study.pages.explorer_page import page_data

    return page_data(_explorer(tmp_path / "good"), tmp_path / "explorer.html")["images"][0]["thumb"].endswith("7.jpg")
