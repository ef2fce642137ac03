"""Public names imported on first use: the one ``__getattr__``/``__dir__`` pair every package ``__init__`` uses.

>>> __getattr__, __dir__ = lazy_names(__name__, {"Segmenter": "infer"}, globals())

``import graspsim.vision`` then costs nothing; ``graspsim.vision.Segmenter`` imports ``graspsim.vision.infer`` the
first time and keeps the object in the package, so later lookups are plain attribute reads.
"""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_names(package: str, table: dict[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """Module ``__getattr__`` and ``__dir__`` for ``package``: ``table`` maps a public name to the submodule (relative
    to ``package``) that defines it; ``namespace`` is the package's ``globals()``, where a resolved name is kept."""

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{table[name]}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(table))

    return __getattr__, __dir__
