"""Fixed evaluation sets for training: seeded composites (:func:`make_set`), batched no-grad probabilities
(:func:`predict_probs`) and metrics per background photo (:func:`per_background`)."""

from __future__ import annotations

import torch
from torch import Tensor

from .compose import Composer
from .metrics import kind_groups, subset_metrics
from .model import SegNet


def make_set(composer: Composer, n: int, seed: int, chunk: int = 256, with_background: bool = False,
             with_kind: bool = False):
    """A fixed set of ``n`` composites at ``seed``: (rgb n,3,H,W uint8, mask n,H,W bool), plus with
    ``with_background`` each frame's background photo index n int64 (:attr:`Composite.background`), then with
    ``with_kind`` each frame's target kind code n int64 (:attr:`Composite.target_kind`). Neither costs a draw."""
    g = torch.Generator(device=composer.device).manual_seed(seed)
    rgbs, masks, bgs, kinds = [], [], [], []
    for i in range(0, n, chunk):
        c = composer(min(chunk, n - i), g)
        rgbs.append(c.rgb)
        masks.append(c.mask)
        bgs.append(c.background)
        kinds.append(c.target_kind)
    out = (torch.cat(rgbs), torch.cat(masks))
    out += (torch.cat(bgs),) if with_background else ()
    return out + ((torch.cat(kinds),) if with_kind else ())


def per_kind(probs: Tensor, masks: Tensor, kind: Tensor, threshold: float, min_pixels: int) -> dict[str, dict]:
    """Metrics of each target kind's composites (``kind`` n int64 codes of ``graspsim.state``): the rows of
    :func:`graspsim.vision.metrics.kind_groups` (a kind's target frames plus every target-free frame)."""
    from graspsim.state import KIND_NAMES

    names = [KIND_NAMES[int(k)] for k in kind]
    groups = {k: torch.from_numpy(v) for k, v in kind_groups(names, masks.flatten(1).any(1).numpy()).items()}
    return subset_metrics(probs, masks, groups, threshold, min_pixels)


def predict_probs(model: SegNet, rgb: Tensor, bf16: bool, chunk: int = 256, mirror: bool = False) -> Tensor:
    """Probabilities n,H,W float32 for ``rgb`` n,3,H,W uint8 (eval mode, no grad); with ``mirror``, from the logits
    averaged with the left-right mirror's (:meth:`SegNet.mirror_averaged`)."""
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for i in range(0, rgb.shape[0], chunk):
            x = rgb[i:i + chunk].to(dev).float().div_(255.0).contiguous(memory_format=torch.channels_last)
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                out.append(torch.sigmoid((model.mirror_averaged(x) if mirror else model(x)).float()))
    model.train(was_training)
    return torch.cat(out)


def per_background(probs: Tensor, masks: Tensor, background: Tensor, names: list[str], threshold: float,
                   min_pixels: int) -> dict[str, dict]:
    """Metrics of each background photo's frames (``background`` n int64 indexes ``names``; -1 frames, the fully
    rendered sim scenes, are reported as ``"(sim scene)"``)."""
    groups = {names[b] if b >= 0 else "(sim scene)": background == b for b in sorted(set(background.tolist()))}
    return subset_metrics(probs, masks, groups, threshold, min_pixels)
