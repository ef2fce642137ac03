"""Vision checkpoints: the one checkpoint format of :mod:`graspsim.runs`, kind ``"graspsim-vision"``.

Keys: ``kind`` = "graspsim-vision", ``format_version``, ``model`` (state_dict), ``model_config`` (dict of
:class:`~graspsim.vision.model.SegNetConfig`), ``optimizer``, ``scheduler``, ``config`` (the run's config, the
``TrainVisionConfig`` as a JSON-able dict: as in every checkpoint of :mod:`graspsim.runs`, ``config`` is a run's
config and ``model_config`` a net's), ``step``, ``threshold`` (probability threshold chosen on validation), ``peak_threshold`` (frame-level
gate chosen with it, 0 = none; optional, older checkpoints lack it), ``image_size``,
``metrics`` (last validation metrics), ``probe_rgb`` (a few validation images ``N,3,H,W uint8`` used to
check reduced-precision inference), ``generator_state`` (training data RNG, for resume); under torchrun also
``generator_states`` (every rank's data RNG, in rank order) and ``world_size``. Provenance of a user's own frames
(optional): ``fine_tune`` (``train-vision --init/--real``: the init checkpoint, the real frames' folders and counts)
and ``calibration`` (``graspsim calibrate``: the tuning frames' folder and counts, the limits, when, the metrics
before and after; :mod:`graspsim.vision.calibrate`).
An ensemble (format version 2) also holds ``ensemble`` (its member count) and ``ensemble_members``, and its
``model`` the members' weights (:mod:`graspsim.vision.ensemble`); a weighted ensemble (format version 3) also
``ensemble_weights``.
"""

from __future__ import annotations

import os

import torch

from graspsim import runs

KIND = "graspsim-vision"
FORMAT_VERSION = 3
"""The newest format this release reads and writes: 3 for a weighted ensemble (key ``ensemble_weights``), which a
release before weights would read as an equal average; 2 for an ensemble of equal weights (:mod:`graspsim.vision.ensemble`,
key ``ensemble``), whose weights a release before ensembles could not load; a single net is still written as 1,
which every release reads."""
ENSEMBLE_FORMAT = 2
SINGLE_NET_FORMAT = 1
REQUIRED = ("model", "model_config", "config", "step", "threshold", "image_size")


def save_checkpoint(path: str | os.PathLike, payload: dict) -> None:
    """Atomically write ``payload`` as a vision checkpoint (the one format of :mod:`graspsim.runs`): version 3 for a
    weighted ensemble, 2 for an ensemble of equal weights, 1 for a single net: the oldest that holds it."""
    version = (SINGLE_NET_FORMAT if not payload.get("ensemble") else
               FORMAT_VERSION if payload.get("ensemble_weights") is not None else ENSEMBLE_FORMAT)
    runs.save_checkpoint(path, KIND, version, payload)


TRAINING_ONLY = runs.TRAINING_ONLY


def deployable_payload(src: str | os.PathLike) -> dict:
    """The vision checkpoint ``src`` without what only resuming training needs (``TRAINING_ONLY``: optimizer and
    data-RNG state): weights, configs, thresholds, metrics and probe images stay. For :func:`save_checkpoint`."""
    return {k: v for k, v in runs.deployable(load_checkpoint(src)).items() if k not in ("kind", "format_version")}


def save_deployable(src: str | os.PathLike, dst: str | os.PathLike) -> dict:
    """Copy the vision checkpoint ``src`` to ``dst`` as :func:`deployable_payload`. Returns the payload written. The
    result loads with :func:`load_checkpoint` and :meth:`graspsim.vision.infer.Segmenter.from_checkpoint`, but cannot
    be resumed."""
    payload = deployable_payload(src)
    save_checkpoint(dst, payload)
    return payload


def _single_net(ckpt: dict, version: int) -> dict:
    """Formats 1 and 2 -> 3: their keys are the same (version 2 added ensembles, 3 their weights). Older files (0: no
    version) are refused, as before."""
    if version < SINGLE_NET_FORMAT:
        raise ValueError(f"vision checkpoint has format_version {version}, older than this code reads; retrain it "
                         "with `graspsim train-vision`")
    return ckpt


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Load and validate a vision checkpoint.

    FileNotFoundError if missing; ValueError if it is not a torch checkpoint, is of another kind (e.g. a
    control checkpoint, ``kind="graspsim-control"``), lacks required keys or has a newer format version.
    """
    return runs.load_checkpoint(path, KIND, FORMAT_VERSION, what="vision checkpoint", inside="checkpoint.pt",
                                written_by="`graspsim train-vision`", required=REQUIRED, map_location=map_location,
                                upgrade=_single_net)
