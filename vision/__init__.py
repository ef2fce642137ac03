"""vision: sim-real composition, real background bank, target segmentation net, training and real-set evaluation.

Entry points: :func:`graspsim.vision.train.train_vision` (``graspsim train-vision``; its config, losses, patch batches,
HDF5 frames and evaluation sets are :mod:`graspsim.vision.train_config`, :mod:`graspsim.vision.losses`, :mod:`graspsim.vision.patches`,
:mod:`graspsim.vision.hdf5_frames`, :mod:`graspsim.vision.eval_sets`), :func:`graspsim.vision.evaluate.evaluate_real` (``graspsim eval-real``),
:class:`graspsim.vision.infer.Segmenter` (fast inference for controllers) and :class:`graspsim.vision.model.SegNet`. The
image-set folder format (read and written) is :mod:`graspsim.vision.image_set`; colour-range mask proposals
(``graspsim propose-masks``) are :mod:`graspsim.vision.proposals`. Submodules are imported lazily so ``import vision``
stays cheap.
"""
