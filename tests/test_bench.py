"""The benchmark package: the epoch table's entries are complete and self-consistent (nothing here
asserts a time — benchmarks measure, tests check what is reported)."""
import pytest

from fraglib.bench import BENCHMARKS, OPT_IN


@pytest.mark.slow
def test_epoch_entries_count_the_work_and_the_critical_path():
    from fraglib.bench.systems import bench_epoch

    got = {e["name"]: e for e in bench_epoch(["devise", "dtrnn"], repeats=1)}
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


def test_the_default_list_holds_the_epoch_table_and_names_are_unique():
    assert "epoch" in BENCHMARKS
    assert not set(BENCHMARKS) & set(OPT_IN)
