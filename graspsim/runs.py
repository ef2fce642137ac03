"""The run folder: its ``config.json``, the one resume rule, the one checkpoint format, metrics and iteration checkpoints.

Every verb that writes a run folder (``collect``'s file, ``train-vision``, ``dagger``, ``pipeline``)
keeps the resolved config there as JSON and, with ``--resume``, follows one rule (:func:`check_resume`):
it refuses when a setting that changes results differs from the stored one, and names every such key
(dotted, e.g. ``sim.randomization.sphere_diameter``). Each verb lists the keys that may change
(budgets such as the total number of episodes or iterations, and switches such as ``progress``).

One word, one thing: **config** is always the resolved config of a run (what ``config.json`` holds, what a
checkpoint stores under ``config``); **model config** is the config of a net (its architecture), stored under
``model_config``.

Checkpoints are one ``torch.save`` dict (:func:`save_checkpoint` / :func:`load_checkpoint`):

=================== ===========================================================================
``kind``            what wrote it, e.g. ``"graspsim-vision"``, ``"graspsim-control"``
``format_version``  the layout version of that kind (files without it are version 0)
``model_config``    the net's config as a dict (enough to rebuild the net)
``model``           the weights (a state dict on CPU)
``config``          the config of the run that wrote it (optional for some kinds)
``optimizer`` ...   training state (:data:`TRAINING_ONLY`): only in resumable training checkpoints;
                    a deployable checkpoint (``policy.pt``, ``best.pt``, shipped weights) has none
=================== ===========================================================================

plus kind-specific entries (iteration, threshold, metrics...). Files are written atomically. A kind that renames a
stored key raises its format version and upgrades older files on loading (``upgrade`` of :func:`load_checkpoint`).

Runs that proceed in iterations (``dagger``) keep, beside ``config.json``, ``metrics.json`` (one row per finished
iteration; writing it is the iteration's commit point), ``metrics.csv`` (the same rows' scalars) and a resumable
checkpoint per iteration, ``checkpoints/iter_NNN.pt`` (:func:`iteration_checkpoint`); :func:`finished_iterations`
applies the resume rule to such a folder.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Collection, Mapping, Sequence

import torch

from . import compat
from .fileio import atomic_write_text, check_in_file, replace_atomically

log = logging.getLogger(__name__)

CONFIG_NAME = "config.json"
METRICS_NAME = "metrics.json"
"""Per-iteration rows of an iterating run (a JSON list); the CSV beside it is :data:`METRICS_CSV_NAME`."""
METRICS_CSV_NAME = "metrics.csv"
CHECKPOINTS_DIR = "checkpoints"
"""Folder of an iterating run's resumable per-iteration checkpoints (:func:`iteration_checkpoint`)."""
TRAINING_ONLY = ("optimizer", "scheduler", "generator_state", "generator_states", "raw_model", "ema_updates")
"""Checkpoint entries that only resuming training needs; deployable checkpoints leave them out."""


# ------------------------------------------------------------------------------------------ config + resume
def flatten_config(d: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (lists kept as values)."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten_config(v, key))
        else:
            out[key] = v
    return out


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=str))  # tuples -> lists, paths -> str: compare as stored


def config_differences(old: dict, new: dict, ignore: Collection[str] = ()) -> list[str]:
    """Dotted keys whose values differ between two configs (``ignore`` lists top-level or dotted keys)."""
    a, b = flatten_config(_jsonable(old)), flatten_config(_jsonable(new))
    ign = set(ignore)

    def ignored(k: str) -> bool:
        return any(k == i or k.startswith(i + ".") for i in ign)

    return sorted(k for k in set(a) | set(b) if not ignored(k) and a.get(k, "<missing>") != b.get(k, "<missing>"))


def describe_differences(old: dict, new: dict, keys: list[str], most: int = 8) -> str:
    """``"N setting(s): k1, k2, ... (k1: old -> new, ...)"``: every key's name, the values of the first ``most``."""
    a, b = flatten_config(_jsonable(old)), flatten_config(_jsonable(new))
    values = ", ".join(f"{k}: {a.get(k, '<missing>')!r} -> {b.get(k, '<missing>')!r}" for k in keys[:most])
    return f"{len(keys)} setting(s): {', '.join(keys)} ({values}{', ...' if len(keys) > most else ''})"


def grouped_runtime(old: dict, new: dict) -> dict:
    """``old`` as the current layout stores it: configs written before :class:`graspsim.runtime.RuntimeConfig`
    kept device, threads, dist_timeout and progress at the top level; when ``new`` groups them under ``runtime``
    and ``old`` does not, they are moved there (so ``threads`` compares as ``runtime.threads``)."""
    group = new.get("runtime")
    if not isinstance(group, dict) or "runtime" in old:
        return old
    moved = {k: old[k] for k in group if k in old}
    if not moved:
        return old
    return {**{k: v for k, v in old.items() if k not in moved}, "runtime": moved}


SIM_FIELDS_BEFORE = {k: e.value for k, e in compat.SIM_SETTINGS_ADDED.items()}
"""Simulator settings added after the wrist whose default changed what a run does, at the value that reproduces runs
written before them (:func:`sim_fields_added`; the table is :data:`graspsim.compat.SIM_SETTINGS_ADDED`). They only
act with the wrist: a stored sphere-only config takes the requested value (it would have run the same either way)."""


SIM_SETTINGS_NESTED = ("randomization.table_photos",)
"""Nested simulator settings added later whose default (here: the built-in table bank) is what every run before them
did; a stored config without one compares as if it held the default (:func:`sim_fields_added`)."""


def sim_fields_added(old: dict, new: dict) -> dict:
    """``old`` completed with the :class:`graspsim.SimConfig` settings that target kinds and the wrist added
    (``target.*``, ``max_yaw_rate``, ``max_yaw_accel``, ``max_wrist_yaw``, ``pad_friction``) and later
    (``embodiment``: ``floating``; :data:`SIM_SETTINGS_NESTED`: their defaults)
    (:data:`SIM_FIELDS_BEFORE`), at the values that reproduce what runs before them did (spheres only, so the wrist
    never turns; no fingertip senses), wherever ``new`` has them and a
    stored simulator config (recognised by its ``open_width``) lacks them: a run folder written before they
    existed still resumes. Returns a flat dotted dict when something was added, else ``old`` unchanged."""
    from .config import SimConfig

    base = {**flatten_config(_jsonable(SimConfig().to_dict())), **SIM_FIELDS_BEFORE}
    names = [k for k in base if k.split(".")[0] in ("target", "max_yaw_rate", "max_yaw_accel", "max_wrist_yaw",
                                                     "pad_friction", "embodiment", *SIM_FIELDS_BEFORE)
             or k in SIM_SETTINGS_NESTED]
    flat_old, flat_new = flatten_config(_jsonable(old)), flatten_config(_jsonable(new))
    fill = {}
    for k in flat_new:
        if k in flat_old:
            continue
        for name in names:
            prefix = k[: -len(name)] if k.endswith(name) and (k == name or k.endswith("." + name)) else None
            if prefix is not None and prefix + "open_width" in flat_old:
                fill[k] = base[name]
                if name in SIM_FIELDS_BEFORE and flat_old.get(prefix + "target.kinds", ["sphere"]) == ["sphere"]:
                    fill[k] = flat_new[k]  # no wrist: the setting changes nothing
    return {**flat_old, **fill} if fill else old


def stored_sim(config: dict | None) -> dict | None:
    """The simulator config a run trained in, from its stored config (a checkpoint's ``config``): the first ``sim``
    dict found depth first (a DAgger run's own, or a pipeline's), else None."""
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("sim"), dict):
        return config["sim"]
    for v in config.values():
        got = stored_sim(v)
        if got is not None:
            return got
    return None


def trained_kinds(config: dict | None) -> tuple[str, ...]:
    """The target kinds a run was trained on, from its stored config (a checkpoint's ``config``): the
    ``sim.target.kinds`` of :func:`stored_sim`, else ``("sphere",)``, the one kind of every run written before kinds
    existed."""
    kinds = (stored_sim(config) or {}).get("target", {}).get("kinds")
    return tuple(kinds) if kinds else ("sphere",)


def check_trained_kinds(trained: Sequence[str], kinds: Sequence[str], what: str) -> None:
    """ValueError naming ``what`` (a checkpoint) when the scenes' target ``kinds`` hold one it was not ``trained`` on."""
    missing = [k for k in kinds if k not in trained]
    if missing:
        raise ValueError(f"{what} was trained on {','.join(trained)}, not on {','.join(missing)}; give "
                         f"--sim.target.kinds within {','.join(trained)}, or train one with "
                         f"--sim.target.kinds {','.join(kinds)}")


def trained_embodiment(config: dict | None) -> str:
    """The embodiment a run was trained for, from its stored config (a checkpoint's ``config``): ``sim.embodiment``
    of :func:`stored_sim`, else ``floating``, the one embodiment of every run written before embodiments existed."""
    name = (stored_sim(config) or {}).get("embodiment")
    return str(name) if name else "floating"


def check_embodiment(trained: str, embodiment: str, what: str) -> None:
    """ValueError naming ``what`` (a checkpoint) and both embodiments when it was ``trained`` for another than the
    scenes' ``embodiment``: its camera, gripper and reach differ, so its net is not for these scenes."""
    if trained != embodiment:
        raise ValueError(f"{what} was trained for the {trained!r} embodiment, not for {embodiment!r}; give "
                         f"--sim.embodiment {trained}, or train one with --sim.embodiment {embodiment}")


def check_resume(old: dict, new: dict, may_change: Collection[str], where: str | os.PathLike,
                 added: Mapping[str, Any] | None = None) -> None:
    """The one resume rule: raise ValueError naming every dotted key (except those in ``may_change``)
    whose value differs between the stored config ``old`` and the requested ``new``. ``added`` maps dotted keys
    that a later version introduced to the value that reproduces what runs before it did: a stored config without
    such a key compares as if it held that value (so a run folder from before the key existed still resumes)."""
    old = grouped_runtime(old, new)
    old = sim_fields_added(old, new)
    if added:
        flat = flatten_config(_jsonable(old))
        old = {**{k: v for k, v in added.items() if k not in flat}, **flat}
    diff = config_differences(old, new, ignore=may_change)
    if diff:
        raise ValueError(f"--resume: the config of {where} differs in {describe_differences(old, new, diff)}; "
                         "these change results, so "
                         f"resuming would mix two runs. Only {sorted(may_change)} may change; start a new run "
                         "folder instead (or repeat the stored settings)")


def resume_old_defaults(old: dict, new: dict, changed: Mapping[str, tuple[Any, Any]],
                        added: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Settings whose default a later version changed, resolved for a resume. ``changed`` maps a dotted key (one
    setting, or a group such as ``model``) to (its default before, its default now). Where the stored config ``old``
    holds the earlier default and the request ``new`` the current one, the run folder resumes as what it was: the
    result maps each such key to the stored value, for the caller to put into its config before
    :func:`check_resume` (``added`` as there)."""
    flat_old = flatten_config(_jsonable(old))
    if added:
        flat_old = {**{k: v for k, v in added.items() if k not in flat_old}, **flat_old}
    flat_new = flatten_config(_jsonable(new))

    def group(flat: dict, key: str) -> dict:
        return {k: v for k, v in flat.items() if k == key or k.startswith(key + ".")}

    return {key: before for key, (before, now) in changed.items()
            if group(flat_old, key) == flatten_config(_jsonable(before), key)
            and group(flat_new, key) == flatten_config(_jsonable(now), key)}


LOCK_NAME = ".graspsim-run.lock"
"""Hidden file a running job holds locked in its run folder (:func:`claim_run_folder`)."""
_CLAIMED: dict[tuple[int, int], Any] = {}


def claim_run_folder(run_dir: str | os.PathLike, resume: bool, flag: str = "--out") -> None:
    """Make this process the one writer of the run folder ``run_dir`` (created if needed) until it exits: an
    exclusive lock on :data:`LOCK_NAME` inside it, released by the operating system when the process ends (also on a
    crash). FileExistsError naming ``flag`` when another process holds it, or when, without ``resume``, another run
    wrote the folder's config after this one checked that it was empty (two runs started into one folder)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    handle = open(run_dir / LOCK_NAME, "a+")
    st = os.fstat(handle.fileno())
    key = (st.st_dev, st.st_ino)  # the lock file itself, so a folder moved while this process holds it stays claimed
    if key in _CLAIMED:
        handle.close()
        return
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, the emptiness check of check_out_dir still applies
        fcntl = None
    if fcntl is not None:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise FileExistsError(f"{flag} {run_dir} is being written by another run right now; wait for it to end "
                                  "or choose another folder") from None
    if not resume and (run_dir / CONFIG_NAME).exists():
        handle.close()
        raise FileExistsError(f"{flag} {run_dir} was written by another run that started at the same time; choose "
                              "another folder")
    _CLAIMED[key] = handle  # kept open (and locked) until release_run_folder, or the end of the process


def release_run_folder(run_dir: str | os.PathLike) -> None:
    """Give up this process's claim on ``run_dir`` (:func:`claim_run_folder`): close its lock file, which releases the
    lock. Nothing happens for a folder this process does not hold (never claimed, or released already)."""
    try:
        st = os.stat(Path(run_dir) / LOCK_NAME)
    except OSError:
        return
    handle = _CLAIMED.pop((st.st_dev, st.st_ino), None)
    if handle is not None:
        handle.close()


def read_config(run_dir: str | os.PathLike) -> dict | None:
    """The stored ``config.json`` of a run folder, or None if there is none; ValueError if unreadable."""
    path = Path(run_dir) / CONFIG_NAME
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a readable run config ({e}); choose another output folder") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a run config (a JSON object); choose another output folder")
    return data


def write_config(run_dir: str | os.PathLike, config: dict) -> Path:
    """Write ``config`` as the run folder's ``config.json`` (atomically); returns its path."""
    path = Path(run_dir) / CONFIG_NAME
    atomic_write_text(path, json.dumps(config, indent=2, default=str))
    return path


def resume_config(run_dir: str | os.PathLike, config: dict, may_change: Collection[str],
                  added: Mapping[str, Any] | None = None) -> bool:
    """Apply the resume rule to a run folder: compare ``config`` with its stored ``config.json``
    (:func:`check_resume`, ``added`` as there). Returns False when the folder has no stored config (nothing to
    resume)."""
    old = read_config(run_dir)
    if old is None:
        return False
    check_resume(old, config, may_change, Path(run_dir) / CONFIG_NAME, added)
    return True


# ------------------------------------------------------------------------------------------ checkpoints
def save_checkpoint(path: str | os.PathLike, kind: str, format_version: int, payload: dict) -> None:
    """Atomically write ``payload`` (with ``model`` and ``model_config``) as a checkpoint of ``kind``."""
    missing = [k for k in ("model", "model_config") if k not in payload]
    if missing:
        raise ValueError(f"save_checkpoint: payload lacks {missing}")
    data = {"kind": kind, "format_version": int(format_version), **payload}
    buf = io.BytesIO()
    torch.save(data, buf)
    with replace_atomically(Path(path)) as tmp:
        Path(tmp).write_bytes(buf.getvalue())


def deployable(ckpt: dict) -> dict:
    """A copy of a loaded checkpoint without its training state (:data:`TRAINING_ONLY`)."""
    return {k: v for k, v in ckpt.items() if k not in TRAINING_ONLY}


def load_checkpoint(path: str | os.PathLike, kind: str, format_version: int, *, what: str, inside: str,
                    written_by: str, required: Collection[str] = ("model", "model_config"),
                    upgrade: Callable[[dict, int], dict] | None = None,
                    map_location: str | torch.device = "cpu") -> dict:
    """Load and check a checkpoint of ``kind``.

    FileNotFoundError if missing (``inside`` names the file to look for when ``path`` is a folder);
    ValueError if it is not a torch checkpoint, is of another kind, lacks ``required`` entries, or has a
    ``format_version`` this code cannot read. An older version is passed to ``upgrade(ckpt, version)``
    (which returns the current layout or raises ValueError saying how to convert the file); without
    ``upgrade`` an older version is refused with that advice.
    """
    path = check_in_file(path, what, what, inside=inside)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:  # any unpickling/zip error means "not a checkpoint"
        reason = " ".join(str(e).split())  # pickle's messages may span lines; an error is one line
        raise ValueError(f"{path} is not a readable torch checkpoint ({type(e).__name__}: {reason}); give a {what} "
                         f"written by {written_by}") from None
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path} is not a graspsim checkpoint (got a {type(ckpt).__name__}, expected a dict)")
    found = ckpt.get("kind")
    if found != kind:
        raise ValueError(f"{path} is a checkpoint of kind {found!r}, expected {kind!r} (a {what} written by "
                         f"{written_by})")
    version = int(ckpt.get("format_version", 0))
    if version > format_version:
        raise ValueError(f"{what} {path} has format_version {version}, newer than this code reads "
                         f"({format_version}); update graspsim")
    if version < format_version:
        if upgrade is None:
            raise ValueError(f"{what} {path} has format_version {version}; this code reads {format_version}. "
                             f"Retrain it with {written_by}")
        ckpt = upgrade(ckpt, version)
        ckpt["format_version"] = format_version
    missing = [k for k in required if k not in ckpt]
    if missing:
        raise ValueError(f"{what} {path} lacks the entries {missing}")
    return ckpt


# ------------------------------------------------------------------------------------------ iterations
def iteration_checkpoint(run_dir: str | os.PathLike, iteration: int) -> Path:
    """Path of iteration ``iteration``'s resumable checkpoint: ``run_dir/checkpoints/iter_NNN.pt``."""
    return Path(run_dir) / CHECKPOINTS_DIR / f"iter_{int(iteration):03d}.pt"


def write_metrics(run_dir: str | os.PathLike, rows: list[dict]) -> None:
    """Write the finished iterations' ``rows`` (one dict each) as ``metrics.json`` (the whole rows) and
    ``metrics.csv`` (the first row's scalar columns), both atomically; ``metrics.json`` is the commit point."""
    run_dir = Path(run_dir)
    atomic_write_text(run_dir / METRICS_NAME, json.dumps(rows, indent=2))
    keys = [k for k in rows[0] if not isinstance(rows[0][k], (dict, list))]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(run_dir / METRICS_CSV_NAME, buf.getvalue())


def finished_iterations(run_dir: str | os.PathLike, config: dict, may_change: Collection[str], *, resume: bool,
                        what: str, added: Mapping[str, Any] | None = None) -> list[dict]:
    """The rows of the finished iterations of the iterating run in ``run_dir`` that ``config`` resumes, or [] for a
    fresh run (``resume`` False, or a folder without ``metrics.json``). Applies the resume rule to the stored
    ``config.json`` (:func:`resume_config`, ``added`` as there) and checks that every finished iteration has its
    checkpoint; ValueError / FileNotFoundError otherwise. ``what`` names the kind of run folder in messages (e.g.
    "DAgger")."""
    run_dir = Path(run_dir)
    metrics = run_dir / METRICS_NAME
    if not resume:  # a fresh run: the verb's check_out_dir has refused a non-empty folder
        return []
    if not metrics.exists():
        log.info("--resume: %s has no finished iteration; starting fresh", run_dir)
        return []
    try:
        rows = json.loads(metrics.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--resume: {run_dir} is not a readable {what} run folder ({e}); choose another --out") from None
    if not resume_config(run_dir, config, may_change, added):
        raise ValueError(f"--resume: {run_dir} has no {CONFIG_NAME}; it is not a {what} run folder")
    for r in rows:
        ck = iteration_checkpoint(run_dir, r["iteration"])
        if not ck.is_file():
            raise FileNotFoundError(f"--resume: finished iteration {r['iteration']} has no checkpoint {ck}")
    return rows


__all__ = [
    "CHECKPOINTS_DIR", "CONFIG_NAME", "METRICS_CSV_NAME", "METRICS_NAME", "TRAINING_ONLY", "check_resume",
    "config_differences", "deployable", "describe_differences", "finished_iterations", "flatten_config",
    "grouped_runtime", "iteration_checkpoint", "load_checkpoint", "read_config", "resume_config",
    "resume_old_defaults", "save_checkpoint", "stored_sim", "trained_embodiment", "check_embodiment", "write_config",
    "write_metrics",
]
