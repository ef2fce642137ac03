"""Groups of :class:`BulletScene` run in this process or in worker processes, behind one interface.

A group owns a contiguous slice of the batch. ``reset(local_ids, params)`` and
``step(targets, close, render)`` return stacked numpy measurements (see :func:`stack_results`).
:class:`ProcessGroup` runs a :class:`LocalGroup` in a child process and talks over a pipe; its calls
are split into ``send_*`` / ``recv`` so the env can start every worker before waiting for any.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback

import numpy as np

from .scene import BulletScene


def stack_results(results: list[dict], images: list[tuple[np.ndarray, np.ndarray]] | None) -> dict:
    """Stack per-scene measurements: tcp n,3; hand_rot n,3,3; gap n; sphere n,3; target_yaw n; touch n,2 bool;
    and, when rendered, rgb n,H,W,3 uint8 and mask n,H,W bool."""
    out = {k: np.stack([r[k] for r in results]) for k in results[0]}
    if images is not None:
        out["rgb"] = np.stack([im[0] for im in images])
        out["mask"] = np.stack([im[1] for im in images])
    return out


class LocalGroup:
    """``n`` scenes, each in its own pybullet DIRECT client of this process."""

    def __init__(self, cfg, n: int):
        self.scenes = [BulletScene(cfg) for _ in range(n)]
        self.last: list[dict | None] = [None] * n

    def reset(self, local_ids: list[int], params: list[dict], render: bool = True) -> dict:
        res, ims = [], []
        for i, p in zip(local_ids, params):
            m = self.scenes[i].reset(p)
            self.last[i] = m
            res.append(m)
            if render:
                ims.append(self.scenes[i].render(m))
        return stack_results(res, ims if render else None)

    def step(self, targets: np.ndarray, close: np.ndarray, drift: np.ndarray, render: bool = True,
             yaws: np.ndarray | None = None) -> dict:
        """targets n,3 (m), close n bool, drift n,2 (m/s), yaws n wrist angle targets (rad) or None for a
        wrist that never turns (see ``BulletScene.step``)."""
        res, ims = [], []
        for i, sc in enumerate(self.scenes):
            m = sc.step(targets[i], bool(close[i]), drift[i], None if yaws is None else float(yaws[i]))
            self.last[i] = m
            res.append(m)
            if render:
                ims.append(sc.render(m))
        return stack_results(res, ims if render else None)

    def render(self, local_ids: list[int]) -> dict:
        """Images of scenes ``local_ids`` in their current state: rgb n,H,W,3 uint8, mask n,H,W bool."""
        ims = [self.scenes[i].render(self.last[i]) for i in local_ids]
        return {"rgb": np.stack([a for a, _ in ims]), "mask": np.stack([b for _, b in ims])}

    def close(self) -> None:
        for sc in self.scenes:
            sc.close_client()


def _worker_main(conn, cfg, n: int) -> None:
    group = None
    try:
        group = LocalGroup(cfg, n)
        conn.send(("ok", None))
        while True:
            cmd, args = conn.recv()
            if cmd == "close":
                break
            try:
                conn.send(("ok", getattr(group, cmd)(*args)))
            except Exception:  # report to the parent instead of dying silently
                conn.send(("error", traceback.format_exc()))
    except (EOFError, KeyboardInterrupt):
        pass
    except Exception:
        conn.send(("error", traceback.format_exc()))
    finally:
        if group is not None:
            group.close()
        conn.close()


class ProcessGroup:
    """A :class:`LocalGroup` of ``n`` scenes living in a child process."""

    def __init__(self, cfg, n: int, context: str = "fork"):
        """Start the process; it builds its scenes in the background; call :meth:`recv` once to wait."""
        ctx = mp.get_context(context)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, cfg, n), daemon=True)
        self.proc.start()
        child.close()

    def send(self, cmd: str, *args) -> None:
        try:
            self.conn.send((cmd, args))
        except (BrokenPipeError, ConnectionResetError, EOFError) as e:
            raise RuntimeError(f"pybullet worker process {self.proc.pid} died (exit code {self.proc.exitcode})") from e

    def recv(self):
        try:
            status, payload = self.conn.recv()
        except (EOFError, ConnectionResetError) as e:
            raise RuntimeError(f"pybullet worker process {self.proc.pid} died (exit code {self.proc.exitcode})") from e
        if status != "ok":
            raise RuntimeError(f"pybullet worker failed:\n{payload}")
        return payload

    def reset(self, local_ids, params, render=True) -> dict:
        self.send("reset", local_ids, params, render)
        return self.recv()

    def step(self, targets, close, drift, render=True, yaws=None) -> dict:
        self.send("step", targets, close, drift, render, yaws)
        return self.recv()

    def render(self, local_ids) -> dict:
        self.send("render", local_ids)
        return self.recv()

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(("close", ()))
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.terminate()
                self.proc.join(timeout=5)
        self.conn.close()
