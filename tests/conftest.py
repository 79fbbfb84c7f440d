"""Shared fixtures. Real data under ../shared/data is optional: tests that need it skip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from fraglib.run.inputs import DataPaths

if os.environ.get("PYTEST_XDIST_WORKER"):  # under pytest-xdist (make test): one thread per worker and per
    os.environ["OMP_NUM_THREADS"] = "1"  # process it starts; two workers of two threads on two cores made
    torch.set_num_threads(1)  # the suite slower than one worker (CNN tests 6-10x)

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def tiny_synth(tmp_path_factory):
    """A 24-image synthetic benchmark (written once per test session)."""
    from fraglib.data.synthetic import SynthConfig, write_benchmark

    cfg = SynthConfig(n_train=16, n_val=4, n_test=4, seed=3, twin_fraction=0.5)
    out = tmp_path_factory.mktemp("synth")
    write_benchmark(cfg, out, progress=False)
    return out, cfg


@pytest.fixture(scope="session")
def tiny_text(tiny_synth, tmp_path_factory):
    """A copy of the tiny benchmark with its spaCy parse and fragments (once per session)."""
    import shutil

    from fraglib.text.build import TextConfig, run_fragments, run_parse

    src, _ = tiny_synth
    out = tmp_path_factory.mktemp("text") / "synth"
    shutil.copytree(src, out)
    run_parse(out, TextConfig(), progress=False)
    stats = run_fragments(out, TextConfig())
    return out, stats


def shared_data(sub: str) -> Path:
    """Path under ../shared/data, or skip the test with the reason."""
    p = SHARED_DATA / sub
    if not p.exists():
        pytest.skip(f"real data not present at {p} (only on development machines)")
    return p


def committed_text(rel: str) -> str:
    """The text of ``rel`` (a path under the project root) as git HEAD holds it, or skip the test with the reason:
    results files that `dvc repro` rewrites are judged as committed, never as trained on this machine."""
    import subprocess

    try:
        out = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    except OSError as exc:
        pytest.skip(f"git is not available ({exc}): cannot read the committed {rel}")
    if out.returncode != 0:
        pytest.skip(f"{rel} is not in git HEAD here ({out.stderr.strip()[:200]})")
    return out.stdout


@pytest.fixture(scope="session")
def tiny_full(tiny_text, tmp_path_factory):
    """The tiny benchmark with text fragments and image features (rcnn + groundtruth)."""
    import shutil

    from fraglib.data import read_karpathy_json
    from fraglib.data.synthetic import synthetic_truth
    from fraglib.vision.features import extract
    from fraglib.vision.rcnn import VisionConfig

    src, _ = tiny_text
    out = tmp_path_factory.mktemp("full") / "synth"
    shutil.copytree(src, out)
    ds = read_karpathy_json(out / "dataset.json")
    extract(
        ds,
        VisionConfig(max_proposals=100, num_workers=0),
        out / "features",
        synthetic_truth(out / "ground_truth.json"),
        progress=False,
        region_views=True,
    )
    return out


TINY_TRAIN = dict(epochs=4, batch_size=20, lr=0.01, lr_drop_epochs=1)
TINY_EVALUATION = dict(n_boot=50, hub_k=2)  # k < the 4 test images
TINY_SYSTEMS = {
    "fragment": dict(embed_dim=32, dense_epochs=2),
    "devise": dict(embed_dim=32),
    "random": {},
    "socher": {},
    "kcca": dict(rff_dim=64, components=8),
    "vse": dict(embed_dim=16, word_dim=12, hidden=16),
    "stt": dict(embed_dim=16, word_dim=12, hidden=16, dec_hidden=16, max_len=8),
    "scan": dict(embed_dim=16, word_dim=12),
}
TINY_RUNS = {
    "full": {"system": "fragment"},
    "devise": {"system": "devise"},
    "random": {"system": "random"},
    "dtrnn": {"system": "socher"},
}


def tiny_params(**runs) -> dict:
    """A params dict for the tiny benchmark: TINY_TRAIN, TINY_SYSTEMS and the runs given (default TINY_RUNS)."""
    return {
        "train": dict(TINY_TRAIN),
        "evaluation": dict(TINY_EVALUATION),
        "systems": {k: dict(v) for k, v in TINY_SYSTEMS.items()},
        "runs": runs or dict(TINY_RUNS),
        "study": {"seeds": [0], "jobs": 1},
    }


def tiny_eval(**overrides):
    """The EvalConfig of the tiny benchmark (TINY_EVALUATION), with keys overridden."""
    from fraglib.run.evaluate import EvalConfig

    return EvalConfig(**{**TINY_EVALUATION, **overrides})


def tiny_spec(run: str = "full", **overrides):
    """The RunSpec of a tiny run, with trainer or system keys overridden."""
    from fraglib.run.train import resolve_run

    return resolve_run(tiny_params(), run, extra=overrides)


@pytest.fixture(scope="session")
def tiny_study(tiny_full, tmp_path_factory):
    """Four runs (fragment, devise, random, socher) x one seed trained for a few epochs on the
    tiny benchmark, plus a search table."""
    import yaml

    from fraglib_study.experiments.study import run_study

    runs = tmp_path_factory.mktemp("runs")
    params = tiny_params()
    # what the reports read run order, labels and the Socher tables' rows from
    (runs / "params.yaml").write_text(
        yaml.safe_dump(
            {
                **params,
                "results_report": {
                    "socher_tables": {
                        "margin": {"random": "random", "dt_rnn": "dtrnn", "sdt_rnn": "not_run"},
                        "squared": {"dt_rnn": "dtrnn"},
                    }
                },
            }
        )
    )
    for r in params["runs"]:
        run_study(DataPaths(tiny_full), r, params, runs / r)
    table = runs / "search.csv"
    table.write_text("lr,margin,val_rsum_best\n0.01,0.3,100.0\n")
    table.with_suffix(".json").write_text('{"trials": 1, "epochs": 1, "seed": 0, "space": {}}')
    return runs


@pytest.fixture(scope="session")
def explorer_data(tiny_study, tiny_full, tmp_path_factory):
    """The explorer's data of the tiny study: three runs, k = 3 (the test split has 4 images)."""
    from fraglib_study.experiments.explore import ExplorerConfig, build

    out = tmp_path_factory.mktemp("explorer") / "explorer"
    runs = {r: tiny_study / r / "seeds" / "seed0" for r in ("full", "devise", "random")}
    cfg = ExplorerConfig(k=3, align_runs=("full",), map_runs=("devise",))
    build(runs, cfg, out, "synthetic", tiny_full / "ground_truth.json", labels={"full": "Our model"})
    return out, runs
