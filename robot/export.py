"""The ``graspsim export`` verb's library: the vision and control nets as ONNX graphs (float32, opset >= 17) plus
their contract (:mod:`graspsim.robot.onnx_contract`).

>>> graspsim export --vision vision/assets/segnet.pt --policy runs/dg/policy.pt --out runs/onnx

Writes into ``--out``:

* ``vision.onnx``: ``rgb`` B,3,S,S **uint8** -> ``logits`` B,S,S float32 (the /255 scaling is inside the graph; with
  mirror averaging, as the checkpoint chose it, the mirrored pass is inside too);
* ``control.onnx``: ``mask`` B,S,S float32 (0/1) and ``gripper`` B,3 float32 -> ``raw`` B,4 float32 (B,5 and B,5
  for a net that turns the wrist; B,9 and B,5 for one that also reads the fingertip senses);
* ``contract.json``: the inputs and outputs above, the constants that turn outputs into decisions (mask threshold
  and frame gate, ``max_speed``), the source checkpoints' sha256, and, unless ``--no-check``, the parity of the
  graphs with torch float32 on ``--frames`` simulator frames (max abs difference of logits and raw outputs, mask
  and grip agreement).

The decision rules (threshold, gate, tanh, hysteresis) stay outside the graphs, in
:mod:`graspsim.robot.controller`, which runs either runtime. The graphs are float32 whatever the torch path uses (bf16
autocast on CPUs with native bf16), so the parity check compares like with like.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from graspsim.extras import require
from graspsim.fileio import check_in_file, check_out_dir, staged_dir
from graspsim.validate import int_in, non_negative_int, positive_int

from .controller import OnnxNets, action_from_raw, load_nets, mask_from_logits
from .onnx_contract import CONTROL_ONNX, OUTPUTS, VISION_ONNX, build_contract, write_contract

log = logging.getLogger(__name__)

PARITY_TOLERANCE = 1e-4
"""Largest allowed abs difference between ONNX and torch float32 outputs (logits and raw control outputs)."""


@dataclass(frozen=True)
class ExportConfig:
    """Export the vision net and the policy to ONNX with a JSON contract of their inputs and outputs."""

    vision: Path
    """Vision checkpoint (graspsim train-vision)."""
    policy: Path
    """Policy checkpoint (graspsim dagger)."""
    out: Path
    """Output folder: vision.onnx, control.onnx, contract.json."""
    opset: int = 17
    """ONNX opset (>= 17)."""
    check: bool = True
    """Check the graphs against torch float32 on --frames simulator frames (needs onnxruntime)."""
    frames: int = 256
    """Frames of the parity check."""
    seed: int = 0
    """Seed of the parity-check scenes and gripper senses."""
    mirror_tta: Optional[bool] = None
    """Put mirror averaging into the vision graph (default: as the checkpoint chose it; its thresholds assume that)."""
    overwrite: bool = False
    """Replace an earlier export in --out."""

    def __post_init__(self) -> None:
        for name in ("vision", "policy", "out"):
            object.__setattr__(self, name, Path(getattr(self, name)))
        check_in_file(self.vision, "ExportConfig.vision", "vision checkpoint", inside="checkpoint.pt")
        check_in_file(self.policy, "ExportConfig.policy", "policy checkpoint", inside="policy.pt")
        int_in("ExportConfig", "opset", self.opset, 17, 23)
        positive_int("ExportConfig", "frames", self.frames)
        non_negative_int("ExportConfig", "seed", self.seed)
        require("onnx", "deploy", "export")  # torch.onnx writes the graphs with it
        if self.check:
            require("onnxruntime", "deploy", "export's parity check (--no-check skips it)")


class _VisionGraph(nn.Module):
    """uint8 frames -> float32 logits, optionally mirror-averaged."""

    def __init__(self, model: nn.Module, mirror: bool):
        super().__init__()
        self.model, self.mirror = model, mirror

    def forward(self, rgb: Tensor) -> Tensor:
        x = rgb.float() / 255.0
        return self.model.mirror_averaged(x) if self.mirror else self.model(x)


def _onnx_export(module: nn.Module, args: tuple, path: Path, inputs: list[str], outputs: list[str], opset: int) -> None:
    axes = {n: {0: "batch"} for n in inputs + outputs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), args, str(path), opset_version=opset, dynamo=False, input_names=inputs,
                          output_names=outputs, dynamic_axes=axes)


def parity_inputs(image_size: int, n: int, seed: int, wrist: bool = False,
                  fingertip: bool = False) -> tuple[Tensor, Tensor]:
    """``n`` simulator frames (n,3,S,S uint8; scenes of the ``test`` stream, camera partway down) and gripper
    senses n,3 float32 (random gap, close bit, contact bit; with ``wrist`` n,5, a random wrist angle's sine and
    cosine appended; with ``fingertip`` too n,9, then 4 fingertip senses of random points near the image centre)."""
    from graspsim import GraspEnv, SimConfig
    from graspsim.env import fingertip_senses
    from graspsim.seeds import episode_seeds

    env = GraspEnv(SimConfig(image_size=image_size), num_envs=n, seed=seed)
    g = torch.Generator().manual_seed(seed)
    # half the frames after a few steps straight down, so blobs of several sizes are seen
    down = torch.zeros(n, 4)
    down[:, 2] = -0.1 * (torch.arange(n) % 2).float()
    with env.rendering(False):  # one render, at the end
        env.reset(seeds=episode_seeds(seed, "test", 0, n))
        for _ in range(8):
            env.step(down)
    obs = env.observe()
    grip = torch.stack([torch.rand(n, generator=g), (torch.rand(n, generator=g) < 0.5).float(),
                        (torch.rand(n, generator=g) < 0.2).float()], 1)
    if wrist:  # drawn after the others, so a sphere-only export's inputs stay what they were
        angle = (torch.rand(n, generator=g) * 2 - 1) * 0.8
        grip = torch.cat([grip, torch.stack([angle.sin(), angle.cos()], 1)], 1)
    if fingertip:
        grip = torch.cat([grip, fingertip_senses(0.4 + 0.2 * torch.rand(n, 4, generator=g))], 1)
    return obs["rgb"], grip


def check_parity(folder: Path, seg, pol, frames: int = 256, seed: int = 0) -> dict:
    """Compare the ONNX graphs in ``folder`` with torch float32 on ``frames`` simulator frames; returns the numbers."""
    nets = OnnxNets(folder)
    wrist = bool(pol.cfg.wrist)
    rgb, grip = parity_inputs(seg.image_size, frames, seed, wrist, pol.cfg.fingertip_pixels)
    with torch.no_grad():
        t_logits = seg.logits(rgb).numpy()
        t_mask = seg.predict_mask(rgb).numpy()
        t_raw = pol.model(torch.from_numpy(t_mask), grip).numpy()
    o_logits = np.concatenate([nets.logits(rgb[i:i + 64].numpy()) for i in range(0, frames, 64)])
    o_mask = mask_from_logits(o_logits, nets.threshold, nets.peak_threshold, nets.one_region)
    o_raw = nets.raw(t_mask.astype(np.float32), grip.numpy())  # same mask in both: compares the control net alone
    yaw = nets.max_yaw_rate if wrist else None
    t_act = action_from_raw(t_raw, nets.max_speed, grip.numpy(), yaw)
    o_act = action_from_raw(o_raw, nets.max_speed, grip.numpy(), yaw)
    return {
        "frames": frames,
        "seed": seed,
        "vision_logits_max_abs_diff": float(np.abs(o_logits - t_logits).max()),
        "vision_prob_max_abs_diff": float(np.abs(1 / (1 + np.exp(-o_logits)) - 1 / (1 + np.exp(-t_logits))).max()),
        "mask_pixels_differing": int((o_mask != t_mask).sum()),
        "frames_with_target": int(t_mask.reshape(frames, -1).any(1).sum()),
        "control_raw_max_abs_diff": float(np.abs(o_raw - t_raw).max()),
        "action_max_abs_diff": float(np.abs(o_act - t_act).max()),
        "grip_decisions_differing": int(((o_raw[:, -1] > 0) != (t_raw[:, -1] > 0)).sum()),
        "tolerance": PARITY_TOLERANCE,
    }


def export(cfg: ExportConfig) -> dict:
    """Write the graphs and contract (see the module docstring); returns the contract."""
    out = check_out_dir(cfg.out, overwrite=cfg.overwrite)
    seg, pol = load_nets(cfg.vision, cfg.policy)
    if cfg.mirror_tta is not None:
        seg.mirror_tta = bool(cfg.mirror_tta)
    S = seg.image_size
    model = seg.model.to(memory_format=torch.contiguous_format)
    with staged_dir(out, lambda name: name in OUTPUTS) as stage:
        _onnx_export(_VisionGraph(model, seg.mirror_tta), (torch.zeros(1, 3, S, S, dtype=torch.uint8),),
                     stage / VISION_ONNX, ["rgb"], ["logits"], cfg.opset)
        _onnx_export(pol.model, (torch.zeros(1, S, S), torch.zeros(1, pol.cfg.gripper_dim)), stage / CONTROL_ONNX,
                     ["mask", "gripper"], ["raw"], cfg.opset)
        contract = build_contract(opset=cfg.opset, vision_path=cfg.vision, policy_path=cfg.policy,
                                  policy_iteration=pol.iteration, image_size=S, threshold=seg.threshold,
                                  peak_threshold=seg.peak_threshold, mirror_tta=seg.mirror_tta,
                                  max_speed=pol.cfg.max_speed, one_region=seg.one_region,
                                  max_yaw_rate=pol.cfg.max_yaw_rate if pol.cfg.wrist else None,
                                  fingertip=pol.fingertip)
        write_contract(stage, contract)
        if cfg.check:
            par = check_parity(stage, seg, pol, cfg.frames, cfg.seed)
            contract["parity"] = par
            write_contract(stage, contract)
            worst = max(par["vision_logits_max_abs_diff"], par["control_raw_max_abs_diff"])
            (log.info if worst <= PARITY_TOLERANCE else log.warning)(
                "export parity on %d frames: logits max diff %.2g, control raw max diff %.2g, %d mask pixels and %d "
                "grip decisions differ (tolerance %g)", par["frames"], par["vision_logits_max_abs_diff"],
                par["control_raw_max_abs_diff"], par["mask_pixels_differing"], par["grip_decisions_differing"],
                PARITY_TOLERANCE)
    log.info("export: wrote %s", ", ".join(str(out / n) for n in OUTPUTS))
    return contract


__all__ = ["ExportConfig", "PARITY_TOLERANCE", "check_parity", "export", "parity_inputs"]
