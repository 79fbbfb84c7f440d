"""The benchmark package: the epoch table's entries are complete and self-consistent (nothing here
asserts a time — benchmarks measure, tests check what is reported)."""
import pytest

from fraglib.bench import BENCHMARKS, OPT_IN


@pytest.mark.slow
def test_epoch_entries_count_the_work_and_the_critical_path():
    from fraglib.bench.systems import bench_epoch

    got = {e["name"].removesuffix("_cuda"): e for e in bench_epoch(["devise", "dtrnn"], repeats=1)}
    gpu = got.pop("epoch_gpu", None)                                    # present (value None) without a GPU
    assert gpu is None or (gpu["value"] is None and "systems_device" in gpu["note"])
    assert set(got) == {"epoch_devise", "epoch_dtrnn"}
    for e in got.values():
        assert {"name", "value", "unit", "reference", "ratio", "machine"} <= set(e)
        assert e["value"] > 0 and e["gflop"] > 0 and e["reference"] > 0 and e["steps"] >= 40   # 4,000 pairs, batches of 100
        # ratio = achieved FLOP/s / the same process's matmul FLOP/s (rounded figures: 5 %)
        assert e["ratio"] == pytest.approx(e["gflop"] / e["value"] / e["reference"], rel=0.05)
    assert "critical_path_s" not in got["epoch_devise"]                 # no recurrence
    tree = got["epoch_dtrnn"]
    assert tree["critical_path_s"] > 0 and tree["sequential"]["levels_all_negatives"] >= 2
    assert tree["sequential"]["levels_batch_mean"] == 0                 # Eq. 5 reads the batch by position only


def test_socher_entries_time_every_encoder_and_the_recursion():
    from fraglib.bench.systems import bench_socher

    got = {e["name"]: e for e in bench_socher(epochs=1, n_images=20, trees=20)}
    assert sorted(got) == ["socher_epoch_s_chain", "socher_epoch_s_ctrnn", "socher_epoch_s_dtrnn", "socher_epoch_s_sdtrnn",
                           "socher_tree_encoder_speedup"]
    assert all(e["value"] > 0 for e in got.values())
    e = got["socher_tree_encoder_speedup"]
    assert e["trees"] == 20 and e["batched_ms"] > 0 and e["recursive_ms"] > 0 and e["nodes"] > 20


@pytest.mark.slow
def test_a_closed_form_fit_reports_its_solver_bound():
    """kCCA's fit is mostly LAPACK (uncounted FLOPs): its entry says how long the decompositions and
    products took inside the fit, and that part is no more than the fit itself."""
    from fraglib.bench.systems import bench_epoch

    e = next(e for e in bench_epoch(["kcca"], repeats=1) if e["name"].startswith("epoch_kcca"))
    assert e["closed_form_fit"] and e["steps"] == 0 and e["value"] > 0
    parts = e["sequential"]
    assert parts["eigh_s"] > 0 and parts["cholesky_s"] > 0 and parts["mm_s"] > 0
    assert sum(parts.values()) == pytest.approx(e["critical_path_s"], abs=0.01)
    assert e["critical_path_s"] <= 1.2 * e["value"]                      # a part of the fit (profiler: +20 % slack)
    assert e["seconds_over_critical_path"] == pytest.approx(e["value"] / e["critical_path_s"], rel=0.05)


@pytest.mark.slow
def test_profile_entries_say_where_an_epoch_goes():
    from fraglib.bench.systems import bench_profile

    (e,) = bench_profile(["devise"])
    assert e["name"].removesuffix("_cuda") == "profile_devise" and e["steps"] >= 40
    assert e["ms_per_step"] == pytest.approx(e["value"] / e["steps"] * 1000, rel=0.01)
    ops = dict((name, ms) for name, ms, _ in e["top_self_cpu_ms_per_step"])
    assert len(ops) == 10 and any(k.startswith("aten::") for k in ops) and all(ms >= 0 for ms in ops.values())
    assert e["scalar_reads_per_step"] >= 1                              # the loss parts read back per step, at least


def _exits_silently(q) -> None:
    raise SystemExit(3)


def test_a_benchmark_process_that_dies_is_named_not_waited_for():
    import multiprocessing as mp

    from fraglib.bench.systems import _result_of

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_exits_silently, args=(q,))
    p.start()
    with pytest.raises(RuntimeError, match="epoch att_top36: .* code 3"):
        _result_of(p, q, "epoch att_top36")


def test_the_default_list_holds_the_epoch_table_and_names_are_unique():
    assert "epoch" in BENCHMARKS
    assert not set(BENCHMARKS) & set(OPT_IN)
