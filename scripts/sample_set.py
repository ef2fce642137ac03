"""``graspsim sample-set``: print the folder of the installed sample image set, or rebuild the set.

>>> S=$(graspsim sample-set --where)            # prints e.g. .../graspsim/data/sample_real
>>> graspsim eval-real --images "$S/images" --masks "$S/masks" --vision CHECKPOINT --out runs/eval_sample
>>> graspsim sample-set --out data/sample_real --overwrite    # rebuild the shipped set (in a checkout)

The work is :func:`graspsim.vision.sample_set.sample_set`; this verb prints the folder it returns on stdout (alone on
its line, so that ``$(...)`` captures it).
"""

from __future__ import annotations

from graspsim.vision.sample_set import SampleSetConfig
from graspsim.vision.sample_set import sample_set as _sample_set


def sample_set(cfg: SampleSetConfig) -> None:
    """Run :func:`graspsim.vision.sample_set.sample_set` and print the folder."""
    print(_sample_set(cfg))


__all__ = ["SampleSetConfig", "sample_set"]
