"""The explorer: its data from checkpoints (fraglib.explore) and its page from those data (fraglib.explorer_page)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from fraglib.config import ConfigError
from fraglib.explore import ExplorerConfig, embedding_map, top_k


def test_top_k_orders_both_directions_ties_by_position_and_inf_last():
    S = torch.tensor([[0.9, 0.1, 0.5, float("-inf")], [0.2, 0.2, float("nan"), 0.8], [0.3, 0.7, 0.5, 0.1]])
    rows, cols = top_k(S, 2)
    assert rows.tolist() == [[0, 2], [3, 0], [1, 2]]
    assert cols.tolist() == [[0, 2], [2, 1], [0, 2], [1, 2]]  # column 2: 0.5 at rows 0 and 2, then nan last
    with pytest.raises(ValueError, match="explorer.k=3"):
        top_k(S, 3)


def test_correct_ranks_are_the_metrics_ranks_and_agree_with_the_lists():
    """The rank of each query's answer: pessimistic on ties as the metrics, NaN last; never above the answer's place
    in top_k's list, and within k exactly when the list holds it."""
    from fraglib.explore import correct_ranks

    S = torch.tensor([[0.9, 0.1, 0.5, 0.5], [0.2, 0.2, float("nan"), 0.8], [0.3, 0.7, 0.5, 0.1]])
    owner = np.array([0, 1, 2, 2])  # sentence -> image
    a, s = correct_ranks(S, owner)
    assert a.tolist() == [1, 3, 2]  # image 1: its sentence's 0.2 ties sentence 0's (pessimistic), nan ranks last
    assert s.tolist() == [1, 2, 2, 3]  # sentence 2: its image's 0.5 ties image 0's, image 1's nan ranks last
    rng = np.random.default_rng(0)
    S = torch.tensor(rng.integers(0, 4, (7, 21)), dtype=torch.float32)  # many ties
    owner = np.repeat(np.arange(7), 3)
    a, s = correct_ranks(S, owner)
    rows, cols = top_k(S, 4)
    for ranks, lists, hit in ((a, rows, lambda q, x: owner[x] == q), (s, cols, lambda q, x: x == owner[q])):
        for q, (rank, row) in enumerate(zip(ranks, lists)):
            place = next((p for p, x in enumerate(row) if hit(q, x)), None)
            assert rank > 4 or place is not None, (q, rank, row)  # within k: the list holds it
            assert place is None or rank >= place + 1, (q, rank, row)  # never above its place


def test_the_map_is_deterministic_and_in_the_unit_square():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(6, 5)), rng.normal(size=(9, 5))
    xy = embedding_map(a, b)
    assert xy.shape == (15, 2) and xy.min() == 0.0 and xy.max() == 1.0
    np.testing.assert_array_equal(xy, embedding_map(a, b))


@pytest.mark.parametrize(
    "key,value", [("thumb_px", 200), ("k", 0), ("quality", 100), ("align_runs", [1]), ("map_runs", "devise")]
)
def test_a_bad_setting_names_itself(key, value):
    with pytest.raises(ConfigError, match=f"explorer.{key}"):
        ExplorerConfig(**{key: value}).validate()


def test_the_lists_agree_with_the_committed_ranks(explorer_data):
    """A run's top k holds a correct item exactly when its evaluation ranked the first correct one within k."""
    out, runs = explorer_data
    data = json.loads((out / "explorer.json").read_text())
    n_img, n_sent = len(data["images"]), len(data["sentences"])
    assert (n_img, n_sent, data["k"]) == (4, 20, 3)
    assert data["runs"]["full"]["label"] == "Our model" and data["runs"]["devise"]["label"] == "devise"
    owner = [s["image"] for s in data["sentences"]]
    for run, seed_dir in runs.items():
        ranks = json.loads((seed_dir / "ranks.json").read_text())
        got = data["runs"][run]
        assert np.shape(got["image_top"]) == (n_img, 3) and np.shape(got["sentence_top"]) == (n_sent, 3)
        hit_a = [any(owner[j] == i for j in top) for i, top in enumerate(got["image_top"])]
        hit_s = [owner[j] in top for j, top in enumerate(got["sentence_top"])]
        assert hit_a == [r <= 3 for r in ranks["annotation"]], run
        assert hit_s == [r <= 3 for r in ranks["search"]], run
        # where the answer is beyond the top k: the evaluation's own ranks (the tiny split shows every test item)
        assert got["image_rank"] == ranks["annotation"] and got["sentence_rank"] == ranks["search"], run


def test_thumbnails_categories_alignments_and_map(explorer_data):
    from PIL import Image

    out, _ = explorer_data
    data = json.loads((out / "explorer.json").read_text())
    scenes = {"grass", "sand", "snow", "water", "brick", "night", "wood"}
    for im in data["images"]:
        pic = Image.open(out / im["thumb"])
        assert pic.format == "JPEG" and max(pic.size) == 160 and im["w"] == im["h"] == 256
        assert im["category"] in scenes
    assert data["aligned"] == ["full"] and sorted(p.name for p in out.glob("alignments_*")) == ["alignments_full.json"]
    A = json.loads((out / "alignments_full.json").read_text())
    correct = {f"{s['image']},{j}" for j, s in enumerate(data["sentences"])}
    listed = {f"{i},{j}" for i, top in enumerate(data["runs"]["full"]["image_top"]) for j in top}
    assert correct | listed <= set(A["pairs"])
    for key, flat in A["pairs"].items():
        i, j = map(int, key.split(","))
        assert len(flat) == 2 * len(A["fragments"][str(j)]) > 0  # (box, 10 × score) per fragment
        assert all(0 <= b < len(A["boxes"][i]) for b in flat[::2])
        assert all(len(box) == 4 and box[0] <= box[2] and box[1] <= box[3] for box in A["boxes"][i])
    M = data["maps"]["devise"]
    assert np.shape(M["images"]) == (4, 2) and np.shape(M["sentences"]) == (20, 2)
    assert sum(M["n_images"]) == 20 * 3 and sum(M["n_sentences"]) == 4 * 3  # every query lists k items


def test_a_run_without_fragments_or_a_space_is_refused(tiny_study, tmp_path):
    from fraglib.explore import build

    runs = {"random": tiny_study / "random" / "seeds" / "seed0"}
    with pytest.raises(ConfigError, match="align_runs: run random"):
        build(runs, ExplorerConfig(k=3, align_runs=("random",), map_runs=()), tmp_path / "a")


def test_the_page_and_its_data_script(explorer_data, tmp_path):
    from fraglib.explorer_page import build, data_file

    out, _ = explorer_data
    html, js = build(out, tmp_path / "reports" / "explorer.html")
    assert js == data_file(html) == tmp_path / "reports" / "explorer_files" / "data.js"
    page = html.read_text()
    assert '<script src="explorer_files/data.js"></script>' in page and "synthetic test split" in page
    assert '<script src="explorer_files/align_full.js"></script>' in page
    align = (js.parent / "align_full.js").read_text()
    assert align.startswith('(window.EXPLORER_ALIGN = window.EXPLORER_ALIGN || {})["full"] = {"boxes":')
    text = js.read_text()
    assert text.startswith("window.EXPLORER = {") and text.endswith("};\n")
    data = json.loads(text[len("window.EXPLORER = ") : -2])
    assert all((html.parent / im["thumb"]).is_file() for im in data["images"])
    assert html.stat().st_size < 1_000_000


def test_the_page_without_its_data_names_the_stage(tmp_path):
    from fraglib.explorer_page import build

    with pytest.raises(FileNotFoundError, match="python -m fraglib.explore"):
        build(tmp_path / "nothing", tmp_path / "explorer.html")


def test_the_registry_lists_the_explorer_pages():
    from fraglib.studies import studies

    from test_dvc_deps import ROOT

    pages = {p.html: p for s in studies(ROOT) for p in s.pages if p.kind == "explorer"}
    assert pages["reports/explorer.html"].parameters == {"data": "runs/synthetic/explorer"}
    pascal = pages["reports/pascal1k/explorer.html"].parameters
    assert pascal["data"] == "runs/pascal1k_folds/explorer" and "every run trained on the folds" in pascal["title"]


def test_the_committed_explorers_are_small():
    """Each study's explorer as git holds it: data and thumbnails (<= 160 px) at most 3 MB, the page under 1 MB
    (and every file under 1 MB: test_project)."""
    from PIL import Image

    from test_dvc_deps import ROOT

    folders = sorted(p.parent for p in ROOT.glob("runs/*/explorer/explorer.json"))
    if not folders:
        pytest.skip("no explorer data committed yet (python -m fraglib.explore: the explorer stages)")
    for folder in folders:
        assert sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) <= 3_000_000, folder
        assert all(max(Image.open(p).size) <= 160 for p in folder.glob("thumbs/*.jpg")), folder
    for page in ROOT.glob("reports/**/explorer.html"):
        scripts = list((page.parent / "explorer_files").glob("*.js"))
        assert page.stat().st_size < 1_000_000 and sum(p.stat().st_size for p in scripts) < 3_000_000


def test_the_index_row_of_an_explorer(explorer_data):
    from fraglib.index import finding
    from fraglib.studies import Page, Study

    out, _ = explorer_data
    page = Page("explorer_page", "", "reports/explorer.html", "", {"data": str(out)})
    study = Study("synthetic", "dvc.yaml", "runs/synthetic", "synthetic", "seeds", None, (page,), "dvc repro", None)
    assert page.kind == "explorer"
    assert finding(study, page, {}) == "3 runs, 4 test images, top 3 both ways"


def test_a_study_names_its_own_aligned_and_mapped_runs(tiny_study, tmp_path):
    """--runs, --align-runs and --map-runs (a study that keeps some runs' checkpoints: Pascal1K's explorer stage)
    replace params.yaml's study.runs and explorer.align_runs / map_runs; a run that cannot be aligned is refused."""
    import yaml

    from fraglib.explore import main

    from conftest import ROOT

    models = tmp_path / "models"
    for run in ("full", "devise"):
        (models / run).mkdir(parents=True)
        (models / run / "seed0").symlink_to(tiny_study / run / "seeds" / "seed0")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"]["k"] = 3  # the tiny split has 4 test images
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    common = ["--models-dir", str(models), "--runs", "full,devise", "--params", str(tmp_path / "params.yaml")]
    main([*common, "--out", str(tmp_path / "a"), "--align-runs", "full", "--map-runs", ""])
    data = json.loads((tmp_path / "a" / "explorer.json").read_text())
    assert list(data["runs"]) == ["full", "devise"] and data["aligned"] == ["full"] and data["maps"] == {}
    main([*common, "--out", str(tmp_path / "b"), "--align-runs", "", "--map-runs", "devise"])
    data = json.loads((tmp_path / "b" / "explorer.json").read_text())
    assert data["aligned"] == [] and list(data["maps"]) == ["devise"]
    assert not list((tmp_path / "b").glob("alignments_*.json"))
    with pytest.raises(ConfigError, match="run devise is no fragment run"):
        main([*common, "--out", str(tmp_path / "c"), "--align-runs", "devise"])


def _ranks(image_rank=None, sentence_rank=None, **top):
    """A change of the small explorer data of test_hostile_inputs_pages (2 images, 2 sentences, k = 1, both lists
    correct at place 1): run full's ranks and lists."""

    def change(d):
        r = d["runs"]["full"]
        r.update(top)
        r.update({k: v for k, v in (("image_rank", image_rank), ("sentence_rank", sentence_rank)) if v is not None})

    return change


@pytest.mark.parametrize(
    "change",
    [
        _ranks(),  # data written before explore recorded the ranks: they still make a page
        _ranks([1, 1], [1, 1]),
        _ranks([2, 1], [2, 1]),  # pessimistic on ties: below the answer's place in the list
        _ranks([1, 1], [2, 1], sentence_top=[[1], [1]]),  # sentence 0's image is missed: its rank is beyond k = 1
    ],
)
def test_the_ranks_of_the_answers_are_optional_and_pass(tmp_path, change):
    from test_hostile_inputs_pages import _explorer

    from fraglib.explorer_page import build

    d = _explorer(tmp_path, change)
    html, js = build(d, tmp_path / "out" / "explorer.html")
    data = json.loads(js.read_text()[len("window.EXPLORER = ") : -2])
    stored = json.loads((d / "explorer.json").read_text())["runs"]["full"]
    assert {k: data["runs"]["full"].get(k) for k in ("image_rank", "sentence_rank")} == {
        k: stored.get(k) for k in ("image_rank", "sentence_rank")
    }


@pytest.mark.parametrize(
    "change, match",
    [
        (_ranks(sentence_rank=[1]), r"runs\.full\.sentence_rank: expected a list of 2 ranks"),
        (_ranks(image_rank={"0": 1}), r"runs\.full\.image_rank: expected a list of 2 ranks"),
        (_ranks(sentence_rank=[1, "1"]), r"runs\.full\.sentence_rank\[1\]='1': not a rank among the 2 images"),
        (_ranks(sentence_rank=[1, True]), r"runs\.full\.sentence_rank\[1\]=True"),
        (_ranks(image_rank=[3, 1]), r"runs\.full\.image_rank\[0\]=3: not a rank among the 2 sentences"),
        (_ranks(sentence_rank=[0, 1]), r"runs\.full\.sentence_rank\[0\]=0: not a rank among the 2 images"),
        (_ranks(image_rank=[0, 1]), r"image_rank\[0\]=0: its first correct item is at place 1 of the list"),
        (
            _ranks(sentence_rank=[1, 1], sentence_top=[[1], [1]]),
            r"runs\.full\.sentence_rank\[0\]=1: its first correct item is not in the list",
        ),
    ],
)
def test_bad_ranks_of_the_answers_are_refused_naming_the_field(tmp_path, capsys, change, match):
    from test_hostile_inputs_pages import assert_refused

    assert_refused(tmp_path, capsys, change, match)


def _script(page: str) -> str:
    """The page's own script (the last one: after the data scripts)."""
    return page.rsplit("<script>", 1)[1].split("</script>", 1)[0]


def test_the_page_colours_twenty_categories_apart_and_ranks_both_directions(tmp_path):
    """The page's script: 20 distinct category colours (Pascal1K's 20 classes, none repeated); a rank on every image
    of a sentence query's list (image queries' lists are numbered <ol>s) and the answer's rank where the list misses
    it; labels drawn apart; the map's points largest first; the runs' labels, not their names, as headings."""
    from test_hostile_inputs_pages import _explorer

    from fraglib.explorer_page import build

    html, _ = build(_explorer(tmp_path, _ranks([1, 1], [2, 1], sentence_top=[[1], [1]])), tmp_path / "explorer.html")
    script = _script(html.read_text())
    palette = re.search(r"const CAT_COLOURS = \[([^\]]*)\]", script)
    assert palette, "no fixed category palette"
    colours = re.findall(r'"(#[0-9a-f]{6})"', palette[1])
    assert len(colours) == len(set(colours)) == 20 and len(re.findall(r'"[^"]*"', palette[1])) == 20
    assert "% COLOURS.length" not in script  # no category colour repeats
    assert 'className: "rank"' in script and "sentence_rank" in script and "image_rank" in script
    assert "its rank is not stored in these data" in script  # older data: said, never faked
    assert "function placeLabels(" in script and "points.sort(" in script
    assert "textContent: runLabel(" in script and "D.runs[r].label)" not in script
    assert "innerHTML" not in script and "outerHTML" not in script  # data reach the page as text only


def test_the_labels_come_from_params(tiny_study, tmp_path):
    """explore writes each run's params.yaml label (runs.<run>.label), the name the page shows; a run without one
    keeps its name."""
    import yaml

    from fraglib.explore import main

    from conftest import ROOT

    models = tmp_path / "models"
    (models / "devise").mkdir(parents=True)
    (models / "devise" / "seed0").symlink_to(tiny_study / "devise" / "seeds" / "seed0")
    (models / "unnamed").mkdir(parents=True)
    (models / "unnamed" / "seed0").symlink_to(tiny_study / "random" / "seeds" / "seed0")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"]["k"] = 3
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "out"
    main(["--models-dir", str(models), "--runs", "devise,unnamed", "--params", str(tmp_path / "params.yaml"),
          "--out", str(out), "--align-runs", "", "--map-runs", ""])  # fmt: skip
    data = json.loads((out / "explorer.json").read_text())
    assert data["runs"]["devise"]["label"] == params["runs"]["devise"]["label"] != "devise"
    assert data["runs"]["unnamed"]["label"] == "unnamed"
    assert all(len(r["image_rank"]) == 4 and len(r["sentence_rank"]) == 20 for r in data["runs"].values())
