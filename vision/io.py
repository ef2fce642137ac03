"""Reading and writing image files: kept as an import path; everything here comes from
:mod:`graspsim.vision.image_set`, the one owner of the image-set folder format (naming, bit depth, overwrite rule).

New code imports :mod:`graspsim.vision.image_set` directly.
"""

from __future__ import annotations

from graspsim.fileio import atomic_write_bytes  # noqa: F401  (re-exported: vision writers of other files use it)

from .image_set import (  # noqa: F401  (re-exported)
    IMAGE_EXTENSIONS,
    MASK_MAX_LEVELS,
    list_images,
    load_mask,
    read_image,
    read_mask,
    write_png,
)
