"""vision: sim-real composition, real background bank, target segmentation net, training and real-set evaluation.

Entry points: :func:`vision.train.train_vision` (``graspsim train-vision``; its config, losses, patch batches,
HDF5 frames and evaluation sets are :mod:`vision.train_config`, :mod:`vision.losses`, :mod:`vision.patches`,
:mod:`vision.hdf5_frames`, :mod:`vision.eval_sets`), :func:`vision.evaluate.evaluate_real` (``graspsim eval-real``),
:class:`vision.infer.Segmenter` (fast inference for controllers) and :class:`vision.model.SegNet`. Submodules are
imported lazily so ``import vision`` stays cheap.
"""
