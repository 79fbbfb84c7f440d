"""The explorer: its data from checkpoints (fraglib_study.experiments.explore) and its page from those data (fraglib_study.pages.explorer_page)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from fraglib.core.config import ConfigError
from fraglib_study.experiments.explore import ExplorerConfig, embedding_map, top_k


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
    from fraglib_study.experiments.explore import correct_ranks

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
    from fraglib_study.experiments.explore import build

    runs = {"random": tiny_study / "random" / "seeds" / "seed0"}
    with pytest.raises(ConfigError, match="align_runs: run random"):
        build(runs, ExplorerConfig(k=3, align_runs=("random",), map_runs=()), tmp_path / "a")


def test_the_page_and_its_data_script(explorer_data, tmp_path):
    from fraglib_study.pages.explorer_page import build, data_file

    out, _ = explorer_data
    html, js = build(out, tmp_path / "reports" / "explorer.html")
    assert js == data_file(html) == tmp_path / "reports" / "explorer_files" / "data.js"
    page = html.read_text()
    assert '<script src="explorer_files/data.js"></script>' in page
    assert "<title>Explorer: synthetic benchmark, test split of seed 0</title>" in page
    assert '<script src="explorer_files/align_full.js"></script>' in page
    align = (js.parent / "align_full.js").read_text()
    assert align.startswith('(window.EXPLORER_ALIGN = window.EXPLORER_ALIGN || {})["full"] = {"boxes":')
    text = js.read_text()
    assert text.startswith("window.EXPLORER = {") and text.endswith("};\n")
    data = json.loads(text[len("window.EXPLORER = ") : -2])
    assert all((html.parent / im["thumb"]).is_file() for im in data["images"])
    assert html.stat().st_size < 1_000_000


def test_the_page_without_its_data_names_the_stage(tmp_path):
    from fraglib_study.pages.explorer_page import build

    with pytest.raises(FileNotFoundError, match=r"python -m fraglib_study figures, explore"):
        build(tmp_path / "nothing", tmp_path / "explorer.html")


def test_the_registry_lists_the_explorer_pages():
    from fraglib_study.report.registry import studies

    from test_dvc_deps import ROOT

    pages = {p.html: p for s in studies(ROOT) for p in s.pages if p.kind == "explorer"}
    assert pages["reports/explorer.html"].parameters == {
        "data": "runs/synthetic/figures"
    }  # the results page's data too
    # no --title: the page's title names the data set and the protocol from its data (no config key in it)
    assert pages["reports/pascal1k/explorer.html"].parameters == {"data": "runs/pascal1k_folds/explorer"}


def test_the_committed_explorers_are_small():
    """Each study's explorer as git holds it: data and thumbnails (<= 160 px, JPEGs of at most 12 kB, 8 kB on
    average) at most 3 MB, the page under 1 MB (and every file under 1 MB: test_project)."""
    from PIL import Image

    from test_dvc_deps import ROOT

    folders = sorted(
        p.parent for p in [*ROOT.glob("runs/*/explorer/explorer.json"), *ROOT.glob("runs/*/figures/explorer.json")]
    )
    if not folders:
        pytest.skip("no explorer data committed yet (python -m fraglib_study figures, explore --folds: their stages)")
    for folder in folders:
        data = json.loads((folder / "explorer.json").read_text())
        thumbs = sorted({(folder / im["thumb"]).resolve() for im in data["images"]})
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert sum(p.stat().st_size for p in [*files, *thumbs]) <= 3_000_000, folder
        assert all(p.stat().st_size < 1_000_000 for p in files), folder
        sizes = [p.stat().st_size for p in thumbs]
        assert max(sizes) <= 12_000 and sum(sizes) <= 8_000 * len(sizes), folder
        for p in thumbs:
            with Image.open(p) as pic:
                assert pic.format == "JPEG" and max(pic.size) <= 160, p
    for page in ROOT.glob("reports/**/explorer.html"):
        scripts = list((page.parent / "explorer_files").glob("*.js"))
        assert page.stat().st_size < 1_000_000 and sum(p.stat().st_size for p in scripts) < 3_000_000


def test_the_index_row_of_an_explorer(explorer_data):
    from fraglib_study.pages.index import finding
    from fraglib_study.report.registry import Page, Study

    out, _ = explorer_data
    page = Page("explorer_page", "", "reports/explorer.html", "", {"data": str(out)})
    study = Study("synthetic", "dvc.yaml", "runs/synthetic", "synthetic", "seeds", None, (page,), "dvc repro", None)
    assert page.kind == "explorer"
    assert finding(study, page, {}) == "3 runs, 4 test images, top 3 both ways"


def test_a_study_names_its_own_aligned_and_mapped_runs(tiny_study, tiny_full, tmp_path):
    """figures --runs, --align-runs and --map-runs (a study that keeps some runs' checkpoints: Pascal1K's figures
    stage) replace params.yaml's study.runs and explorer.align_runs / map_runs; a run that cannot be aligned is
    refused."""
    import yaml

    from fraglib_study.report.figure_data import main

    from conftest import ROOT

    models = tmp_path / "models"
    for run in ("full", "devise"):
        (models / run).mkdir(parents=True)
        (models / run / "seed0").symlink_to(tiny_study / run / "seeds" / "seed0")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"]["k"] = 3  # the tiny split has 4 test images
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    common = ["--dataset-dir", str(tiny_full), "--models-dir", str(models), "--runs", "full,devise",
              "--params", str(tmp_path / "params.yaml")]  # fmt: skip
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

    from fraglib_study.pages.explorer_page import build

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

    from fraglib_study.pages.explorer_page import build

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


def test_the_labels_come_from_params(tiny_study, tiny_full, tmp_path):
    """The explorer record (figures --runs) holds each run's params.yaml label (runs.<run>.label), the name the page
    shows; a run without one keeps its name."""
    import yaml

    from fraglib_study.report.figure_data import main

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
    main(["--dataset-dir", str(tiny_full), "--models-dir", str(models), "--runs", "devise,unnamed",
          "--params", str(tmp_path / "params.yaml"), "--out", str(out), "--align-runs", "", "--map-runs", ""])  # fmt: skip
    data = json.loads((out / "explorer.json").read_text())
    assert data["runs"]["devise"]["label"] == params["runs"]["devise"]["label"] != "devise"
    assert data["runs"]["unnamed"]["label"] == "unnamed"
    assert all(len(r["image_rank"]) == 4 and len(r["sentence_rank"]) == 20 for r in data["runs"].values())


# ----------------------------------------------------------------------------- issue #79: where the answer is
def test_a_label_drops_its_notes_on_another_protocols_splits():
    """The page shows a run's params.yaml label without "(Pascal1K: splits 0-1)"-like notes (true of the five-split
    study, not of what an explorer shows); other parentheses stay."""
    import yaml

    from fraglib_study.pages.explorer_page import shown_label

    from conftest import ROOT

    assert shown_label("Peri: region-word attention, 6 x 6 grid (Pascal1K: splits 0-1)") == (
        "Peri: region-word attention, 6 x 6 grid"
    )
    assert shown_label("Peri: STT-ATT (region-word attention, 36 proposals, + decoder; Pascal1K: splits 0-1)") == (
        "Peri: STT-ATT (region-word attention, 36 proposals, + decoder)"
    )
    assert shown_label("Peri: STT paraphrasing branch, text only (Pascal1K, Flickr8K: splits 0-1)") == (
        "Peri: STT paraphrasing branch, text only"
    )
    kept = "DeViSE-like, D = 2048 (five-split choice)"
    assert shown_label(kept) == kept and shown_label("Our model: + Adam (lr 1e-2)") == "Our model: + Adam (lr 1e-2)"
    labels = [(e or {}).get("label", "") for e in yaml.safe_load((ROOT / "params.yaml").read_text())["runs"].values()]
    assert not [x for x in map(shown_label, labels) if re.search(r": splits? \d|\(\s*\)|;\s*\)", x)]


def test_the_title_names_the_data_set_and_the_protocol():
    from fraglib_study.pages.explorer_page import page_title

    assert page_title({"dataset": "pascal1k", "seed": 0, "protocol": "folds", "folds": 10}) == (
        "Explorer: Pascal1K, fold 0 of the ten-fold protocol"
    )
    assert page_title({"dataset": "synthetic", "seed": 0}) == "Explorer: synthetic benchmark, test split of seed 0"
    # the name is the reader's title (fraglib.data.readers), the protocol's words the same for every dataset
    assert page_title({"dataset": "pascal1k", "seed": 2}) == "Explorer: Pascal1K, test split of seed 2"
    assert page_title({"dataset": "mydata", "seed": 1}) == "Explorer: mydata, test split of seed 1"  # no reader


def test_a_fold_shows_its_first_training_else_its_first_replicate_with_a_checkpoint(tmp_path):
    from fraglib_study.experiments.explore import fold_unit

    for unit in ("a/seed0", "a/seed0r1", "b/seed0r2", "b/seed0r1", "b/seed1", "c/seed0r1", "d/seed10"):
        (tmp_path / unit).mkdir(parents=True)
    for unit in ("a/seed0", "a/seed0r1", "b/seed0r2", "b/seed1", "d/seed10"):
        (tmp_path / unit / "best.pt").write_bytes(b"")
    assert fold_unit(tmp_path, "a", 0) == ("0", tmp_path / "a" / "seed0")
    assert fold_unit(tmp_path, "b", 0) == ("0r2", tmp_path / "b" / "seed0r2")  # seed0r1 holds no checkpoint
    assert fold_unit(tmp_path, "b", 1) == ("1", tmp_path / "b" / "seed1")
    assert fold_unit(tmp_path, "c", 0) is None and fold_unit(tmp_path, "gone", 0) is None
    assert fold_unit(tmp_path, "d", 1) is None  # seed10 is fold 10, not fold 1


def test_one_vector_per_item_from_every_encoder_kind():
    """DeViSE and kCCA give tensors, a VSE image (vectors, no mask, positions), Socher et al. an object with
    ``vec``; a fragment run's sets and an attention run's regions (a mask) give none: no map."""
    import types

    from fraglib_study.experiments.explore import _one_vector_each

    v = torch.ones(3, 4)
    assert _one_vector_each(v) is v
    assert _one_vector_each((v, None, torch.arange(3))) is v
    assert _one_vector_each(types.SimpleNamespace(index=np.arange(3), vec=v)) is v
    assert _one_vector_each((torch.ones(3, 5, 4), torch.ones(3, 5), torch.arange(3))) is None  # regions and a mask
    assert _one_vector_each(torch.ones(3, 5, 4)) is None
    assert _one_vector_each(types.SimpleNamespace(fragments=[v])) is None


def _fold_models(tiny_study, models):
    """A k-fold models folder of the tiny study: full only by its replicate, devise by both trainings, dtrnn by its
    first, random by none (its folder holds a last.pt-less, best.pt-less replicate)."""
    layout = {"full": ["seed0r1"], "devise": ["seed0", "seed0r1"], "dtrnn": ["seed0"]}
    for run, units in layout.items():
        for unit in units:
            (models / run).mkdir(parents=True, exist_ok=True)
            (models / run / unit).symlink_to(tiny_study / run / "seeds" / "seed0")
    (models / "random" / "seed0r1").mkdir(parents=True)


def test_the_fold_explorer_shows_each_run_with_a_checkpoint_and_lists_the_others(tiny_study, tmp_path):
    """--folds: every run asked for with a fold-0 checkpoint, saying which training; the others listed with why and
    the command that trains them; a map of every joint space (--map-runs all); thumbnails in --thumbs (a page's
    folder under reports/), linked from the page, never copied beside the data."""
    import yaml

    from fraglib_study.experiments.explore import main
    from fraglib_study.pages.explorer_page import build

    from conftest import ROOT

    models = tmp_path / "models"
    _fold_models(tiny_study, models)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["explorer"]["k"] = 3
    params["pascal1k"].update(folds=3, fold_runs=["full", "devise", "random", "dtrnn"])  # the tiny data: 3 "folds"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out, thumbs = tmp_path / "runs" / "explorer", tmp_path / "reports" / "explorer_thumbs"
    argv = ["--folds", "--models-dir", str(models), "--out", str(out), "--thumbs", str(thumbs), "--dataset", "pascal1k",
            "--params",
            str(tmp_path / "params.yaml"), "--align-runs", "full,fr_lr01", "--map-runs", "all",
            "--train-command", "train {run}", "--rebuild-command", "rebuild them"]  # fmt: skip
    main(argv)
    data = json.loads((out / "explorer.json").read_text())
    assert list(data["runs"]) == ["full", "devise", "dtrnn"] and data["aligned"] == ["full"]
    assert {r: v["unit"] for r, v in data["runs"].items()} == {"full": "0r1", "devise": "0", "dtrnn": "0"}
    assert (data["protocol"], data["folds"], data["rebuild"]) == ("folds", 3, "rebuild them")
    assert [(m["run"], m["command"]) for m in data["missing"]] == [("random", "train random")]
    assert "no checkpoint of its fold-0 trainings" in data["missing"][0]["reason"]
    assert sorted(data["maps"]) == ["devise", "dtrnn"]  # Socher et al.'s vectors too; the fragment run has none
    assert {r: v["joint_space"] for r, v in data["runs"].items()} == {"full": False, "devise": True, "dtrnn": True}
    assert not (out / "thumbs").exists() and len(list(thumbs.glob("*.jpg"))) == len(data["images"]) == 4
    assert all(im["thumb"] == f"../../reports/explorer_thumbs/{im['id']}.jpg" for im in data["images"])
    html, js = build(out, tmp_path / "reports" / "explorer.html")
    page = json.loads(js.read_text()[len("window.EXPLORER = ") : -2])
    assert [im["thumb"] for im in page["images"]] == [f"explorer_thumbs/{im['id']}.jpg" for im in data["images"]]
    assert "<title>Explorer: Pascal1K, fold 0 of the three-fold protocol</title>" in html.read_text()
    assert not (html.parent / "explorer_files" / "thumbs").exists()  # linked, not copied
    # again, the thumbnails elsewhere and a run skipped: the earlier thumbnails go, a user's picture beside them stays
    (thumbs / "mine.jpg").write_bytes(b"a user's picture")
    main([*argv[:6], str(tmp_path / "elsewhere"), *argv[7:], "--skip", "dtrnn", "--skip-reason", "still training",
          "--overwrite"])  # fmt: skip
    data = json.loads((out / "explorer.json").read_text())
    assert list(data["runs"]) == ["full", "devise"] and sorted(p.name for p in thumbs.iterdir()) == ["mine.jpg"]
    assert [(m["run"], m["reason"], m["command"]) for m in data["missing"]] == [
        ("random", data["missing"][0]["reason"], "train random"), ("dtrnn", "still training", "")]  # fmt: skip


def test_moving_the_thumbnails_changes_only_their_paths(explorer_data, tmp_path):
    """--move-thumbs: the thumbnails an earlier build wrote beside its data move to --thumbs (one copy), their paths
    in explorer.json follow, nothing else changes; a user's file in thumbs/ stays; the page links the moved ones."""
    import shutil

    from fraglib_study.experiments.explore import main
    from fraglib_study.pages.explorer_page import build

    out = tmp_path / "runs" / "explorer"
    shutil.copytree(explorer_data[0], out)
    (out / "thumbs" / "mine.jpg").write_bytes(b"a user's picture")
    before = json.loads((out / "explorer.json").read_text())
    pictures = {im["id"]: (out / im["thumb"]).read_bytes() for im in before["images"]}
    main(["--out", str(out), "--thumbs", str(tmp_path / "reports" / "explorer_thumbs"), "--move-thumbs"])
    after = json.loads((out / "explorer.json").read_text())
    assert [im.pop("thumb") for im in after["images"]] == [
        f"../../reports/explorer_thumbs/{im['id']}.jpg" for im in before["images"]
    ]
    for im in before["images"]:
        del im["thumb"]
    assert after == before
    assert sorted(p.name for p in (out / "thumbs").iterdir()) == ["mine.jpg"]
    assert {i: (tmp_path / "reports" / "explorer_thumbs" / f"{i}.jpg").read_bytes() for i in pictures} == pictures
    html, js = build(out, tmp_path / "reports" / "explorer.html")
    page = json.loads(js.read_text()[len("window.EXPLORER = ") : -2])
    assert all(im["thumb"].startswith("explorer_thumbs/") and (html.parent / im["thumb"]).is_file()
               for im in page["images"])  # fmt: skip


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda d: d.update(missing={"run": "x"}), r"explorer\.missing=.*expected a list"),
        (lambda d: d.update(missing=[{"run": "x", "label": "X", "reason": "r"}]), r"missing\[0\]\.command=None"),
        (lambda d: d.update(protocol="splits"), r"protocol='splits'"),
        (lambda d: d.update(protocol="folds", folds=1), r"folds=1"),
        (lambda d: d["runs"]["full"].update(unit=0), r"runs\.full\.unit=0: expected a str"),
        (lambda d: d["runs"]["full"].update(joint_space="no"), r"runs\.full\.joint_space='no'"),
        (lambda d: d.update(rebuild=["dvc"]), r"explorer\.rebuild="),
        (lambda d: d["images"][0].update(thumb="../../reports/7.jpg"), r"images\[0\]\.thumb=.*not a thumbs/<id>"),
    ],
)
def test_bad_fold_fields_are_refused_naming_the_field(tmp_path, capsys, change, match):
    from test_hostile_inputs_pages import assert_refused

    assert_refused(tmp_path, capsys, change, match)


def test_the_committed_explorer_pages_show_labels_and_travel_with_reports():
    """As git holds them: titles and labels without config keys or another protocol's notes; every thumbnail a file
    under reports/ (copying reports/ alone keeps the pictures), none of them duplicated under runs/; the Pascal1K
    explorer lists the fold runs it does not show, each with why (and the command where training makes it)."""
    from fraglib_study.pages.explorer_page import shown_label

    from conftest import ROOT

    pages = [p for p in (ROOT / "reports/explorer.html", ROOT / "reports/pascal1k/explorer.html") if p.exists()]
    if not pages:
        pytest.skip("no explorer page committed")
    reports = (ROOT / "reports").resolve()
    for page in pages:
        html = page.read_text()
        title = re.search(r"<title>([^<]*)</title>", html)[1]
        assert title.startswith("Explorer: ") and not re.search(r"\(\w+\.\w+\)|shown\.|splits? \d", title), title
        text = (page.parent / f"{page.stem}_files" / "data.js").read_text()
        data = json.loads(text[len("window.EXPLORER = ") : -2].replace("<\\/", "</"))
        assert all(shown_label(r["label"]) == r["label"] for r in data["runs"].values()), page
        for im in data["images"]:
            thumb = (page.parent / im["thumb"]).resolve()
            assert thumb.is_file() and reports in thumb.parents, (page, im["thumb"])
    for folder in ("runs/synthetic/figures", "runs/pascal1k_folds/explorer"):
        assert not list((ROOT / folder).glob("thumbs/*.jpg")), folder
    pascal = ROOT / "reports/pascal1k/explorer_files/data.js"
    if pascal.exists():
        data = json.loads(pascal.read_text()[len("window.EXPLORER = ") : -2].replace("<\\/", "</"))
        asked = set(data["runs"]) | {m["run"] for m in data["missing"]}
        import yaml

        assert asked == set(yaml.safe_load((ROOT / "params.yaml").read_text())["pascal1k"]["fold_runs"])
        assert all(m["reason"] for m in data["missing"]) and data["rebuild"]
        assert all(
            m["command"].endswith(f"train_folds@{m['run']}") for m in data["missing"] if "checkpoint" in m["reason"]
        )
        assert {"sdtrnn_sq", "kcca_euclidean", "vsepp"} <= set(data["runs"])  # Table 2's ablations, Peri's runs


def test_the_data_and_the_page_agree_on_where_a_thumbnail_may_be():
    """explore (what --overwrite may delete) and the page (what it links) accept the same thumbnail paths."""
    from fraglib_study.experiments.explore import THUMB_PATH
    from fraglib_study.pages.explorer_page import THUMB

    assert THUMB == THUMB_PATH
    for ok in ("thumbs/3.jpg", "../../../reports/pascal1k/explorer_thumbs/3.jpg"):
        assert re.fullmatch(THUMB, ok), ok
    for bad in ("../escape.jpg", "/etc/thumbs/3.jpg", "thumbs/../x.jpg", "thumbs\\\\3.jpg", "3.jpg", "thumbs/3.png"):
        assert not re.fullmatch(THUMB, bad), bad
