"""vision: sim-real composition, real background bank, target segmentation net, training and real-set evaluation.

Entry points: :func:`vision.train.train_vision` (``graspsim train-vision``; config in :mod:`vision.train_config`), :func:`vision.evaluate.evaluate_real`
(``graspsim eval-real``), :class:`vision.infer.Segmenter` (fast inference for controllers) and
:class:`vision.model.SegNet`. Submodules are imported lazily so ``import vision`` stays cheap.
"""
