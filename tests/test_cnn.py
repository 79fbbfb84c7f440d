"""CNN fine-tuning (systems' ``finetune``): the CNN trained with the system reads pixels and, with its
weights untouched, reproduces the cached descriptors; training moves only its last blocks."""

import numpy as np
import pytest
import torch

from fraglib.run.inputs import DataPaths, load_splits
from fraglib.run.train import resolve_run, train
from fraglib.systems import get_system

from conftest import tiny_eval, tiny_params

CPU = torch.device("cpu")


@pytest.mark.parametrize("images", ["rcnn", "fullframe"])
def test_untouched_cnn_reproduces_the_feature_cache(tiny_full, images):
    spec = resolve_run(tiny_params(r={"system": "fragment", "images": images, "finetune": 2}), "r")
    views = get_system("fragment").views(spec.system_config)
    assert views.pixels
    splits, dims, _ = load_splits(DataPaths(tiny_full), views, CPU)
    system = get_system("fragment")(spec.system_config, dims, 0)
    te = splits["test"]
    rows = te.images.take(np.arange(te.n_images))
    with torch.no_grad():
        got = system.cnn(rows)
    want = rows.data["x"]
    assert got.shape == want.shape and rows.data["full"].sum() == te.n_images
    assert torch.allclose(got, want, rtol=1e-3, atol=1e-3 * float(want.abs().max()))


def test_finetuning_trains_only_the_last_blocks_and_reloads(tiny_full, tmp_path):
    from fraglib.run.checkpoint import load_system

    spec = resolve_run(
        tiny_params(r={"system": "vse", "finetune": 1, "finetune_lr_scale": 1.0}), "r", extra={"epochs": 1, "lr": 0.01}
    )
    cls = get_system("vse")
    splits, dims, _ = load_splits(DataPaths(tiny_full), cls.views(spec.system_config), CPU)
    before = cls(spec.system_config, dims, 0).state_dict()
    groups = cls(spec.system_config, dims, 0).lr_groups()
    assert [k for k, _ in groups] == [1.0, 1.0] and all(p.requires_grad for p in groups[1][1])
    train(DataPaths(tiny_full), tmp_path, spec, tiny_eval(), device=CPU, progress=False)
    after, ck = load_system(tmp_path / "best.pt")
    after = after.state_dict()
    n = len([k for k in before if k.startswith("cnn.net._blocks.") and k.endswith(".weight")])
    last = max(int(k.split(".")[3]) for k in before if k.startswith("cnn.net._blocks."))
    moved = {k for k in before if k.startswith("cnn.") and not torch.equal(before[k], after[k])}
    assert (
        n
        and moved
        and all(k.startswith((f"cnn.net._blocks.{last}.", "cnn.net._conv_head", "cnn.net._bn1")) for k in moved)
    ), sorted(moved)[:5]
    assert not any(k.endswith(("running_mean", "running_var")) for k in moved)  # batch-norm statistics stay
    assert torch.equal(before["cnn.net._conv_stem.weight"], after["cnn.net._conv_stem.weight"])
