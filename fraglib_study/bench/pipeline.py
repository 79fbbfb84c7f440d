"""Benchmarks of the pipeline: the synthetic generator, what each pipeline process pays at start-up,
`dvc repro` from a fresh clone (default and Pascal1K studies), and which settings change the bits of the
float work."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fraglib.core.outputs import write_text
from fraglib_study.bench.common import entry


def bench_synthetic(repeats: int = 3, n_images: int = 60) -> list[dict[str, Any]]:
    """Synthetic generator throughput (images/s incl. PNG writing), median of ``repeats`` runs."""
    from fraglib.data.synthetic import SynthConfig, write_benchmark

    cfg = SynthConfig(n_train=n_images - 20, n_val=10, n_test=10, seed=0)
    rates = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            write_benchmark(cfg, tmp, progress=False)
            rates.append(n_images / (time.perf_counter() - t0))
    return [
        entry(
            "synthetic_images_per_s",
            round(statistics.median(rates), 2),
            "images/s",
            repeats=repeats,
            images_per_repeat=n_images,
            image_size=cfg.image_size,
            all_runs=[round(r, 2) for r in rates],
        )
    ]


def _timed_repro(workdir: Path, target: list[str], env: dict[str, str]) -> tuple[float, dict[str, float]]:
    """Run ``dvc repro <target>`` in ``workdir``; total and per-stage minutes (stage starts read off
    DVC's "Running stage" lines; a foreach stage's instances are summed under its name)."""
    import re
    import subprocess

    t0 = time.perf_counter()
    starts: list[tuple[str, float]] = []
    proc = subprocess.Popen(
        ["dvc", "repro", *target], cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.match(r"Running stage '(?:[^:']*:)?([^'@]+)(?:@[^']*)?'", line)
        if m:
            starts.append((m.group(1), time.perf_counter()))
    if proc.wait() != 0:
        raise RuntimeError(f"dvc repro failed in {workdir}")
    end = time.perf_counter()
    per: dict[str, float] = {}
    for (name, t), nxt in zip(starts, starts[1:] + [("", end)]):
        per[name] = round(per.get(name, 0.0) + (nxt[1] - t) / 60, 2)
    return (end - t0) / 60, per


def _venv_env(bin_dir: Path | None = None) -> dict[str, str]:
    """Environment in which DVC stages' ``python`` is the one in ``bin_dir`` (default: this interpreter's venv)."""
    return dict(os.environ, PATH=f"{bin_dir or Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


def _fresh_clone() -> Path:
    import subprocess

    tmp = Path(tempfile.mkdtemp(prefix="fraglib-repro-"))
    subprocess.run(["git", "clone", "-q", str(Path.cwd()), str(tmp / "clone")], check=True)
    return tmp / "clone"


def bench_repro() -> list[dict[str, Any]]:
    """The README's main command in a fresh clone of HEAD: ``make env`` (a new virtual environment, packages
    from the registries) then the default ``dvc repro`` (empty DVC cache) in it, timed per stage."""
    import subprocess

    clone = _fresh_clone()
    t0 = time.perf_counter()
    subprocess.run(["make", "env"], cwd=clone, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    env_min = (time.perf_counter() - t0) / 60
    total, per = _timed_repro(clone, [], _venv_env(clone / ".venv" / "bin"))
    make = env_min + total
    return [
        entry(
            "repro_default_minutes",
            round(total, 1),
            "min",
            stages_minutes=per,
            note="fresh clone of HEAD, empty DVC cache, `dvc repro` (environment not included)",
        ),
        entry(
            "make_default_minutes",
            round(make, 1),
            "min",
            reference=25.0,
            ratio=round(make / 25.0, 2),
            reference_is="the aim: `make` within 25 minutes of a fresh clone, environment included",
            environment_minutes=round(env_min, 1),
            repro_minutes=round(total, 1),
            note="fresh clone of HEAD: `make env` (new venv, uv from the registries) + `dvc repro`",
        ),
    ]


def bench_repro_pascal1k(in_place: bool = False) -> list[dict[str, Any]]:
    """The Pascal1K study (`dvc repro studies/pascal1k/dvc.yaml`) in a fresh clone, timed per stage.
    ``in_place``: in this checkout instead, timing only the stages that are out of date (the entry
    lists them; a stage already up to date costs nothing and is not in ``stages_minutes``)."""
    import yaml

    if in_place:
        total, per = _timed_repro(Path.cwd(), ["studies/pascal1k/dvc.yaml"], _venv_env())
        return [
            entry(
                "repro_pascal1k_minutes_in_place",
                round(total, 1),
                "min",
                stages_minutes=per,
                note="this checkout: only the stages listed in stages_minutes were out of date and re-ran",
            )
        ]
    clone = _fresh_clone()
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["pascal1k"]["root"] = str(Path(params["pascal1k"]["root"]).resolve())
    write_text(clone / "params.yaml", yaml.safe_dump(params, sort_keys=False))
    total, per = _timed_repro(clone, ["studies/pascal1k/dvc.yaml"], _venv_env())
    return [
        entry(
            "repro_pascal1k_minutes",
            round(total, 1),
            "min",
            stages_minutes=per,
            note="fresh clone of HEAD, empty DVC cache, `dvc repro studies/pascal1k/dvc.yaml`",
        )
    ]


def _wall(cmd: list[str], env: dict[str, str] | None = None, repeats: int = 3) -> float:
    """Median wall seconds of ``cmd`` in a fresh process, from the project root."""
    import subprocess

    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def bench_startup(repeats: int = 3) -> list[dict[str, Any]]:
    """What every pipeline process pays before its work, each in fresh processes (median of ``repeats``):
    torch + torch._dynamo (torch.optim imports it) with this environment's bytecode and with none (what a
    venv installed without compiling gives when PYTHONDONTWRITEBYTECODE is set, as in CI); papermill in the
    page renderer with and without :func:`fraglib_study.report.notebook.skip_iri_grammars`; ``dvc status`` of one stage."""
    py = sys.executable
    torch_cmd = [py, "-c", "import torch, torch._dynamo"]
    with tempfile.TemporaryDirectory() as empty:
        cold = _wall(
            [py, "-X", f"pycache_prefix={empty}", *torch_cmd[1:]],
            {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            repeats,
        )
    warm = _wall(torch_cmd, None, repeats)
    skip = _wall(
        [
            py,
            "-c",
            "from fraglib_study.report.notebook import skip_iri_grammars; skip_iri_grammars(); import papermill",
        ],
        None,
        repeats,
    )
    plain = _wall([py, "-c", "import papermill"], None, repeats)
    dvc = _wall([str(Path(py).parent / "dvc"), "status", "train_synthetic@fullframe"], None, repeats)
    return [
        entry(
            "startup_import_torch_s",
            round(warm, 2),
            "s",
            reference=round(cold, 2),
            ratio=round(warm / cold, 3),
            reference_is="the same import with no bytecode (`make env` compiles it: uv --compile-bytecode)",
            repeats=repeats,
        ),
        entry(
            "startup_import_papermill_s",
            round(skip, 2),
            "s",
            reference=round(plain, 2),
            ratio=round(skip / plain, 3),
            reference_is="the same import building rfc3987_syntax's grammars (fraglib_study.report.notebook.skip_iri_grammars)",
            repeats=repeats,
        ),
        entry(
            "startup_dvc_status_stage_s",
            round(dvc, 2),
            "s",
            repeats=repeats,
            note="`dvc status train_synthetic@fullframe`: DVC reads every dvc.yaml and dvc.lock of the project "
            "(ruamel.yaml.clib parses them in C)",
        ),
    ]


KERNEL_ENVS = {  # how another CPU can pick other float kernels for the same code
    "default": {},
    "2_threads": {"OMP_NUM_THREADS": "2"},
    "1_thread": {"OMP_NUM_THREADS": "1"},
    "aten_no_simd": {"ATEN_CPU_CAPABILITY": "default"},  # ATen's element-wise / reduction kernels
    "onednn_sse41": {"ONEDNN_MAX_CPU_ISA": "SSE41"},  # convolutions (the CNN)
    "mkl_compatible": {"MKL_CBWR": "COMPATIBLE"},  # matrix products (the embeddings)
    # all three pinned: to AVX2 (free on an AVX-512 Xeon: a fragment-model epoch 11.0 → 10.5 s), or to the
    # vendor-neutral branches (MKL: SSE2 "on Intel and compatible processors"; the same epoch 29.7 s)
    "pinned_avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "pinned_portable": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}


def _kernel_child() -> None:  # python -c entry: hashes of the three kinds of float work in fraglib
    import hashlib

    import numpy as np
    import torch

    from fraglib.vision.rcnn import Backbone

    g = torch.Generator().manual_seed(0)
    out = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
    a, b = torch.randn(100, 1280, generator=g), torch.randn(1280, 1000, generator=g)
    x = torch.randn(64, 4096, generator=g)
    img = (torch.rand(256, 256, 3, generator=g) * 255).to(torch.uint8).numpy()
    net = Backbone(0)
    t0 = time.perf_counter()
    work = {
        "gemm": a @ b,
        "softmax_sum": torch.softmax(x, 1).sum(0),
        "cnn": net.feature_map(Backbone.to_input(img, torch.device("cpu"))),
    }
    out["seconds"] = time.perf_counter() - t0
    out.update(
        {
            k: hashlib.sha256(np.ascontiguousarray(v.detach().numpy()).tobytes()).hexdigest()[:16]
            for k, v in work.items()
        }
    )
    print(json.dumps(out))


def bench_kernel_bits() -> list[dict[str, Any]]:
    """Which settings change the bits of fraglib's float work on this CPU (each in a fresh process):
    the number of settings under which the GEMM, the softmax/sum and the CNN feature map are not
    byte-identical to the default. Evidence for README "Reproducibility": kernels chosen by thread
    count or instruction set change the last bits, so another CPU gives other features and metrics.
    Each entry keeps the three outputs' SHA-256 prefixes (``hashes``), so two machines' registers tell whether a
    setting (``pinned_avx2``, ``pinned_portable``) gives the same bits on both."""
    import subprocess

    results = {}
    for name, extra in KERNEL_ENVS.items():
        env = {**os.environ, **extra}
        res = subprocess.run(
            [sys.executable, "-c", "from fraglib_study.bench.pipeline import _kernel_child; _kernel_child()"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        results[name] = json.loads(res.stdout.strip().splitlines()[-1])
    base = results["default"]
    entries = []
    for name, r in results.items():
        if name == "default":
            continue
        changed = [k for k in ("gemm", "softmax_sum", "cnn") if r[k] != base[k]]
        entries.append(
            entry(
                f"kernel_bits_{name}_on_{base['capability'].lower()}",  # a machine's ISA: both kept
                len(changed),
                "outputs changed of 3",
                note=f"changed: {', '.join(changed) or 'none'}; capability {r['capability']}, "
                f"{r['threads']} threads (default: {base['capability']}, {base['threads']} threads)",
                hashes={k: r[k] for k in ("gemm", "softmax_sum", "cnn")},
                default_hashes={k: base[k] for k in ("gemm", "softmax_sum", "cnn")},
                env=KERNEL_ENVS[name],
            )
        )
    return entries
