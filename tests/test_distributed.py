"""Data-parallel training (fraglib.core.distributed): two gloo processes started by torchrun take the same
step as one process on the same global batch, and a short two-process run ends where one process ends."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fraglib.core import distributed
from fraglib.run.inputs import DataPaths, load_splits, make_batches
from fraglib.run.train import Step, train
from fraglib.systems import get_system
from fraglib.systems.base import join_parts

from conftest import ROOT, tiny_eval, tiny_spec


def torchrun(args: list[str], n: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    errors = [line for line in r.stderr.splitlines() if "Error" in line]
    assert r.returncode == 0, "\n".join(errors[:5]) + r.stdout[-2000:] + r.stderr[-2000:]
    return r


def one_process_step(data: Path, spec, epoch: int):
    cls, tc = get_system(spec.system), spec.train_config
    cpu = torch.device("cpu")
    splits, dims, _ = load_splits(DataPaths(data), cls.views(spec.system_config), cpu)
    tr = splits["train"]
    torch.manual_seed(tc.seed)
    system = cls(spec.system_config, dims, tc.seed)
    system.prepare(tr)
    system.use_training_split(tr)
    b = make_batches(tr, tc.batch_size, tc.seed, epoch)[0]
    assert len(b) >= 5, "the batch must split unevenly over two processes for the test to mean something"
    cost, _ = Step(system, distributed.Context())(tr.images.take(tr.sentence_image[b]), tr.sentences.take(b), epoch)
    cost.backward()
    return cost.detach(), {n: p.grad for n, p in system.named_parameters()}


CASES = [
    ("fragment", {}, 0),
    ("fragment", {}, 3),  # dense phase, then MIL
    ("fragment", {"normalize": True, "sentences": "bow"}, 3),
    ("devise", {}, 0),
    ("socher", {}, 0),  # Eq. 5 against the whole split
    ("vse", {"negatives": "hardest", "warmup_epochs": 0}, 0),
    ("vse", {"similarity": "attention", "images": "top36"}, 0),  # padded regions and words
    ("stt", {}, 0),
]


def test_two_processes_take_the_one_process_step(tiny_full, tmp_path):
    """One DDP step of 2 gloo processes on an 11-pair batch (shares of 6 and 5) = one process's step, for
    every case of CASES (one torchrun for all: each start costs seconds)."""
    from fraglib.run.train import resolve_run

    from conftest import tiny_params

    specs = [
        resolve_run(tiny_params(r={"system": system, **override}), "r", extra={"batch_size": 11})
        for system, override, _ in CASES
    ]
    f = tmp_path / "specs.json"
    f.write_text(
        json.dumps(
            [
                {
                    "system": sp.system,
                    "system_config": dataclasses.asdict(sp.system_config),
                    "train_config": dataclasses.asdict(sp.train_config),
                    "epoch": epoch,
                }
                for sp, (_, _, epoch) in zip(specs, CASES)
            ]
        )
    )
    torchrun([str(ROOT / "tests" / "ddp_worker.py"), str(tiny_full), str(f), str(tmp_path)])
    for n, (spec, (system, override, epoch)) in enumerate(zip(specs, CASES)):
        case = f"{system} {override} epoch {epoch}"
        cost1, g1 = one_process_step(tiny_full, spec, epoch)
        got = torch.load(tmp_path / f"{n}.pt")
        assert torch.allclose(got["cost"], cost1, rtol=1e-5, atol=1e-6), case
        assert set(got["grads"]) == set(g1) and any(g is not None and g.abs().sum() > 0 for g in g1.values()), case
        scale = max(float(g.abs().max()) for g in g1.values() if g is not None)
        for name, g in g1.items():
            if g is None:
                assert got["grads"][name] is None or not got["grads"][name].any(), (case, name)
            else:
                err = float((got["grads"][name] - g).abs().max())  # float sums in another order
                assert err <= 1e-5 * scale, f"{case}, {name}: max |diff| {err:.3g}, largest gradient entry {scale:.3g}"


def test_join_parts_pads_and_refuses_what_it_cannot_join():
    a, b = torch.ones(2, 3), torch.ones(1, 5)
    j = join_parts([(a, np.array([1, 2])), (b, np.array([3]))])
    assert j[0].shape == (3, 5) and j[0][:2, 3:].abs().sum() == 0 and j[1].tolist() == [1, 2, 3]
    assert join_parts([torch.ones(2, 2, dtype=torch.bool), torch.ones(1, 3, dtype=torch.bool)]).sum() == 7
    with pytest.raises(TypeError, match="override join"):
        join_parts([3, 4])


def test_shards_cover_the_batch_in_order():
    b = np.arange(11)
    parts = [distributed.shard(b, distributed.Context(r, 3)) for r in range(3)]
    assert np.concatenate(parts).tolist() == b.tolist() and [len(p) for p in parts] == [4, 4, 3]


def test_a_short_two_process_run_matches_one_process_and_resumes(tiny_full, tmp_path):
    """torchrun -m fraglib.run train with 2 gloo processes: rank 0 alone writes; test metrics within a stated
    tolerance of the one-process run (same global batches; float sums in another order); a killed run resumes."""
    params = tmp_path / "params.yaml"
    import yaml

    from conftest import tiny_params

    p = tiny_params()
    params.write_text(yaml.safe_dump(p))
    args = [
        "-m",
        "fraglib.run",
        "train",
        "--run-name",
        "full",
        "--dataset-dir",
        str(tiny_full),
        "--params",
        str(params),
    ]
    torchrun(args + ["--out", str(tmp_path / "two")])
    one = train(
        DataPaths(tiny_full), tmp_path / "one", tiny_spec(), tiny_eval(), device=torch.device("cpu"), progress=False
    )
    two = json.loads((tmp_path / "two" / "metrics.json").read_text())
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [
        "best.pt",
        "history.csv",
        "last.pt",
        "metrics.json",
        "ranks.json",
        "timing.json",
    ]
    h1 = (tmp_path / "one" / "history.csv").read_text().splitlines()
    h2 = (tmp_path / "two" / "history.csv").read_text().splitlines()
    assert h1[0] == h2[0] and len(h1) == len(h2)
    c1 = [float(r.split(",")[h1[0].split(",").index("train_cost")]) for r in h1[1:]]
    c2 = [float(r.split(",")[h2[0].split(",").index("train_cost")]) for r in h2[1:]]
    assert np.allclose(c1, c2, rtol=1e-4), (c1, c2)  # tolerance: 1e-4 relative on the cost
    for d in ("annotation", "search"):
        for k in ("r1", "r5", "r10"):
            assert abs(one["test"][d][k] - two["test"][d][k]) <= 1e-9 + 100 / 20, (d, k)  # at most one query of 20
    # stopped after one epoch (as if killed), resumed by a second torchrun: the uninterrupted run's outputs
    out = ["--out", str(tmp_path / "resumed")]
    torchrun(args + out + ["--stop-after", "1"])
    assert not (tmp_path / "resumed" / "metrics.json").exists()
    torchrun(args + out)
    assert (tmp_path / "resumed" / "metrics.json").read_text() == (tmp_path / "two" / "metrics.json").read_text()


@pytest.mark.parametrize(
    "system,override",
    [("fragment", {}), ("devise", {}), ("vse", {"negatives": "hardest", "warmup_epochs": 0}), ("stt", {})],
)
def test_mixed_precision_changes_the_step_little(tiny_full, system, override):
    """train.amp (bfloat16 autocast of the step): the cost within 2 % and the gradient direction within
    cosine 0.99 of float32 on one batch — the tolerance we call safe."""
    from fraglib.run.train import resolve_run

    from conftest import tiny_params

    spec = resolve_run(tiny_params(r={"system": system, **override}), "r")
    cls, cpu = get_system(spec.system), torch.device("cpu")
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), cpu)
    tr = splits["train"]
    b = make_batches(tr, 16, 0, 0)[0]
    out = []
    for amp in (False, True):
        torch.manual_seed(0)
        s = cls(spec.system_config, dims, 0)
        s.prepare(tr)
        s.use_training_split(tr)
        with torch.autocast("cpu", torch.bfloat16, enabled=amp):
            cost, _ = Step(s, distributed.Context())(tr.images.take(tr.sentence_image[b]), tr.sentences.take(b), 0)
        cost.float().backward()
        g = torch.cat([p.grad.flatten() for p in s.parameters() if p.grad is not None])
        out.append((float(cost), g))
    (c32, g32), (c16, g16) = out
    assert c16 != c32, "autocast changed nothing: the test would measure nothing"
    assert abs(c16 - c32) <= 0.02 * abs(c32)
    assert torch.nn.functional.cosine_similarity(g16, g32, dim=0) > 0.99


def test_torchrun_features_take_a_shard_per_rank_and_merge(tiny_full, tmp_path):
    """`torchrun -m fraglib.vision features`: each rank extracts its shard, rank 0 merges into the
    arrays one process wrote (tiny_full's caches, same settings): boxes and indices exactly, CNN
    descriptors up to float rounding (torchrun gives each rank one thread, the test process may use
    more, and the convolution kernels then sum in another order)."""
    params = tmp_path / "params.yaml"
    params.write_text("vision:\n  max_proposals: 100\n  num_workers: 0\n")
    out = tmp_path / "features"
    torchrun(
        [
            "-m",
            "fraglib.vision",
            "features",
            "--dataset-dir",
            str(tiny_full),
            "--truth",
            str(tiny_full / "ground_truth.json"),
            "--region-views",
            "--params",
            str(params),
            "--out-dir",
            str(out),
        ]
    )
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["0of2", "1of2"]
    for det in ("rcnn", "groundtruth", "top36", "grid"):
        a, b = np.load(tiny_full / "features" / f"{det}.npz"), np.load(out / f"{det}.npz")
        for k in a.files:
            if a[k].dtype.kind == "f":
                np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=1e-5, err_msg=f"{det} {k}")
            else:
                assert np.array_equal(a[k], b[k]), (det, k)


PARENT = """
import os, sys, time
from fraglib.core.distributed import worker_pool

if __name__ == "__main__":
    with worker_pool(1) as ex:
        pid = ex.submit(os.getpid).result()
        ex.submit(time.sleep, 300)
        open(sys.argv[1], "w").write(str(pid))
        time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has stopped; only its entry is left


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_pool_workers_die_with_the_process_that_started_them(tmp_path):
    """A killed study or search must not leave its seed workers training (they wrote into the killed run's
    folder): kill the parent while its worker sleeps, and the worker goes too."""
    import time

    (tmp_path / "parent.py").write_text(PARENT)
    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), str(pid_file)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        t0 = time.time()
        while not pid_file.exists() or not pid_file.read_text():
            assert parent.poll() is None and time.time() - t0 < 120, "the parent did not start its worker"
            time.sleep(0.2)
        worker = int(pid_file.read_text())
        assert worker != parent.pid and _alive(worker)
        parent.kill()
        parent.wait()
        t0 = time.time()
        while _alive(worker) and time.time() - t0 < 30:
            time.sleep(0.2)
        assert not _alive(worker), f"worker {worker} outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        if pid_file.exists() and pid_file.read_text() and _alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), 9)  # no orphan left by a failing run
