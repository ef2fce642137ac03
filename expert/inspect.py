"""``graspsim inspect PATH.h5``: summarise an episode file and draw one episode (contact sheet PNG + GIF).

The contact sheet shows evenly spaced frames of one episode, each as the wrist RGB image beside the
target mask (white), labelled with the step and, when recorded, the expert phase. The GIF plays the
whole episode at the control rate.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import tyro

from graspsim.dataset import OBS, Episode, describe, read_episodes, repair
from graspsim.fileio import check_folder_path, check_out_file, replace_atomically
from graspsim.keys import MASK, RGB
from graspsim.validate import int_in, non_negative_int

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InspectConfig:
    """Summarise an HDF5 episode file and render one episode as a contact sheet and a GIF."""

    path: tyro.conf.Positional[Path]
    """The episode file (.h5)."""
    out: Optional[Path] = None
    """Folder for the PNG and GIF (default: the file's folder); created if missing."""
    png: Optional[Path] = None
    """Contact sheet path (default: OUT/<file stem>_demo<K>.png)."""
    gif: Optional[Path] = None
    """Animation path (default: OUT/<file stem>_demo<K>.gif)."""
    demo: int = 0
    """Which episode to draw (K in data/demo_K)."""
    frames: int = 16
    """Frames on the contact sheet (evenly spaced over the episode)."""
    scale: int = 2
    """Integer upscaling of each image (nearest neighbour)."""
    media: bool = True
    """Write the PNG and GIF (--no-media prints the summary only)."""
    overwrite: bool = False
    """Replace an existing PNG or GIF (otherwise an existing one is refused)."""
    repair: bool = False
    """Repair a damaged file first: keep every readable episode (renumbered in order), drop the unreadable ones
    and report them, and consolidate the rest into one file that ``collect --resume`` can continue."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))
        non_negative_int("InspectConfig", "demo", self.demo)
        int_in("InspectConfig", "frames", self.frames, 1, 256)
        int_in("InspectConfig", "scale", self.scale, 1, 16)
        for name in ("png", "gif"):
            p = getattr(self, name)
            if p is not None and Path(p).suffix.lower() != f".{name}":
                raise ValueError(f"InspectConfig.{name} must end in .{name}; got {str(p)!r}")


def _pair(rgb: np.ndarray, mask: np.ndarray | None, scale: int) -> np.ndarray:
    """H,W,3 uint8 RGB and H,W 0/1 mask -> H*s, 2*W*s (+gap), 3 uint8 side by side."""
    tiles = [rgb]
    if mask is not None:
        tiles += [np.full((rgb.shape[0], 2, 3), 64, np.uint8), np.repeat((mask > 0).astype(np.uint8)[..., None] * 255, 3, -1)]
    img = np.concatenate(tiles, axis=1)
    return img.repeat(scale, 0).repeat(scale, 1)


def _frames(ep: Episode, scale: int) -> list[np.ndarray]:
    if RGB not in ep.obs:
        raise ValueError("the episode has no obs/rgb array to draw")
    rgb, mask = ep.obs[RGB], ep.obs.get(MASK)
    if rgb.ndim != 4 or rgb.shape[-1] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"obs/rgb must be T,H,W,3 uint8 to be drawn; got {rgb.dtype} {rgb.shape}")
    return [_pair(rgb[t], None if mask is None else mask[t], scale) for t in range(len(rgb))]


def _save_atomic(img_or_frames, path: Path, **kwargs) -> None:
    with replace_atomically(path) as tmp:
        if isinstance(img_or_frames, list):
            img_or_frames[0].save(tmp, format=path.suffix[1:].upper(), save_all=True,
                                  append_images=img_or_frames[1:], **kwargs)
        else:
            img_or_frames.save(tmp, format=path.suffix[1:].upper(), **kwargs)


def contact_sheet(ep: Episode, n_frames: int = 16, scale: int = 2, title: str = "", columns: int = 4):
    """PIL image: ``n_frames`` evenly spaced steps of ``ep``, RGB beside mask, labelled with step/phase."""
    from PIL import Image, ImageDraw

    from .fsm import PHASES

    frames = _frames(ep, scale)
    T = len(frames)
    idx = np.unique(np.linspace(0, T - 1, min(n_frames, T)).round().astype(int))
    phase = ep.privileged.get("phase")
    h, w = frames[0].shape[:2]
    label_h, head = 14, 18
    cols = min(columns, len(idx))
    rows = math.ceil(len(idx) / cols)
    sheet = Image.new("RGB", (cols * (w + 4) + 4, head + rows * (h + label_h + 4) + 4), (24, 24, 24))
    draw = ImageDraw.Draw(sheet)
    draw.text((4, 3), title, fill=(230, 230, 230))
    for j, t in enumerate(idx):
        x, y = 4 + (j % cols) * (w + 4), head + (j // cols) * (h + label_h + 4)
        sheet.paste(Image.fromarray(frames[t]), (x, y + label_h))
        label = f"t={t}"
        if phase is not None and 0 <= int(phase[t]) < len(PHASES):
            label += f" {PHASES[int(phase[t])]}"
        draw.text((x + 1, y + 1), label, fill=(230, 230, 120))
    return sheet


MAX_PROBLEMS = 10
"""Problems listed per file (the count of the rest is given)."""


def health(path: Path) -> list[str]:
    """What makes the episode file unusable for training or export although it opens: no ``obs/rgb`` (the wrist
    frames), frames that are not T,H,W,3 uint8, an episode whose actions are not one per step, NaN or infinite
    actions or senses. One line per problem (at most :data:`MAX_PROBLEMS`, then how many more), naming the
    episode; [] for a healthy file."""
    import h5py

    from graspsim.dataset.format import ACTIONS, DATA

    problems: list[str] = []
    with h5py.File(path, "r") as f:
        if DATA not in f:
            return problems
        data = f[DATA]
        for name in sorted(data.keys(), key=lambda n: int(n.split("_")[-1]) if n.split("_")[-1].isdigit() else -1):
            try:
                g = data[name]
                obs = g[OBS] if OBS in g else {}
                actions = g[ACTIONS][()] if ACTIONS in g else None
            except (KeyError, OSError):
                continue  # unreadable episodes are describe()'s and --repair's to report
            steps = [obs[k].shape[0] for k in obs]
            if RGB not in obs:
                problems.append(f"{name}: no obs/{RGB} (the wrist frames); training and export need them")
            elif obs[RGB].ndim != 4 or obs[RGB].shape[-1] != 3 or obs[RGB].dtype != np.uint8:
                problems.append(f"{name}: obs/{RGB} is {obs[RGB].dtype} {tuple(obs[RGB].shape)}; expected T,H,W,3 "
                                "uint8")
            if actions is None:
                problems.append(f"{name}: no {ACTIONS} array")
            else:
                if steps and len(actions) != max(steps):
                    problems.append(f"{name}: {len(actions)} actions for {max(steps)} steps")
                if np.issubdtype(actions.dtype, np.floating) and not np.isfinite(actions).all():
                    problems.append(f"{name}: {int((~np.isfinite(actions)).sum())} NaN or infinite action values")
            for k in obs:
                if k != RGB and np.issubdtype(obs[k].dtype, np.floating) and not np.isfinite(obs[k][()]).all():
                    problems.append(f"{name}: obs/{k} holds NaN or infinite values")
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"and {len(problems) - MAX_PROBLEMS} more"]
    return problems


def inspect(cfg: InspectConfig) -> dict[str, Any]:
    """Print a summary table of ``cfg.path`` and write the contact sheet / GIF; return the summary dict."""
    from PIL import Image

    repaired = repair(cfg.path) if cfg.repair else None
    info = describe(cfg.path)
    summary = dict(info)
    if repaired is not None:
        summary["repair"] = repaired
    summary["problems"] = health(cfg.path)
    for p in summary["problems"]:
        log.warning("%s: %s", cfg.path, p)
    if cfg.media:
        if info["episodes"] == 0:
            raise ValueError(f"{cfg.path} holds no episodes to draw")
        if cfg.demo >= info["episodes"]:
            raise ValueError(f"InspectConfig.demo={cfg.demo} but {cfg.path} holds demos 0..{info['episodes'] - 1}")
        out = Path(cfg.out) if cfg.out is not None else cfg.path.parent
        stem = f"{cfg.path.stem}_demo{cfg.demo}"
        png = Path(cfg.png) if cfg.png is not None else out / f"{stem}.png"
        gif = Path(cfg.gif) if cfg.gif is not None else out / f"{stem}.gif"
        check_folder_path(out)
        for p, flag in ((png, "--png"), (gif, "--gif")):
            check_out_file(p, flag=flag, overwrite=cfg.overwrite)
            if p.parent != out and not p.parent.is_dir():
                raise FileNotFoundError(f"{flag} {p}: folder {p.parent} does not exist; create it or give another path")
        out.mkdir(parents=True, exist_ok=True)
        ep = next(read_episodes(cfg.path, keys=[k for k in (RGB, MASK) if f"{OBS}/{k}" in info["arrays"]],
                                demos=[cfg.demo]))
        outcome = ep.attrs.get("failure", "success" if ep.attrs.get("success") else "?")
        title = f"{cfg.path.name} demo_{cfg.demo}: {ep.num_samples} steps, {outcome}, seed {ep.attrs.get('seed', '?')}"
        _save_atomic(contact_sheet(ep, cfg.frames, cfg.scale, title), png)
        hz = float(info["config"].get("sim", {}).get("control_hz", 10.0)) if isinstance(info["config"], dict) else 10.0
        frames = [Image.fromarray(f) for f in _frames(ep, cfg.scale)]
        _save_atomic(frames, gif, duration=int(round(1000 / hz)), loop=0)
        summary.update(png=str(png), gif=str(gif))
        log.info("wrote %s and %s", png, gif)
    _print_summary(summary)
    return summary


def _print_summary(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{s['path']}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value")
    rate = s["success_rate"]
    med = s["median_steps_success"]
    if not s["episodes"]:
        success = "-"
    elif math.isnan(rate):
        success = "unknown (the episodes have no 'success' attribute)"
    else:
        success = f"{100 * rate:.2f}%"
        if s.get("success_known", s["episodes"]) < s["episodes"]:
            success += f" (of the {s['success_known']} episodes that record success)"
    rows = [
        ("format", s["format"] or "(none)"),
        ("episodes", str(s["episodes"])),
        ("steps", f"{s['steps']} (mean {s['mean_steps']:.1f} per episode)" if s["episodes"] else "0"),
        ("success rate", success),
        ("median steps to success", "-" if math.isnan(med) else f"{med:g}"),
        ("outcomes", ", ".join(f"{k}: {v}" for k, v in sorted(s["failures"].items())) or "-"),
        ("layout", "single file" if s["consolidated"] else "index + parts (unfinished or interrupted run)"),
        ("size", f"{s['bytes'] / 1e6:.2f} MB"),
        ("filter keys", ", ".join(f"{k}: {v} demos" for k, v in sorted(s["filter_keys"].items())) or "-"),
        ("problems", "; ".join(s.get("problems") or []) or "none found"),
    ]
    for k in ("png", "gif"):
        if k in s:
            rows.append((k, s[k]))
    if "repair" in s:
        r = s["repair"]
        dropped = ", ".join(f"{d['demo']} ({d['reason']})" for d in r["dropped"]) or "none"
        rows.append(("repair", f"kept {r['kept']} episode(s), dropped {len(r['dropped'])}: {dropped}"
                     + (f"; renumbered {len(r['renumbered'])}" if r["renumbered"] else "")))
    for r in rows:
        t.add_row(*r)
    a = Table(title="arrays of demo_0")
    for c in ("key", "shape", "dtype", "compression"):
        a.add_column(c)
    for k, v in sorted(s["arrays"].items()):
        a.add_row(k, str(tuple(v["shape"])), v["dtype"], str(v["compression"] or "-"))
    console = Console()
    console.print(t)
    if s["arrays"]:
        console.print(a)


__all__ = ["InspectConfig", "contact_sheet", "inspect"]
