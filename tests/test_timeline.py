"""`make`'s timeline (fraglib_study/bench/timeline.py): the recorder passes a command's output and exit status through
and writes its stages in order, the CPU shares and the idle-core fraction; DVC's lines are parsed; a record draws.
No assertion depends on the machine's speed: times are only ordered, shares only in [0, 1]."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fraglib_study.bench import timeline as T
from fraglib_study.report.plots import stage_label, timeline_lanes

FAKE_DVC = textwrap.dedent(
    """
    import sys, time
    print("Running stage 'a':", flush=True)
    print("> python -m a", flush=True)
    time.sleep(0.3)
    print("Updating lock file 'dvc.lock'", flush=True)
    print("Stage 'c' didn't change, skipping", flush=True)
    print("Running stage 'b':", flush=True)
    print("b writes to stderr", file=sys.stderr, flush=True)
    time.sleep(0.3)
    sys.exit(3)
    """
)


def _fake(tmp_path: Path) -> list[str]:
    script = tmp_path / "fake_dvc.py"
    script.write_text(FAKE_DVC)
    return [sys.executable, str(script)]


def test_record_passes_the_output_and_the_status_through_and_writes_the_stages(tmp_path, capfd):
    out = tmp_path / "timeline.json"
    with pytest.raises(SystemExit) as exc:
        T.main(
            ["record", "--out", str(out), "--interval", "0.1", "--runs", str(tmp_path / "runs"), "--", *_fake(tmp_path)]
        )
    assert exc.value.code == 3
    got = capfd.readouterr()
    assert got.out == (
        "Running stage 'a':\n> python -m a\nUpdating lock file 'dvc.lock'\nStage 'c' didn't change, skipping\n"
        "Running stage 'b':\n"
    )  # byte for byte: nothing of ours on stdout
    assert got.err.startswith("b writes to stderr\n") and "recorded in" in got.err
    rec = T.read_record(out)
    assert rec["status"] == 3 and rec["failed"] is True and rec["command"][1].endswith("fake_dvc.py")
    assert [(s["name"], s["status"]) for s in rec["stages"]] == [("a", "ran"), ("c", "skipped"), ("b", "ran")]
    a, c, b = rec["stages"]
    assert 0 <= a["check_from"] <= a["start"] < a["end"] <= c["start"] == c["end"] <= b["start"] < b["end"]
    assert b["end"] <= rec["seconds"] and rec["cores"] == os.cpu_count() and rec["units"] == []
    assert c["idle_core_fraction"] is None  # no time: no share
    if T.cpu_counters() is None:
        pytest.skip("no /proc/stat: no CPU counters to check")
    # an interval in which the kernel's CPU counters did not tick (a loaded machine) has no shares: None, never wrong
    assert any(s[1] is not None for s in rec["samples"])
    assert all(s[1:] == [None, None] or (0 <= s[1] <= 1 and 0 <= s[2] <= 1) for s in rec["samples"])
    assert [s[0] for s in rec["samples"]] == sorted(s[0] for s in rec["samples"])
    assert 0 <= rec["idle_core_fraction"] <= 1 and 0 <= rec["command_idle_core_fraction"] <= 1
    assert rec["command_busy"] <= rec["busy"] + 0.05  # the command's processes are some of the machine's
    for r in (a, b):  # a 0.3 s stage on a loaded machine may see no sample of its own: no share then, never a wrong one
        fractions = (r["idle_core_fraction"], r["command_idle_core_fraction"])
        assert fractions == (None, None) or all(0 <= x <= 1 for x in fractions)


def test_record_writes_the_record_when_the_command_cannot_start(tmp_path, capfd):
    out = tmp_path / "timeline.json"
    with pytest.raises(SystemExit) as exc:
        T.main(["record", "--out", str(out), "--", str(tmp_path / "no-such-command")])
    assert exc.value.code == 127
    assert "no-such-command" in capfd.readouterr().err
    rec = T.read_record(out)
    assert rec["status"] == 127 and rec["failed"] and rec["stages"] == [] and "error" in rec


def test_record_replaces_its_own_record_only(tmp_path, capfd):
    """--out is checked before the command runs: an earlier record is replaced, any other file refused."""
    out = tmp_path / "timeline.json"
    marker = tmp_path / "ran"
    touch = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    T.main(["record", "--out", str(out), "--", *touch])
    first = T.read_record(out)
    marker.unlink()
    T.main(["record", "--out", str(out), "--", *touch])
    assert marker.exists() and T.read_record(out)["start_unix"] >= first["start_unix"]
    marker.unlink()
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    with pytest.raises(SystemExit) as exc:
        T.main(["record", "--out", str(notes), "--", *touch])
    assert exc.value.code == 2 and "refusing to replace" in capfd.readouterr().err
    assert notes.read_text() == '{"mine": 1}' and not marker.exists()
    T.main(["record", "--out", str(notes), "--overwrite", "--", *touch])
    assert T.read_record(notes)["status"] == 0 and marker.exists()
    with pytest.raises(SystemExit):
        T.main(["record", "--out", str(out)])  # no command
    assert "no command" in capfd.readouterr().err


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="no pseudo-terminals here")
def test_a_command_under_a_terminal_still_sees_one(tmp_path):
    """Where `make` runs in a terminal, dvc and its stages print to a pseudo-terminal (progress bars, line
    buffering, colours as without the recorder); the bytes reach the terminal as written."""
    master, slave = os.openpty()
    probe = "import sys; print('tty', sys.stdout.isatty(), sys.stderr.isatty()); print(\"Running stage 'x':\")"
    cmd = [
        sys.executable,
        "-m",
        "fraglib_study",
        "bench",
        "timeline",
        "record",
        "--out",
        str(tmp_path / "t.json"),
        "--",
    ]
    run = subprocess.run([*cmd, sys.executable, "-c", probe], stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert run.returncode == 0
    assert b"tty True True" in seen, seen
    assert [s["name"] for s in T.read_record(tmp_path / "t.json")["stages"]] == ["x"]


# a captured `dvc repro` log (dvc 3.x): colour codes, a terminal's \r\n, study addresses and foreach instances
DVC_LOG = (
    "Stage 'synthetic' didn't change, skipping\r\n"
    "'data/pascal1k.dvc' didn't change, skipping\r\n"
    "\x1b[32mRunning stage 'features':\x1b[39m\r\n"
    "> python -m fraglib.vision features --dataset-dir data/synthetic\r\n"
    "features: 100%|██████████| 1400/1400 [01:02<00:00]\r"
    "Updating lock file 'dvc.lock'\r\n"
    "\r\n"
    "Running stage 'studies/synthetic/dvc.yaml:train@full':\n"
    "> python -m fraglib_study study --run full\n"
    "Updating lock file 'studies/synthetic/dvc.lock'\n"
    "Stage 'captions@full' is cached - skipping run, checking out outputs\n"
    "Running stage 'summary':\n"
    "ERROR: failed to reproduce 'summary': failed to run: python -m fraglib_study summary, exited with 1\n"
)


def test_the_parser_reads_a_dvc_log():
    assert T.parse_log(DVC_LOG) == [
        (0, "skipped", "synthetic"),
        (2, "ran", "features"),
        (5, "lock", "dvc.lock"),  # after the progress bar's \r
        (7, "ran", "studies/synthetic/dvc.yaml:train@full"),
        (9, "lock", "studies/synthetic/dvc.lock"),
        (10, "restored", "captions@full"),
        (11, "ran", "summary"),
    ]
    timed = [(10.0 * (i + 1), kind, name) for i, kind, name in T.parse_log(DVC_LOG)]
    stages = T.stages_from(timed, end=200.0)
    assert [(s["name"], s["check_from"], s["start"], s["end"]) for s in stages] == [
        ("synthetic", 0.0, 10.0, 10.0),  # skipped: checking it is all it cost
        ("features", 10.0, 30.0, 60.0),  # ran until its lock file was written
        ("studies/synthetic/dvc.yaml:train@full", 60.0, 80.0, 100.0),
        ("captions@full", 100.0, 110.0, 120.0),  # restored: until the next stage's line
        ("summary", 120.0, 120.0, 200.0),  # failed, no lock file: until the command ended
    ]
    assert stage_label("studies/synthetic/dvc.yaml:train@full") == "synthetic:train@full"
    assert stage_label("features") == "features"


def test_shares_interpolate_the_counters():
    # (t, busy ticks, total ticks, the command's ticks) on 2 cores at 100 ticks/s
    rows = [(0.0, 0, 0, 0), (1.0, 100, 200, 50), (2.0, 300, 400, 150)]
    assert T.shares(rows, 0.0, 2.0) == (0.75, 0.375)
    assert T.shares(rows, 1.0, 2.0) == (1.0, 0.5)
    assert T.shares(rows, 0.5, 1.5) == (0.75, 0.375)
    assert T.shares(rows, 1.0, 1.0) == (None, None) and T.shares(rows[:1], 0.0, 1.0) == (None, None)


def test_units_written_during_the_command(tmp_path):
    from datetime import datetime, timezone

    start = datetime(2026, 11, 1, 12, 0, 0, tzinfo=timezone.utc).timestamp()

    def unit(run, seed, date, train=100.0, ev=10.0):
        f = tmp_path / "runs" / "synthetic" / run / "seeds" / seed / "timing.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps({"train_seconds": train, "eval_seconds": ev, "threads": 1, "date": date}))

    unit("full", "seed0", "2026-11-01T12:05:00Z")  # during
    unit("full", "seed1", "2026-11-01T11:00:00Z")  # an earlier make's
    unit("bow", "seed0", "2026-11-01T12:03:00Z", train=None)  # not clocked: the test only
    (tmp_path / "runs" / "synthetic" / "bow" / "seeds" / "seed1").mkdir(parents=True)
    (tmp_path / "runs" / "synthetic" / "bow" / "seeds" / "seed1" / "timing.json").write_text("{cut")
    got = T.units_written(tmp_path / "runs", start, start + 600)
    assert [(Path(u["run"]).name, u["unit"], u["start"], u["end"]) for u in got] == [
        ("bow", "seed0", 170.0, 180.0),
        ("full", "seed0", 190.0, 300.0),
    ]
    assert timeline_lanes(
        [{"start": 0, "end": 5}, {"start": 1, "end": 3}, {"start": 4, "end": 9}, {"start": 5, "end": 6}]
    ) == [
        0,
        1,
        1,
        0,
    ]


def test_the_pool_s_stages_side_by_side_end_at_their_own_lines():
    """The pool's lines (fraglib_study/experiments/pool.py): stages that overlap each end at their own `Finished
    stage` line; `dvc repro` after it, skipping them, adds nothing."""
    log = (
        "Running stage 'synthetic':\n"
        "Finished stage 'synthetic'\n"
        "Running stage 'train@a': 2 training unit(s)\n"
        "Running stage 'data_report':\n"
        "Finished stage 'data_report'\n"
        "Finished stage 'train@a'\n"
        "Updating lock file 'dvc.lock'\n"
        "Stage 'train@a' didn't change, skipping\n"
        "Stage 'index' didn't change, skipping\n"
    )
    timed = [(10.0 * (i + 1), kind, name) for i, kind, name in T.parse_log(log)]
    stages = T.stages_from(timed, end=100.0)
    assert [(s["name"], s["status"], s["start"], s["end"]) for s in stages] == [
        ("synthetic", "ran", 10.0, 20.0),
        ("train@a", "ran", 30.0, 60.0),  # beside data_report
        ("data_report", "ran", 40.0, 50.0),
        ("index", "skipped", 90.0, 90.0),  # only dvc repro's line: skipped
    ]


def _record(tmp_path: Path) -> Path:
    stages = T.stages_from([(1.0, "skipped", "synthetic"), (3.0, "ran", "features"), (50.0, "lock", "dvc.lock"),
                            (52.0, "ran", "studies/synthetic/dvc.yaml:train@full")], 300.0)  # fmt: skip
    rows = [(float(t), 150 * t, 200 * t, 60 * t) for t in range(0, 301, 10)]
    for s in stages:
        s["idle_core_fraction"] = T._idle(T.shares(rows, s["start"], s["end"])[0])
        s["seconds"] = s["end"] - s["start"]
    rec = {
        "kind": T.KIND,
        "command": ["dvc", "repro"],
        "status": 0,
        "failed": False,
        "start": "2026-11-01T12:00:00Z",
        "seconds": 300.0,
        "cores": 2,
        "machine": "AMD EPYC (AVX2), 2 logical cores",
        "idle_core_fraction": 0.25,
        "command_idle_core_fraction": 0.7,
        "stages": stages,
        "units": [
            {"run": "runs/synthetic/full", "unit": "seed0", "start": 60.0, "end": 200.0},
            {"run": "runs/synthetic/full", "unit": "seed1", "start": 62.0, "end": 280.0},
        ],
        "samples": [[rows[i + 1][0], 0.75, 0.3] for i in range(len(rows) - 1)],
    }
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(rec))
    return path


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_draw_writes_a_figure(tmp_path, capsys, suffix, magic):
    path = _record(tmp_path)
    fig = tmp_path / "fig" / f"timeline{suffix}"
    T.main(["draw", str(path), "--out", str(fig)])
    assert fig.read_bytes().startswith(magic)
    assert "5.0 min on 2 cores, 2 of 3 stages run; idle cores: 25% of the machine" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:  # an existing figure: only with --overwrite
        T.main(["draw", str(path), "--out", str(fig)])
    assert exc.value.code == 2
    T.main(["draw", str(path), "--out", str(fig), "--overwrite"])


def test_draw_refuses_what_is_not_a_record(tmp_path, capsys):
    bad = tmp_path / "results.json"
    bad.write_text("[]")
    with pytest.raises(SystemExit) as exc:
        T.main(["draw", str(bad), "--out", str(tmp_path / "t.svg")])
    assert exc.value.code == 2 and "not a timeline record" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        T.main(["draw", str(bad), "--out", str(tmp_path / "t.txt")])
    assert not (tmp_path / "t.svg").exists()


def test_the_recorder_starts_without_torch():
    """`make` runs the recorder before dvc: the package's benchmarks (torch) load only when a benchmark runs."""
    from conftest import ROOT

    code = "import sys, fraglib_study.bench, fraglib_study.bench.timeline; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


def test_a_term_sent_to_the_recorder_ends_the_command_and_the_record_says_so(tmp_path):
    """`make` killed (TERM to the recorder alone): the command gets it, the record is written, and the recorder ends
    by the same signal, as the command did."""
    import signal

    out = tmp_path / "t.json"
    sleeper = [sys.executable, "-c", "import time; print(\"Running stage 'long':\", flush=True); time.sleep(600)"]
    cmd = [sys.executable, "-m", "fraglib_study", "bench", "timeline", "record", "--out", str(out), "--", *sleeper]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline() == "Running stage 'long':\n"  # the command runs (and the recorder waits for it)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == -signal.SIGTERM
    rec = T.read_record(out)
    assert rec["status"] == -signal.SIGTERM and rec["failed"] and [s["name"] for s in rec["stages"]] == ["long"]


def test_a_record_that_cannot_be_written_never_costs_the_command_its_status(tmp_path, capfd):
    blocked = tmp_path / "afile"
    blocked.write_text("x")  # --out below a file: the write fails after the command ran
    with pytest.raises(SystemExit) as exc:
        T.main(["record", "--out", str(blocked / "t.json"), "--", sys.executable, "-c", "raise SystemExit(5)"])
    assert exc.value.code == 5
    assert "NOT recorded" in capfd.readouterr().err


def test_the_index_shows_the_committed_timeline(tmp_path):
    """The index's cost section: make's last timeline as a figure, with its summary and minutes by kind of stage
    (fraglib_study.pages.index.timeline_context); nothing without a record."""
    import base64

    from fraglib_study.pages.index import costs_html, timeline_context

    rec = json.loads(_record(tmp_path).read_text())
    t = timeline_context(rec)
    assert base64.b64decode(t["png"]).startswith(b"\x89PNG")
    assert t["summary"].startswith("5.0 min on 2 cores, 2 of 3 stages run")
    assert t["machine"] == "AMD EPYC (AVX2), 2 logical cores"
    # synthetic 0-1 s and features 1-50 s (checks included); train@full 50-300 s
    assert t["minutes"] == "data, features, captions, explorer data 0.8 min; training 4.2 min"
    from fraglib_study.pages.index import covered

    assert covered([(0, 10), (5, 20), (30, 40), (35, 36)]) == 30  # overlapping stages count once
    assert timeline_context(None) is None and timeline_context({"stages": []}) is None
    page = costs_html([], rec)
    assert "One <code>make</code> over time" in page and t["png"] in page
    assert "over time" not in costs_html([], None)
