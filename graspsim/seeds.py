"""The one seed scheme: which scene an episode gets, and where run-level random streams come from.

Every loop over episodes (collect, DAgger rounds, eval-sim, bench, the benchmarks) names its scenes
by **episode seed**: a 63-bit integer from which :func:`graspsim.randomization.scenes_from_seeds`
builds exactly one scene (the same one ``GraspEnv(cfg, num_envs=1, seed=s)`` builds).

Episode seeds come from three disjoint **streams** of a run seed:

========== ======================================================================================
stream      used by
========== ======================================================================================
``train``   scenes that produce training data: ``collect`` and DAgger's rollouts
``heldout`` scenes that choose things during training: DAgger's per-iteration validation
``test``    scenes that only report: ``eval-sim`` and the benchmarks
========== ======================================================================================

Episode ``k`` of stream ``S`` of run seed ``r`` is ``episode_seeds(r, S, k, 1)[0]``. It depends on
(r, S, k) only, never on the batch size, the number of processes or what ran before; two streams
(or two run seeds) share a scene with odds of about 2^-63. A job split over several processes gives
each a disjoint range (or stride) of ``k`` and the union is the single-process run's scene set.

An episode's per-step random numbers (action noise, grasp slip, image noise, the collect expert's
noise, DAgger's choice of driver) are its own too: they are drawn from the scene's key (``State.key``,
itself drawn from the episode seed) and the step counter (:mod:`graspsim.rng`), so an episode plays out
the same whatever else shares the batch or the process. Run-level random streams that are not tied to
an episode (minibatch order, network initialisation) come from :func:`derive_seed` of the run seed and
a fixed tag per purpose.
"""

from __future__ import annotations

import numpy as np

STREAMS = {"train": 0x747261696E, "heldout": 0x68656C64, "test": 0x74657374}
"""Stream tags mixed into episode seeds (the ASCII of the stream's name)."""


def episode_seeds(run_seed: int, stream: str, start: int, n: int) -> list[int]:
    """Episode seeds ``start .. start+n-1`` of ``stream`` ("train", "heldout" or "test") of ``run_seed``."""
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {sorted(STREAMS)}; got {stream!r}")
    if int(start) < 0 or int(n) < 0:
        raise ValueError(f"episode_seeds: start and n must be >= 0; got start={start!r}, n={n!r}")
    out = []
    for k in range(int(start), int(start) + int(n)):
        a, b = np.random.SeedSequence([int(run_seed), STREAMS[stream], k]).generate_state(2, np.uint32)
        out.append(int((int(a) << 31) ^ int(b)))
    return out


def derive_seed(*parts: int) -> int:
    """A 32-bit seed for a run-level random stream, well mixed from the integers ``parts``
    (e.g. run seed, a tag naming the purpose, an iteration)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, np.uint32)[0])


__all__ = ["STREAMS", "derive_seed", "episode_seeds"]


def frame_rng(set_seed: int, index: int, draw: int) -> np.random.Generator:
    """The numpy random stream of one frame of a seeded image set (the foreign-render transfer sets): draw ``draw``
    (an attempt number, or a fixed tag for a later stage such as camera effects) of frame ``index`` of the set made
    with ``set_seed``. It depends on (set_seed, index, draw) only, so frame k of a set is the same whatever the
    set's length."""
    return np.random.default_rng([int(set_seed), int(index), int(draw)])


__all__ += ["frame_rng"]


def net_init_seed(run_seed: int) -> int:
    """Seed of torch's global generator just before a training run builds its net (the initial weights of the vision
    net in ``train-vision`` and of the control net in ``dagger``): the run seed itself."""
    return int(run_seed)


def data_seed(run_seed: int) -> int:
    """Seed of a training run's own data stream (``train-vision``'s composites, patches and frame draws) in a job of
    one process: the run seed itself. Under torchrun rank r draws from
    :func:`rank_seed` of it."""
    return int(run_seed)


def split_draws(run_seed: int, n: int) -> np.ndarray:
    """``n`` uniform draws in [0, 1) (float64), one per episode 0..n-1 of a collected file, that split it into
    robomimic's ``train`` and ``valid`` filter keys (episode k is valid when its draw is below the valid fraction).
    Draw k depends on (run_seed, k) only, so a longer file keeps the split of its first episodes."""
    return np.random.default_rng([int(run_seed), 7919]).random(int(n))


def rank_seed(seed: int, rank: int) -> int:
    """Seed of rank ``rank``'s own copy of a random stream that every rank draws from independently (training
    minibatches, training composites): rank 0 keeps ``seed``, so a job of one draws what it always drew; rank
    r > 0 gets a well-mixed seed of (seed, r). :func:`graspsim.distributed.rank_seed` is this function."""
    return int(seed) if rank == 0 else derive_seed(seed, 0x52414E4B, rank)


def dagger_stream_seed(run_seed: int, iteration: int, purpose: int) -> int:
    """Seed of DAgger iteration ``iteration``'s random stream for ``purpose`` (the one left is 2, the minibatch
    draws). Scenes, dynamics, expert choices and noise come from each episode's own seed (:func:`episode_seeds`,
    :mod:`graspsim.rng`), so the rollout environments need no seed of their own."""
    return derive_seed(run_seed, 0xDA66E2, iteration, purpose)


__all__ += ["dagger_stream_seed", "data_seed", "net_init_seed", "rank_seed", "split_draws"]
