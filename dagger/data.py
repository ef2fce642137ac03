"""Moved to :mod:`graspsim.dagger.aggregate`; this path imports for one release, with a warning (:mod:`graspsim.compat`)."""

from graspsim.compat import moved_module

moved_module(__name__)
