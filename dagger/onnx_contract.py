"""Moved to :mod:`graspsim.robot.onnx_contract`; this path imports for one release, with a warning (:mod:`graspsim.compat`)."""

from graspsim.compat import moved_module

moved_module(__name__)
