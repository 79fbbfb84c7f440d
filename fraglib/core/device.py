"""Which torch device to run on, and why (the only place in fraglib that names a device type).

Order: the ``FRAGLIB_DEVICE`` environment variable if set (``cpu``, ``cuda``, ``cuda:1``, ``mps``),
else CUDA when a GPU is visible, else Apple MPS, else CPU. A CUDA build of torch on a machine
without a GPU falls through to the CPU.
"""

from __future__ import annotations

import contextlib
import os
import platform

import torch

ENV_VAR = "FRAGLIB_DEVICE"


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def select_device(preference: str | None = None) -> tuple[torch.device, str]:
    """Return ``(device, reason)``. ``preference`` (or $FRAGLIB_DEVICE) overrides detection.

    Raises ValueError naming the setting when the requested device is unknown or absent.
    """
    source = "argument"
    if preference is None and os.environ.get(ENV_VAR):
        preference, source = os.environ[ENV_VAR], f"${ENV_VAR}"
    if preference:
        pref = preference.strip().lower()
        try:
            dev = torch.device(pref)
        except RuntimeError as exc:
            raise ValueError(f"{source}={preference!r}: not a torch device; use cpu, cuda, cuda:N or mps") from exc
        if dev.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(
                    f"{source}={preference!r}: CUDA requested but torch sees no CUDA device "
                    f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'})"
                )
            idx = dev.index or 0
            if idx >= torch.cuda.device_count():
                raise ValueError(f"{source}={preference!r}: only {torch.cuda.device_count()} CUDA device(s)")
            return dev, f"{_cuda_name(idx)} (requested by {source})"
        if dev.type == "mps" and not _mps_available():
            raise ValueError(f"{source}={preference!r}: MPS requested but not available")
        if dev.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"{source}={preference!r}: unsupported device type, use cpu, cuda, cuda:N or mps")
        return dev, f"{dev.type} (requested by {source})"
    if torch.cuda.is_available():  # under torchrun: this process's GPU (LOCAL_RANK)
        idx = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
        return torch.device("cuda", idx), f"{_cuda_name(idx)} (CUDA detected)"
    if _mps_available():
        return torch.device("mps"), "Apple MPS (detected, no CUDA)"
    cuda_note = "CUDA build, no GPU visible" if torch.version.cuda else "CPU-only torch build"
    return torch.device("cpu"), f"CPU, {torch.get_num_threads()} threads ({cuda_note}; set ${ENV_VAR} to override)"


def _cuda_name(index: int) -> str:
    props = torch.cuda.get_device_properties(index)
    return f"cuda:{index} {props.name}, {props.total_memory / 2**30:.1f} GiB"


def describe(preference: str | None = None) -> str:
    """One line for the top of every notebook: what we run on and why."""
    dev, reason = select_device(preference)
    return f"fraglib runs on {dev}: {reason}; torch {torch.__version__}"


def _cores() -> str:
    """The logical cores this process may run on, of the machine's: ``2``, or ``1 of 2`` under ``taskset -c 0``."""
    total = os.cpu_count() or 1
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else total
    return str(total) if mine >= total else f"{mine} of {total}"


def hardware(device: torch.device) -> dict[str, str | int]:
    """What a timing was measured on: ``device`` (the GPU's name and memory, or ``cpu``), ``machine`` (the CPU's
    model name, the instruction set torch's kernels use on it and the logical cores this process may use, e.g. ``AMD EPYC
    (AVX2), 2 logical cores`` (``1 of 2 logical cores`` under ``taskset -c 0``): two CPUs
    of one model name but other kernels give other floats and times, so they are never one machine) and
    ``threads`` (torch's intra-op threads)."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        names = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    isa = torch.backends.cpu.get_cpu_capability()
    return {
        "device": _cuda_name(device.index or 0) if device.type == "cuda" else device.type,
        "machine": f"{cpu} ({isa}), {_cores()} logical cores",
        "threads": torch.get_num_threads(),
    }


def backend(device: torch.device) -> str:
    """The torch.distributed backend for processes on ``device``: NCCL for CUDA, gloo otherwise."""
    return "nccl" if device.type == "cuda" else "gloo"


def make_deterministic(device: torch.device) -> None:
    """Ask for deterministic kernels on a GPU, so a fixed seed gives the same floats on a re-run
    there too: CUDA's ``index_add_`` (used by every score function) otherwise accumulates with
    atomics in a varying order (measured on an H100: differences of ~1e-7 between two identical
    calls; with this, none, and no slower). cuBLAS needs its workspace setting before first use.
    On the CPU nothing changes: its kernels are deterministic already."""
    if device.type != "cuda":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on ``device`` without the host waiting for the device: on CUDA through pinned memory with
    ``non_blocking`` (a plain copy from pageable memory waits for the device's queue to drain, which makes a
    step's host and device work take turns); elsewhere ``.to(device)`` (on the CPU: the tensor itself)."""
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)
