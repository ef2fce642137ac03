"""The record beside a shipped vision net (``vision/assets/<name>.json``): how it was trained, stage by stage, how
it was chosen, what it measured and what it replaced. One writer, so that every shipped net's record has the same
keys and none is assembled by hand.

A net trained in stages (``train-vision``, then ``train-vision --init`` from that net) is described by its stages in
order; each stage that has a run folder on this machine reads its seed, steps, seconds and init learning rate from
that folder, and a stage whose folder is gone (an earlier session's) is given as the dict an older record stored.
The last stage's run folder is the net shipped. A maintainer's tool, used from Python when a net is shipped
(``vision/assets/README.md``).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Sequence

from graspsim.fileio import atomic_write_text, check_in_file

from .checkpoint import deployable_payload, save_checkpoint
from .infer import Segmenter, vision_mflop_per_frame

METRIC_KEYS = ("iou", "precision", "recall", "false_positive_image_rate")
"""The numbers of a set that the ``replaced`` summary keeps."""
FROM_METRICS = ("test", "transfer_test", "transfer_val", "transfer_test_by_kind", "transfer_test_breakdown",
                "operating_point")
"""Keys copied from the last stage's ``metrics.json`` when the run wrote them."""


def stage_from_run(run: str | os.PathLike, command: str, **notes: Any) -> dict:
    """One stage of a record from its run folder ``run``: the ``command`` given, and the run's seed, steps, training
    seconds, operating point (threshold, frame gate) and (for a ``--init`` run) init learning rate; ``notes`` are added
    as they are."""
    run = Path(run)
    config = json.loads(check_in_file(run / "config.json", f"stage {command!r}", what="run config").read_text())
    metrics = json.loads(check_in_file(run / "metrics.json", f"stage {command!r}", what="run metrics file").read_text())
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
    metrics = json.loads(check_in_file(run / "metrics.json", "ship: run", what="run metrics file").read_text())
    filled = [stage_from_run(**s) if "run" in s else dict(s) for s in stages]
    old_record = net.with_suffix(".json")
    replaced = _summary(json.loads(old_record.read_text())) if old_record.exists() else None
    payload = deployable_payload(run / "checkpoint.pt")
    if init_as is not None:
        places = [d for d in (payload.get("config"), payload.get("fine_tune"), (payload.get("metrics") or {}).get("fine_tune"))
                  if isinstance(d, dict) and d.get("init")]
        if not places:
            raise ValueError(f"ship: init_as={init_as!r} was given, but {run / 'checkpoint.pt'} was not started from "
                             "another net (no --init in its config)")
        for d in places:
            d["init"] = init_as

    tmp = net.with_name(net.name + ".shipping")
    try:
        save_checkpoint(tmp, payload)
        mflop = vision_mflop_per_frame(Segmenter.from_checkpoint(tmp, precision="fp32"), payload["image_size"])
        os.replace(tmp, net)
    finally:
        tmp.unlink(missing_ok=True)
    record = {
        "command": ", then ".join(s["command"] for s in filled),
        "stages": filled,
        "seed": filled[-1].get("seed"),
        "steps": payload["step"],
        "git_commit": _git_commit(),
        "machine": machine or f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
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
