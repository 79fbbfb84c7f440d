"""What a long command prints while it runs (fraglib/core/progress.py): the ETA's arithmetic on a fake clock, plain lines
(never a carriage return) where stderr is not a terminal or CI is set, and the lines a study and its units print."""

from __future__ import annotations

import io

import pytest

from fraglib.core.progress import Progress, duration, eta, interactive, track
from fraglib.run.inputs import DataPaths


class Clock:
    """A fake monotonic clock: ``clock.now`` seconds, moved by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "seconds, text",
    [(0, "0s"), (44.6, "45s"), (59.4, "59s"), (60, "1m00s"), (192, "3m12s"), (3599, "59m59s"), (7500, "2h05m")],
)
def test_durations_read_as_a_person_writes_them(seconds, text):
    assert duration(seconds) == text


def test_the_eta_counts_rounds_of_parallel_units():
    """3 units left on 2 workers take two unit times (the last round runs one); on one worker, three."""
    assert eta(60.0, 3, 2) == 120.0
    assert eta(60.0, 4, 2) == 120.0
    assert eta(60.0, 3, 1) == 180.0
    assert eta(60.0, 0, 2) == 0.0


def test_a_study_eta_is_the_mean_unit_time_times_the_rounds_left():
    """5 units, 2 at a time, timed by their workers: the mean of the timed units so far; a kept unit is counted done
    but says nothing of the time a unit takes."""
    clock, out = Clock(), io.StringIO()
    p = Progress("full", 5, "unit", parallel=2, clock=clock, stream=out)
    assert p.eta() is None
    clock.now += 100
    assert p.step("seed 0 trained", seconds=100) == "[full] unit 1/5: seed 0 trained; elapsed 1m40s, ETA 3m20s"
    clock.now += 20
    line = p.step("seed 1 trained", seconds=140)  # mean 120 s, 3 left: two rounds
    assert p.eta() == 240 and line == "[full] unit 2/5: seed 1 trained; elapsed 2m00s, ETA 4m00s"
    clock.now += 1
    p.step("seed 2 kept", seconds=0.5, timed=False)  # mean still 120 s, 2 left: one round
    assert p.eta() == 120
    p.step(seconds=120)
    clock.now += 119
    assert p.step(seconds=120) == "[full] unit 5/5; elapsed 4m00s"  # the last line has no ETA
    assert out.getvalue().count("\n") == 5


def test_a_resumed_training_counts_its_earlier_epochs_and_times_its_own():
    """Epochs 1–3 came from a checkpoint: the ETA is this process's mean epoch (by the clock) times the epochs left."""
    clock, out = Clock(), io.StringIO()
    p = Progress("full seed 0", 10, "epoch", done=3, clock=clock, stream=out)
    clock.now += 30
    assert p.step("cost 0.5") == "[full seed 0] epoch 4/10: cost 0.5; elapsed 30s, ETA 3m00s"
    clock.now += 50
    assert p.step() == "[full seed 0] epoch 5/10; elapsed 1m20s, ETA 3m20s"  # mean 40 s, 5 left


def test_every_holds_back_lines_but_not_the_first_nor_the_last():
    clock, out = Clock(), io.StringIO()
    p = Progress("x", 6, "epoch", every=10, clock=clock, stream=out)
    said = []
    for _ in range(6):
        clock.now += 4
        said.append(p.step())
    assert [s is not None for s in said] == [True, False, False, True, False, True]  # at 4, 16 and 24 s
    assert said[-1] == "[x] epoch 6/6; elapsed 24s" and len(out.getvalue().splitlines()) == 3


def test_off_a_terminal_a_loop_prints_plain_lines_with_an_eta(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    clock, out = Clock(), io.StringIO()
    seen = []
    for x in track(range(4), "features", 4, "image", every=0, clock=clock, stream=out):
        seen.append(x)
        clock.now += 2
    assert seen == [0, 1, 2, 3]
    assert out.getvalue().splitlines() == [
        "[features] image 1/4; elapsed 2s, ETA 6s",
        "[features] image 2/4; elapsed 4s, ETA 4s",
        "[features] image 3/4; elapsed 6s, ETA 2s",
        "[features] image 4/4; elapsed 8s",
    ]
    assert "\r" not in out.getvalue()


def test_ci_gets_plain_lines_even_on_a_terminal(monkeypatch):
    """A bar redraws its line with carriage returns: a log (CI, DVC) keeps every redraw."""
    tty = Terminal()
    monkeypatch.delenv("CI", raising=False)
    assert interactive(tty) and not interactive(io.StringIO())
    for value in ("true", "1", "yes"):
        monkeypatch.setenv("CI", value)
        assert not interactive(tty)
    monkeypatch.setenv("CI", "false")
    assert interactive(tty)
    monkeypatch.setenv("CI", "true")
    list(track(range(50), "features", 50, "image", every=0, stream=tty))
    assert "\r" not in tty.getvalue() and len(tty.getvalue().splitlines()) == 50
    assert list(track(range(3), "quiet", 3, enabled=False, stream=tty)) == [0, 1, 2]  # off: nothing more said
    assert len(tty.getvalue().splitlines()) == 50


def test_on_a_terminal_a_loop_draws_one_bar(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    tty = Terminal()
    assert list(track(range(5), "features", 5, "image", stream=tty)) == list(range(5))
    assert "features" in tty.getvalue() and "5/5" in tty.getvalue() and "ETA" not in tty.getvalue()


def test_a_study_says_its_units_and_their_epochs_as_they_finish(tiny_full, tmp_path, capsys, monkeypatch):
    """Two units one after another: the plan, each unit's epoch lines under its name (the first and last at least),
    a line per finished unit with its test R@1 and an ETA; all on stderr, no carriage return; stdout as before."""
    from fraglib_study.experiments.study import run_study

    from conftest import tiny_params

    monkeypatch.setenv("CI", "true")
    params = tiny_params(r={"system": "devise", "replicates": 2, "epochs": 2})
    run_study(DataPaths(tiny_full), "r", params, tmp_path)
    cap = capsys.readouterr()
    err = cap.err.splitlines()
    assert "\r" not in cap.err and "ETA" not in cap.out
    assert err[0] == "[r] 2 training units (seed 0, seed 0r1), 1 at a time"
    assert any(e.startswith("[r seed 0] epoch 1/2: cost ") and ", ETA " in e for e in err)
    assert any(e.startswith("[r seed 0r1] epoch 2/2: cost ") for e in err)
    units = [e for e in err if e.startswith("[r] unit ")]
    assert len(units) == 2
    assert units[0].startswith("[r] unit 1/2: seed 0 trained, test annotation R@1 ") and ", ETA " in units[0]
    assert units[1].startswith("[r] unit 2/2: seed 0r1 trained, test annotation R@1 ") and "ETA" not in units[1]


def test_a_training_says_each_epoch_and_a_resumed_one_goes_on_counting(tiny_full, tmp_path, capsys, monkeypatch):
    """The trainer alone (``python -m fraglib.run train``): a line per epoch under the run's name with an ETA, on stderr;
    killed after one epoch and resumed, it goes on from epoch 2 of 4."""
    import torch

    from fraglib.run.train import train

    from conftest import tiny_eval, tiny_spec

    monkeypatch.setenv("CI", "true")
    cpu = torch.device("cpu")
    train(DataPaths(tiny_full), tmp_path, tiny_spec(), tiny_eval(), device=cpu, stop_after=1)
    first = capsys.readouterr().err.splitlines()
    train(DataPaths(tiny_full), tmp_path, tiny_spec(), tiny_eval(), device=cpu)
    cap = capsys.readouterr()
    again = [e for e in cap.err.splitlines() if e.startswith("[full] epoch ")]
    assert [e.split(":")[0] for e in first if e.startswith("[full] epoch ")] == ["[full] epoch 1/4"]
    assert [e.split(":")[0] for e in again] == ["[full] epoch 2/4", "[full] epoch 3/4", "[full] epoch 4/4"]
    assert ", ETA " in again[0] and "ETA" not in again[-1] and "\r" not in cap.err
