"""One data-parallel training step, for tests/test_distributed.py (run by torchrun, not by pytest).

    torchrun --nproc_per_node 2 tests/ddp_worker.py DATASET_DIR SPECS.json OUT_DIR

For each case of SPECS (a list of RunSpecs as JSON: system, system_config, train_config, epoch) every
process builds the system on the data, takes the first global batch of epoch ``epoch`` and runs one DDP
step; rank 0 saves the parameter gradients and the cost to OUT_DIR/<case>.pt.
"""

import json
import sys

import torch

from fraglib.core import distributed
from fraglib.run.inputs import DataPaths, load_splits, make_batches
from fraglib.run.train import Step, TrainConfig
from fraglib.systems import get_system


def main(dataset_dir: str, spec_file: str, out: str) -> None:
    ctx = distributed.setup(torch.device("cpu"))
    for n, spec in enumerate(json.loads(open(spec_file).read())):
        one_step(dataset_dir, spec, ctx, f"{out}/{n}.pt")
    distributed.teardown(ctx)


def one_step(dataset_dir: str, spec: dict, ctx: distributed.Context, out: str) -> None:
    cls, tc = get_system(spec["system"]), TrainConfig(**spec["train_config"])
    cfg = cls.Config(**spec["system_config"])
    cpu = torch.device("cpu")
    splits, dims, _ = load_splits(DataPaths(dataset_dir), cls.views(cfg), cpu)
    tr = splits["train"]
    torch.manual_seed(tc.seed)
    system = cls(cfg, dims, tc.seed)
    system.prepare(tr)
    system.use_training_split(tr)
    step = torch.nn.parallel.DistributedDataParallel(
        Step(system, ctx), find_unused_parameters=True, broadcast_buffers=False
    )
    b = distributed.shard(make_batches(tr, tc.batch_size, tc.seed, spec["epoch"])[0], ctx)
    cost, _ = step(tr.images.take(tr.sentence_image[b]), tr.sentences.take(b), spec["epoch"])
    cost.backward()
    if ctx.main:
        torch.save({"cost": cost.detach(), "grads": {n: p.grad for n, p in system.named_parameters()}}, out)


if __name__ == "__main__":
    main(*sys.argv[1:])
