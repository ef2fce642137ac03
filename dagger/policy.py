"""Control checkpoints and the inference wrapper ``MaskPolicy``.

A checkpoint has the one format of :mod:`graspsim.runs`: ``kind="graspsim-control"``,
``format_version``, ``model`` (state dict), ``model_config`` (the ``ControlNetConfig`` as a dict), ``iteration``
(DAgger iteration that produced it), plus optional ``config`` (the DAgger run's config) and ``metrics``. Only
resumable training checkpoints (``checkpoints/iter_NNN.pt``) add ``optimizer``; the deployable ``policy.pt`` and
``best.pt`` hold none. Older files load unchanged: those from before the format version (version 0, where
``policy.pt`` carried the optimizer) and version 1, which stored the net's config as ``config`` and the run's as
``run_config`` (:data:`RENAMED`, applied on loading). Version 2 is the layout above; code from before it refuses a
version-2 file by its version instead of misreading its ``config``.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from graspsim import SimConfig, runs
from graspsim.config import TargetConfig, gripper_width
from graspsim.env import fingertip_calibration

from .model import ControlNet, ControlNetConfig, to_action

GRIPPER_WRIST = gripper_width(True, False)
"""Senses of a wrist net from before the fingertip senses (5): the first 5 of today's 9."""

KIND = "graspsim-control"
FORMAT_VERSION = 2
RENAMED = (("config", "model_config"), ("run_config", "config"))
"""Keys renamed in version 2 so that ``config`` means the run's config in every checkpoint (:mod:`graspsim.runs`), as
(old, new) in the order they apply: files of versions 0 and 1 hold the net's config as ``config``."""


def save_checkpoint(path: str | os.PathLike, model: ControlNet, optimizer: torch.optim.Optimizer | None,
                    iteration: int, **extra) -> None:
    """Write a control checkpoint atomically (see the module docstring); ``optimizer`` None = deployable.
    ``extra``: further entries, e.g. ``config`` (the run's config) and ``metrics``."""
    payload = {
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "model_config": model.cfg.to_dict(),
        "iteration": int(iteration),
        **extra,
    }
    if optimizer is not None:
        payload["optimizer"] = optimizer.state_dict()
    runs.save_checkpoint(path, KIND, FORMAT_VERSION, payload)


def _upgrade(ckpt: dict, version: int) -> dict:
    """Versions 0 and 1 to version 2: version 0 (no ``format_version``) may hold ``optimizer`` None; both keep the
    net's config under ``config`` and the run's under ``run_config`` (:data:`RENAMED`)."""
    if ckpt.get("optimizer", 0) is None:
        del ckpt["optimizer"]
    for old, new in RENAMED:
        if old in ckpt:
            ckpt[new] = ckpt.pop(old)
    return ckpt


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Read a control checkpoint; FileNotFoundError if missing, ValueError if it is not one."""
    return runs.load_checkpoint(path, KIND, FORMAT_VERSION, what="control checkpoint", inside="best.pt",
                                written_by="'graspsim dagger'", required=("model", "model_config", "iteration"),
                                upgrade=_upgrade, map_location=map_location)


def model_from_checkpoint(ckpt: dict) -> ControlNet:
    """Rebuild the ControlNet of a loaded checkpoint; ValueError if its weights do not fit this version's net
    (for example a net from before the gripper observation gained its contact channel)."""
    cfg = ControlNetConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in ckpt["model_config"].items()})
    model = ControlNet(cfg)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise ValueError(f"control checkpoint does not fit this version's ControlNet (inputs: mask + gripper "
                         f"{cfg.gripper_dim} wide); retrain it with 'graspsim dagger' ({str(e).splitlines()[0]})") from e
    return model


def check_fits_scenes(cfg, sim: SimConfig, what: str, trained: tuple[str, ...] | None = None,
                      embodiment: str | None = None) -> None:
    """ValueError naming ``what`` (the checkpoint) when its net cannot drive scenes of ``sim``: a net trained for
    another ``embodiment`` (:func:`graspsim.runs.trained_embodiment`; None: not checked), a sphere-only net
    (no wrist) for a mix with cubes or cylinders, a wrist net for sphere-only scenes (whose actions are 4-D), or
    scenes holding a kind outside ``trained`` (the kinds it was trained on, :func:`graspsim.runs.trained_kinds`).
    ``cfg``: anything with the net's ``wrist`` flag (a :class:`ControlNetConfig`, or a deploy controller)."""
    if embodiment is not None:
        runs.check_embodiment(embodiment, sim.embodiment, what)
    kinds = ",".join(sim.target.kinds)
    if cfg.wrist and not sim.wrist:
        raise ValueError(f"{what} turns the wrist (trained on cubes or cylinders) but the simulated world holds only "
                         f"--sim.target.kinds {kinds}; give the kinds it was trained on, e.g. "
                         f"--sim.target.kinds sphere,cube,cylinder")
    if sim.wrist and not cfg.wrist:
        raise ValueError(f"{what} is a sphere-only control net (4-D actions, no wrist) and cannot grasp "
                         f"--sim.target.kinds {kinds}; train one with 'graspsim dagger --sim.target.kinds {kinds}'")
    if getattr(cfg, "fingertip_pixels", False) and not sim.fingertip_pixels:
        raise ValueError(f"{what} reads the fingertip senses but the simulated world has --sim.no-fingertip-pixels; "
                         "drop that flag")
    if trained is not None:
        runs.check_trained_kinds(trained, sim.target.kinds, what)


class MaskPolicy:
    """Batched inference: ``act(mask B,H,W bool, gripper B,3 float32) -> B,4 float32`` in simulator units
    ((vx, vy, vz) m/s clipped to ``max_speed`` by the tanh, grip > 0 closes); with the wrist ``gripper`` B,9 (B,5
    for a net without the fingertip senses, which reads the first 5 of 9) -> ``B,5`` (wz rad/s before the grip).
    Stateless across steps."""

    def __init__(self, model: ControlNet, device: str | torch.device = "cpu", iteration: int = -1,
                 trained_kinds: tuple[str, ...] | None = None, trained_sim: SimConfig | None = None,
                 trained_embodiment: str | None = None):
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.cfg = model.cfg
        self.iteration = iteration
        self.trained_kinds = trained_kinds
        """Target kinds of the scenes it was trained on (from a checkpoint's run config), None when unknown."""
        self.trained_sim = trained_sim
        """The simulator config of its training run (from a checkpoint), None when unknown."""
        self.trained_embodiment = trained_embodiment
        """The embodiment it was trained for (from a checkpoint; ``floating`` for one written before embodiments),
        None when unknown."""
        self._fingertip: dict[str, list[float]] | None = None

    @property
    def fingertip(self) -> dict[str, list[float]] | None:
        """For a net that reads the fingertip senses, :func:`graspsim.env.fingertip_calibration` of the simulator it
        was trained in (today's default where unknown): the nominal fingertip points and the range it saw; else None."""
        if not self.cfg.fingertip_pixels:
            return None
        if self._fingertip is None:
            self._fingertip = fingertip_calibration(self.trained_sim or SimConfig(target=TargetConfig(("cube",))))
        return self._fingertip

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike, device: str | torch.device = "cpu") -> "MaskPolicy":
        ckpt = load_checkpoint(path)
        sim = runs.stored_sim(ckpt.get("config"))
        try:
            trained_sim = SimConfig.from_dict(sim) if sim is not None else None
        except (TypeError, ValueError):  # a config this version cannot rebuild: the nominal camera of today's default
            trained_sim = None
        return cls(model_from_checkpoint(ckpt), device, int(ckpt["iteration"]), runs.trained_kinds(ckpt.get("config")),
                   trained_sim, runs.trained_embodiment(ckpt.get("config")))

    @torch.no_grad()
    def act(self, mask: Tensor, gripper: Tensor) -> Tensor:
        if not isinstance(mask, Tensor) or mask.dim() != 3:
            raise ValueError(f"MaskPolicy.act: mask must be a B,H,W tensor; got {getattr(mask, 'shape', type(mask).__name__)}")
        gripper = gripper.to(self.device).float()
        if gripper.dim() == 2 and gripper.shape[1] > self.cfg.gripper_dim == GRIPPER_WRIST:
            gripper = gripper[:, :GRIPPER_WRIST]  # a wrist net from before the fingertip senses: the 5 it knows
        raw = self.model(mask.to(self.device), gripper)
        return to_action(raw, self.cfg, gripper)

    __call__ = act


__all__ = ["KIND", "MaskPolicy", "RENAMED", "check_fits_scenes", "load_checkpoint", "model_from_checkpoint",
           "save_checkpoint"]
