"""Which CPU a bit-level pin was recorded on.

The digest pins (tests/assets/sphere_pin.json, the collect digest of test_regression.py, the composite digests of
test_kinds_vision.py) hash float tensors bit for bit. torch's MKL paths take other kernels on Intel than on AMD, so
the same code gives other bits there: the pins were recorded on AMD EPYCs (AVX2 and Zen 4 agree). On the Intel Xeon
with AMX (2026-12-01), the sphere pin's commit (c81aff7b) gives its own digests, and today's code gives the same ones:
those are pinned too (``tests/assets/sphere_pin_intel.json``). The collect and composite pins have no Intel digest:
for the collect, the pin's commit (a9042e68) gives dc73c147... on that Xeon and today's code b1a95402..., so today's
code is not that commit's to the bit there, and a pin of today's would pin an unexplained difference; the composite
pin's commit was not run there. Both are skipped on Intel, saying why (docs/notes/2026-12-01_session10.md).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest


@lru_cache(maxsize=1)
def cpu_vendor() -> str:
    """``"AuthenticAMD"``, ``"GenuineIntel"``, or ``"unknown"`` (no /proc/cpuinfo, another vendor string)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


recorded_on_amd = pytest.mark.skipif(
    cpu_vendor() != "AuthenticAMD",
    reason=f"bit-level pin recorded on AuthenticAMD CPUs; this one is {cpu_vendor()}, whose float kernels give other "
           "bits (tests/cpu_pins.py)")
"""Mark for a test whose pin has AMD digests only."""
