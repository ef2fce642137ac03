"""The record beside a shipped vision net (``vision/assets/<name>.json``): how it was trained, stage by stage, how
it was chosen, what it measured and what it replaced. One writer, so that every shipped net's record has the same
keys and none is assembled by hand.

A net trained in stages (``train-vision``, then ``train-vision --init`` from that net) is described by its stages in
order; each stage that has a run folder on this machine reads its seed, steps, seconds and init learning rate from
that folder, and a stage whose folder is gone (an earlier session's) is given as the dict an older record stored.
The last stage's run folder is the net shipped. A maintainer's tool, used from Python when a net is shipped
(``vision/assets/README.md``). :func:`recalibrate` ships a new operating point for the same weights (the output of
``graspsim calibrate``) and adds that step to the record. :func:`ship_ensemble` ships an ensemble that ``graspsim
calibrate --vision A.pt B.pt ...`` made, with its members' records, and :func:`add_test` adds the transfer-test
figures to a net shipped before its test set was read.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Sequence

import torch

from graspsim.fileio import atomic_write_text, check_in_file

from .checkpoint import deployable_payload, load_checkpoint, save_checkpoint
from .ensemble import WEIGHTS_KEY, ensemble_size
from .infer import Segmenter, vision_mflop_per_frame

METRIC_KEYS = ("iou", "precision", "recall", "false_positive_image_rate")
"""The numbers of a set that the ``replaced`` summary keeps."""
FROM_METRICS = ("test", "transfer_test", "transfer_val", "transfer_test_by_kind", "transfer_test_breakdown",
                "operating_point")
"""Keys copied from the last stage's ``metrics.json`` when the run wrote them."""


def _read_json(path: Path, label: str, what: str) -> dict:
    """The JSON object in ``path``: FileNotFoundError when missing, ValueError naming the file when it is not a
    readable JSON object (a half-written or hand-edited file)."""
    path = check_in_file(path, label, what=what)
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{label}: {path} is not a readable {what} ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{label}: {path} is not a {what} (a JSON object)")
    return data


def stage_from_run(run: str | os.PathLike, command: str, **notes: Any) -> dict:
    """One stage of a record from its run folder ``run``: the ``command`` given, and the run's seed, steps, training
    seconds, operating point (threshold, frame gate) and (for a ``--init`` run) init learning rate; ``notes`` are added
    as they are."""
    run = Path(run)
    config = _read_json(run / "config.json", f"stage {command!r}", "run config")
    metrics = _read_json(run / "metrics.json", f"stage {command!r}", "run metrics file")
    stage = {"command": command, "seed": config.get("seed"), "steps": config.get("init_steps") if config.get("init")
             else config.get("steps"), "train_seconds": metrics.get("train_seconds"),
             "threshold": metrics.get("threshold"), "peak_threshold": metrics.get("peak_threshold")}
    if config.get("init"):
        stage["init_lr"] = config.get("init_lr")
    return {**stage, **notes}


def _summary(record: dict) -> dict:
    """What a record keeps of the record it replaces: its command, operating point, headline test numbers and its own
    ``replaced`` (so the chain of shipped nets stays readable)."""
    keep = lambda d: {k: d[k] for k in METRIC_KEYS if k in d}  # noqa: E731
    out = {"command": record.get("command"), "threshold": record.get("threshold"),
           "peak_threshold": record.get("peak_threshold")}
    for name in ("test", "transfer_test"):
        if isinstance(record.get(name), dict):
            out[name] = keep(record[name])
    if isinstance(record.get("transfer_test_by_kind"), dict):
        out["transfer_test_by_kind"] = {k: {x: round(v[x], 4) for x in ("iou", "precision", "recall") if x in v}
                                        for k, v in record["transfer_test_by_kind"].items()}
    out["replaced"] = record.get("replaced")
    return out


def _git_commit() -> str | None:
    """The short commit of the repository this module lives in (None outside a git checkout, e.g. from a wheel)."""
    try:
        got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                             cwd=Path(__file__).resolve().parent)
    except (OSError, subprocess.CalledProcessError):
        return None
    return got.stdout.strip() or None


def _check_stages(stages: Sequence[dict], run: Path) -> None:
    """ValueError naming the stage unless every stage has a ``command`` and the last one is read from ``run``."""
    if not stages:
        raise ValueError("ship: give the stages that trained the net (at least the last, with its run folder)")
    for i, s in enumerate(stages):
        if not isinstance(s, dict) or not isinstance(s.get("command"), str) or not s["command"].strip():
            raise ValueError(f"ship: stage {i + 1} of {len(stages)} needs a 'command' (the command line it ran); got {s!r}")
    last = stages[-1]
    if "run" not in last or Path(last["run"]).resolve() != run.resolve():
        raise ValueError(f"ship: the last stage must be read from the run shipped ({run}); it is "
                         f"{last.get('run', 'given without a run folder')!s}")


def ship(net: str | os.PathLike, run: str | os.PathLike, stages: Sequence[dict], *, chosen_on: dict,
         machine: str | None = None, init_as: str | None = None, extra: dict | None = None) -> dict:
    """Ship the net of run folder ``run`` (its ``checkpoint.pt``) as ``net`` (a ``.pt`` path) without its training
    state, and write its record beside it (``net`` with ``.json``). Returns the record.

    ``stages``: the commands that trained it, in order; an item with ``"run"`` is read from that run folder
    (:func:`stage_from_run`, other keys kept as notes), any other item is stored as given; every item has a
    ``"command"``, and the last is read from ``run``. ``chosen_on``: the rule it was chosen by and what the candidates
    scored (validation only). ``machine``: where it trained (default: this machine's processor). ``init_as``: the path
    to store as the checkpoint's ``config.init`` and ``fine_tune.init`` instead of this machine's (e.g.
    ``vision/assets/segnet_kinds.pt`` when the run started from the shipped file). ``extra``: more keys for the
    record (e.g. ``closed_loop_validation``, or ``git_commit`` for the commit the runs started from, which is by
    default the commit it is shipped from). A record already beside ``net`` becomes the new one's ``replaced``.

    Every input is read and checked before anything is written; the net is written to a temporary file, loaded back
    for its cost per frame, then moved over ``net``, and the record is written last.
    """
    net, run = Path(net), Path(run)
    if net.suffix != ".pt":
        raise ValueError(f"ship: the net to write must be a .pt path; got {net}")
    _check_stages(stages, run)
    check_in_file(run / "checkpoint.pt", "ship: run", what="checkpoint")
    metrics = _read_json(run / "metrics.json", "ship: run", "run metrics file")
    filled = [stage_from_run(**s) if "run" in s else dict(s) for s in stages]
    old_record = net.with_suffix(".json")
    replaced = _summary(_read_json(old_record, "ship: the net's", "record")) if old_record.exists() else None
    payload = deployable_payload(run / "checkpoint.pt")
    if init_as is not None:
        places = [d for d in (payload.get("config"), payload.get("fine_tune"), (payload.get("metrics") or {}).get("fine_tune"))
                  if isinstance(d, dict) and d.get("init")]
        if not places:
            raise ValueError(f"ship: init_as={init_as!r} was given, but {run / 'checkpoint.pt'} was not started from "
                             "another net (no --init in its config)")
        for d in places:
            d["init"] = init_as

    mflop = _write_net(net, payload, _cost_as_deployed)
    record = {
        "command": ", then ".join(s["command"] for s in filled),
        "stages": filled,
        "seed": filled[-1].get("seed"),
        "steps": payload["step"],
        "git_commit": _git_commit(),
        "machine": machine or _this_machine(),
        "train_seconds": filled[-1].get("train_seconds"),
        "threshold": payload["threshold"],
        "peak_threshold": payload.get("peak_threshold", 0.0),
        "mirror_tta": payload.get("mirror_tta", False),
        "mflop_per_frame_as_deployed": round(mflop, 2),
        "chosen_on": chosen_on,
        **(extra or {}),
        **{k: metrics[k] for k in FROM_METRICS if k in metrics},
        "config": payload["config"],
        "replaced": replaced,
    }
    atomic_write_text(old_record, json.dumps(record, indent=2, default=str) + "\n")
    return record


def _this_machine() -> str:
    """This machine's processor and core count, as a record's ``machine`` says them by default."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def _cost_as_deployed(tmp: Path) -> float:
    """MFLOP a frame of the vision checkpoint written at ``tmp``, loaded back as deploy loads it (float32): loading the
    written file is the check that it can be used."""
    seg = Segmenter.from_checkpoint(tmp, precision="fp32")
    return vision_mflop_per_frame(seg, seg.image_size)


def _write_net(net: Path, payload: dict, check=None):
    """Write ``payload`` as the vision checkpoint ``net`` through a temporary file beside it, which ``check`` (a
    callable of its path, or None) reads first; the file is moved over ``net`` only when ``check`` returns. Returns
    what ``check`` returned."""
    tmp = net.with_name(net.name + ".shipping")
    try:
        save_checkpoint(tmp, payload)
        out = check(tmp) if check is not None else None
        os.replace(tmp, net)
        return out
    finally:
        tmp.unlink(missing_ok=True)


def recalibrate(net: str | os.PathLike, calibrated: str | os.PathLike, *, command: str, chosen_on: dict,
                test: str | os.PathLike, test_command: str) -> dict:
    """Ship ``calibrated`` (``graspsim calibrate``'s output for the shipped ``net``: the same weights, a new pixel
    threshold and frame gate) over ``net`` and update its record: ``command`` becomes a stage of its own, the
    operating point is the calibration's, the transfer-test numbers are those of ``test`` (the ``metrics.json`` of
    ``eval-real`` on the transfer test set, run as ``test_command`` with the calibrated net), ``chosen_on`` replaces
    the rule, and the record before becomes ``replaced`` (the numbers measured only at the old point, such as the
    composite test, are kept there and not carried over). Returns the record.

    ValueError when ``calibrated`` is not ``net`` recalibrated (other weights or configuration, no calibration) or
    ``test`` was measured on another checkpoint or at another operating point. Everything is checked before anything
    is written; the net goes through a temporary file and the record is written last."""
    net, calibrated, test = Path(net), Path(calibrated), Path(test)
    record_path = net.with_suffix(".json")
    old = _read_json(record_path, "recalibrate: net", "record")
    shipped, new = load_checkpoint(net), deployable_payload(calibrated)
    if "calibration" not in new:
        raise ValueError(f"recalibrate: {calibrated} has no calibration record; give the file graspsim calibrate wrote")
    same = (shipped["model"].keys() == new["model"].keys() and shipped["config"] == new["config"]
            and all(torch.equal(shipped["model"][k], new["model"][k]) for k in shipped["model"]))
    if not same:
        raise ValueError(f"recalibrate: {calibrated} does not hold the weights and training config of {net}")
    test_set, by_kind = _test_figures(test, calibrated, new, "recalibrate")
    point = _point(new)
    # the checkpoint's own metrics describe its operating point: the new one's numbers replace the old ones', and what
    # was measured only at the old point (the test breakdown, validation per kind) is dropped
    kept = {k: v for k, v in (new.get("metrics") or {}).items()
            if k not in ("transfer_test_breakdown", "transfer_val_by_kind")}
    new["metrics"] = {**kept, "threshold": point[0], "peak_threshold": point[1], "one_region": point[2],
                      "transfer_test": test_set, "transfer_test_by_kind": by_kind,
                      "transfer_val": new["calibration"].get("after"),
                      "recalibrated_from": {"threshold": shipped["threshold"],
                                            "peak_threshold": shipped.get("peak_threshold", 0.0)}}
    _write_net(net, new)
    stages = [*old.get("stages", [{"command": old.get("command", "")}]),
              {"command": command, "threshold": point[0], "peak_threshold": point[1],
               "note": "a new operating point for the same weights, chosen on validation"}]
    stale = ("test", "transfer_test_breakdown")  # measured at the old point only; ``replaced`` keeps their summary
    record = {**{k: v for k, v in old.items() if k not in stale},
              "command": ", then ".join(st["command"] for st in stages), "stages": stages, "git_commit": _git_commit(),
              "threshold": point[0], "peak_threshold": point[1], "one_region": point[2],
              "chosen_on": chosen_on,
              "operating_point": {"chosen_on": ["transfer val (graspsim calibrate)"],
                                  "calibration": new["calibration"]},
              "transfer_val": new["calibration"].get("after"),
              "transfer_test": test_set, "transfer_test_by_kind": by_kind,
              "transfer_test_command": test_command,
              "replaced": _summary(old)}
    atomic_write_text(record_path, json.dumps(record, indent=2, default=str) + "\n")
    return record


def _point(ckpt: dict) -> tuple:
    """The operating point of a loaded vision checkpoint: (threshold, frame gate, one region)."""
    return ckpt["threshold"], ckpt.get("peak_threshold", 0.0), bool(ckpt.get("one_region", False))


def _test_figures(test: Path, net: Path, ckpt: dict, label: str) -> tuple[dict, dict]:
    """The transfer-test summary and per-kind rows a record keeps from ``test`` (the ``metrics.json`` of ``eval-real``)
    measured with ``ckpt`` (loaded from ``net``). ValueError naming both when ``test`` is unreadable or was measured at
    another operating point."""
    metrics = _read_json(test, f"{label}: test", "eval-real metrics file")
    point = _point(ckpt)
    measured = (metrics.get("threshold"), metrics.get("peak_threshold"), bool(metrics.get("one_region", False)))
    if measured != point:
        raise ValueError(f"{label}: {test} was measured at threshold, frame gate, one region {measured}, but "
                         f"{net} has {point}")
    test_set = {k: v for k, v in metrics.items() if k in _SET_KEYS}
    by_kind = {kind: {k: v for k, v in m.items() if k in _KIND_KEYS}
               for kind, m in (metrics.get("by_kind") or {}).items()}
    return test_set, by_kind


def ship_ensemble(net: str | os.PathLike, calibrated: str | os.PathLike, members: Sequence[dict], *, command: str,
                  chosen_on: dict, machine: str | None = None, extra: dict | None = None) -> dict:
    """Ship ``calibrated`` (the file ``graspsim calibrate --vision A.pt B.pt ...`` wrote: an ensemble and its operating
    point) over ``net`` and write its record beside it. Returns the record.

    ``members``: one dict per member, in the order given to calibrate: ``"file"`` (a single-net checkpoint whose
    weights must be that member's; read before anything is written, so ``net`` itself may be one), ``"name"`` (how
    the record and the checkpoint's ``ensemble_members`` name it: a repository path, not this machine's), and
    optionally ``"record"`` (its record: a dict or a ``.json`` path; it is stored without its own ``replaced``) and
    notes (``"command"``, ``"note"``, ...), kept as given. ``command``: the calibrate command line. ``chosen_on``: the
    rule. A record already beside ``net`` becomes the new one's ``replaced``. The test figures are added later, by
    :func:`add_test`, so that the ship can be decided and committed before a test set is read.

    ValueError naming the file when ``calibrated`` is not a calibrated ensemble, the members are not its members, or
    an input is unreadable. Everything is checked before anything is written; the net goes through a temporary file
    that is loaded back first, and the record is written last."""
    net, calibrated = Path(net), Path(calibrated)
    if net.suffix != ".pt":
        raise ValueError(f"ship_ensemble: the net to write must be a .pt path; got {net}")
    payload = deployable_payload(calibrated)
    n = ensemble_size(payload)
    if n < 2 or "calibration" not in payload:
        raise ValueError(f"ship_ensemble: {calibrated} is not a calibrated ensemble (members: {n}, calibration "
                         f"record: {'calibration' in payload}); give the file `graspsim calibrate --vision A B ...` wrote")
    if len(members) != n:
        raise ValueError(f"ship_ensemble: {calibrated} has {n} members; {len(members)} were described")
    described = []
    for i, m in enumerate(members):
        if not isinstance(m, dict) or not m.get("file") or not m.get("name"):
            raise ValueError(f"ship_ensemble: member {i + 1} needs a 'file' (its checkpoint) and a 'name'; got {m!r}")
        weights = load_checkpoint(m["file"])["model"]
        mine = {k[len(f"members.{i}."):]: v for k, v in payload["model"].items() if k.startswith(f"members.{i}.")}
        if weights.keys() != mine.keys() or not all(torch.equal(weights[k], mine[k]) for k in weights):
            raise ValueError(f"ship_ensemble: {m['file']} does not hold the weights of member {i + 1} of {calibrated}")
        rec = m.get("record")
        if rec is not None and not isinstance(rec, dict):
            rec = _read_json(Path(rec), f"ship_ensemble: member {i + 1}'s", "record")
        stored = payload["ensemble_members"][i]
        described.append({"name": m["name"], "step": stored["step"], "seed": stored["seed"],
                          "threshold": stored["threshold"], "peak_threshold": stored["peak_threshold"],
                          **({"weight": stored["weight"]} if "weight" in stored else {}),
                          **{k: v for k, v in m.items() if k not in ("file", "name", "record")},
                          **({"record": {k: v for k, v in rec.items() if k != "replaced"}} if rec is not None else {})})
        stored["source"] = m["name"]  # this machine's path means nothing elsewhere
    old_record = net.with_suffix(".json")
    replaced = _summary(_read_json(old_record, "ship_ensemble: the net's", "record")) if old_record.exists() else None
    threshold, peak, one_region = _point(payload)
    payload["metrics"] = {"threshold": threshold, "peak_threshold": peak, "one_region": one_region,
                          "transfer_val": payload["calibration"].get("after")}

    mflop = _write_net(net, payload, _cost_as_deployed)
    record = {
        "command": command,
        "members": described,
        "ensemble_weights": payload.get(WEIGHTS_KEY),  # None: the members' plain mean
        "steps": [m["step"] for m in described],
        "seed": [m["seed"] for m in described],
        "git_commit": _git_commit(),
        "machine": machine or _this_machine(),
        "threshold": threshold, "peak_threshold": peak, "one_region": one_region,
        "mirror_tta": payload.get("mirror_tta", False),
        "mflop_per_frame_as_deployed": round(mflop, 2),
        "chosen_on": chosen_on,
        **(extra or {}),
        "operating_point": {"chosen_on": ["transfer val (graspsim calibrate)"], "calibration": payload["calibration"]},
        "transfer_val": payload["calibration"].get("after"),
        "config": payload["config"],
        "replaced": replaced,
    }
    atomic_write_text(old_record, json.dumps(record, indent=2, default=str) + "\n")
    return record


def add_test(net: str | os.PathLike, test: str | os.PathLike, *, test_command: str) -> dict:
    """Add the transfer-test figures of the shipped ``net`` to it and its record: ``test`` is the ``metrics.json`` of
    ``eval-real`` run as ``test_command`` with ``net`` at its stored operating point. For a net shipped before its
    test set was read (:func:`ship_ensemble`). Returns the record. ValueError when ``test`` was measured at another
    point or is unreadable; nothing is written then."""
    net, test = Path(net), Path(test)
    record_path = net.with_suffix(".json")
    record = _read_json(record_path, "add_test: net", "record")
    ckpt = deployable_payload(net)
    test_set, by_kind = _test_figures(test, net, ckpt, "add_test")
    ckpt["metrics"] = {**(ckpt.get("metrics") or {}), "transfer_test": test_set, "transfer_test_by_kind": by_kind}
    _write_net(net, ckpt)
    record = {**record, "transfer_test": test_set, "transfer_test_by_kind": by_kind, "transfer_test_command": test_command}
    atomic_write_text(record_path, json.dumps(record, indent=2, default=str) + "\n")
    return record


_SET_KEYS = ("precision", "recall", "iou", "f1", "false_positive_image_rate", "num_images", "num_target_images",
             "num_empty_images", "false_positive_images", "tp_pixels", "fp_pixels", "fn_pixels", "threshold",
             "min_pixels")
"""The keys of a set's summary that a record keeps (as train-vision's ``metrics.json`` has them)."""
_KIND_KEYS = ("iou", "precision", "recall", "false_positive_image_rate", "num_target_images", "num_empty_images",
              "meets_targets")
"""The keys of a target kind's row that a record keeps."""
