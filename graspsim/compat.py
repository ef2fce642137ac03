"""Compatibility with earlier releases, in one place: every entry names the release it may be dropped in.

What lives here: module paths that moved (:data:`MOVED_MODULES`), command-line flags that were renamed and are now
refused with a hint (:data:`RENAMED_FLAGS`), config fields renamed in code (:data:`RENAMED_FIELDS`), and how run
folders written by earlier releases resume: settings added since (:data:`ADDED_SETTINGS`), defaults changed since
(:data:`CHANGED_DEFAULTS`), settings and values stored under older names (:data:`RENAMED_SETTINGS`,
:data:`RENAMED_VALUES`), settings that moved into a group (:data:`LEGACY_TOP_LEVEL`), simulator settings added since
(:data:`SIM_SETTINGS_ADDED`) and checkpoint keys renamed since (:data:`LEGACY_CHECKPOINT_KEYS`). The run-folder
tables hold history as plain values (what an older release wrote), keyed by the verb whose run folders they describe;
the modules that resume read them through :func:`added_settings`, :func:`changed_defaults` and
:func:`renamed_settings`.

Two horizons: an import path or a flag hint goes one release after it changed (0.3.0); a run-folder or checkpoint
format stays readable until 1.0.0, since users keep their runs longer than their scripts.
``tests/test_compat.py`` fails once the package version reaches an entry's ``drop_in``, so no shim outlives its
promise silently, and checks that the tables' "now" values are still today's defaults. Importing this module changes
nothing and imports nothing of ours; :func:`moved_module` acts only when an old path is imported.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any, Iterator, NamedTuple

FLAG_HORIZON = "0.3.0"
"""When a moved import path or a renamed flag's hint may go: one release after the change."""
FORMAT_HORIZON = "1.0.0"
"""Until when run folders and checkpoints of earlier releases keep resuming and loading."""


class Moved(NamedTuple):
    """A module that moved: the old import path keeps working, with a ``DeprecationWarning``, until ``drop_in``."""

    new: str
    """The module's import path now."""
    drop_in: str
    """The release whose code may delete the old path."""


MOVED_MODULES: dict[str, Moved] = {
    # 0.2.0: the robot stack left graspsim.dagger for its own package, graspsim.robot (folder robot/)
    "graspsim.dagger.cameras": Moved("graspsim.robot.cameras", FLAG_HORIZON),
    "graspsim.dagger.robots": Moved("graspsim.robot.robots", FLAG_HORIZON),
    "graspsim.dagger.robot_loop": Moved("graspsim.robot.loop", FLAG_HORIZON),
    "graspsim.dagger.controller": Moved("graspsim.robot.controller", FLAG_HORIZON),
    "graspsim.dagger.deploy": Moved("graspsim.robot.deploy", FLAG_HORIZON),
    "graspsim.dagger.export": Moved("graspsim.robot.export", FLAG_HORIZON),
    "graspsim.dagger.onnx_contract": Moved("graspsim.robot.onnx_contract", FLAG_HORIZON),
    "graspsim.dagger.record": Moved("graspsim.robot.capture", FLAG_HORIZON),
    # 0.2.0: the DAgger aggregate is no longer named like the graspsim.data package (the shipped photos)
    "graspsim.dagger.data": Moved("graspsim.dagger.aggregate", FLAG_HORIZON),
}
"""Old module path -> where it lives now and when the old path goes."""


def moved_module(old: str) -> None:
    """Make the old module path ``old`` an alias of its new module, warning once per import.

    Called from the stub left at the old path; afterwards ``import old`` and ``from old import X`` give the new
    module's objects (the same module object, so patching one patches the other)."""
    entry = MOVED_MODULES[old]
    warnings.warn(f"{old} moved to {entry.new}; the old path goes in graspsim {entry.drop_in}: import {entry.new}",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(entry.new)


# ------------------------------------------------------------------------------------------ flags and fields
class RenamedFlag(NamedTuple):
    """A command-line flag that was renamed: the old spelling is refused with one line naming the new one."""

    new: str
    """The flag to give now."""
    why: str
    """Half a sentence: why it changed."""
    drop_in: str
    """The release whose code may drop the hint (the old flag then gets the parser's plain error)."""
    verbs: tuple[str, ...] = ()
    """The verbs where the old spelling meant this (empty: every verb)."""


RENAMED_FLAGS: dict[str, RenamedFlag] = {
    # 0.1: one name for each net in every verb
    "--vision-checkpoint": RenamedFlag("--vision", "one name for each net in every verb", FLAG_HORIZON),
    "--control-checkpoint": RenamedFlag("--policy", "one name for each net in every verb", FLAG_HORIZON),
    # 0.2.0: --runtime is the device/threads/progress group in every verb; deploy's torch|onnx choice is its inference
    "--runtime": RenamedFlag("--inference", "the torch|onnx choice is inference; runtime means device, threads and "
                             "progress in every verb", FLAG_HORIZON, ("deploy",)),
}
"""Old flag -> its new spelling, the reason, when the hint goes and the verbs it applies to."""


def renamed_flag(verb: str, args: list[str]) -> str | None:
    """The one-line error for the first old flag spelling in ``args`` (``--flag`` or ``--flag=value``) that applies to
    ``verb``, else None."""
    for a in args:
        old = a.split("=", 1)[0]
        entry = RENAMED_FLAGS.get(old)
        if entry is not None and (not entry.verbs or verb in entry.verbs):
            return f"{old} is now {entry.new} ({entry.why}); give {entry.new}"
    return None


class RenamedField(NamedTuple):
    """A config field renamed in code: a caller that still passes the old name gets a ValueError naming the new."""

    new: str
    """The field's name now."""
    drop_in: str
    """The release whose code may drop the check."""


RENAMED_FIELDS: dict[str, dict[str, RenamedField]] = {
    # 0.2.0: DeployConfig.runtime (torch|onnx) -> inference; DeployConfig.run (the RuntimeConfig) -> runtime, as in
    # every other verb's config
    "DeployConfig": {"run": RenamedField("runtime", FLAG_HORIZON), "runtime": RenamedField("inference", FLAG_HORIZON)},
}
"""Config class -> old field -> its new name."""


# ------------------------------------------------------------------------------------------ run folders
class Added(NamedTuple):
    """A setting added after run folders were first written."""

    value: Any
    """The value that reproduces what runs before it did: a stored config without the key resumes as if it held
    this."""
    drop_in: str


class Changed(NamedTuple):
    """A default that changed after run folders were written."""

    before: Any
    """The default before the change (a run folder that holds it resumes with it when the request holds ``now``)."""
    now: Any
    """Today's default."""
    drop_in: str


class Renamed(NamedTuple):
    """A setting key or value stored under an older name."""

    new: str
    drop_in: str


# the vision net before issue 40 (the whole-frame U-Net), and the default since (the cropped cascade):
# graspsim.vision.train_config.UNET_MODEL and DEFAULT_MODEL as dicts
_UNET_MODEL = {"base_channels": 12, "max_channels": 96, "depth": 3, "chroma": True, "arch": "unet", "crop": 0,
               "locator_channels": 8, "recentre": 0, "context": False, "full_channels": 0}
_CROPPED_MODEL = {"base_channels": 8, "max_channels": 64, "depth": 3, "chroma": True, "arch": "unet", "crop": 24,
                  "locator_channels": 12, "recentre": 0, "context": True, "full_channels": 0}

ADDED_SETTINGS: dict[str, dict[str, Added]] = {
    "train-vision": {
        # issue 40: the cropped cascade, its locator and context; distillation, initialisation, real frames
        "model.arch": Added("unet", FORMAT_HORIZON), "model.full_channels": Added(0, FORMAT_HORIZON),
        "model.crop": Added(0, FORMAT_HORIZON), "model.locator_channels": Added(8, FORMAT_HORIZON),
        "model.context": Added(False, FORMAT_HORIZON), "locator_weight": Added(1.0, FORMAT_HORIZON),
        "teacher": Added(None, FORMAT_HORIZON), "teacher_weight": Added(1.0, FORMAT_HORIZON),
        "init": Added(None, FORMAT_HORIZON), "init_lr": Added(1e-3, FORMAT_HORIZON),
        "real": Added([], FORMAT_HORIZON), "real_fraction": Added(0.5, FORMAT_HORIZON),
        "model.recentre": Added(0, FORMAT_HORIZON),
        "extra_backgrounds": Added([], FORMAT_HORIZON),  # issue 53: more training photo folders
        "ema_decay": Added(0.0, FORMAT_HORIZON),  # issue 53: the weight average
        "compose.supersample": Added(1, FORMAT_HORIZON),  # issue 53: anti-aliased composites
    },
    "dagger": {
        # the wrist (spheres only before it: no wrist, so its rate limit never acted) and the fingertip senses
        "model.wrist": Added(False, FORMAT_HORIZON), "model.max_yaw_rate": Added(1.5, FORMAT_HORIZON),
        "model.fingertip_pixels": Added(False, FORMAT_HORIZON), "sim.fingertip_pixels": Added(False, FORMAT_HORIZON),
        "precision": Added("auto", FORMAT_HORIZON),  # issue 53: --precision (auto was the only behaviour before)
    },
    "pipeline": {
        "vision_model": Added("unet", FORMAT_HORIZON), "target": Added(None, FORMAT_HORIZON),
        "sim.fingertip_pixels": Added(False, FORMAT_HORIZON),
        "precision": Added("auto", FORMAT_HORIZON),  # issue 53: --precision (auto was the only behaviour before)
    },
}
"""Verb -> dotted setting -> the value a run folder from before the setting resumes with
(:func:`graspsim.runs.check_resume`'s ``added``)."""

CHANGED_DEFAULTS: dict[str, dict[str, Changed]] = {
    "train-vision": {"model": Changed(_UNET_MODEL, _CROPPED_MODEL, FORMAT_HORIZON)},  # issue 40
    "dagger": {"sim.fingertip_pixels": Changed(False, True, FORMAT_HORIZON)},
    "pipeline": {"vision_model": Changed("unet", "cropped", FORMAT_HORIZON),
                 "sim.fingertip_pixels": Changed(False, True, FORMAT_HORIZON)},
}
"""Verb -> dotted setting (or group) -> (default before, default now): a run folder that holds the earlier default
resumes with it when the request holds today's (:func:`graspsim.runs.resume_old_defaults`)."""

RENAMED_SETTINGS: dict[str, dict[str, Renamed]] = {
    "pipeline": {"vision_checkpoint": Renamed("vision", FORMAT_HORIZON)},  # the flag --vision-checkpoint -> --vision
}
"""Verb -> setting key a stored config may hold -> the key it compares as."""

RENAMED_VALUES: dict[str, dict[str, dict[str, Renamed]]] = {
    "pipeline": {"vision_model": {"default": Renamed("unet", FORMAT_HORIZON)}},  # before issue 40
}
"""Verb -> setting -> stored value -> today's name for it (run folders and their reports)."""

LEGACY_TOP_LEVEL: dict[str, dict[str, Renamed]] = {
    "deploy": {"threads": Renamed("runtime.threads", FORMAT_HORIZON),
               "progress": Renamed("runtime.progress", FORMAT_HORIZON)},
}
"""Verb -> a setting its config once held at the top level -> where it lives now; a caller or stored config that
still gives it there is read as if it were grouped."""


SIM_SETTINGS_ADDED: dict[str, Added] = {
    "fingertip_pixels": Added(False, FORMAT_HORIZON),  # the fingertip senses (wrist runs before them read 5 senses)
}
"""Simulator settings added after the wrist, at the value that reproduces runs written before them, wherever a
stored config holds a simulator config (:func:`graspsim.runs.sim_fields_added`; they only act with the wrist)."""

LEGACY_CHECKPOINT_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    # control checkpoints of format versions 0 and 1 kept the net's config under "config" and the run's under
    # "run_config"; version 2 (0.1) renamed them, in this order, so "config" is the run's config in every checkpoint
    "graspsim-control": (("config", "model_config"), ("run_config", "config")),
}
"""Checkpoint kind -> (old key, new key) renames its loader applies to older files, in order."""
LEGACY_CHECKPOINT_DROP_IN = {"graspsim-control": FORMAT_HORIZON}
"""Checkpoint kind -> the release whose loader may stop reading the older layout."""


def added_settings(verb: str) -> dict[str, Any]:
    """``{dotted key: value}`` of :data:`ADDED_SETTINGS` for ``verb``."""
    return {k: e.value for k, e in ADDED_SETTINGS.get(verb, {}).items()}


def changed_defaults(verb: str) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (before, now)}`` of :data:`CHANGED_DEFAULTS` for ``verb``."""
    return {k: (e.before, e.now) for k, e in CHANGED_DEFAULTS.get(verb, {}).items()}


def renamed_settings(verb: str, stored: dict) -> dict:
    """``stored`` (a run folder's config) with keys and values of older names under today's
    (:data:`RENAMED_SETTINGS`, :data:`RENAMED_VALUES`)."""
    keys = RENAMED_SETTINGS.get(verb, {})
    out = {(keys[k].new if k in keys else k): v for k, v in stored.items()}
    for key, values in RENAMED_VALUES.get(verb, {}).items():
        if isinstance(out.get(key), str) and out[key] in values:
            out[key] = values[out[key]].new
    return out


def renamed_value(verb: str, key: str, value: Any) -> Any:
    """Today's name of a stored ``value`` of setting ``key`` (itself when it was never renamed)."""
    entry = RENAMED_VALUES.get(verb, {}).get(key, {}).get(value) if isinstance(value, str) else None
    return entry.new if entry is not None else value


def entries() -> Iterator[tuple[str, str]]:
    """Every entry of every table as (where, drop_in), for the test that no entry outlives its release."""
    for old, e in MOVED_MODULES.items():
        yield f"MOVED_MODULES[{old!r}]", e.drop_in
    for old, e in RENAMED_FLAGS.items():
        yield f"RENAMED_FLAGS[{old!r}]", e.drop_in
    for table_name, table in (("RENAMED_FIELDS", RENAMED_FIELDS), ("ADDED_SETTINGS", ADDED_SETTINGS),
                              ("CHANGED_DEFAULTS", CHANGED_DEFAULTS), ("RENAMED_SETTINGS", RENAMED_SETTINGS),
                              ("LEGACY_TOP_LEVEL", LEGACY_TOP_LEVEL)):
        for owner, rows in table.items():
            for key, e in rows.items():
                yield f"{table_name}[{owner!r}][{key!r}]", e.drop_in
    for key, e in SIM_SETTINGS_ADDED.items():
        yield f"SIM_SETTINGS_ADDED[{key!r}]", e.drop_in
    for kind in LEGACY_CHECKPOINT_KEYS:
        yield f"LEGACY_CHECKPOINT_KEYS[{kind!r}]", LEGACY_CHECKPOINT_DROP_IN[kind]
    for owner, keys in RENAMED_VALUES.items():
        for key, values in keys.items():
            for value, e in values.items():
                yield f"RENAMED_VALUES[{owner!r}][{key!r}][{value!r}]", e.drop_in
