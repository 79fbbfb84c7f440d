"""`dvc repro` on a copy of the project with a tiny benchmark: runs, then has nothing to do; a local-folder
remote carries every result to a fresh clone; a one-parameter experiment re-runs only what it changes."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_dvc_repro_then_nothing_to_do(tmp_path):
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.split()
    for f in files:
        if (ROOT / f).is_file() and not f.startswith(("data/", "reports/", "runs/")) and f != "dvc.lock":
            (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, tmp_path / f)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["synthetic"].update(n_train=12, n_val=3, n_test=3, gallery=0)  # one gallery of 3
    params["data_report"]["n_show"] = 2
    params["vision"].update(max_proposals=60, num_workers=0)
    params["train"].update(epochs=2, batch_size=10, lr_drop_epochs=1)
    params["evaluation"].update(n_boot=20, hub_k=2)  # k below the 3 test images
    params["systems"]["fragment"].update(dense_epochs=1, embed_dim=16)
    params["study"] = {
        "seeds": [0],
        "jobs": 1,
        "replicates": 1,
        "runs": ["full", "random"],
        "captions": [],
        "extended_runs": [],
        "extended_captions": [],
        "train": {},
        "systems": {},
    }  # dvc.yaml reads each key
    params["runs"] = {"full": {"system": "fragment"}, "random": {"system": "random"}}
    params["fusion"] = {}  # fusions name runs of the real-data study
    params["results_report"]["n_examples"] = 1
    params["captions"]["runs"] = []  # no generating run here (tests/test_captions.py)
    params["bench"] = {}  # run lists must name runs that exist (fraglib.core.config)
    params["flickr8k"]["runs"] = []
    params["pascal1k"].update(fold_runs=[], fold_captions=[])  # the k-fold study's runs are not here
    params["explorer"].update(k=2, map_runs=[])  # k below the 3 test images; no joint-space run here
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    # stages call `python`: the interpreter running the tests (the project's venv) comes first
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")

    def run(*cmd, cwd=tmp_path):
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
        assert r.returncode == 0, f"{cmd} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    run("git", "init", "-q")
    # as `make` does: the pool runs the stages side by side on a local Dask cluster (the training stages as their
    # units) and commits each; `dvc repro` then finds every stage up to date
    pooled = run(sys.executable, "-m", "fraglib_study", "pool")
    assert "Running stage 'synthetic'" in pooled and "Finished stage 'train_synthetic@full'" in pooled
    assert "Running stage 'data_report'" in pooled and "Finished stage 'index'" in pooled
    first = run("dvc", "repro")
    assert "Running stage" not in first
    again = subprocess.run(
        [sys.executable, "-m", "fraglib_study", "pool"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert again.returncode == 0 and "stages to run: -" in again.stderr
    for page in (
        "data_report",
        "text_report",
        "vision_report",
        "training_report",
        "results_report",
        "explorer",
        "index",
    ):
        assert (tmp_path / "reports" / f"{page}.html").exists(), page
    second = run("dvc", "repro")
    assert "Running stage" not in second
    assert "stats.json" in run("dvc", "metrics", "show")
    # one-parameter experiment: of the training stages only the changed variant re-runs (targeted, so the
    # pages downstream, rendered above, are not rendered again: a minute of the test suite)
    git_env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    env.update(git_env)
    run("git", "add", "-A")
    run("git", "commit", "-qm", "baseline")
    # a shared cache (docs/scale.md, "Shared caches"): push to a local-folder remote, pull into a fresh clone,
    # which is then up to date without recomputing anything
    run("dvc", "remote", "add", "-d", "shared", str(tmp_path.parent / "remote"))
    run("git", "commit", "-qam", "remote")
    run("dvc", "push")
    clone = tmp_path.parent / "clone"
    run("git", "clone", "-q", str(tmp_path), str(clone))
    cached = Path("data/synthetic/features/rcnn.npz")  # a DVC-cached output (not in git)
    assert not (clone / cached).exists()
    # results in git, models in DVC: a clone has every seed's metrics and ranks, and no checkpoint
    assert (clone / "runs/synthetic/full/seeds/seed0/ranks.json").read_bytes() == (
        tmp_path / "runs/synthetic/full/seeds/seed0/ranks.json"
    ).read_bytes()
    assert not (clone / "models/synthetic/full/seed0/best.pt").exists()
    run("dvc", "pull", "dvc.yaml", cwd=clone)  # the studies' pipelines were never run here
    assert "up to date" in run("dvc", "status", "dvc.yaml", cwd=clone)
    assert "Running stage" not in run("dvc", "repro", cwd=clone)
    assert (clone / cached).read_bytes() == (tmp_path / cached).read_bytes()
    exp = run("dvc", "exp", "run", "-S", "+runs.full.lr=0.02", "train_synthetic")  # "+": the entry has no lr key yet
    assert "Running stage 'train_synthetic@full'" in exp
    assert "train_synthetic@random" not in exp.replace("Stage 'train_synthetic@random' didn't change", "")
    assert "Running stage 'features_synthetic'" not in exp
    assert "runs/synthetic/full/metrics.json" in run("dvc", "metrics", "diff", "HEAD")
