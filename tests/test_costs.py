"""The cost table (fraglib_study/audit/costs.py) on made files: per-unit timings beside the runs, make targets' records, and the
clock the Makefile records them with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fraglib_study.audit import costs
from fraglib_study.report.tables import html

TRAIN = "python -m fraglib_study study --run ${{item}} {dataset} --dataset-dir data/x --out runs/{study}/${{item}}"


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def project(root: Path) -> Path:
    """Two studies (synthetic: the root dvc.yaml; pascal1k), three timed units of a fragment run on the CPU (one
    without its machine), one of a devise run on a GPU and on the CPU each, and nothing timed on Pascal1K."""
    (root / "dvc.yaml").write_text(  # a study's title: its train stage's meta (fraglib_study.report.registry)
        "stages:\n  train:\n    foreach: [full]\n    do:\n      meta: {title: Synthetic benchmark}\n      cmd: "
        + TRAIN.format(dataset="", study="synthetic")
    )
    (root / "studies" / "pascal1k").mkdir(parents=True)
    (root / "studies" / "pascal1k" / "dvc.yaml").write_text(
        "stages:\n  train:\n    foreach: [full]\n    do:\n      meta: {title: 'Pascal1K, five stratified splits'}\n"
        "      cmd: " + TRAIN.format(dataset="--dataset pascal1k", study="pascal1k")
    )
    cpu = {"device": "cpu", "machine": "AMD EPYC; 2 cores", "threads": 2, "commit": "abc1234", "eval_seconds": 4.0}
    runs = root / "runs" / "synthetic"
    for run, system in (("full", "fragment"), ("fr_best", "fragment"), ("devise", "devise")):
        write_json(runs / run / "metrics.json", {"system": system})
    for unit, seconds, date in (("seed0", 100.0, "2026-11-20"), ("seed0r1", 300.0, "2026-11-25")):
        write_json(
            runs / "full" / "seeds" / unit / "timing.json", dict(cpu, train_seconds=seconds, epochs=10, date=date)
        )
    write_json(
        runs / "fr_best" / "seeds" / "seed0" / "timing.json", {"device": "cpu", "train_seconds": 200.0, "epochs": 5}
    )
    gpu = {"device": "cuda:0 NVIDIA H100", "machine": "H100 box", "commit": "def5678", "date": "2026-11-26"}
    write_json(runs / "devise" / "seeds" / "seed0" / "timing.json", dict(gpu, train_seconds=30.0, epochs=10))
    write_json(runs / "devise" / "seeds" / "seed1" / "timing.json", dict(cpu, train_seconds=90.0, epochs=10))
    write_json(root / "runs" / "pascal1k" / "full" / "metrics.json", {"system": "fragment"})  # trained before timings
    write_json(runs / "kcca" / "metrics.json", {"system": "kcca"})  # a closed-form fit: the trainer's clock is not run
    write_json(runs / "kcca" / "seeds" / "seed0" / "timing.json", dict(cpu, train_seconds=None, epochs=None))
    return root


def test_one_training_is_the_median_per_system_and_device_kind(tmp_path):
    table = costs.cost_table(project(tmp_path))
    assert table.header == costs.HEADER
    rows = {r[0] + " " + r[1]: r for r in table.rows}
    cpu = rows["one training: Synthetic benchmark, `fragment` CPU"]
    # units 100, 300 (10 epochs) and 200 (5 epochs): median 200 s, per epoch median of 10, 30, 40 s
    assert cpu[2:5] == ("3.3 min + 4.0 s test evaluation", "30.0 s", "3 units of 2 runs")
    assert cpu[5:] == ("AMD EPYC; 2 cores (2 threads)", "abc1234, 2026-11-25")  # the newest unit's
    assert rows["one training: Synthetic benchmark, `devise` GPU"][2:] == (
        "30.0 s",
        "3.0 s",
        "1 unit of 1 run",
        "H100 box",
        "def5678, 2026-11-26",
    )
    assert rows["one training: Synthetic benchmark, `devise` CPU"][2] == "90.0 s + 4.0 s test evaluation"
    assert rows["one training: Synthetic benchmark, `kcca` CPU"][2:4] == ("not clocked + 4.0 s test evaluation", "—")
    assert rows["one training: Pascal1K, five stratified splits —"][2] == costs.NOT_MEASURED  # runs without timings


def test_the_folds_have_rows_and_a_run_after_the_papers_its_own(tmp_path):
    """A study's k-fold runs are a study of their own here; a run marked ``after_papers`` is not pooled with its
    system's other runs."""
    root = project(tmp_path)
    (root / "studies" / "pascal1k" / "dvc.yaml").write_text(
        "stages:\n  train:\n    foreach: [full]\n    do:\n      meta: {title: 'Pascal1K, five stratified splits'}\n"
        "      cmd: "
        + TRAIN.format(dataset="--dataset pascal1k", study="pascal1k")
        + "\n  folds:\n    foreach: [full]\n    do:\n      cmd: python -m fraglib_study study --run ${item} --dataset pascal1k"
        " --folds --dataset-dir data/f --out runs/pascal1k_folds/${item}"
    )
    (root / "params.yaml").write_text("runs:\n  gpo: {system: vse, after_papers: true}\n  vsepp: {system: vse}\n")
    folds = root / "runs" / "pascal1k_folds"
    for run, seconds in (("vsepp", 60.0), ("gpo", 120.0)):
        write_json(folds / run / "metrics.json", {"system": "vse"})
        write_json(
            folds / run / "seeds" / "seed0" / "timing.json", {"device": "cpu", "train_seconds": seconds, "epochs": 15}
        )
    rows = {r[0]: r for r in costs.cost_table(root).rows}
    assert rows["one training: Pascal1K, k-fold protocol, `vse`"][2:5] == ("60.0 s", "4.0 s", "1 unit of 1 run")
    assert rows["one training: Pascal1K, k-fold protocol, `vse` (`gpo`)"][2:5] == (
        "2.0 min",
        "8.0 s",
        "1 unit of 1 run",
    )


def test_every_target_has_a_row_measured_or_not(tmp_path):
    root = project(tmp_path)
    record = {"target": "make pascal1k", "seconds": 9000.0, "commit": "abc1234", "date": "2026-11-27"}
    record.update(device="cpu", machine="m", threads=2)
    write_json(root / costs.COSTS, [record, {"target": "make bench", "seconds": 60.0}])
    rows = {r[0]: r for r in costs.cost_table(root).rows if r[0].startswith("`")}
    assert list(rows) == [f"`{t}` in all" for t in (*costs.TARGETS, "make bench")]
    assert rows["`make pascal1k` in all"][1:] == ("CPU", "2.5 h", "—", "—", "m (2 threads)", "abc1234, 2026-11-27")
    assert rows["`make bench` in all"][1:] == ("unknown", "60.0 s", "—", "—", "not recorded", "not recorded")
    assert [r[2] for t, r in rows.items() if t not in ("`make pascal1k` in all", "`make bench` in all")] == [
        costs.NOT_MEASURED
    ] * 5
    page = html(costs.cost_blocks(root))
    assert page.startswith("<h2>What it costs</h2>") and "<td>not measured yet</td>" in page


def test_the_clock_records_a_target_and_replaces_only_its_record(tmp_path, monkeypatch):
    import fraglib.core.device

    monkeypatch.setattr(
        fraglib.core.device, "hardware", lambda d: {"device": "cpu", "machine": "this machine", "threads": 1}
    )
    out, clock = tmp_path / "costs.json", tmp_path / ".clock-make-test"
    other = {"target": "make test", "seconds": 2.0, "machine": "another machine"}
    write_json(out, [{"target": "make", "seconds": 700.0}, other, {"target": "make test", "seconds": 1.0,
                                                                    "machine": "this machine"}])  # fmt: skip
    costs.main(["start", str(clock)])
    began = json.loads(clock.read_text())
    assert {"start", "commit", "date"} <= set(began)
    costs.main(["stop", str(clock), "make test", "--out", str(out)])
    records = {(e["target"], e.get("machine")): e for e in json.loads(out.read_text())}
    assert len(records) == 3 and records["make", None] == {"target": "make", "seconds": 700.0}
    assert records["make test", "another machine"] == other  # another CPU's time of the same target is kept
    new = records["make test", "this machine"]
    assert 0 <= new["seconds"] < 60 and new["date"] == began["date"]
    rows = [r for r in costs.target_rows(costs.read_costs(out)) if r[0] == "`make test` in all"]
    assert [(r[2], r[5]) for r in rows] == [
        ("2.0 s", "another machine"),
        (costs.duration(new["seconds"]), "this machine (1 thread)"),
    ]
    assert (new["device"], new["machine"], new["threads"]) == ("cpu", "this machine", 1)
    assert not clock.exists()
    with pytest.raises(SystemExit):  # stop without start: the clock file is named
        costs.main(["stop", str(clock), "make test", "--out", str(out)])


@pytest.mark.parametrize(
    "timing,match",
    [
        (
            {"train_seconds": "slow", "epochs": 3},
            r"train_seconds='slow'; expected a finite non-negative number or null",
        ),
        ({"train_seconds": 3.0, "epochs": 0}, r"timing.json: epochs=0; expected a finite positive number or null"),
        ([1, 2], r"timing.json: not a timing record \(a JSON list"),
    ],
)
def test_a_damaged_timing_is_named(tmp_path, timing, match):
    write_json(tmp_path / "full" / "seeds" / "seed0" / "timing.json", timing)
    with pytest.raises(ValueError, match=match):
        costs.read_timings(tmp_path)


def test_a_damaged_costs_file_is_named(tmp_path):
    write_json(tmp_path / "costs.json", {"make": 3})
    with pytest.raises(ValueError, match=r"costs.json: expected a JSON list of target records, got a dict"):
        costs.read_costs(tmp_path / "costs.json")
    write_json(tmp_path / "costs.json", [{"target": "make", "seconds": -1}])
    with pytest.raises(ValueError, match=r"costs.json: seconds=-1; expected a finite non-negative number"):
        costs.read_costs(tmp_path / "costs.json")


def test_device_kinds_and_durations():
    assert [costs.device_kind(d) for d in ("cpu", "cuda:1 A100", "mps", "")] == ["CPU", "GPU", "GPU", "unknown"]
    assert [costs.duration(s) for s in (59.94, 150, 7300)] == ["59.9 s", "2.5 min", "2.0 h"]


def test_the_makefile_clocks_every_target_of_the_table():
    """Each target the table lists starts the clock before its work and stops it after (``make`` is ``repro``)."""
    from conftest import ROOT

    recipes: dict[str, list[str]] = {}
    target = None
    for line in (ROOT / "Makefile").read_text().splitlines():
        if line and not line[0].isspace() and ":" in line and "=" not in line.split(":")[0]:
            target = line.split(":")[0].strip()
            recipes[target] = []
        elif line.startswith("\t") and target:
            recipes[target].append(line.strip())
    for name in costs.TARGETS:
        lines = recipes["repro" if name == "make" else name.split()[1]]
        assert lines[0] == f"$(call clock,start,{name})" and lines[-1] == f"$(call clock,stop,{name})", name
        assert len(lines) == 3, f"{name}: one command between start and stop: {lines}"


def test_start_writes_only_clock_files(tmp_path, capsys):
    register = tmp_path / "costs.json"
    write_json(register, [{"target": "make", "seconds": 60.0, "machine": "m"}])
    before = register.read_bytes()
    with pytest.raises(SystemExit) as exc:
        costs.main(["start", str(register)])
    assert exc.value.code == 2
    assert "refusing to replace it with a clock file" in capsys.readouterr().err
    assert register.read_bytes() == before
    clock = tmp_path / ".clock-make"
    costs.main(["start", str(clock)])
    first = json.loads(clock.read_text())["start"]
    costs.main(["start", str(clock)])  # a clock left by a failed target: replaced
    assert json.loads(clock.read_text())["start"] >= first


@pytest.mark.parametrize("began", [float("nan"), -5.0, 1e300, "yesterday", True])
def test_stop_refuses_a_clock_that_is_not_a_time(tmp_path, began, capsys):
    register = tmp_path / "costs.json"
    write_json(register, [{"target": "make", "seconds": 60.0, "machine": "m"}])
    before = register.read_bytes()
    clock = tmp_path / ".clock-make"
    clock.write_text(json.dumps({"start": began}))
    with pytest.raises(SystemExit) as exc:
        costs.main(["stop", str(clock), "make", "--out", str(register)])
    assert exc.value.code == 2
    assert str(clock) in capsys.readouterr().err
    assert register.read_bytes() == before
    assert all(isinstance(e["seconds"], float) for e in costs.read_costs(register).values())


def test_a_folder_where_a_clock_or_the_register_belongs_is_named(tmp_path, capsys):
    (tmp_path / "clock").mkdir()
    (tmp_path / "reg").mkdir()
    for argv in (["start", str(tmp_path / "clock")], ["stop", str(tmp_path / "clock"), "make"]):
        with pytest.raises(SystemExit):
            costs.main(argv)
        assert "a folder, not a clock file" in capsys.readouterr().err
    with pytest.raises(ValueError, match="a folder, not the cost register"):
        costs.read_costs(tmp_path / "reg")
