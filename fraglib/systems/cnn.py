"""The CNN a system trains with itself (fine-tuning; docs/systems.md, "CNN fine-tuning").

The one system part that reads pixels, and the one that imports vision code: the backbone of the
features stage (:class:`fraglib.vision.rcnn.Backbone`, EfficientNet-Lite with its ImageNet weights)
with its last ``blocks`` blocks and head trainable, the rest frozen. It computes the descriptors the
features stage caches — the whole-image row as the mean of the feature map, a box row as its RoI
descriptor (:func:`fraglib.vision.rcnn.roi_descriptors`) — so with untouched weights it reproduces
the cache (tests/test_cnn.py). Batch-norm statistics stay ImageNet's (always in eval mode).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fraglib.core.batches import Rows
from fraglib.core.config import check_range


class TunedCNN(nn.Module):
    def __init__(self, variant: int, blocks: int) -> None:
        super().__init__()
        from fraglib.vision.rcnn import Backbone

        self.net = Backbone(variant).net
        n = len(self.net._blocks)
        check_range("finetune (CNN blocks trained)", blocks, 1, n, int)
        self.first = n - blocks
        self.net.requires_grad_(False)
        for m in [*self.net._blocks[self.first :], self.net._conv_head, self.net._bn1]:
            m.requires_grad_(True)
        self.net.eval()

    def train(self, mode: bool = True) -> "TunedCNN":
        return super().train(False)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        """(1, 3, h, w) in [-1, 1] -> (1, C, h/32, w/32); gradients only through the trained blocks."""
        net, n = self.net, len(self.net._blocks)
        rate = net._global_params.drop_connect_rate or 0.0
        with torch.no_grad():
            x = net._swish(net._bn0(net._conv_stem(x)))
            for i, block in enumerate(net._blocks[: self.first]):
                x = block(x, drop_connect_rate=rate * i / n)
        for i, block in enumerate(net._blocks[self.first :], self.first):
            x = block(x, drop_connect_rate=rate * i / n)
        return net._swish(net._bn1(net._conv_head(x)))

    def forward(self, rows: Rows) -> torch.Tensor:
        """(R, C) descriptors of the rows of ``rows`` (data ``box`` (R, 4) original px, ``full`` (R,);
        items ``pixels`` (n, H, W, 3) uint8 padded, ``hw`` (n, 2), ``scale`` (n,))."""
        from fraglib.vision.rcnn import roi_descriptors

        d, it = rows.data, rows.items
        counts = torch.bincount(rows.owner, minlength=rows.n).tolist()
        out = []
        for i, (seg_box, seg_full) in enumerate(zip(torch.split(d["box"], counts), torch.split(d["full"], counts))):
            if not counts[i]:
                continue
            h, w = (int(v) for v in it["hw"][i])
            x = it["pixels"][i, :h, :w].permute(2, 0, 1)[None].float().div(127.5).sub(1.0)
            fmap = self.feature_map(x.contiguous(memory_format=torch.channels_last))
            roi = roi_descriptors(fmap, seg_box.cpu().numpy(), float(it["scale"][i]))
            out.append(torch.where(seg_full[:, None], fmap.mean(dim=(2, 3)), roi))
        return torch.cat(out) if out else d["box"].new_zeros((0, self.net._conv_head.out_channels))


def tuned_cnn(cfg: Any, dims: dict[str, int]) -> nn.Module | None:
    """The CNN a system with ``cfg.finetune`` > 0 trains (:class:`TunedCNN`), else None."""
    if not getattr(cfg, "finetune", 0):
        return None
    return TunedCNN(dims["cnn_variant"], cfg.finetune)
