"""vision: sim-real composition, real background bank, target segmentation net, training and real-set evaluation.

Entry points: :func:`graspsim.vision.train.train_vision` (``graspsim train-vision``; its config, losses, patch batches,
HDF5 frames and evaluation sets are :mod:`graspsim.vision.train_config`, :mod:`graspsim.vision.losses`, :mod:`graspsim.vision.patches`,
:mod:`graspsim.vision.hdf5_frames`, :mod:`graspsim.vision.eval_sets`), :func:`graspsim.vision.evaluate.evaluate_real` (``graspsim eval-real``),
:class:`graspsim.vision.infer.Segmenter` (fast inference for controllers) and :class:`graspsim.vision.model.SegNet`. The
image-set folder format (read and written) is :mod:`graspsim.vision.image_set`; colour-range mask proposals
(``graspsim propose-masks``) are :mod:`graspsim.vision.proposals`. A net's provenance (which runs and stages made a
shipped checkpoint) is :mod:`graspsim.vision.record`.

The public names below are imported on first use (``from graspsim.vision import Segmenter``), so ``import
graspsim.vision`` stays cheap. Verbs whose function shares its module's name (``calibrate``, ``sample_set``) stay in
their modules: a package attribute named like a submodule would hide it.
"""

from __future__ import annotations

from graspsim.lazy import lazy_names

_LAZY = {
    "Segmenter": "infer",
    "SegNet": "model", "SegNetConfig": "model",
    "TrainVisionConfig": "train_config", "train_vision": "train",
    "EvalRealConfig": "evaluate", "evaluate_real": "evaluate",
    "CalibrateConfig": "calibrate",
    "ComposeConfig": "compose", "Composer": "compose",
    "AugmentConfig": "augment",
    "BackgroundBank": "backgrounds",
    "ImageSetWriter": "image_set", "list_images": "image_set", "read_image": "image_set", "read_mask": "image_set",
    "LabelledFrames": "labelled", "load_labelled": "labelled",
    "ProposeMasksConfig": "proposals", "propose_masks": "proposals",
    "SampleSetConfig": "sample_set",
    "TransferSet": "transfer", "load_transfer_set": "transfer",
}
"""Public name -> the submodule that defines it."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
