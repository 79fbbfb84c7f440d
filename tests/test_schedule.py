"""The study's units on a Dask cluster (fraglib_study/experiments/schedule.py, pool.py): the same bytes as in this
process, resources and priorities as documented, and the pool's refusals before any work. The pool on a DVC
pipeline, end to end: tests/test_pipeline.py."""

from types import SimpleNamespace

import pytest

from fraglib.core.config import ConfigError
from fraglib.run.inputs import DataPaths

from conftest import tiny_params


def test_units_on_a_local_dask_cluster_give_the_bytes_of_units_in_this_process(tiny_full, tmp_path):
    """Two units at once (study.jobs 2: each in a fresh process, a Dask task) against one after another in this
    process (jobs 1), with the same threads (one: seed_threads gives both plans one thread a unit on one core)."""
    import torch

    from fraglib_study.experiments.study import run_study

    params = tiny_params()
    params["study"]["replicates"] = 2
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_study(DataPaths(tiny_full), "devise", params, tmp_path / "here")
        params["study"]["jobs"] = 2
        run_study(DataPaths(tiny_full), "devise", params, tmp_path / "dask")
    finally:
        torch.set_num_threads(threads)
    for unit in ("seed0", "seed0r1"):
        for f in ("ranks.json", "history.csv"):
            a = (tmp_path / "here" / "seeds" / unit / f).read_bytes()
            assert a == (tmp_path / "dask" / "seeds" / unit / f).read_bytes(), (unit, f)
    assert (tmp_path / "here" / "metrics.json").read_bytes() == (tmp_path / "dask" / "metrics.json").read_bytes()


def test_a_unit_that_fails_names_itself_and_a_unit_no_worker_can_take_is_refused(tiny_full, tmp_path):
    from fraglib_study.experiments import schedule
    from fraglib_study.experiments.study import plan_study

    plan = plan_study(DataPaths(tmp_path / "no_such_data"), "devise", tiny_params(), tmp_path / "out")
    with schedule.cluster(None, slots=1) as client:
        ((_, _, error),) = schedule.wait(schedule.submit_all(client, [(0, plan.work[0], 1, 1.0)]))
        assert isinstance(error, RuntimeError) and "'seed 0' of 'devise' failed" in str(error)
        with pytest.raises(ConfigError, match="offer at most 1 'cores' and a unit needs 2"):
            schedule.submit_all(client, [(0, plan.work[0], 2, 1.0)])


def test_priority_puts_many_core_units_first_then_the_longest():
    from fraglib_study.experiments.schedule import priority

    order = sorted([(1, 5.0), (2, 1.0), (1, 80.0), (2, 30.0)], key=lambda u: -priority(*u))
    assert order == [(2, 30.0), (2, 1.0), (1, 80.0), (1, 5.0)]


def test_recorded_seconds_read_timing_else_epochs(tmp_path):
    from fraglib_study.experiments.schedule import recorded_seconds

    (tmp_path / "timing.json").write_text('{"train_seconds": 12.5, "eval_seconds": 2.5}')
    assert recorded_seconds(tmp_path, 6) == 15.0
    assert recorded_seconds(tmp_path / "none", 6) == 6.0
    (tmp_path / "timing.json").write_text("{not json")
    assert recorded_seconds(tmp_path, 4) == 4.0


def test_the_pool_trains_only_study_commands_from_the_root(tmp_path, monkeypatch):
    from fraglib_study.experiments.pool import study_argv

    monkeypatch.chdir(tmp_path)
    ok = SimpleNamespace(
        addressing="train@a", cmd='python -m fraglib_study study --run a --dataset-dir "d/f{seed}"', wdir="."
    )
    assert study_argv(ok) == ["--run", "a", "--dataset-dir", "d/f{seed}"]
    with pytest.raises(ConfigError, match="train@b: its command is not a plain"):
        study_argv(SimpleNamespace(addressing="train@b", cmd="python -m fraglib_study captions --run-dir x", wdir="."))
    with pytest.raises(ConfigError, match="train@c: its command is not"):
        study_argv(SimpleNamespace(addressing="train@c", cmd=["python", "x"], wdir="."))
    for shell in ("$HOME", "~/d", "x; rm -rf y", "x && y", "x > log", "`x`"):  # what shlex would read otherwise
        with pytest.raises(ConfigError, match="train@e: its command is not a plain"):
            study_argv(SimpleNamespace(addressing="train@e", cmd=f"{ok.cmd} --out {shell}", wdir="."))
    (tmp_path / "sub").mkdir()
    with pytest.raises(ConfigError, match="train@d: it runs in sub, not in the repository's root"):
        study_argv(SimpleNamespace(addressing="train@d", cmd=ok.cmd, wdir="sub"))


def test_a_stage_command_runs_as_dvc_runs_it_and_asks_for_its_cores(tmp_path):
    """run_command: the stage's non-persistent outputs removed first (a file, a folder), then its command in a shell
    in its folder; a failure names the stage. stage_cores: meta.cores, else every slot, at most the slots."""
    from fraglib_study.experiments.pool import run_command, stage_cores

    (tmp_path / "old.txt").write_text("stale")
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "a.html").write_text("stale")
    outs = [str(tmp_path / "old.txt"), str(tmp_path / "pages"), str(tmp_path / "never_made")]
    run_command("s", "test ! -e old.txt && test ! -e pages && echo new > out.txt", str(tmp_path), outs)
    assert (tmp_path / "out.txt").read_text() == "new\n"
    with pytest.raises(RuntimeError, match="stage 'bad' failed: `exit 3` exited with 3"):
        run_command("bad", "exit 3", str(tmp_path), [])
    stage = lambda meta: SimpleNamespace(addressing="x", meta=meta)  # noqa: E731
    assert [stage_cores(stage(m), 2) for m in (None, {}, {"cores": 1}, {"cores": 8})] == [2, 2, 1, 2]
    for bad in (0, "1", True):
        with pytest.raises(ConfigError, match="x: meta.cores="):
            stage_cores(stage({"cores": bad}), 2)
