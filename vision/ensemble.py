"""Ensembles of vision nets: several :class:`~graspsim.vision.model.SegNet` of one architecture, trained apart (other
seeds), whose logits are averaged. The average is one net to everything downstream (:class:`~graspsim.vision.infer.Segmenter`,
``eval-real``, ``eval-sim``, ``deploy``, ``export``), at the members' summed cost.

An ensemble is made by ``graspsim calibrate --vision A.pt B.pt ...``: members disagree most where each is unsure, so
the averaged probabilities need an operating point of their own, and calibrate chooses it on labelled frames. The
checkpoint is an ordinary vision checkpoint (:mod:`graspsim.vision.checkpoint`) with two more keys: ``ensemble``
(the number of members, >= 2; ``model`` then holds the members' weights under ``members.<i>.``) and
``ensemble_members`` (each member's source path, step, seed and stored operating point, for provenance). Its
``model_config`` is the members' common one. Ensembles are written as format version 2 (:data:`graspsim.vision.checkpoint.ENSEMBLE_FORMAT`), so a
release that cannot average nets refuses them by name instead of failing on their weights. Fine-tuning
(``train-vision --init``) takes single nets only.

**Weights.** By default the members count alike (their logits' mean). ``calibrate --ensemble-weights 0.75 0.25``
averages them with those weights instead (stored as ``ensemble_weights``, normalised to sum 1): for two nets that are
each better on a part of the task, e.g. one on spheres and one on cubes. Such a checkpoint is written as format
version 3, so a release that would read it as an equal average refuses it by name.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from graspsim import runs

from .model import SegNet, SegNetConfig

ENSEMBLE_KEY = "ensemble"
SAME = {  # what every member must share, read as the loaders read it
    "image size": lambda c: int(c["image_size"]),
    "mirror averaging": lambda c: bool(c.get("mirror_tta", False)),
    "model_config": lambda c: c["model_config"],
    "embodiment": lambda c: runs.trained_embodiment(c.get("config")),
    "target kinds": lambda c: runs.trained_kinds(c.get("config")),
}


class SegNetEnsemble(nn.Module):
    """``size`` SegNets of config ``cfg``; :meth:`forward` and :meth:`mirror_averaged` average the members' logits
    (``x`` B,3,H,W float in [0, 1] -> logits B,H,W), with ``weights`` (one per member, summing to 1;
    :func:`check_weights`) or, by default, alike. Made for inference: train-vision trains one SegNet at a time
    (a forward pass in training mode, as BatchNorm adaptation runs it, updates every member's statistics)."""

    def __init__(self, cfg: SegNetConfig, size: int, weights: Sequence[float] | None = None):
        super().__init__()
        if int(size) < 2:
            raise ValueError(f"an ensemble needs at least 2 members; got {size}")
        self.cfg = cfg
        self.members = nn.ModuleList(SegNet(cfg) for _ in range(int(size)))
        self.weights = None if weights is None else check_weights(weights, int(size))
        """The members' weights (a tuple of floats summing to 1), or None for their plain mean. Plain floats, not a
        buffer: they stay float64 constants when the net is cast to bf16, and the weights' state_dict is unchanged."""

    @property
    def multiple(self) -> int:
        return self.cfg.multiple

    def _average(self, logits: list[Tensor]) -> Tensor:
        if self.weights is None:
            return torch.stack(logits).mean(0)
        out = logits[0] * self.weights[0]
        for w, y in zip(self.weights[1:], logits[1:]):
            out = out + y * w
        return out

    def forward(self, x: Tensor) -> Tensor:
        return self._average([m(x) for m in self.members])

    def mirror_averaged(self, x: Tensor) -> Tensor:
        """The members' :meth:`SegNet.mirror_averaged` logits, averaged."""
        return self._average([m.mirror_averaged(x) for m in self.members])


WEIGHTS_KEY = "ensemble_weights"


def check_weights(weights: Sequence[float], size: int, owner: str = "ensemble weights") -> tuple[float, ...]:
    """``weights`` for ``size`` members, normalised to sum 1. ValueError naming ``owner`` when there is not one per
    member, or one is not a finite number >= 0, or all are 0."""
    ws = list(weights)
    if len(ws) != size:
        raise ValueError(f"{owner}: {len(ws)} weight(s) for {size} nets; give one per net, in the --vision order")
    for w in ws:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise ValueError(f"{owner}: each weight must be a finite number >= 0; got {w!r}")
    total = float(sum(ws))
    if total <= 0:
        raise ValueError(f"{owner}: the weights sum to 0; at least one net must count")
    return tuple(float(w) / total for w in ws)


def ensemble_size(ckpt: dict) -> int:
    """Members in the vision checkpoint ``ckpt`` (a loaded dict): 1 for a single net."""
    return int(ckpt.get(ENSEMBLE_KEY) or 1)


def net_from_checkpoint(ckpt: dict, path: str | os.PathLike) -> SegNet | SegNetEnsemble:
    """The net stored in the loaded vision checkpoint ``ckpt`` (read from ``path``, named in errors): a
    :class:`SegNet`, or a :class:`SegNetEnsemble` when the checkpoint holds several members. ValueError when the
    stored config or weights do not build it."""
    try:
        cfg = SegNetConfig(**ckpt["model_config"])
        n = ensemble_size(ckpt)
        net = SegNet(cfg) if n == 1 else SegNetEnsemble(cfg, n, ckpt.get(WEIGHTS_KEY))
        net.load_state_dict(ckpt["model"])
    except (TypeError, ValueError, RuntimeError) as e:  # a bad stored config, or weights that do not fit it
        raise ValueError(f"vision checkpoint {path}: {e}") from None
    return net


def ensemble_payload(paths: list[str | os.PathLike], loaded: list[dict], weights: Sequence[float] | None = None) -> dict:
    """The deployable payload (no optimizer or RNG state) of an ensemble of the vision checkpoints ``loaded`` (read
    from ``paths``): the first member's configs, probe frames and operating point, the members' weights under
    ``members.<i>.``, ``ensemble`` and ``ensemble_members``; with ``weights`` (one per member, normalised to sum 1)
    also ``ensemble_weights``, and each member's ``weight`` in ``ensemble_members``. Its operating point is a
    placeholder: calibrate sets it. ValueError naming the members when they cannot be averaged: fewer than two, an
    ensemble among them, a difference in architecture, image size, mirror averaging, embodiment or target kinds, or
    weights that do not fit (:func:`check_weights`)."""
    if len(loaded) < 2:
        raise ValueError(f"an ensemble needs at least 2 vision checkpoints; got {len(loaded)}")
    ws = None if weights is None else check_weights(weights, len(loaded), "--ensemble-weights")
    first, p0 = loaded[0], paths[0]
    for p, ck in zip(paths, loaded):
        if ensemble_size(ck) > 1:
            raise ValueError(f"--vision {p} is already an ensemble of {ensemble_size(ck)} nets; list its members instead")
    for p, ck in zip(paths[1:], loaded[1:]):
        for what, get in SAME.items():
            if get(ck) != get(first):
                raise ValueError(f"--vision {p} and {p0} differ in {what} ({get(ck)!r} vs {get(first)!r}); "
                                 "an ensemble averages nets of one recipe, trained for one camera and target kinds")
    payload = {k: v for k, v in runs.deployable(first).items() if k not in ("kind", "format_version", "calibration")}
    payload["model"] = {f"members.{i}.{k}": v for i, ck in enumerate(loaded) for k, v in ck["model"].items()}
    payload[ENSEMBLE_KEY] = len(loaded)
    payload["ensemble_members"] = [
        {"source": str(Path(p).resolve()), "step": int(ck["step"]), "seed": (ck.get("config") or {}).get("seed"),
         "threshold": float(ck["threshold"]), "peak_threshold": float(ck.get("peak_threshold", 0.0))}
        for p, ck in zip(paths, loaded)]
    if ws is not None:
        payload[WEIGHTS_KEY] = list(ws)
        for m, w in zip(payload["ensemble_members"], ws):
            m["weight"] = w
    payload["metrics"] = {}  # the members' validation figures are not the ensemble's
    return payload
