"""Data-parallel training over the processes ``torchrun`` starts (docs/training.md, "Many processes").

    torchrun --nproc_per_node 2 -m fraglib.run train --run full --dataset-dir data/synthetic --out runs/try
    torchrun --nnodes 2 --node_rank 0 --rdzv_backend c10d --rdzv_endpoint HOST:29500 --nproc_per_node 8 -m fraglib.run train ...

Every process draws the same global batch (the order depends only on (seed, epoch)) and encodes its
contiguous share of it (:func:`shard`); the encodings are exchanged with gradients (:meth:`Context.gather`)
and joined by the system (``System.join``), so every process computes the loss of the whole global batch,
as one process would. Backward sums each share's gradient over the processes (N × its true value) and
DistributedDataParallel averages the parameter gradients (÷ N): the step equals the one-process step on
the same batch, to float tolerance (tests/test_distributed.py). Dropout draws its masks per process, so
with dropout the runs agree in distribution, not in floats. Rank 0 alone validates, writes checkpoints,
metrics and reports; a kill resumes as before (every process reads rank 0's ``last.pt``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist


@dataclasses.dataclass
class Context:
    """This process's place: ``rank`` of ``world`` processes on ``device``; ``group`` carries the
    encodings' exchange (its own group, so its collectives never interleave with DDP's gradient buckets)."""

    rank: int = 0
    world: int = 1
    group: Any = None
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    def gather(self, enc: Any) -> list[Any]:
        """Every process's ``enc`` (same structure on all), in rank order; tensors that require grad
        pass gradients back to their owner. Leaves: tensors, numpy arrays, ints, None, tuples,
        lists and dataclasses."""
        if self.world == 1:
            return [enc]
        leaves, build = _flatten(enc)
        per_leaf = [self._gather_leaf(x) for x in leaves]
        return [build([p[r] for p in per_leaf]) for r in range(self.world)]

    def _gather_leaf(self, x: Any) -> list[Any]:
        if x is None:
            return [None] * self.world
        if isinstance(x, (int, np.integer)):
            return [int(t[0]) for t in self._gather_leaf(torch.tensor([int(x)], device=self.device))]
        if isinstance(x, np.ndarray):
            t = torch.from_numpy(np.ascontiguousarray(x)).to(self.device)
            return [g.cpu().numpy().astype(x.dtype, copy=False) for g in self._gather_leaf(t)]
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"cannot exchange an encoding part of type {type(x).__name__} between processes "
                "(tensors, numpy arrays, ints, tuples, lists and dataclasses only)"
            )
        if x.device != self.device and x.device.type == "cpu":  # a CPU copy (Rows.cpu) beside GPU data: NCCL
            return [g.cpu() for g in self._gather_leaf(x.to(self.device))]  # exchanges device tensors only
        if x.dim() > 8:
            raise ValueError(f"cannot exchange a tensor of {x.dim()} dimensions (8 at most)")
        mine = torch.tensor(list(x.shape) + [-1] * (8 - x.dim()), dtype=torch.long, device=x.device)
        shapes = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(shapes, mine, group=self.group)
        sizes = [tuple(int(v) for v in row.tolist() if v >= 0) for row in shapes]
        if x.dtype == torch.bool:
            return [t.bool() for t in _exchange(x.to(torch.uint8), sizes, self)]
        if x.requires_grad:
            return list(_Exchange.apply(x, sizes, self))
        return _exchange(x, sizes, self)


def _exchange(x: torch.Tensor, sizes: list[tuple[int, ...]], ctx: Context) -> list[torch.Tensor]:
    """All processes' ``x`` (shapes ``sizes``), zero-padded to a common shape for the collective."""
    big = tuple(max(s[d] for s in sizes) for d in range(x.dim()))
    buf = x.new_zeros(big)
    buf[tuple(slice(0, n) for n in x.shape)] = x
    out = [torch.empty_like(buf) for _ in sizes]
    dist.all_gather(out, buf.contiguous(), group=ctx.group)
    return [o[tuple(slice(0, n) for n in s)] for o, s in zip(out, sizes)]


class _Exchange(torch.autograd.Function):
    """All-gather forward; backward sums every process's gradient of each share and hands the share
    its sum (an all-reduce of the padded gradients: works on gloo and NCCL alike)."""

    @staticmethod
    def forward(ctx, x, sizes, context):
        ctx.sizes, ctx.context, ctx.shape = sizes, context, x.shape
        return tuple(_exchange(x.detach(), sizes, context))

    @staticmethod
    def backward(ctx, *grads):
        sizes, c = ctx.sizes, ctx.context
        big = tuple(max(s[d] for s in sizes) for d in range(len(ctx.shape)))
        ref = next(g for g in grads if g is not None)
        buf = ref.new_zeros((len(sizes),) + big)
        for r, (g, s) in enumerate(zip(grads, sizes)):
            if g is not None:
                buf[(r,) + tuple(slice(0, n) for n in s)] = g
        dist.all_reduce(buf, group=c.group)
        return buf[(c.rank,) + tuple(slice(0, n) for n in ctx.shape)], None, None


def _flatten(obj: Any) -> tuple[list[Any], Any]:
    """(leaves, build): ``build(new_leaves)`` rebuilds ``obj``'s structure around new leaves."""
    if isinstance(obj, (tuple, list)):
        parts = [_flatten(o) for o in obj]
        counts = [len(p[0]) for p in parts]

        def build(leaves, parts=parts, counts=counts, kind=type(obj)):
            out, a = [], 0
            for (_, b), n in zip(parts, counts):
                out.append(b(leaves[a : a + n]))
                a += n
            return kind(out) if kind in (tuple, list) else kind(*out)

        return [x for p in parts for x in p[0]], build
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = [f.name for f in dataclasses.fields(obj)]
        leaves, b = _flatten(tuple(getattr(obj, n) for n in names))
        return leaves, lambda new, b=b, names=names, obj=obj: dataclasses.replace(obj, **dict(zip(names, b(new))))
    return [obj], lambda new: new[0]


def shard(batch: np.ndarray, ctx: Context) -> np.ndarray:
    """This process's contiguous share of a global batch (sizes differ by at most one)."""
    return np.array_split(batch, ctx.world)[ctx.rank]


def setup(device: torch.device) -> Context:
    """The context of this process: one process unless ``torchrun`` set ``WORLD_SIZE`` > 1, then the
    process group is started (NCCL on GPUs, gloo on CPUs: :func:`fraglib.core.device.backend`)."""
    from fraglib.core.device import backend

    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return Context(device=device)
    if not dist.is_initialized():
        dist.init_process_group(backend(device))
    return Context(dist.get_rank(), dist.get_world_size(), dist.new_group(), device)


def teardown(ctx: Context) -> None:
    if ctx.world > 1 and dist.is_initialized():
        dist.destroy_process_group()


def die_with_parent() -> None:
    """Pool initializer: on Linux the kernel sends this worker SIGTERM when the process that started it
    dies (``prctl(PR_SET_PDEATHSIG)``), so a killed study or search leaves no orphan training behind."""
    import signal
    import sys

    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent died before the line above took effect
            os._exit(1)


def worker_pool(jobs: int):
    """A ``ProcessPoolExecutor`` of ``jobs`` spawned workers that die with this process (the seeds of a
    study, the trials of a search)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    return ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn"), initializer=die_with_parent)
