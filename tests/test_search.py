"""fraglib_study.experiments.search: its journal of finished trials and the tables a second stage reads. Trials are faked
(no training): ``_trial`` returns a row that shows the epochs it was given, in a thread pool."""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from fraglib.run.inputs import DataPaths
from fraglib_study.experiments import search

from conftest import tiny_params

CONFIGS = [{"lr": 0.01}, {"lr": 0.03}, {"lr": 0.1}]


@pytest.fixture
def trained(monkeypatch):
    """The configurations a search trains (fake trials: criterion 100 + epochs, best epoch = the last)."""
    done = []

    def trial(args):
        _, _, spec, over = args
        done.append(over)
        e = spec.train_config.epochs
        return {
            **over,
            "val_rsum_best": 100.0 + e,
            "best_epoch": float(e - 1),
            "seconds": 0.0,
            "val_rsum_splits": f"{100.0 + e:.1f}",
        }

    monkeypatch.setattr(search, "_trial", trial)
    monkeypatch.setattr(search, "worker_pool", ThreadPoolExecutor)
    return done


@pytest.fixture
def data(tmp_path):
    """A dataset folder (only its dataset.json is read: the journal fingerprints it)."""
    d = tmp_path / "data"
    d.mkdir()
    (d / "dataset.json").write_text('{"images": []}')
    return d


def run(data, journal, configs=CONFIGS, epochs=8, fixed=None, params=None):
    return search.search(
        DataPaths(data),
        params or tiny_params(),
        "devise",
        len(configs),
        epochs,
        0,
        1,
        fixed=fixed,
        configs=configs,
        journal=journal,
    )


def killed_after(journal, rows):
    """The journal as a search killed after its first ``rows`` trials left it."""
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[: 1 + rows]))


@pytest.mark.parametrize(
    "change, says",
    [
        (dict(epochs=2), "epochs: 8 in the journal, 2 now"),
        (dict(fixed={"margin": 0.2}), "fixed.margin: '(absent)' in the journal, 0.2 now"),
        (
            dict(params={**tiny_params(), "systems": {**tiny_params()["systems"], "devise": {"embed_dim": 64}}}),
            "settings.embed_dim: 32 in the journal, 64 now",
        ),
        ("data", "data.split 0: "),
    ],
)
def test_a_journal_of_other_settings_is_refused(change, says, data, tmp_path, trained):
    """A killed --epochs 8 search's trials are not "already done" in an --epochs 2 search (nor under other
    --set keys, run settings or data): the journal is refused, naming it, what differs and what to do."""
    journal = tmp_path / "t.partial.jsonl"
    run(data, journal)
    head, *rows = map(json.loads, journal.read_text().splitlines())
    assert head["journal"] == search.JOURNAL and head["epochs"] == 8 and len(rows) == 3
    killed_after(journal, 1)
    before = journal.read_text()
    if change == "data":
        (data / "dataset.json").write_text('{"images": [1]}')
        change = {}
    del trained[:]
    with pytest.raises(search.JournalError, match="Delete it") as e:
        run(data, journal, **change)
    assert str(e.value).startswith(f"{journal}: ") and says in str(e.value)
    assert not trained and journal.read_text() == before


def test_a_journal_of_the_same_settings_resumes(data, tmp_path, trained):
    journal = tmp_path / "t.partial.jsonl"
    run(data, journal)
    killed_after(journal, 1)
    del trained[:]
    rows = run(data, journal)
    assert trained == CONFIGS[1:] and [r["lr"] for r in rows] == [0.01, 0.03, 0.1]
    assert len(journal.read_text().splitlines()) == 4  # one header, three rows


def test_the_command_refuses_a_journal_of_other_settings(data, tmp_path, trained, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params()))
    out = tmp_path / "t.csv"
    argv = [
        "--run",
        "devise",
        "--dataset-dir",
        str(data),
        "--params",
        str(params),
        "--jobs",
        "1",
        "--out",
        str(out),
        "--configs",
        json.dumps(CONFIGS[:2]),
    ]
    journal = out.with_suffix(".partial.jsonl")
    run(data, journal, CONFIGS[:2])
    killed_after(journal, 1)
    with pytest.raises(SystemExit) as e:
        search.main(argv + ["--epochs", "2"])
    assert e.value.code == 2 and f"{journal}: its trials were trained with other settings" in capsys.readouterr().err
    assert not out.exists()
    search.main(argv)  # the journal's settings: resumes, then the table
    assert out.read_text().splitlines() == [
        "lr,val_rsum_best,best_epoch,seconds,val_rsum_splits",
        "0.01,108.0,7.0,0.0,108.0",
        "0.03,108.0,7.0,0.0,108.0",
    ]
    assert trained[2:] == CONFIGS[1:2]  # only the trial missing from the journal trained again
    assert not journal.exists()


def test_a_torn_last_line_is_dropped_with_a_note(data, tmp_path, trained, capsys):
    """A kill cuts at most the line being appended: that line is dropped (its trial trains again) and cut
    from the file, so the next row starts on a line of its own."""
    journal = tmp_path / "t.partial.jsonl"
    run(data, journal)
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:3]) + lines[3][:20])
    del trained[:]
    rows = run(data, journal)
    assert f"{journal}: line 4 was cut short" in capsys.readouterr().out
    assert trained == [CONFIGS[2]] and len(rows) == 3
    assert journal.read_text().splitlines(keepends=True)[:3] == lines[:3]
    assert [json.loads(x)["lr"] for x in journal.read_text().splitlines()[1:]] == [0.01, 0.03, 0.1]


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda lines: lines[:1] + ['{"lr": 0.0\n'] + lines[2:], "line 2 is damaged"),
        (lambda lines: lines[:1] + ['{"margin": 0.1}\n'] + lines[2:], "line 2 is not a trial row"),
        (lambda lines: lines[1:], "line 1 is not a fraglib_study.experiments.search journal header"),
    ],
)
def test_damage_before_the_last_line_is_an_error_naming_file_and_line(damage, says, data, tmp_path, trained):
    journal = tmp_path / "t.partial.jsonl"
    run(data, journal)
    journal.write_text("".join(damage(journal.read_text().splitlines(keepends=True))))
    with pytest.raises(search.JournalError, match="delete") as e:
        run(data, journal)
    assert str(e.value).startswith(f"{journal}: {says}")


META = {
    "dataset_dir": "d{seed}",
    "trials": 2,
    "epochs": 1,
    "seed": 0,
    "space": {"lr": [0.01, 0.03], "margin": [0.1, 1]},
    "splits": [0],
    "features_dir": None,
    "run": "devise",
    "dataset": None,
    "fixed": {},
    "rescore": None,
}
TABLE = "lr,margin,val_rsum_best,best_epoch\n0.03,1,120.5,0.0\n0.01,0.1,110.0,0.0\n"


@pytest.mark.parametrize(
    "table, meta, says",
    [
        ("lr,mar", META, "t.csv: its header 'lr,mar' lacks the column(s) margin, val_rsum_best (cut short?)"),
        ("", META, "t.csv: its header '' lacks the column(s) lr, margin, val_rsum_best"),
        ("lr,margin,val_rsum_best\n", META, "t.csv: it has no rows"),
        (TABLE[:-9], META, "t.csv line 3 ('0.01,0.1,1') does not match its header or the space of"),
        (TABLE, json.dumps(META)[:40], "t.json (the settings of"),
        (TABLE, {k: v for k, v in META.items() if k != "run"}, "t.json (the settings of"),
    ],
)
def test_rescore_refuses_a_cut_table_naming_it(table, meta, says, tmp_path, capsys):
    first = tmp_path / "t.csv"
    first.write_text(table)
    first.with_suffix(".json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
    with pytest.raises(SystemExit) as e:
        search.main(["--rescore", str(first), "--splits", "1", "--out", str(tmp_path / "second.csv")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and says in err and "write both again" in err


def test_rescore_reads_the_best_rows_with_their_types(tmp_path):
    first = tmp_path / "t.csv"
    first.write_text(TABLE)
    first.with_suffix(".json").write_text(json.dumps(META))
    meta, configs, crit = search.top_rows(first, 2)
    assert (
        meta == META and configs == [{"lr": 0.03, "margin": 1}, {"lr": 0.01, "margin": 0.1}] and crit == [120.5, 110.0]
    )
    assert type(configs[0]["margin"]) is int


def test_a_search_trial_never_builds_nor_scores_the_test_split(tiny_full, monkeypatch):
    """A trial fits and validates: the test split is never built (load_splits is asked for train and val only)
    and the test evaluation never runs."""
    import fraglib.run.train
    from fraglib_study.experiments import search

    from conftest import tiny_spec

    asked = []
    real = fraglib.run.train.load_splits

    def spy(*args, **kw):
        splits = real(*args, **kw)
        asked.append(sorted(splits[0]))
        return splits

    def never(*args, **kw):
        raise AssertionError("a search trial ran the test evaluation")

    monkeypatch.setattr(fraglib.run.train, "load_splits", spy)
    monkeypatch.setattr(fraglib.run.train, "evaluate_split", never)
    row = search._trial((DataPaths(tiny_full), [0], tiny_spec("devise", epochs=1), {"lr": 0.01}))
    assert asked == [["train", "val"]] and row["best_epoch"] == 1.0 and row["val_rsum_best"] > 0
