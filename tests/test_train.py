"""Training end to end on the tiny benchmark: determinism, kill-and-resume, variants, batching."""

import json

import numpy as np
import pytest
import torch

from fraglib.core.batches import Views
from fraglib.core.config import ConfigError
from fraglib.run import checkpoint
from fraglib.run.checkpoint import CheckpointError
from fraglib.run.inputs import DataPaths, load_splits, make_batches
from fraglib.run.train import resolve_run, train

from conftest import tiny_eval, tiny_params, tiny_spec


def _test_metrics(out):
    return json.loads((out / "metrics.json").read_text())["test"]


def test_same_seed_same_metrics_and_resume_equals_uninterrupted(tiny_full, tmp_path):
    spec = tiny_spec()
    cpu = torch.device("cpu")
    a = train(DataPaths(tiny_full), tmp_path / "a", spec, tiny_eval(), device=cpu, progress=False)
    train(DataPaths(tiny_full), tmp_path / "b", spec, tiny_eval(), device=cpu, progress=False)
    assert (tmp_path / "a" / "metrics.json").read_text() == (tmp_path / "b" / "metrics.json").read_text()
    assert (tmp_path / "a" / "ranks.json").read_text() == (tmp_path / "b" / "ranks.json").read_text()
    # killed after 2 epochs (the process ends), then started again: resumes from last.pt
    r = train(DataPaths(tiny_full), tmp_path / "c", spec, tiny_eval(), device=cpu, progress=False, stop_after=2)
    assert r == {"stopped_at_epoch": 2}
    assert checkpoint.load(tmp_path / "c" / "last.pt")["epoch"] == 2
    train(DataPaths(tiny_full), tmp_path / "c", spec, tiny_eval(), device=cpu, progress=False)
    assert _test_metrics(tmp_path / "c") == _test_metrics(tmp_path / "a")
    assert (tmp_path / "c" / "history.csv").read_text() == (tmp_path / "a" / "history.csv").read_text()
    hist = (tmp_path / "a" / "history.csv").read_text().splitlines()
    assert len(hist) == 1 + spec.train_config.epochs and "train_C_0" in hist[0] and "train_C_F" in hist[0]
    assert a["train_config"]["seed"] == 0 and a["best_epoch"] in range(1, spec.train_config.epochs + 1)
    assert a["system"] == "fragment" and "train_seconds" not in json.dumps(a)
    # the wall times live beside the metrics (git), the resumed run's clock summed over both processes
    for run in "ac":
        t = json.loads((tmp_path / run / "timing.json").read_text())
        assert t["epochs"] == spec.train_config.epochs and t["device"] == "cpu" and t["threads"] >= 1
        assert t["train_seconds"] > 0 and t["eval_seconds"] > 0 and {"machine", "commit", "date"} <= set(t)


def test_resume_refuses_another_configuration(tiny_full, tmp_path):
    cpu = torch.device("cpu")
    train(DataPaths(tiny_full), tmp_path, tiny_spec(), tiny_eval(), device=cpu, progress=False, stop_after=1)
    with pytest.raises(CheckpointError, match="other train_config"):
        train(DataPaths(tiny_full), tmp_path, tiny_spec(lr=0.5), tiny_eval(), device=cpu, progress=False)
    with pytest.raises(CheckpointError, match="other system_config"):
        train(DataPaths(tiny_full), tmp_path, tiny_spec(margin=0.5), tiny_eval(), device=cpu, progress=False)


@pytest.mark.parametrize(
    "run,override",
    [
        ("devise", {}),
        ("devise", {"similarity": "cosine", "optimizer": "adam", "lr": 1e-3, "images": "fullframe"}),
        ("random", {}),
        ("full", {"images": "fullframe"}),
        ("full", {"images": "groundtruth", "sentences": "bow", "accumulate": "max"}),
        ("full", {"sentences": "bigram", "beta": 0.0}),
    ],
)
def test_runs_of_every_system(tiny_full, tmp_path, run, override):
    m = train(
        DataPaths(tiny_full),
        tmp_path,
        tiny_spec(run, epochs=2, **override),
        tiny_eval(),
        device=torch.device("cpu"),
        progress=False,
    )
    t = m["test"]
    assert 0 <= t["annotation"]["r1"] <= 100 and t["search"]["mean_rank"] >= 1
    assert t["annotation_ci"]["r1"][0] <= t["annotation"]["r1"] <= t["annotation_ci"]["r1"][1]


def test_batches_never_repeat_an_image(tiny_full):
    splits, _, _ = load_splits(DataPaths(tiny_full), Views("rcnn", "dependency"), torch.device("cpu"))
    tr = splits["train"]
    batches = make_batches(tr, 7, seed=0, epoch=3)
    for b in batches:
        assert len(set(tr.sentence_image[b].tolist())) == len(b) <= 7
    seen = np.concatenate(batches)
    assert len(seen) == len(set(seen.tolist()))
    assert len(seen) >= tr.n_sentences - 1  # every sentence with fragments, but a lone last one
    assert [b.tolist() for b in batches] == [b.tolist() for b in make_batches(tr, 7, seed=0, epoch=3)]


def test_bad_train_parameters():
    with pytest.raises(ConfigError, match=r"systems\.fragment\.images='yolo'"):
        tiny_spec(images="yolo")
    with pytest.raises(ConfigError, match="both 0"):
        tiny_spec(fragment_weight=0.0, beta=0.0)
    with pytest.raises(ConfigError, match=r"train\.optimizer"):
        tiny_spec(optimizer="rmsprop")
    with pytest.raises(ConfigError, match=r"--set\.lrr: unknown parameter \(did you mean 'lr'\?\)"):
        tiny_spec(lrr=0.1)
    with pytest.raises(ConfigError, match=r"systems\.devise\.similarity"):
        tiny_spec("devise", similarity="l2")


def test_search_over_splits_with_fixed_keys(tiny_full, tmp_path):
    """The validation-only search averages its criterion over splits and keeps --set keys fixed."""
    import yaml

    from fraglib_study.experiments import search

    for s in (0, 1):
        (tmp_path / f"split{s}").symlink_to(tiny_full, target_is_directory=True)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params()))
    out = tmp_path / "table.csv"
    search.main(
        [
            "--run",
            "devise",
            "--dataset-dir",
            str(tmp_path / "split{seed}"),
            "--splits",
            "0",
            "1",
            "--params",
            str(params),
            "--set",
            "similarity=cosine",
            "--trials",
            "2",
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--out",
            str(out),
            "--space",
            '{"lr": [0.01, 0.03], "margin": [0.1, 0.2]}',
        ]
    )
    lines = out.read_text().splitlines()
    assert lines[0].split(",")[:2] == ["lr", "margin"] and len(lines) == 3
    crit = [float(line.split(",")[2]) for line in lines[1:]]
    assert crit == sorted(crit, reverse=True) and all(c > 0 for c in crit)
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["splits"] == [0, 1] and meta["run"] == "devise" and meta["fixed"] == {"similarity": "cosine"}


def test_search_resumes_from_its_journal(tiny_full, tmp_path):
    """A trial already in ``<out>.partial.jsonl`` (a killed search) is taken from it, not trained again;
    the others train; the journal is removed once the table is written."""
    import yaml

    from fraglib_study.experiments import search

    (tmp_path / "split0").symlink_to(tiny_full, target_is_directory=True)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params()))
    out = tmp_path / "table.csv"
    journal = out.with_suffix(".partial.jsonl")
    head = search.journal_head(
        tiny_params(), "devise", None, {}, 1, DataPaths(str(tmp_path / "split{seed}")), [0], ["lr"]
    )
    journal.write_text(
        json.dumps(head)
        + "\n"
        + json.dumps(
            {"lr": 0.01, "val_rsum_best": 999.0, "best_epoch": 1.0, "seconds": 0.0, "val_rsum_splits": "999.0"}
        )
        + "\n"
    )
    search.main(
        [
            "--run",
            "devise",
            "--dataset-dir",
            str(tmp_path / "split{seed}"),
            "--splits",
            "0",
            "--params",
            str(params),
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--out",
            str(out),
            "--configs",
            '[{"lr": 0.01}, {"lr": 0.03}]',
        ]
    )
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert rows[1][:2] == ["0.01", "999.0"]  # from the journal
    assert rows[2][0] == "0.03" and 0 < float(rows[2][1]) < 600  # trained now
    assert not journal.exists()


def test_closed_form_fit_has_one_validation_row_and_can_be_searched(tiny_full, tmp_path):
    """kCCA is fitted, never stepped: its history is one "epoch 0" row whose R-sum is the fitted model's
    validation R-sum, so the search ranks its settings like any trained system's."""
    import yaml

    from fraglib.metrics.retrieval import evaluate_scores, rsum
    from fraglib.run.checkpoint import load_system
    from fraglib.run.evaluate import score_matrix
    from fraglib_study.experiments import search

    params = tiny_params(k={"system": "kcca", "kernel": "linear"})
    m = train(
        DataPaths(tiny_full),
        tmp_path / "run",
        resolve_run(params, "k"),
        tiny_eval(),
        device=torch.device("cpu"),
        progress=False,
    )
    system, _ = load_system(tmp_path / "run" / "best.pt", torch.device("cpu"))
    val = load_splits(DataPaths(tiny_full), type(system).views(system.cfg), torch.device("cpu"))[0]["val"]
    head, *rows = (tmp_path / "run" / "history.csv").read_text().splitlines()
    assert m["best_epoch"] == 0 and len(rows) == 1 and dict(zip(head.split(","), rows[0].split(",")))["epoch"] == "0"
    assert m["val_rsum_best"] == rsum(evaluate_scores(score_matrix(system, val, 64), val.sentence_image, 10, 0))
    fresh = [(tmp_path / "run" / f).read_bytes() for f in ("metrics.json", "history.csv")]
    ck = checkpoint.load(tmp_path / "run" / "best.pt")  # as written before the row existed
    checkpoint.save(tmp_path / "run" / "best.pt", {**ck, "history": [], "best_epoch": None, "best_rsum": -1.0})
    train(
        DataPaths(tiny_full),
        tmp_path / "run",
        resolve_run(params, "k"),
        tiny_eval(),
        device=torch.device("cpu"),
        progress=False,
    )
    assert [(tmp_path / "run" / f).read_bytes() for f in ("metrics.json", "history.csv")] == fresh
    (tmp_path / "split0").symlink_to(tiny_full, target_is_directory=True)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "kcca.csv"
    search.main(
        [
            "--run",
            "k",
            "--dataset-dir",
            str(tmp_path / "split{seed}"),
            "--splits",
            "0",
            "--params",
            str(tmp_path / "params.yaml"),
            "--jobs",
            "1",
            "--out",
            str(out),
            "--configs",
            '[{"reg": 0.01, "distance": "inner"}, {"reg": 100.0, "distance": "euclidean"}]',
        ]
    )
    rows = [line.split(",") for line in out.read_text().splitlines()[1:]]
    assert len(rows) == 2 and all(float(r[2]) > 0 for r in rows) and float(rows[0][2]) >= float(rows[1][2])


def test_search_second_stage_rescores_the_best_rows_on_other_splits(tiny_full, tmp_path):
    """--rescore: the --top best rows of a table again on new splits, ranked by the split-weighted mean."""
    import yaml

    from fraglib_study.experiments import search

    for s in (0, 1, 2):
        (tmp_path / f"split{s}").symlink_to(tiny_full, target_is_directory=True)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params()))
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    search.main(
        [
            "--run",
            "devise",
            "--dataset-dir",
            str(tmp_path / "split{seed}"),
            "--splits",
            "0",
            "--params",
            str(params),
            "--set",
            "similarity=cosine",
            "--trials",
            "3",
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--out",
            str(first),
            "--space",
            '{"lr": [0.01, 0.03, 0.1], "margin": [0.1, 0.2]}',
        ]
    )
    head, *lines = first.read_text().splitlines()
    stage1 = {(float(r[0]), float(r[1])): float(r[2]) for r in (line.split(",") for line in lines)}
    search.main(
        [
            "--rescore",
            str(first),
            "--top",
            "2",
            "--splits",
            "1",
            "2",
            "--params",
            str(params),
            "--jobs",
            "1",
            "--out",
            str(second),
        ]
    )
    head, *lines = second.read_text().splitlines()
    rows = [dict(zip(head.split(","), line.split(","))) for line in lines]
    assert len(rows) == 2 and {(float(r["lr"]), float(r["margin"])) for r in rows} == set(list(stage1)[:2])
    for r in rows:
        assert float(r["val_rsum_prev"]) == stage1[(float(r["lr"]), float(r["margin"]))]
        new = [float(v) for v in r["val_rsum_splits"].split()]
        assert len(new) == 2 and float(r["val_rsum_best"]) == pytest.approx(sum(new) / 2, abs=0.01)
        assert float(r["val_rsum_all"]) == pytest.approx(
            (float(r["val_rsum_prev"]) + 2 * float(r["val_rsum_best"])) / 3, abs=0.01
        )
    assert float(rows[0]["val_rsum_all"]) >= float(rows[1]["val_rsum_all"])
    meta = json.loads(second.with_suffix(".json").read_text())
    assert meta["rescore"]["splits"] == [0] and meta["splits"] == [1, 2] and meta["fixed"]["similarity"] == "cosine"
    assert meta["epochs"] == 1 and meta["run"] == "devise" and meta["trials"] == 2
    third = tmp_path / "third.csv"  # --configs: exactly the given trials
    search.main(
        [
            "--run",
            "devise",
            "--dataset-dir",
            str(tmp_path / "split{seed}"),
            "--splits",
            "0",
            "--params",
            str(params),
            "--epochs",
            "1",
            "--jobs",
            "1",
            "--out",
            str(third),
            "--configs",
            '[{"lr": 0.2, "margin": 0.1}, {"lr": 0.01, "margin": 0.3}]',
        ]
    )
    rows = [line.split(",") for line in third.read_text().splitlines()[1:]]
    assert sorted((float(r[0]), float(r[1])) for r in rows) == [(0.01, 0.3), (0.2, 0.1)]
    assert json.loads(third.with_suffix(".json").read_text())["space"] == {"lr": [0.2, 0.01], "margin": [0.1, 0.3]}
    with pytest.raises(ValueError, match="same keys"):
        search.main(
            [
                "--run",
                "devise",
                "--dataset-dir",
                str(tmp_path / "split{seed}"),
                "--params",
                str(params),
                "--out",
                str(tmp_path / "fourth.csv"),
                "--configs",
                '[{"lr": 0.2}, {"margin": 0.3}]',
            ]
        )
    with pytest.raises(ValueError, match=r"splits \[0\] were already scored"):
        search.main(
            ["--rescore", str(first), "--splits", "0", "--params", str(params), "--out", str(tmp_path / "x.csv")]
        )


def test_search_over_feature_caches(tiny_full, tmp_path):
    """The space key features_dir: each trial reads its own feature cache (a detector setting)."""
    import yaml

    from fraglib_study.experiments import search

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params()))
    out, other = tmp_path / "table.csv", tmp_path / "other_features"
    other.symlink_to(tiny_full / "features", target_is_directory=True)
    base = [
        "--run",
        "full",
        "--dataset-dir",
        str(tiny_full),
        "--params",
        str(params),
        "--trials",
        "2",
        "--epochs",
        "1",
        "--jobs",
        "1",
        "--out",
        str(out),
    ]
    search.main(base + ["--space", json.dumps({"features_dir": [str(tiny_full / "features"), str(other)]})])
    rows = [line.split(",") for line in out.read_text().splitlines()]
    assert rows[0][0] == "features_dir" and {r[0] for r in rows[1:]} == {str(tiny_full / "features"), str(other)}
    assert rows[1][1] == rows[2][1]  # the same cache under two names: the same criterion
    with pytest.raises(FileNotFoundError, match="nowhere"):
        search.main(
            base[:-1]
            + [
                str(tmp_path / "missing.csv"),
                "--trials",
                "1",
                "--space",
                json.dumps({"features_dir": [str(tmp_path / "nowhere")]}),
            ]
        )


def test_resolve_run_layers_and_routing():
    """train <- <dataset>.train <- systems.<s> <- <dataset>.systems.<s> <- runs.<r>; keys routed by name."""
    params = {
        "train": {"lr": 0.01, "epochs": 3},
        "systems": {"fragment": {"margin": 1.0, "embed_dim": 64}, "devise": {"margin": 0.5}},
        "runs": {
            "full": {"system": "fragment"},
            "fo": {"system": "fragment", "beta": 0.0},
            "devise": {"system": "devise", "lr": 0.2},
        },
        "ds": {"train": {"epochs": 5}, "systems": {"fragment": {"lr": 0.1, "margin": 0.2}, "devise": {"lr": 0.3}}},
    }
    full = resolve_run(params, "full", "ds")
    assert (
        full.train_config.lr,
        full.train_config.epochs,
        full.system_config.margin,
        full.system_config.embed_dim,
    ) == (0.1, 5, 0.2, 64)
    assert full.overrides == {"lr": 0.1, "epochs": 5, "margin": 0.2}
    assert resolve_run(params, "fo", "ds").system_config.beta == 0.0
    dev = resolve_run(params, "devise", "ds")
    assert (dev.system, dev.train_config.lr, dev.system_config.margin) == ("devise", 0.2, 0.5)  # the run wins
    assert resolve_run(params, "full").train_config.lr == 0.01
    with pytest.raises(ConfigError, match="unknown run .*did you mean 'full'"):
        resolve_run(params, "fulll")
    with pytest.raises(ConfigError, match=r"runs\.x\.system='sgm': unknown system, known: fragment, devise, random"):
        resolve_run({**params, "runs": {"x": {"system": "sgm"}}}, "x")
    with pytest.raises(ConfigError, match=r"ds\.train\.margin: unknown parameter"):  # trainer layers take trainer keys
        resolve_run({**params, "ds": {"train": {"margin": 1.0}}}, "full", "ds")
    with pytest.raises(ConfigError, match="section 'runs' missing"):
        resolve_run({"train": {}, "systems": {}}, "full")


def test_devise_scores_cosine_by_hand():
    from fraglib.systems.devise import Config, DeviseSystem

    sys_ = DeviseSystem(Config(embed_dim=2), {"n_words": 1, "word_dim": 2, "img_dim": 2})
    V = torch.tensor([[3.0, 4.0], [1.0, 0.0]])
    S = torch.tensor([[0.0, 2.0], [1.0, 1.0]])
    assert torch.allclose(sys_.scores(V, S), torch.tensor([[8.0, 7.0], [0.0, 1.0]]))
    r = 2**-0.5
    cos = DeviseSystem(Config(embed_dim=2, similarity="cosine"), {"n_words": 1, "word_dim": 2, "img_dim": 2})
    assert torch.allclose(cos.scores(V, S), torch.tensor([[0.8, 7 / 5 * r], [0.0, r]]))


def test_seed_threads_give_idle_cores_to_the_last_round():
    from fraglib_study.experiments.study import seed_threads

    assert seed_threads(5, 2, 2) == [1, 1, 1, 1, 2]
    assert seed_threads(3, 2, 8) == [4, 4, 8]
    assert seed_threads(4, 2, 2) == [1, 1, 1, 1]
    assert seed_threads(1, 2, 2) == [2]
    assert seed_threads(2, 1, 3) == [3, 3]


def test_select_last_keeps_the_final_epoch_and_old_checkpoints_resume_with_new_defaults(tiny_full, tmp_path):
    cpu = torch.device("cpu")
    spec = tiny_spec(epochs=3, select="last")
    m = train(DataPaths(tiny_full), tmp_path / "last", spec, tiny_eval(), device=cpu, progress=False)
    assert m["best_epoch"] == 3 and checkpoint.load(tmp_path / "last" / "best.pt")["epoch"] == 3
    # a checkpoint written before `select` existed (its stored settings lack the key) resumes at the default
    out = tmp_path / "old"
    train(DataPaths(tiny_full), out, tiny_spec(epochs=3), tiny_eval(), device=cpu, progress=False, stop_after=1)
    for name in ("last.pt", "best.pt"):
        ck = checkpoint.load(out / name)
        del ck["train_config"]["select"]
        checkpoint.save(out / name, ck)
    train(DataPaths(tiny_full), out, tiny_spec(epochs=3), tiny_eval(), device=cpu, progress=False)
    assert checkpoint.load(out / "last.pt")["epoch"] == 3
    with pytest.raises(CheckpointError, match="other train_config"):  # but not at another value
        train(DataPaths(tiny_full), out, tiny_spec(epochs=3, select="last"), tiny_eval(), device=cpu, progress=False)


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--trials", "0"], "--trials 0: must be at least 1"),
        (["--jobs", "0"], "--jobs 0: must be at least 1"),
        (["--space", "{lr: [1]}"], "--space '{lr: [1]}': not JSON"),
        (["--space", "{}"], "a non-empty JSON object of non-empty lists"),
        (["--space", '{"lr": 0.01}'], "a non-empty JSON object of non-empty lists"),
        (["--space", '{"lr": []}'], "a non-empty JSON object of non-empty lists"),
        (["--configs", "[{"], "--configs '[{': not JSON"),
        (["--splits", "0", "1"], "has no {seed}"),
        ([], "refusing to replace 1 existing file"),
    ],
)
def test_search_refuses_unusable_arguments_before_any_work(extra, says, tmp_path, capsys):
    """Each bad argument stops the search with a usage error naming it, before a trial trains; an existing
    table is never rewritten without --overwrite."""
    from fraglib_study.experiments import search

    out = tmp_path / "table.csv"
    if not extra:
        out.write_text("lr,val_rsum_best\n0.01,100\n")
    with pytest.raises(SystemExit) as e:
        search.main(["--run", "devise", "--dataset-dir", str(tmp_path / "nowhere"), "--out", str(out), *extra])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not extra or not out.exists()
    assert extra or out.read_text() == "lr,val_rsum_best\n0.01,100\n"


@pytest.mark.parametrize(
    "module, argv, says",
    [
        ("captions", ["--run-dir", "x", "--split", "dev"], "invalid choice: 'dev'"),
        ("captions", ["--run-dir", "x", "--beam", "0"], "--beam 0: the beam width is at least 1"),
        ("captions", ["--run-dir", "x", "--beam", "-2"], "--beam -2: the beam width is at least 1"),
        ("captions", ["--run-dir", "x", "--n-boot", "0"], "--n-boot 0: at least 1"),
        (
            "study",
            ["--run", "full", "--dataset-dir", "x", "--out", "y", "--seeds", "0,x"],
            "--seeds '0,x': comma-separated",
        ),
    ],
)
def test_commands_refuse_unusable_arguments(module, argv, says, capsys):
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(f"fraglib_study.experiments.{module}").main(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_epoch_sums_are_the_python_sums_and_a_bad_cost_is_reported(tiny_full):
    """train_epoch keeps the sums of the cost and the parts on the device: they equal, to the bit, the
    Python sums of the floats read batch by batch; a cost that is not finite raises FloatingPointError
    naming the run and the epoch (read at the epoch's end)."""
    from fraglib.core.distributed import Context
    from fraglib.run.train import Step, make_optimizer, train_epoch
    from fraglib.systems import get_system

    spec = tiny_spec()
    tc, cls = spec.train_config, get_system(spec.system)
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), torch.device("cpu"))
    tr = splits["train"]
    system = cls(spec.system_config, dims, 0)
    system.prepare(tr)
    seen = []

    class Logged(Step):
        def forward(self, images, sentences, epoch):
            cost, parts = super().forward(images, sentences, epoch)
            seen.append({"cost": float(cost.detach()), **{k: float(v) for k, v in parts.items()}})
            return cost * self.scale, parts

    step = Logged(system, Context())
    step.scale = 1.0
    opt = make_optimizer(tc, system.lr_groups())
    sums, n, _ = train_epoch(step, system, opt, tr, tc, 0, torch.device("cpu"))
    assert n == len(seen) > 1
    for k in seen[0]:
        want = 0.0
        for row in seen:
            want += row[k]
        assert sums[k] == want, k
    step.scale = float("nan")
    with pytest.raises(FloatingPointError, match="run tiny, epoch 2: the cost summed"):
        train_epoch(step, system, opt, tr, tc, 1, torch.device("cpu"), run="tiny")


def test_a_run_folder_is_trained_by_one_process_at_a_time(tmp_path, capsys):
    """Two writers on one --out once both trained it in full: while one holds the folder (results or
    checkpoints), another stops at once, before reading any data; the lock goes with its holder."""
    import yaml

    from fraglib.run.checkpoint import RunLocked, run_lock
    from fraglib.run.train import main

    run, models = tmp_path / "run", tmp_path / "models"
    nowhere = tmp_path / "no-data"  # never read: the refusal comes first
    with run_lock(run):
        assert (run / ".lock").exists()
        with pytest.raises(
            RunLocked,
            match=f"^{run}: another process is training this run folder "
            f"\\(it holds {run}/.lock\\); wait for it to finish or stop it",
        ):
            train(DataPaths(nowhere), run, tiny_spec(), tiny_eval(), device=torch.device("cpu"), progress=False)
        with pytest.raises(RunLocked, match=f"^{run}: another process"):
            train(
                DataPaths(nowhere),
                tmp_path / "other",
                tiny_spec(),
                tiny_eval(),
                device=torch.device("cpu"),
                progress=False,
                checkpoint_dir=run,
            )
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(tiny_params()))
        with pytest.raises(SystemExit) as e:
            main(
                [
                    "--run",
                    "full",
                    "--dataset-dir",
                    str(nowhere),
                    "--out",
                    str(run),
                    "--params",
                    str(tmp_path / "params.yaml"),
                ]
            )
        assert e.value.code == 2 and f"{run}: another process is training this run folder" in capsys.readouterr().err
    assert not (run / ".lock").exists()
    with run_lock(run, models, models / ".." / "run"):  # free again; one folder spelled twice: one lock
        assert (run / ".lock").exists() and (models / ".lock").exists()
    assert not list(tmp_path.rglob(".lock"))


def test_the_lock_of_a_killed_run_is_released(tmp_path):
    """flock: the OS releases the lock of a process that dies, so a killed run can be resumed."""
    import subprocess
    import sys

    from fraglib.run.checkpoint import RunLocked, run_lock

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from fraglib.run.checkpoint import run_lock\n"
            f"with run_lock({str(tmp_path)!r}):\n    print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunLocked, match=f"{tmp_path}: another process is training"):
            with run_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert (tmp_path / ".lock").exists()  # left behind by the kill, but not held
    with run_lock(tmp_path):
        pass


def test_results_and_timing_are_written_atomically_with_the_same_bytes(tmp_path, monkeypatch):
    """metrics.json, ranks.json, history.csv and timing.json go through fraglib.core.outputs (a complete
    temporary file renamed into place), with the bytes they always had."""
    import os

    from fraglib.run.train import write_outputs, write_timing

    renamed = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(os.path.basename(b)), real(a, b)))
    spec = tiny_spec()
    history = [{"epoch": 1, "val_rsum": 10.5, "train_cost": 2.0}, {"epoch": 2, "val_rsum": 12.0, "skipped_pairs": 1}]
    write_outputs(
        tmp_path, spec, tiny_eval(), {"d": 1}, {"annotation": {"r1": 1.0}, "ranks": {"search": [1, 2]}}, 2, history
    )
    write_timing(tmp_path, 1.23456, 2)
    assert renamed == ["metrics.json", "ranks.json", "history.csv", "timing.json"]
    assert (tmp_path / "ranks.json").read_bytes() == b'{"search": [1, 2]}\n'
    assert (
        tmp_path / "history.csv"
    ).read_bytes() == b"epoch,skipped_pairs,train_cost,val_rsum\n1,,2.0,10.5\n2,1,,12.0\n"
    assert (tmp_path / "timing.json").read_bytes() == b'{"train_seconds": 1.235, "epochs": 2}\n'
    m = (tmp_path / "metrics.json").read_text()
    assert m.startswith('{\n "best_epoch": 2,\n') and m.endswith("}\n") and json.loads(m)["val_rsum_best"] == 12.0


def test_distinct_image_batches_equal_the_greedy_scan_of_the_pool():
    """make_batches stops scanning the pool once a batch is full (linear per epoch, not O(M²/b)): the batches
    are those of the plain greedy scan written from the definition, for full and short batches."""
    import numpy as np

    from fraglib.run.inputs import make_batches
    from fraglib_study.bench.common import random_split

    def greedy(split, batch_size, seed, epoch):
        pool = list(np.random.default_rng([seed, epoch]).permutation(np.nonzero(split.usable_sentences())[0]))
        out = []
        while pool:
            batch, seen, rest = [], set(), []
            for j in pool:
                k = int(split.sentence_image[j])
                if len(batch) < batch_size and k not in seen:
                    batch.append(j)
                    seen.add(k)
                else:
                    rest.append(j)
            if len(batch) < 2:
                break
            out.append(batch)
            pool = rest
        return out

    for n, per, size in ((50, 5, 8), (7, 9, 4), (40, 5, 100), (30, 1, 4)):
        split, _ = random_split(n, per, img_dim=4, seed=1)
        for epoch in range(2):
            got = make_batches(split, size, 0, epoch)
            assert [b.tolist() for b in got] == [list(map(int, b)) for b in greedy(split, size, 0, epoch)]


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_the_fused_update_is_the_plain_update_to_float_rounding(tiny_full, optimizer):
    """make_optimizer(fused=True) (the GPU's default: one kernel for every parameter's update) trains an epoch
    of the fragment model to the same parameters as the plain per-parameter update, within float32 rounding;
    on the CPU the default stays the plain update (its floats unchanged)."""
    import dataclasses

    from fraglib.core.distributed import Context
    from fraglib.run.train import Step, make_optimizer, train_epoch
    from fraglib.systems import get_system

    spec = tiny_spec()
    tc = dataclasses.replace(spec.train_config, optimizer=optimizer)
    cls = get_system(spec.system)
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), torch.device("cpu"))
    tr = splits["train"]
    trained = {}
    for fused in (False, True):
        torch.manual_seed(0)  # the trainer's seeding: the same initial weights
        system = cls(spec.system_config, dims, 0)
        system.prepare(tr)
        opt = make_optimizer(tc, system.lr_groups(), fused=fused)
        assert all(g.get("fused") is (True if fused else None) for g in opt.param_groups), opt.defaults
        for epoch in range(2):
            train_epoch(Step(system, Context()), system, opt, tr, tc, epoch, torch.device("cpu"))
        trained[fused] = {k: v.detach().clone() for k, v in system.state_dict().items()}
    torch.manual_seed(0)
    plain = cls(spec.system_config, dims, 0)
    assert make_optimizer(tc, plain.lr_groups()).defaults.get("fused") is None  # CPU default: the plain update
    moved = 0
    for k, want in trained[False].items():
        torch.testing.assert_close(trained[True][k], want, rtol=1e-4, atol=1e-5, msg=k)
        moved += int(not torch.equal(want, plain.state_dict()[k]))
    assert moved >= 2  # the epochs trained something
