"""Frames of a collected episode file mixed into segmentation training (``train-vision --hdf5``)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graspsim.dataset import DATA, OBS, repair_hint
from graspsim.fileio import check_in_file
from graspsim.keys import MASK, RGB

log = logging.getLogger(__name__)


class HDF5Frames:
    """rgb/mask frames from a graspsim-episodes-v1 file, held in memory (``rgb`` N,3,H,W uint8, ``mask`` N,H,W bool)."""

    def __init__(self, path: Path, image_size: int, max_frames: int):
        import h5py

        path = check_in_file(path, "--hdf5", "dataset file (.h5)")
        try:
            f = h5py.File(path, "r")
        except OSError as e:
            raise ValueError(f"cannot open HDF5 dataset {path}: {e}") from None
        with f:
            if DATA not in f:
                raise ValueError(f"HDF5 dataset {path} has no 'data' group (expected graspsim-episodes-v1)")
            demos = sorted(f[DATA].keys())
            rgbs, masks = [], []
            for k in demos:
                try:
                    obs = f[DATA][k].get(OBS)
                    if obs is None or RGB not in obs or MASK not in obs:
                        raise ValueError(f"HDF5 dataset {path}: data/{k}/obs lacks rgb or mask")
                    rgbs.append(obs[RGB][()])
                    masks.append(obs[MASK][()])
                except (KeyError, OSError) as e:  # e.g. a damaged part file of an interrupted collection
                    raise ValueError(f"HDF5 dataset {path}: data/{k} cannot be read ({e}). {repair_hint(path)}") from None
        if not rgbs:
            raise ValueError(f"HDF5 dataset {path} holds no episodes")
        rgb = np.concatenate(rgbs)
        mask = np.concatenate(masks)
        if rgb.ndim != 4 or rgb.shape[1:] != (image_size, image_size, 3):
            raise ValueError(f"HDF5 dataset {path}: rgb frames are {rgb.shape[1:]}, expected ({image_size}, {image_size}, 3)")
        if len(rgb) > max_frames:
            keep = np.linspace(0, len(rgb) - 1, max_frames).round().astype(int)
            rgb, mask = rgb[keep], mask[keep]
        self.rgb = torch.from_numpy(np.ascontiguousarray(rgb)).permute(0, 3, 1, 2).contiguous()
        self.mask = torch.from_numpy(mask.astype(bool))
        log.info("mixing %d HDF5 frames from %s", len(self.rgb), path)

    def sample(self, n: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = torch.randint(0, len(self.rgb), (n,), generator=g, device=g.device).cpu()
        return self.rgb[idx], self.mask[idx]
