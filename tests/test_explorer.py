"""The explorer: its data from checkpoints (fraglib.explore) and its page from those data (fraglib.explorer_page)."""

from __future__ import annotations

import json

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
