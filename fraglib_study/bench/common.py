"""What every benchmark shares: the entry schema, the results file, fresh processes, the matmul
reference rate, and random inputs of Pascal1K's size for the systems."""

from __future__ import annotations

import itertools
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from fraglib.core.outputs import git_revision, write_text
from fraglib_study.report.loading import read_register

RESULTS = Path("benchmarks/results.json")


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # the instruction set torch's CPU kernels use: two CPUs of one name can differ in it, and with it in the
    # last bits of their floats (README "Reproducibility"); an AVX-512 'AMD EPYC; 2 cores' ran `make` in 11.8 min,
    # its AVX2 namesake in 24-28
    return (
        f"{cpu}; {os.cpu_count()} cores; {torch.backends.cpu.get_cpu_capability()}; torch {torch.__version__} "
        f"({torch.get_num_threads()} threads); Python {platform.python_version()}"
    )


def entry(
    name: str, value: float, unit: str, reference: float | None = None, ratio: float | None = None, **extra: Any
) -> dict[str, Any]:
    from datetime import datetime, timezone

    return {
        "name": name,
        "value": value,
        "unit": unit,
        "reference": reference,
        "ratio": ratio,
        "machine": machine(),
        "commit": git_revision(),  # the code measured, and when (an entry of an older study says so by itself)
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        **extra,
    }


def matmul_gflops(m: int, k: int, n: int, repeats: int = 5, device=None) -> float:
    import torch

    device = device or torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    a, b = torch.randn(m, k, device=device), torch.randn(k, n, device=device)
    a @ b
    ts = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        a @ b
        sync()
        ts.append(time.perf_counter() - t0)
    return 2 * m * k * n / statistics.median(ts) / 1e9


def in_fresh_processes(target: Callable, repeats: int) -> list[Any]:
    """What ``target(queue)`` puts, from ``repeats`` fresh (spawned) processes one after another, so
    that each one's peak memory is its own."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = []
    for _ in range(repeats):
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(q,))
        p.start()
        out.append(q.get())
        p.join()
    return out


def measured(q, fn: Callable, args: tuple) -> None:  # a fresh process: fn's seconds and this process's peak RSS
    import resource

    import torch

    torch.set_num_threads(int(os.environ.get("FRAGLIB_BENCH_THREADS", torch.get_num_threads())))
    t0 = time.perf_counter()
    extra = fn(*args)
    q.put((time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, extra))


def fresh(fn: Callable, *args: Any) -> tuple[float, float, Any]:
    """``fn(*args)`` in a fresh (spawned) process: (its seconds, the process's peak RSS in MB, what it returned);
    a RuntimeError naming ``fn`` when the process dies before reporting."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=measured, args=(q, fn, args))
    p.start()
    return result_of(
        p, q, getattr(fn, "__name__", str(fn)) + (f" {args[0]}" if args and isinstance(args[0], str) else "")
    )


def result_of(p: Any, q: Any, what: str) -> Any:
    """What process ``p`` puts on ``q``; a RuntimeError naming ``what`` if it exits without (its traceback is
    on stderr) instead of waiting for ever."""
    import queue

    while True:
        try:
            r = q.get(timeout=5)
            p.join()
            return r
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(
                    f"{what}: the benchmark process exited with code {p.exitcode} before reporting "
                    "(its error is printed above)"
                ) from None


def gpu_absent(name: str, command: str = "epoch systems_device profile") -> list[dict[str, Any]]:
    """An entry saying why a GPU figure is missing and which ``python -m fraglib_study bench`` ``command`` fills it
    (none when a CUDA device is visible)."""
    import torch

    if torch.cuda.is_available():
        return []
    return [
        entry(
            name,
            None,
            "s",
            note="not measured: no CUDA device visible to this process (torch "
            f"{torch.__version__}, CUDA build {torch.version.cuda or 'no'}); run `python -m fraglib_study bench "
            f"{command}` on a GPU machine",
        )
    ]


def host(m: str) -> str:
    """The part of a ``machine`` string that names the computer and torch build (not the thread count)."""
    return m.split(" (")[0]


def keep_pending(new: list[dict[str, Any]], path: Path) -> Path:
    """Keep ``new`` beside the results file ``path`` and return where: appended to the entries already in
    ``<path>.pending.json`` (a refused run before this one), or, when that file is damaged, in the first free
    ``<path>.pending<N>.json``. Nothing measured is replaced."""
    for n in itertools.count(1):
        pending = path.with_suffix(f".pending{n if n > 1 else ''}.json")
        try:
            old = read_register(pending)
        except ValueError:
            continue
        write_text(pending, json.dumps(old + new, indent=1) + "\n")
        return pending


def merge(new: list[dict[str, Any]], path: Path = RESULTS, overwrite: bool = False) -> list[dict[str, Any]]:
    """Put ``new`` into the results file at ``path``: an entry replaces the one of its name, other entries stay
    (each names its machine). Replacing an entry measured on another machine (``host``) needs ``overwrite``.
    On any failure (such a refusal: FileExistsError; a damaged file: ValueError; a failed write: OSError) the
    new entries are kept (:func:`keep_pending`) and the error says where."""
    try:
        old = read_register(path)
        mine = {e["name"]: host(e.get("machine", "")) for e in new}
        foreign = [e["name"] for e in old if e["name"] in mine and host(e.get("machine", "")) != mine[e["name"]]]
        if foreign and not overwrite:
            raise FileExistsError(
                f"{path}: {len(foreign)} entries to replace were measured on another machine "
                f"({', '.join(foreign[:5])}{' …' if len(foreign) > 5 else ''}). Pass --overwrite to "
                "replace them, or --out elsewhere."
            )
        merged = sorted([e for e in old if e["name"] not in mine] + new, key=lambda e: e["name"])
        write_text(path, json.dumps(merged, indent=1) + "\n")
        return merged
    except (OSError, ValueError) as exc:
        raise type(exc)(f"{exc} This run's entries are kept in {keep_pending(new, path)}.") from None


REGIONS = {"rcnn": 20, "top36": 37, "grid": 37, "groundtruth": 4, "fullframe": 1, "none": 1}  # rows per image


def random_split(
    n_images: int = 800,
    per_image: int = 5,
    img_dim: int = 1280,
    seed: int = 0,
    regions: int = 1,
    n_rel: int = 40,
    device: Any = "cpu",
):
    """A training split of Pascal1K's size with random trees (≈ 10 nodes, as spaCy's Pascal1K trees)
    and ``regions`` random descriptors per image: the cost of the systems does not depend on the values.
    Every sentence view reads it: ``rel`` < ``n_rel`` is a relation type, or a token id of the tokens view
    (``n_rel`` = its vocabulary, ~1,000 words on Pascal1K). Tensors on ``device``."""
    import numpy as np
    import torch

    from fraglib.run.inputs import Ragged, Split
    from fraglib.text.trees import binarize_head_outward, slots, subtree_sizes

    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {
        k: [] for k in ("w1", "w2", "rel", "parent", "side", "rank", "ell", "bin_left", "bin_right")
    }
    counts = []
    for _ in range(n_images * per_image):
        m = int(np.clip(rng.poisson(9.8), 2, 35))
        parent = np.array([-1] + [int(rng.integers(0, i)) for i in range(1, m)])
        order = rng.permutation(m)  # relabel so the root is anywhere
        inv = np.argsort(order)
        parent = np.array([inv[parent[order[i]]] if parent[order[i]] >= 0 else -1 for i in range(m)])
        side, rank = slots(parent)
        left, right = binarize_head_outward(parent)
        w = rng.integers(0, 3000, m)
        for k, v in (
            ("w1", w),
            ("w2", w),
            ("rel", rng.integers(0, n_rel, m)),
            ("parent", parent),
            ("side", side),
            ("rank", np.minimum(rank, 5)),
            ("ell", subtree_sizes(parent)),
            ("bin_left", np.append(left, -1)),
            ("bin_right", np.append(right, -1)),
        ):
            cols[k].append(np.asarray(v, np.int64))
        counts.append(m)
    t = lambda a: torch.from_numpy(a).to(device)  # noqa: E731
    sent = Ragged({k: t(np.concatenate(v)) for k, v in cols.items()}, np.concatenate([[0], np.cumsum(counts)]))
    imgs = Ragged(
        {"x": t(rng.standard_normal((n_images * regions, img_dim)).astype(np.float32))},
        np.arange(0, n_images * regions + 1, regions),
    )
    words = t(rng.standard_normal((3000, 50)).astype(np.float32))
    split = Split(
        "train", imgs, sent, np.repeat(np.arange(n_images), per_image), np.arange(n_images * per_image), words
    )
    return split, {"n_words": 3000, "word_dim": 50, "img_dim": img_dim, "n_relations": n_rel, "max_rank": 6}


def token_split(n_images: int = 800, per_image: int = 5, n_vocab: int = 1000, img_dim: int = 1280, seed: int = 0):
    """A training split of Pascal1K's size in the tokens view: 4,000 captions of 5-20 tokens (mean ≈ 11,
    as Pascal1K's), a vocabulary of ~1,000 words (count >= 4), random full-frame descriptors."""
    import numpy as np
    import torch

    from fraglib.run.inputs import Ragged, Split

    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 18, n_images * per_image)
    rel = torch.from_numpy(rng.integers(0, n_vocab, lengths.sum()))
    sent = Ragged({"rel": rel, "w1": torch.zeros_like(rel)}, np.concatenate([[0], np.cumsum(lengths)]))
    imgs = Ragged(
        {"x": torch.from_numpy(rng.standard_normal((n_images, img_dim)).astype(np.float32))}, np.arange(n_images + 1)
    )
    split = Split(
        "train",
        imgs,
        sent,
        np.repeat(np.arange(n_images), per_image),
        np.arange(n_images * per_image),
        torch.zeros(1, 50),
    )
    return split, {"n_relations": n_vocab, "n_words": 1, "word_dim": 50, "img_dim": img_dim}


def sentence_rows(split: Any, a: int, b: int) -> Any:
    from fraglib.run.inputs import Ragged

    off = split.sentences.off
    return Ragged({k: v[off[a] : off[b]] for k, v in split.sentences.data.items()}, off[a : b + 1] - off[a])
