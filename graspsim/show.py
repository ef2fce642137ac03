"""``graspsim show``: a contact sheet of randomized scenes as the wrist camera sees them.

Each tile row shows, per scene: the start view (RGB | mask) and, for the torch backend, a close view
with the fingertips placed 2.5 cm above the sphere (RGB | mask), so a person can check what the policy
and the segmentation net will see.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .config import SimConfig
from .fileio import check_out_file, replace_atomically
from .keys import MASK, RGB
from .runtime import Runtime, RuntimeConfig
from .validate import int_in

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShowConfig:
    """Render randomized scenes into one PNG."""

    out: Path = Path("scenes.png")
    """Output PNG path (its folder is created). An existing file is refused unless --overwrite is given."""
    overwrite: bool = False
    """Replace an existing --out file."""
    num: int = 12
    """Number of scenes."""
    seed: int = 0
    """Seed of the scene randomization."""
    backend: str = "torch"
    """Simulator backend: torch or bullet."""
    scale: int = 3
    """Integer upscaling of each tile (nearest neighbour) for viewing."""
    runtime: Runtime = field(default_factory=RuntimeConfig)
    """Device and threads (flags --device, --threads; the others are unused here)."""
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator configuration."""

    def __post_init__(self) -> None:
        int_in("ShowConfig", "num", self.num, 1, 256)
        if self.backend not in ("torch", "bullet"):
            raise ValueError(f"ShowConfig.backend must be 'torch' or 'bullet'; got {self.backend!r}")
        int_in("ShowConfig", "scale", self.scale, 1, 16)
        if Path(self.out).suffix.lower() != ".png":
            raise ValueError(f"ShowConfig.out must end in .png; got {str(self.out)!r}")


def _tile(rgb: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """rgb H,W,3 uint8 and mask H,W bool -> H,2W+2,3 (RGB | white gap | mask in white)."""
    m = np.repeat((mask.astype(np.uint8) * 255)[..., None], 3, axis=-1)
    gap = np.full((rgb.shape[0], 2, 3), 255, np.uint8)
    return np.concatenate([rgb, gap, m], axis=1)


def contact_sheet(views: list[tuple[np.ndarray, np.ndarray]], columns: int, scale: int) -> np.ndarray:
    """Arrange (rgb N,H,W,3, mask N,H,W) view sets side by side per scene and scenes in a grid."""
    n = views[0][0].shape[0]
    rows = []
    for i in range(n):
        parts = [_tile(rgb[i], mask[i]) for rgb, mask in views]
        sep = np.full((parts[0].shape[0], 6, 3), 40, np.uint8)
        rows.append(np.concatenate(sum([[p, sep] for p in parts], [])[:-1], axis=1))
    h, w = rows[0].shape[:2]
    cols = max(1, min(columns, n))
    nrows = (n + cols - 1) // cols
    sheet = np.full((nrows * (h + 6), cols * (w + 6), 3), 20, np.uint8)
    for i, tile in enumerate(rows):
        r, c = divmod(i, cols)
        sheet[r * (h + 6): r * (h + 6) + h, c * (w + 6): c * (w + 6) + w] = tile
    return np.kron(sheet, np.ones((scale, scale, 1), np.uint8)) if scale > 1 else sheet


def save_png(path: Path, image: np.ndarray) -> None:
    """Write an RGB uint8 image atomically (temp file in the same folder, then rename)."""
    from PIL import Image

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replace_atomically(path) as tmp:
        Image.fromarray(image).save(tmp, format="PNG")


def show(cfg: ShowConfig) -> Path:
    """Render ``cfg.num`` randomized scenes and write the contact sheet; returns the PNG path."""
    check_out_file(cfg.out, overwrite=cfg.overwrite)
    with cfg.runtime.job("show"):
        return _show(cfg)


def _show(cfg: ShowConfig) -> Path:
    from . import make_env
    from .render import render

    env = make_env(cfg.backend, cfg.sim, num_envs=cfg.num, device=cfg.runtime.device, seed=cfg.seed)
    obs = env.reset(seed=cfg.seed)
    views = [(obs[RGB].permute(0, 2, 3, 1).cpu().numpy(), obs[MASK].cpu().numpy())]
    if cfg.backend == "torch":
        s = env.state
        tcp = s.sphere_pos.clone()
        tcp[:, 2] = s.sphere_radius + 0.025
        close = render(s.replace(tcp_pos=tcp), cfg.sim)
        views.append((close.rgb.permute(0, 2, 3, 1).cpu().numpy(), close.mask.cpu().numpy()))
    sheet = contact_sheet(views, columns=3 if len(views) > 1 else 4, scale=cfg.scale)
    save_png(cfg.out, sheet)
    log.info("wrote %s (%d scenes, backend %s)", cfg.out, cfg.num, cfg.backend)
    return Path(cfg.out)
