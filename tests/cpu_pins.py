"""Which CPU a bit-level pin was recorded on, and the pin for this one.

The digest pins (tests/assets/sphere_pin.json, the collect digest of test_regression.py, the composite digests of
test_kinds_vision.py) hash float tensors bit for bit. torch's MKL paths take other kernels on Intel than on AMD, so
the same code gives other bits there. The pins were recorded on AMD EPYCs (AVX2 and Zen 4 agree). On the Intel Xeon
with AMX (2026-12-01) each pin's own commit was run again and today's code gives the same digests as that commit:
the sphere pin's commit c81aff7b (``tests/assets/sphere_pin_intel.json``), the collect pin's commit ebd97547 (merged
at 87b9fafe) and the composite pin's commit c54c8dd1. Those Intel digests are pinned beside the AMD ones. Another
vendor has no pin, and such a test is skipped saying why (docs/notes/2026-12-01_session11.md).
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


def pin_for_this_cpu(pins: dict[str, object]) -> object:
    """``pins[cpu_vendor()]`` (pins keyed by vendor string); skips the calling test, naming the vendor, when this
    CPU's vendor has none."""
    vendor = cpu_vendor()
    if vendor not in pins:
        pytest.skip(f"bit-level pin recorded on {', '.join(sorted(pins))} CPUs only; this one is {vendor}, whose float "
                    "kernels give other bits (tests/cpu_pins.py)")
    return pins[vendor]
