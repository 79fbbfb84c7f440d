"""The benchmark package: the epoch table's entries are complete and self-consistent (nothing here
asserts a time — benchmarks measure, tests check what is reported)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from fraglib_study.bench import BENCHMARKS, OPT_IN


@pytest.mark.slow
def test_epoch_entries_count_the_work_and_the_critical_path():
    from fraglib_study.bench.systems import bench_epoch

    got = {e["name"].removesuffix("_cuda"): e for e in bench_epoch(["devise", "dtrnn"], repeats=1)}
    gpu = got.pop("epoch_gpu", None)  # present (value None) without a GPU
    assert gpu is None or (gpu["value"] is None and "systems_device" in gpu["note"])
    assert set(got) == {"epoch_devise", "epoch_dtrnn"}
    for e in got.values():
        assert {"name", "value", "unit", "reference", "ratio", "machine"} <= set(e)
        assert (
            e["value"] > 0 and e["gflop"] > 0 and e["reference"] > 0 and e["steps"] >= 40
        )  # 4,000 pairs, batches of 100
        # ratio = achieved FLOP/s / the same process's matmul FLOP/s (rounded figures: 5 %)
        assert e["ratio"] == pytest.approx(e["gflop"] / e["value"] / e["reference"], rel=0.05)
    assert "critical_path_s" not in got["epoch_devise"]  # no recurrence
    tree = got["epoch_dtrnn"]
    assert tree["critical_path_s"] > 0 and tree["sequential"]["levels_all_negatives"] >= 2
    assert tree["sequential"]["levels_batch_mean"] == 0  # Eq. 5 reads the batch by position only


def test_epoch_growth_times_every_system_and_leaves_out_the_quadratic_form_at_scale(monkeypatch):
    """``bench epoch_growth``: a line per run of ``bench.growth_runs`` (a closed form: its fit; a Socher run: the exact
    Eq. 5 to ``exact_max_scale`` only, the linear form at every scale), each with its slope; the epoch itself is the
    trainer's (stubbed here: the test checks the bookkeeping, not a time)."""
    import fraglib_study.bench.scale as S

    calls = []

    def fake_fresh(fn, run, scale, neg):  # (seconds of the process, peak MB, what the child returned)
        calls.append((run, scale, neg))
        return 1.0, 50.0 * scale, {"seconds": 2.0 * scale, "steps": 40 * scale, "fit": run == "kcca",
                                   "rows_per_image": 1}  # fmt: skip

    monkeypatch.setattr(S, "fresh", fake_fresh)
    monkeypatch.setenv("FRAGLIB_GROWTH_SCALES", "1,4,16")
    from fraglib_study.params import read_params

    params = read_params("params.yaml")
    params["bench"] = {**params["bench"], "growth_runs": ["full", "kcca", "dtrnn"]}
    monkeypatch.setattr("fraglib_study.params.read_params", lambda p: params)
    got = {e["name"]: e for e in S.bench_epoch_growth(exact_max_scale=4, negatives=8)}
    assert ("dtrnn", 16, None) not in calls and ("dtrnn", 16, 8) in calls and ("dtrnn", 4, None) in calls
    assert {
        "growth_epoch_full_random_x16_s",
        "growth_fit_kcca_random_x4_s",
        "growth_epoch_dtrnn_neg8_random_x16_s",
    } <= set(got)
    assert "growth_epoch_dtrnn_random_x16_s" not in got
    assert got["slope_epoch_growth_full_random"]["value"] == pytest.approx(1.0)  # seconds ∝ scale
    e = got["growth_epoch_full_random_x4_s"]
    assert e["value"] == 8.0 and e["peak_rss_mb"] == 200 and e["train_images"] == 3200 and e["threads"] == 1


def test_growth_times_every_stage_and_samples_socher_negatives_above_the_exact_scale(monkeypatch):
    """``bench growth``: per scale data, features, a study per run (its epoch or fit and its test evaluation, from
    the study's timing.json) and the results page, whose peak is the notebook kernel's when larger; a Socher run
    with the exact Eq. 5 is given sampled negatives above ``exact_max_scale`` and named for them (stubbed
    children: the test checks the bookkeeping, not a time)."""
    import yaml

    import fraglib_study.bench.scale as S

    calls = []

    def fake_fresh(fn, *args):
        name = fn.__name__
        if name == "_study":
            argv = args[0]
            run = argv[argv.index("--run") + 1]
            P = yaml.safe_load(Path(argv[argv.index("--params") + 1]).read_text())
            calls.append((run, P["runs"][run].get("negatives"), P["runs"][run].get("epochs"), P["study"]["jobs"]))
            fit = run == "kcca"  # a closed form: not clocked by the trainer
            timing = {"train_seconds": None if fit else 6.0, "eval_seconds": 2.0, "epochs": None if fit else 1}
            return 10.0, 300.0, timing
        if name == "report_page":
            Path(args[0][1]).write_text("<html>" + "x" * 4096)
            return 5.0, 100.0, 700.0  # the kernel's peak above the driver's
        calls.append((name, args[-1] if name == "_growth_features" else None))
        return 3.0, 80.0, None

    monkeypatch.setattr(S, "fresh", fake_fresh)
    monkeypatch.setenv("FRAGLIB_GROWTH_SCALES", "1,8")
    monkeypatch.setenv("FRAGLIB_GROWTH_VISION", "cheap")
    monkeypatch.setenv("FRAGLIB_GROWTH_RUNS", "full,kcca,dtrnn")
    got = {e["name"]: e for e in S.bench_growth(exact_max_scale=4, negatives=8)}
    assert ("dtrnn", None, 1, 1) in calls and ("dtrnn", 8, 1, 1) in calls  # exact at 1x, sampled at 8x
    assert ("kcca", None, None, 1) in calls and ("_growth_features", True) in calls  # a fit has no epochs
    for x in (1, 8):
        assert {
            f"growth_{w}_x{x}_s" for w in ("data", "features_cheap", "epoch_full", "fit_kcca", "eval_full", "report")
        } <= set(got)
    assert (
        "growth_epoch_dtrnn_x1_s" in got
        and "growth_epoch_dtrnn_neg8_x8_s" in got
        and "growth_epoch_dtrnn_x8_s" not in got
    )
    e = got["growth_epoch_full_x8_s"]
    assert (
        e["value"] == 6.0
        and e["images"] == 8 * 800 + 100 + 500
        and e["train_images"] == 6400
        and e["study_s"] == 10.0
        and e["peak_rss_mb"] == 300
    )
    assert (
        got["growth_eval_full_x8_s"]["value"] == 2.0
        and "proposals 64 px" in got["growth_features_cheap_x1_s"]["vision"]
    )
    r = got["growth_report_x1_s"]
    assert r["value"] == 5.0 and r["peak_rss_mb"] == 700 and r["runs"] == 3 and r["page_kb"] == 4


def test_growth_params_train_once_for_one_epoch_in_the_measured_process():
    from fraglib.run.train import resolve_run
    from fraglib_study.bench.scale import growth_params
    from fraglib_study.params import read_params

    params = read_params("params.yaml")
    p = growth_params(params, ["full", "kcca", "dtrnn"], {"dtrnn": 16})
    assert p["study"]["jobs"] == 1 and p["study"]["seeds"] == [0] and p["study"]["replicates"] == 1
    assert "replicates" not in p["runs"]["full"] and params["runs"]["full"]["replicates"] == 2  # a copy
    assert resolve_run(p, "full").train_config.epochs == 1 and resolve_run(p, "dtrnn").system_config.negatives == 16
    assert "epochs" not in p["runs"]["kcca"]  # closed form: nothing to shorten


def test_random_epoch_trains_one_epoch_of_a_run_on_inputs_of_its_views():
    """The child itself, in this process, at Pascal1K's training size: DeViSE trains 4,000 pairs in batches of at
    most 100 (no image twice in a batch, so a few more than 40)."""
    from fraglib_study.bench.scale import _random_epoch

    r = _random_epoch("devise", 1, None)
    assert r["fit"] is False and 40 <= r["steps"] <= 45 and r["seconds"] > 0 and r["rows_per_image"] >= 1


def test_socher_entries_time_every_encoder_and_the_recursion():
    from fraglib_study.bench.systems import bench_socher

    got = {e["name"]: e for e in bench_socher(epochs=1, n_images=20, trees=20)}
    assert sorted(got) == [
        "socher_epoch_s_chain",
        "socher_epoch_s_ctrnn",
        "socher_epoch_s_dtrnn",
        "socher_epoch_s_sdtrnn",
        "socher_tree_encoder_speedup",
    ]
    assert all(e["value"] > 0 for e in got.values())
    e = got["socher_tree_encoder_speedup"]
    assert e["trees"] == 20 and e["batched_ms"] > 0 and e["recursive_ms"] > 0 and e["nodes"] > 20


@pytest.mark.slow
def test_a_closed_form_fit_reports_its_solver_bound():
    """kCCA's fit is mostly LAPACK (uncounted FLOPs): its entry says how long the decompositions and
    products took inside the fit, and that part is no more than the fit itself."""
    from fraglib_study.bench.systems import bench_epoch

    e = next(e for e in bench_epoch(["kcca"], repeats=1) if e["name"].startswith("epoch_kcca"))
    assert e["closed_form_fit"] and e["steps"] == 0 and e["value"] > 0
    parts = e["sequential"]
    assert parts["eigh_s"] > 0 and parts["cholesky_s"] > 0 and parts["mm_s"] > 0
    assert sum(parts.values()) == pytest.approx(e["critical_path_s"], abs=0.01)
    assert e["critical_path_s"] <= 1.2 * e["value"]  # a part of the fit (profiler: +20 % slack)
    assert e["seconds_over_critical_path"] == pytest.approx(e["value"] / e["critical_path_s"], rel=0.05)


@pytest.mark.slow
def test_profile_entries_say_where_an_epoch_goes():
    from fraglib_study.bench.systems import bench_profile

    (e,) = bench_profile(["devise"])
    assert e["name"].removesuffix("_cuda") == "profile_devise" and e["steps"] >= 40
    assert e["ms_per_step"] == pytest.approx(e["value"] / e["steps"] * 1000, rel=0.01)
    ops = dict((name, ms) for name, ms, _ in e["top_self_cpu_ms_per_step"])
    assert len(ops) == 10 and any(k.startswith("aten::") for k in ops) and all(ms >= 0 for ms in ops.values())
    assert e["scalar_reads_per_step"] >= 1  # the loss parts read back per step, at least


def _exits_silently(q) -> None:
    raise SystemExit(3)


def test_a_benchmark_process_that_dies_is_named_not_waited_for():
    import multiprocessing as mp

    from fraglib_study.bench.common import result_of

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_exits_silently, args=(q,))
    p.start()
    with pytest.raises(RuntimeError, match="epoch att_top36: .* code 3"):
        result_of(p, q, "epoch att_top36")


def test_the_default_list_holds_the_epoch_table_and_names_are_unique():
    assert "epoch" in BENCHMARKS
    assert not set(BENCHMARKS) & set(OPT_IN)


# ----------------------------------------------------------------------------- the register (benchmarks/results.json)
THEIRS = {"name": "epoch_full", "value": 1.0, "machine": "Intel Xeon; 16 cores; torch 2.11 (1 threads); Python 3.11"}
MINE = {"name": "epoch_full", "value": 2.0, "machine": "AMD EPYC; 2 cores; torch 2.14 (1 threads); Python 3.11"}


def test_refused_runs_keep_every_measurement_in_the_pending_file(tmp_path):
    from fraglib_study.bench.common import merge

    path = tmp_path / "results.json"
    path.write_text(json.dumps([THEIRS]))
    second = dict(MINE, value=2.5)
    for new in (MINE, second):
        with pytest.raises(
            FileExistsError,
            match=r"another machine \(epoch_full\)\. Pass --overwrite .* This run's "
            rf"entries are kept in {path.with_suffix('.pending.json')}\.",
        ):
            merge([new], path)
    assert json.loads(path.with_suffix(".pending.json").read_text()) == [MINE, second]  # appended, both kept
    assert json.loads(path.read_text()) == [THEIRS]
    path.with_suffix(".pending.json").write_text("[{")  # a damaged pending file
    with pytest.raises(FileExistsError, match="kept in .*results.pending2.json"):
        merge([MINE], path)
    assert json.loads(path.with_suffix(".pending2.json").read_text()) == [MINE]
    assert path.with_suffix(".pending.json").read_text() == "[{"  # left for the user


@pytest.mark.parametrize(
    "text, defect",
    [
        ('[{"name": "a", "value": 1}, {"na', r"not valid JSON \(.* line 1 column 30\): the file is cut or damaged"),
        ('{"name": "a", "value": 1}', r"not a benchmark register \(a JSON dict, not a list of entries\)"),
        ('[{"name": "a"}, {"value": 1}]', r'1 of its 2 entries are not objects with a "name" \(the first: entry 2\)'),
    ],
)
def test_a_damaged_register_stops_the_bench_before_it_measures(text, defect, tmp_path, monkeypatch, capsys):
    import fraglib_study.bench
    from fraglib_study.bench.common import merge

    path = tmp_path / "results.json"
    path.write_text(text)
    measured = []
    monkeypatch.setitem(fraglib_study.bench.BENCHMARKS, "eval", lambda: measured.append(1) or [])
    with pytest.raises(SystemExit) as e:
        fraglib_study.bench.main(["eval", "--out", str(path)])
    assert e.value.code == 2 and not measured and path.read_text() == text
    assert re.search(rf"{re.escape(str(path))}: {defect}", capsys.readouterr().err)
    with pytest.raises(ValueError, match=rf"{defect}.* This run's entries are kept in .*results.pending.json"):
        merge([MINE], path)  # damaged after measuring: the figures are kept
    assert json.loads(path.with_suffix(".pending.json").read_text()) == [MINE] and path.read_text() == text


def test_a_full_disk_leaves_the_register_as_it_was(tmp_path, monkeypatch):
    import errno
    import pathlib

    from fraglib_study.bench.common import merge

    path = tmp_path / "results.json"
    path.write_text(json.dumps([THEIRS], indent=1) + "\n")
    before = path.read_bytes()
    write = pathlib.Path.write_text

    def half(self, data, *args, **kwargs):
        write(self, data[: len(data) // 2], *args, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device", str(self))

    monkeypatch.setattr(pathlib.Path, "write_text", half)
    with pytest.raises(OSError, match="No space left"):
        merge([dict(THEIRS, value=9.0)], path)
    assert path.read_bytes() == before


def test_made_precomp_files_are_the_scan_layout_of_the_size_asked(tmp_path):
    """bench memory's made input: (n, regions, dim) float16 that np.load reads, five captions per image; and
    the importer takes it (the rows it writes are the made rows and their mean)."""
    from fraglib.data.precomp import read_precomp
    from fraglib_study.bench.scale import _made_precomp

    size = _made_precomp(tmp_path, 70, regions=2, dim=3)
    x = np.load(tmp_path / "train_ims.npy")
    assert x.shape == (70, 2, 3) and x.dtype == np.float16 and size == (tmp_path / "train_ims.npy").stat().st_size
    np.testing.assert_array_equal(x[64:], x[:6])  # one block of 64 images, repeated
    assert len((tmp_path / "train_caps.txt").read_text().splitlines()) == 350
    ds, rows, counts = read_precomp(tmp_path, ["train"])
    assert len(ds.sentences) == 350 and counts.tolist() == [3] * 70 and rows.shape == (210, 3)


def test_rehearsal_data_is_the_precomp_layout_and_its_regions_carry_the_captions_objects(tmp_path):
    """bench rehearsal's made data: SCAN's layout at the sizes asked (float16, 36 × 2,048, five captions per image,
    the same layouts and captions whatever the block size; the noise is drawn per block), and an image's first regions are its objects' codes (so that a
    system can learn from them), the rest noise."""
    from fraglib.data.synthetic import SynthConfig
    from fraglib_study.bench.rehearsal import DIM, REGIONS, _codes, _scenes, made_sizes, make_precomp
    from fraglib_study.params import read_params

    syn = read_params("params.yaml")["synthetic"]
    sizes = {"train": 12, "dev": 10, "test": 10}
    total = make_precomp(tmp_path / "a", sizes, syn, block=5)
    make_precomp(tmp_path / "b", sizes, syn, block=256)
    x = np.load(tmp_path / "a" / "train_ims.npy")
    assert x.shape == (12, REGIONS, DIM) and x.dtype == np.float16
    assert total == sum((tmp_path / "a" / f"{s}_ims.npy").stat().st_size for s in sizes)
    caps = (tmp_path / "a" / "train_caps.txt").read_text().splitlines()
    assert len(caps) == 60 and caps == (tmp_path / "b" / "train_caps.txt").read_text().splitlines()
    assert made_sizes(1.0) == {"train": 29_000, "dev": 1_014, "test": 1_000} and made_sizes(1e-6)["test"] == 10
    codes = _codes(0)
    scenes = _scenes(SynthConfig(**syn), "train", 0, 12, 0)
    for i, (img, (scene, objects, five)) in enumerate(zip(x.astype(np.float32), scenes)):
        assert caps[5 * i : 5 * i + 5] == five
        for j, o in enumerate(objects):
            code = codes[o["shape"]] + codes[o["colour"]] + 0.5 * codes[o["pattern"]]
            own = float(img[j] @ code) / float(code @ code)
            assert 0.9 < own < 1.1, (j, own)  # the region is its object's code plus noise orthogonal-ish to it
        noise = img[len(objects) + 2 :]
        assert np.abs(noise @ code / float(code @ code)).max() < 0.15
    assert all(c.endswith(".") for c in caps)


@pytest.mark.slow
def test_rehearsal_runs_the_own_data_commands_and_records_every_stage(tmp_path, monkeypatch):
    """bench rehearsal on a tiny made set: one entry per stage (make, import, parse, fragments, each run's training
    and re-scoring, the results page) with seconds and peak RSS, a training's epochs and test R@1, and kCCA above chance. Each stage
    runs in this process here (``fresh`` stubbed: a fresh process per stage is what the benchmark adds)."""
    import time

    from fraglib_study.bench import rehearsal
    from fraglib_study.bench.rehearsal import rehearse

    def here(fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        return time.perf_counter() - t0, 1.0, out

    monkeypatch.setattr(rehearsal, "fresh", here)
    from fraglib_study.params import read_params

    from conftest import TINY_EVALUATION

    params = read_params("params.yaml")
    params["evaluation"].update(TINY_EVALUATION, n_boot=20)
    params["systems"]["devise"].update(embed_dim=16)
    entries = rehearse(tmp_path / "w", {"train": 60, "dev": 20, "test": 20}, ("devise", "kcca"), 1, params)
    stages = [e["stage"] for e in entries]
    assert stages == [
        "make",
        "import",
        "parse",
        "fragments",
        "train_devise",
        "rescore_devise",
        "train_kcca",
        "rescore_kcca",
        "report",
    ]
    assert all(
        e["name"] == f"rehearsal_{e['stage']}_n100_s" and e["value"] >= 0 and e["peak_rss_mb"] > 0 for e in entries
    )
    by = {e["stage"]: e for e in entries}
    assert (
        by["train_devise"]["epochs"] == 1 and by["train_devise"]["epoch_s"] == by["train_devise"]["train_seconds"] > 0
    )
    assert by["train_kcca"]["test_r1"][0] > 3 * 5.0  # chance: 1 of 20 images
    assert not (tmp_path / "w" / "precomp").exists()  # the made input is removed once imported
    rescored = json.loads((tmp_path / "w" / "kcca.json").read_text())  # the 1K test and its 5 folds
    assert rescored["annotation"]["r1"] == by["train_kcca"]["test_r1"][0] and rescored["folds"]
    page = (tmp_path / "w" / "results.html").read_text()  # the results page of a user's own precomp data
    assert "Flickr30K-size rehearsal (100 images" in page and by["report"]["page_kb"] > 0 and by["report"]["runs"] == 2


def test_repeated_dataset_lists_each_picture_under_new_ids(tiny_synth):
    """The features' memory at 32x (bench memory, FRAGLIB_MEMORY_FEATURE_SCALES) lists each picture x times: ids of
    every copy are distinct, files and captions the original's, and every copy has its true boxes."""
    from fraglib.data import read_karpathy_json
    from fraglib.data.synthetic import synthetic_truth
    from fraglib_study.bench.scale import repeat_dataset

    src, _ = tiny_synth
    ds = read_karpathy_json(src / "dataset.json")
    truth = synthetic_truth(src / "ground_truth.json")
    big, big_truth = repeat_dataset(ds, truth, 3)
    n = len(ds.images)
    assert len(big.images) == 3 * n and len(big.sentences) == 3 * len(ds.sentences)
    assert len({im["imgid"] for im in big.images}) == 3 * n and len({s["sentid"] for s in big.sentences}) == 3 * len(
        ds.sentences
    )
    assert [im["filename"] for im in big.images] == [im["filename"] for im in ds.images] * 3
    assert [s["raw"] for s in big.sentences[-len(ds.sentences) :]] == [s["raw"] for s in ds.sentences]
    assert set(big_truth) == {im["imgid"] for im in big.images}
    last = big.images[-1]["imgid"]
    np.testing.assert_array_equal(big_truth[last], truth[ds.images[-1]["imgid"]])


def test_scaled_features_stage_writes_every_copy(tiny_synth, tmp_path):
    """bench memory's features stage at x2 on the first 5 pictures: 10 images in every cache, one per copy."""
    from fraglib.data.cache import FeatureCache
    from fraglib_study.bench.scale import _memory_features

    src, _ = tiny_synth
    _memory_features(str(src), str(tmp_path / "f"), 5, 2)
    stats = json.loads((tmp_path / "f" / "features_stats.json").read_text())
    assert stats["images"] == 10
    for view in ("rcnn", "groundtruth", "top36", "grid"):
        c = FeatureCache.load(tmp_path / "f" / f"{view}.npz")
        assert len(c.offsets) == 11 and len(set(c.imgids.tolist())) == 10
