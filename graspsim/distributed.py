"""Running one verb on several processes (``torchrun``): who am I, which share is mine, how ranks talk.

>>> with distributed.job("cpu", timeout=1800, what="eval-sim") as ctx:
...     mine = distributed.shard(seeds, ctx.rank, ctx.world_size)
...     parts = distributed.all_gather_object(run(mine))

A process belongs to a job of several when ``torchrun`` (or any launcher that sets the same variables)
gave it ``WORLD_SIZE`` > 1, with ``RANK``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``. Without
those variables every helper here is a no-op for a job of one (rank 0, world size 1): nothing is
initialised, collectives return their input, and every verb behaves exactly as it does on one process.

* :func:`init` starts the default process group once per process: backend ``nccl`` for CUDA devices,
  ``gloo`` for the CPU, with ``timeout`` seconds for every collective (the ``--dist-timeout`` flag of
  the verbs). CUDA ranks use ``cuda:LOCAL_RANK`` (:func:`local_device`).
* :func:`shard` gives a rank its share of a list (episode seeds, episode indices): contiguous blocks or a
  stride; the shares are disjoint and their union, in rank order (contiguous) or interleaved (strided), is
  the list. Episode seeds depend on the episode's index only (:mod:`graspsim.seeds`), so a job split
  over ranks runs the scenes of the single-process job.
* :func:`all_gather_object`, :func:`broadcast_object` and :func:`broadcast_module` move small Python
  objects and weights between ranks; :func:`barrier` waits for all.
* :func:`guard` (used by :func:`job`) makes a failure on one rank a clear error everywhere: the failing
  rank posts ``"rank R: <exception>"`` to the job's key-value store before re-raising; a rank whose
  collective then fails (a lost peer, or the timeout) raises :class:`RankFailed` naming the first rank
  that posted and its cause. ``torchrun`` also ends the other workers as soon as one exits non-zero and
  prints the failed rank with its exit code or signal, so a job never hangs longer than the timeout.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import hashlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Iterator, Sequence, TypeVar

import torch

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT = 1800.0
"""Seconds a collective may wait for the other ranks (torch's own default). It bounds how long a job hangs
when a rank is lost without the launcher noticing, and must exceed the longest stretch that only rank 0
works through (final evaluation, joining a dataset)."""
_ERROR_KEY = "graspsim/failed"


class RankFailed(RuntimeError):
    """Another rank of the job failed; the message names it and its cause."""


@dataclass(frozen=True)
class Context:
    """Where this process stands in its job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def label(self) -> str:
        """``"rank R of W"`` (empty for a job of one)."""
        return f"rank {self.rank} of {self.world_size}" if self.distributed else ""


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer (set by torchrun)") from None


def from_env() -> Context:
    """The job position the launcher gave this process (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``); a job of
    one without them. ValueError for inconsistent values."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", rank if world > 1 else 0)
    if world < 1 or not 0 <= rank < world or local < 0:
        raise ValueError(f"torchrun environment is inconsistent: RANK={rank}, WORLD_SIZE={world}, LOCAL_RANK={local}")
    return Context(rank, world, local)


def single_process(what: str, because: str) -> None:
    """ValueError when this process is one of several of a ``torchrun`` job (``WORLD_SIZE`` > 1), for verbs that
    drive one piece of hardware (``deploy``, ``record``); ``because`` says what every rank would do (e.g. "send
    every command to the robot again"). Call it before opening anything."""
    ctx = from_env()
    if ctx.distributed:
        raise ValueError(f"{what} runs on one process; under torchrun (WORLD_SIZE={ctx.world_size}) every rank would "
                         f"{because}: run it without torchrun")


def context() -> Context:
    """This process's position: from the initialised process group if there is one, else from the environment."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return Context(torch.distributed.get_rank(), torch.distributed.get_world_size(), _env_int("LOCAL_RANK", 0))
    return from_env()


def rank() -> int:
    return context().rank


def world_size() -> int:
    return context().world_size


def is_main() -> bool:
    """True on rank 0 (and in a job of one): the rank that logs, validates and writes shared outputs."""
    return context().rank == 0


def backend_for(device: str | torch.device) -> str:
    """``nccl`` for CUDA devices, ``gloo`` otherwise (no SyncBatchNorm, no nccl on the CPU)."""
    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def local_device(device: str | torch.device) -> torch.device:
    """The device this rank uses: a bare ``"cuda"`` becomes ``cuda:LOCAL_RANK`` in a job of several (one GPU
    per process); anything else is returned as it is."""
    dev = torch.device(device)
    ctx = context()
    if dev.type == "cuda" and dev.index is None and ctx.distributed:
        return torch.device("cuda", ctx.local_rank)
    return dev


def init(device: str | torch.device = "cpu", timeout: float = DEFAULT_TIMEOUT) -> Context:
    """Join the job's process group (once per process; later calls return the context). A no-op for a job of
    one. ``timeout``: seconds any collective waits before it fails."""
    ctx = from_env()
    if not ctx.distributed:
        return ctx
    if not torch.distributed.is_available():
        raise RuntimeError("this torch build has no torch.distributed; run on one process")
    if torch.distributed.is_initialized():
        return context()
    if not (isinstance(timeout, (int, float)) and timeout > 0):
        raise ValueError(f"dist_timeout must be a positive number of seconds; got {timeout!r}")
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(ctx.local_rank)
    torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=float(timeout)))
    # leave the group before the interpreter tears down: a gloo group still alive then aborts the process
    # ("terminate called without an active exception"); re-joining later in the same process does not work
    atexit.register(_leave_at_exit)
    log.info("joined a job of %d processes as rank %d (backend %s, timeout %.0f s)", ctx.world_size, ctx.rank,
             backend, timeout)
    return context()


def _leave_at_exit() -> None:
    with contextlib.suppress(Exception):
        shutdown()


def shutdown() -> None:
    """Leave the process group (if joined)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _active() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and \
        torch.distributed.get_world_size() > 1


# ------------------------------------------------------------------------------------------ shares
def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """``(start, stop)`` of rank ``rank``'s contiguous block of ``n`` items: blocks in rank order, the first
    ``n % world`` of them one longer."""
    if world < 1 or not 0 <= rank < world or n < 0:
        raise ValueError(f"shard_bounds: need 0 <= rank < world and n >= 0; got n={n}, rank={rank}, world={world}")
    base, extra = divmod(n, world)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def shard(items: Sequence[T], rank: int, world: int, strided: bool = False) -> list[T]:
    """Rank ``rank``'s share of ``items``: a contiguous block (:func:`shard_bounds`) or, with ``strided``, every
    ``world``-th item from position ``rank``. Shares of ranks 0..world-1 are disjoint and cover ``items``."""
    if strided:
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"shard: need 0 <= rank < world; got rank={rank}, world={world}")
        return list(items[rank::world])
    lo, hi = shard_bounds(len(items), rank, world)
    return list(items[lo:hi])


def rank_seed(seed: int, rank: int) -> int:
    """:func:`graspsim.seeds.rank_seed`: rank 0 keeps ``seed``, rank r > 0 a well-mixed seed of (seed, r)."""
    from .seeds import rank_seed as derive

    return derive(seed, rank)


# ------------------------------------------------------------------------------------------ collectives
def barrier() -> None:
    """Wait until every rank arrives (no-op for a job of one)."""
    if _active():
        torch.distributed.barrier()


def all_gather_object(obj: T) -> list[T]:
    """Every rank's ``obj`` (picklable), in rank order; ``[obj]`` for a job of one."""
    if not _active():
        return [obj]
    out: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def broadcast_object(obj: T, src: int = 0) -> T:
    """Rank ``src``'s ``obj`` on every rank (the argument is ignored elsewhere); ``obj`` for a job of one."""
    if not _active():
        return obj
    box = [obj if torch.distributed.get_rank() == src else None]
    torch.distributed.broadcast_object_list(box, src=src)
    return box[0]


def broadcast_module(module: torch.nn.Module, src: int = 0) -> None:
    """Overwrite every parameter and buffer of ``module`` with rank ``src``'s values, in place."""
    if not _active():
        return
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            torch.distributed.broadcast(t.data, src=src)


def all_reduce_mean(values: Sequence[float]) -> list[float]:
    """The mean over ranks of each number in ``values`` (as float64); ``values`` for a job of one."""
    if not _active():
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    torch.distributed.all_reduce(t)
    return (t / torch.distributed.get_world_size()).tolist()


def digest(module: torch.nn.Module, buffers: bool = False) -> str:
    """sha256 of ``module``'s parameters (and buffers) as bytes, in name order: equal digests mean bit-identical
    weights."""
    h = hashlib.sha256()
    named = list(module.named_parameters()) + (list(module.named_buffers()) if buffers else [])
    for name, t in sorted(named, key=lambda kv: kv[0]):
        h.update(name.encode())
        flat = t.detach().cpu().clone(memory_format=torch.contiguous_format).reshape(-1)
        h.update(flat.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def check_identical(module: torch.nn.Module, what: str) -> None:
    """RuntimeError unless every rank holds bit-identical parameters of ``module`` (one small all-gather)."""
    if not _active():
        return
    mine = digest(module)
    every = all_gather_object(mine)
    odd = [r for r, d in enumerate(every) if d != every[0]]
    if odd:
        raise RuntimeError(f"{what}: the weights of ranks {odd} differ from rank 0's; data-parallel training lost "
                           "step (a bug: every rank must take the same optimizer steps)")


# ------------------------------------------------------------------------------------------ failures
def _store():
    try:
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except Exception:  # no store (not initialised, or a torch without this helper): nothing to post to
        return None


def _post_failure(message: str) -> None:
    store = _store()
    if store is None:
        return
    with contextlib.suppress(Exception):
        store.compare_set(_ERROR_KEY, "", message)  # the first failure wins


def posted_failure() -> str | None:
    """The failure a rank of this job posted (``"rank R: ..."``), or None."""
    store = _store()
    if store is None:
        return None
    try:
        if store.check([_ERROR_KEY]):
            return store.get(_ERROR_KEY).decode()
    except Exception:
        return None
    return None


@contextlib.contextmanager
def guard(what: str) -> Iterator[None]:
    """Turn a failure on one rank into a clear error on all (see the module docstring). Exceptions raised by
    this rank's own code are posted for the others and re-raised unchanged; a failed collective caused by
    another rank becomes :class:`RankFailed` naming that rank and its cause."""
    ctx = context()
    if not ctx.distributed:
        yield
        return
    try:
        yield
    except RankFailed:
        raise
    except BaseException as e:
        other = posted_failure()
        if other is not None and not other.startswith(f"rank {ctx.rank}:"):
            raise RankFailed(f"{what} stopped on rank {ctx.rank}: {other}") from e
        cause = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
        if _is_comm_error(e):  # a peer vanished without posting (killed, out of memory)
            raise RankFailed(f"{what} stopped on rank {ctx.rank}: another rank was lost without a report (killed "
                             f"or out of memory?); the launcher's log names it ({cause})") from e
        _post_failure(f"rank {ctx.rank}: {cause}")
        raise


def _is_comm_error(e: BaseException) -> bool:
    backend_error = getattr(torch.distributed, "DistBackendError", ())
    text = str(e)
    return (bool(backend_error) and isinstance(e, backend_error)) or isinstance(e, TimeoutError) or any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Timed out", "timed out",
                            "Broken pipe", "gloo"))


@contextlib.contextmanager
def job(device: str | torch.device, timeout: float, what: str) -> Iterator[Context]:
    """:func:`init` then :func:`guard` around the block; yields the :class:`Context`. A no-op for a job of one.
    The process group stays up for later jobs of the same process (a pipeline's stages, a script calling several
    verbs) and is left at interpreter exit."""
    ctx = init(device, timeout)
    with guard(what):
        yield ctx


__all__ = [
    "Context", "DEFAULT_TIMEOUT", "RankFailed", "all_gather_object", "all_reduce_mean", "backend_for", "barrier",
    "broadcast_module", "broadcast_object", "check_identical", "context", "digest", "from_env", "guard", "init",
    "is_main", "job", "local_device", "posted_failure", "rank", "rank_seed", "shard", "shard_bounds", "shutdown",
    "single_process", "world_size",
]
