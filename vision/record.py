"""The record beside a shipped vision net (``vision/assets/<name>.json``): how it was trained, stage by stage, how
it was chosen, what it measured and what it replaced. One writer, so that every shipped net's record has the same
keys and none is assembled by hand.

A net trained in stages (``train-vision``, then ``train-vision --init`` from that net) is described by its stages in
order; each stage that has a run folder on this machine reads its seed, steps, seconds and init learning rate from
that folder, and a stage whose folder is gone (an earlier session's) is given as the dict an older record stored.
The last stage's run folder is the net shipped. Use it from Python or as
``python -m graspsim.vision.record SPEC.json`` (the keyword arguments of :func:`ship` as a JSON object).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from graspsim.fileio import atomic_write_text, check_in_file

from .checkpoint import load_checkpoint, save_checkpoint, save_deployable
from .infer import Segmenter, vision_mflop_per_frame

METRIC_KEYS = ("iou", "precision", "recall", "false_positive_image_rate")
"""The numbers of a set that the ``replaced`` summary keeps."""
FROM_METRICS = ("test", "transfer_test", "transfer_val", "transfer_test_by_kind", "transfer_test_breakdown",
                "operating_point")
"""Keys copied from the last stage's ``metrics.json`` when the run wrote them."""


def stage_from_run(run: str | os.PathLike, command: str, **notes: Any) -> dict:
    """One stage of a record from its run folder ``run``: the ``command`` given, and the run's seed, steps, training
    seconds and (for a ``--init`` run) init learning rate; ``notes`` are added as they are."""
    run = Path(run)
    config = json.loads(check_in_file(run / "config.json", f"stage {command!r}", what="run config").read_text())
    metrics = json.loads(check_in_file(run / "metrics.json", f"stage {command!r}", what="run metrics file").read_text())
    stage = {"command": command, "seed": config.get("seed"), "steps": config.get("init_steps") if config.get("init")
             else config.get("steps"), "train_seconds": metrics.get("train_seconds")}
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
    try:
        got = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return got.stdout.strip() or None


def ship(net: str | os.PathLike, run: str | os.PathLike, stages: Sequence[dict], *, chosen_on: dict,
         machine: str | None = None, init_as: str | None = None, extra: dict | None = None) -> dict:
    """Ship the net of run folder ``run`` (its ``checkpoint.pt``) as ``net`` (a ``.pt`` path) without its training
    state, and write its record beside it (``net`` with ``.json``). Returns the record.

    ``stages``: the commands that trained it, in order; an item with ``"run"`` and ``"command"`` is read from that run
    folder (:func:`stage_from_run`, other keys kept as notes), any other item is stored as given. ``chosen_on``: the
    rule it was chosen by and what the candidates scored (validation only). ``machine``: where it trained (default: this
    machine's processor). ``init_as``: the path to store as the checkpoint's ``config.init`` and ``fine_tune.init``
    instead of this machine's (e.g. ``vision/assets/segnet_kinds.pt`` when the run was started from the shipped file).
    ``extra``: more keys for the record (e.g. ``closed_loop_validation``). A record already beside ``net`` becomes
    the new one's ``replaced`` summary.
    """
    net, run = Path(net), Path(run)
    if net.suffix != ".pt":
        raise ValueError(f"ship: the net to write must be a .pt path; got {net}")
    if not stages:
        raise ValueError("ship: give the stages that trained the net (at least the last, with its run folder)")
    check_in_file(run / "checkpoint.pt", "ship: run", what="checkpoint")
    filled = [stage_from_run(**s) if "run" in s else dict(s) for s in stages]
    old_record = net.with_suffix(".json")
    replaced = _summary(json.loads(old_record.read_text())) if old_record.exists() else None
    metrics = json.loads((run / "metrics.json").read_text())

    payload = save_deployable(run / "checkpoint.pt", net)
    if init_as is not None:
        for d in (payload.get("config"), payload.get("fine_tune"), (payload.get("metrics") or {}).get("fine_tune")):
            if isinstance(d, dict) and d.get("init"):
                d["init"] = init_as
        save_checkpoint(net, payload)
    payload = load_checkpoint(net)

    seg = Segmenter.from_checkpoint(net, precision="fp32")
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
        "mflop_per_frame_as_deployed": round(vision_mflop_per_frame(seg, payload["image_size"]), 2),
        "chosen_on": chosen_on,
        **(extra or {}),
        **{k: metrics[k] for k in FROM_METRICS if k in metrics},
        "config": payload["config"],
        "replaced": replaced,
    }
    atomic_write_text(old_record, json.dumps(record, indent=2, default=str) + "\n")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m graspsim.vision.record SPEC.json``: :func:`ship` with the keyword arguments in SPEC.json."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m graspsim.vision.record SPEC.json  (keys: net, run, stages, chosen_on, machine, "
              "init_as, extra)", file=sys.stderr)
        return 2
    spec = json.loads(check_in_file(args[0], "record spec").read_text())
    record = ship(**spec)
    print(json.dumps({k: record[k] for k in ("command", "threshold", "peak_threshold", "mflop_per_frame_as_deployed",
                                            "steps")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
