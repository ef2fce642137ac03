"""Export of episode files as a LeRobotDataset v3.0 folder, written with pyarrow and PyAV (never through lerobot).

Layout written (``CHUNK`` / ``FILE`` count from ``chunk-000`` / ``file-000``; a data file holds whole episodes, one
parquet row group each, and a new file starts once one passes :data:`DATA_FILE_MB`, likewise videos at
:data:`VIDEO_FILE_MB`)::

    OUT/meta/info.json                                 codebase_version "v3.0", fps, totals, path templates, features
    OUT/meta/stats.json                                per feature: min max mean std count q01 q10 q50 q90 q99
    OUT/meta/tasks.parquet                             task (the index, for pandas readers), task_index
    OUT/meta/episodes/chunk-CHUNK/file-FILE.parquet    one row per episode (lengths, where its frames are, seed, ...)
    OUT/meta/graspsim_source.json                      the sidecar: source files, their configs, export options
    OUT/data/chunk-CHUNK/file-FILE.parquet             one row per frame
    OUT/videos/observation.images.wrist/chunk-CHUNK/file-FILE.mp4    (--images video) the episodes back to back

Field mapping (per frame; ``T`` steps per episode, ``H``, ``W`` the image size):

==================================  =====================================  =============================================
source (episode file)               export feature                         type
==================================  =====================================  =============================================
``obs/rgb`` T,H,W,3 uint8           ``observation.images.wrist``           ``video`` (mp4, lossy) or ``image`` (PNG bytes)
``obs/mask`` T,H,W uint8 0/1        ``observation.mask``                   ``bool`` [H, W]
``obs/gripper`` T,3 float32         ``observation.state``                  ``float32`` [3]: finger_gap, last_close_cmd,
                                                                           table_contact
``actions`` T,4 float32             ``action``                             ``float32`` [4]: vx, vy, vz (m/s), grip
(last step), attr ``success``       ``next.done``, ``next.success``        ``bool`` [1]; True on the last frame only
                                                                           (success: when the episode succeeded)
``rewards`` T float32 (if in all)   ``next.reward``                        ``float32`` [1]
``privileged/<k>`` (--privileged)   ``privileged.<k>``                     as stored; never a policy input (no
                                                                           ``observation.`` prefix, so LeRobot's
                                                                           policies do not pick it up)
==================================  =====================================  =============================================

Per episode (``meta/episodes``): ``seed``, ``success``, ``failure``, ``source_file``, ``source_demo`` beside LeRobot's
own columns. ``fps`` is ``SimConfig.control_hz`` of the files' stored config. Statistics are exact over every frame
(images: per channel over every pixel, scaled to 0-1, shape 3,1,1; quantiles by the inverted-CDF rule: the smallest
stored value whose cumulative share reaches q), computed from the source arrays (before video compression).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .. import extras
from ..fileio import atomic_write_text, check_in_file, check_out_dir, staged_dir
from ..keys import FINGERTIP_SENSES, GRIPPER, MASK, RGB
from ..runs import config_differences, sim_fields_added
from ..validate import int_in
from .format import (ACTIONS, DATA, FORMAT, OBS, PRIVILEGED, _attr_value, _open_h5, _sorted_demos, parts_dir,
                     repair_hint)
from .read import read_episodes

log = logging.getLogger(__name__)

CODEBASE_VERSION = "v3.0"
"""The LeRobotDataset format version written (readers of lerobot >= 0.4 expect it)."""
EXTRA = "lerobot"
INSTALL_HINT = f"pip install 'graspsim[{EXTRA}]'"

# feature keys (LeRobot's names where LeRobot has a convention)
IMAGE_KEY = "observation.images.wrist"
MASK_KEY = "observation.mask"
STATE_KEY = "observation.state"
ACTION_KEY = "action"
DONE_KEY = "next.done"
SUCCESS_KEY = "next.success"
REWARD_KEY = "next.reward"
PRIVILEGED_PREFIX = "privileged."
STATE_NAMES = ("finger_gap", "last_close_cmd", "table_contact")
ACTION_NAMES = ("vx", "vy", "vz", "grip")
WRIST_STATE_NAMES = STATE_NAMES + ("wrist_sin", "wrist_cos")
"""``observation.state`` of episodes with the turning wrist (cubes or cylinders in the mix): the wrist angle's sine
and cosine follow."""
FINGERTIP_STATE_NAMES = WRIST_STATE_NAMES + FINGERTIP_SENSES
"""``observation.state`` of wrist episodes with the fingertip senses (``SimConfig.fingertip_pixels``): the 4 follow."""
WRIST_ACTION_NAMES = ("vx", "vy", "vz", "wz", "grip")
"""``action`` of episodes with the turning wrist: the wrist yaw rate (rad/s) before the grip."""
STATE_LAYOUTS = ((STATE_NAMES, ACTION_NAMES), (WRIST_STATE_NAMES, WRIST_ACTION_NAMES),
                 (FINGERTIP_STATE_NAMES, WRIST_ACTION_NAMES))
"""The (state names, action names) an episode file may hold, told apart by its gripper senses' width."""
DEFAULT_TASK = "grasp the small sphere"

SIDECAR = "meta/graspsim_source.json"
INFO = "meta/info.json"
STATS = "meta/stats.json"
TASKS = "meta/tasks.parquet"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
OUTPUTS = ("meta", "data", "videos")
"""Top-level entries of ``--out`` that an export owns (``--overwrite`` replaces them as a whole)."""
CHUNKS_SIZE = 1000
"""Files per chunk folder (LeRobot's default)."""
DATA_FILE_MB = 100
VIDEO_FILE_MB = 200
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)

CODECS = {"av1": "libsvtav1", "h264": "libx264"}
"""``--codec`` -> PyAV encoder. Both ship inside the PyAV wheel (SVT-AV1 is LeRobot's default)."""
DEFAULT_CRF = {"av1": 30, "h264": 23}
"""Constant rate factor of each video codec when none is given: SVT-AV1 at LeRobot's 30, libx264 at its own
default 23 (at 30 its frames differ half again as much from the source); lower is closer and larger."""
GOP = 2
"""Frames between key frames (LeRobot's default), so a random frame decodes after at most one other."""
PIX_FMT = "yuv420p"

FIXED_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}


def require_extra(verb: str = "export-dataset") -> None:
    """:class:`graspsim.extras.MissingExtra` (one line, naming the extra and the install command) unless pyarrow and
    PyAV are installed."""
    for module in ("pyarrow", "av"):
        extras.require(module, EXTRA, verb)


def check_codec(codec: str) -> str:
    """The PyAV encoder name of ``--codec``; ValueError if unknown or not in this PyAV build."""
    if codec not in CODECS:
        raise ValueError(f"--codec must be one of {sorted(CODECS)}; got {codec!r}")
    import av

    try:
        av.codec.Codec(CODECS[codec], "w")
    except Exception as e:  # av raises its own UnknownCodecError
        other = [c for c in CODECS if c != codec]
        raise ValueError(f"--codec {codec}: this PyAV build has no {CODECS[codec]} encoder ({e}); try --codec "
                         f"{other[0]} or --images png") from e
    return CODECS[codec]


# ------------------------------------------------------------------------------------------ sources
@dataclass
class Source:
    """One input episode file as scanned (nothing but attributes and shapes read)."""

    path: Path
    config: dict
    sim: dict
    demos: list[str]
    lengths: list[int]
    obs: dict[str, tuple[tuple[int, ...], str]]  # key -> (per-step shape, dtype)
    action_shape: tuple[int, ...]
    privileged: dict[str, tuple[tuple[int, ...], str]]
    has_rewards: bool


def _sim_config(config: dict, path: Path) -> dict:
    """The SimConfig dict inside a file's stored config: ``config["sim"]`` (collect) or ``config[x]["sim"]``
    (dagger stores its whole config under ``"dagger"``)."""
    if isinstance(config.get("sim"), dict):
        return config["sim"]
    for v in config.values():
        if isinstance(v, dict) and isinstance(v.get("sim"), dict):
            return v["sim"]
    raise ValueError(f"{path}: its stored config holds no simulator settings ('sim'); it was not written by "
                     "graspsim collect or dagger")


def scan_source(path: str | os.PathLike) -> Source:
    """Check that ``path`` is a finished graspsim episode file and read its layout; ValueError naming the problem."""
    path = check_in_file(path, "export-dataset", "episode file")
    pdir = parts_dir(path)
    if pdir.is_dir():
        raise ValueError(f"{path} is an unfinished episode file (its episodes are still in {pdir.name}/ beside it): "
                         f"finish it with 'graspsim collect --out {path} --resume ...' or consolidate what it holds "
                         f"with 'graspsim inspect {path} --repair', then export it")
    with _open_h5(path) as f:
        try:
            return _scan(f, path)
        except (KeyError, OSError, RuntimeError) as e:  # h5py's errors for a damaged file name neither it nor the episode
            raise ValueError(f"{path}: cannot be read ({_h5_reason(e)}). {repair_hint(path)}") from None


def _h5_reason(e: BaseException) -> str:
    """h5py's message without its quotes ("Unable to synchronously open object (can't open file)")."""
    return str(e).strip("'\"") or type(e).__name__


def _open_episode(path: Path, data, name: str):
    """The group of episode ``name``; ValueError naming the file and the episode when it cannot be opened (a part
    file of an unfinished collect that is gone, a damaged file)."""
    import h5py

    try:
        return data[name]
    except (KeyError, OSError) as e:
        link = data.get(name, getlink=True)
        if isinstance(link, h5py.ExternalLink):
            raise ValueError(f"{path} {name}: its steps are stored in {link.filename}, which cannot be opened "
                             f"({_h5_reason(e)}): a 'collect' stopped before it finished its file, and its "
                             f"{parts_dir(path).name}/ folder was moved or deleted since. {repair_hint(path)}") from None
        raise ValueError(f"{path} {name}: cannot be read ({_h5_reason(e)}). {repair_hint(path)}") from None


def _check_episode(path: Path, data, name: str, obs_keys: list[str]) -> int:
    """The number of steps of episode ``name`` after checking, from its metadata alone, that it can be opened, holds
    the observations ``obs_keys`` of the file's first episode and that all its arrays have that many rows; ValueError
    naming the file and the episode otherwise."""
    import h5py

    g = _open_episode(path, data, name)
    if OBS not in g or ACTIONS not in g:
        raise ValueError(f"{path} {name}: has no '{OBS}' group or '{ACTIONS}' array. {repair_hint(path)}")
    have = sorted(g[OBS].keys())
    if have != obs_keys:
        missing, extra = sorted(set(obs_keys) - set(have)), sorted(set(have) - set(obs_keys))
        what = "; ".join(x for x in (f"no obs/{', obs/'.join(missing)}" if missing else "",
                                     f"an extra obs/{', obs/'.join(extra)}" if extra else "") if x)
        raise ValueError(f"{path} {name}: {what} (the file's first episode has obs/{', obs/'.join(obs_keys)}); "
                         "every episode of a dataset needs the same observations: leave the file out")
    try:
        steps = int(g.attrs["num_samples"])
    except (KeyError, TypeError, ValueError):
        steps = int(g[ACTIONS].shape[0])
    rows = {f"{OBS}/{k}": g[OBS][k].shape[0] for k in have}
    rows.update({k: v.shape[0] for k, v in g.items() if isinstance(v, h5py.Dataset)})  # actions, rewards, ...
    if PRIVILEGED in g:
        rows.update({f"{PRIVILEGED}/{k}": v.shape[0] for k, v in g[PRIVILEGED].items()})
    wrong = {k: n for k, n in rows.items() if n != steps}
    if wrong:
        shown = ", ".join(f"{k} has {n}" for k, n in sorted(wrong.items()))
        raise ValueError(f"{path} {name}: arrays of unequal lengths ({shown} steps, the episode {steps}). "
                         f"{repair_hint(path)}")
    return steps


def _scan(f, path: Path) -> Source:
    """:func:`scan_source` on the open file ``f``."""
    fmt = _attr_value(f.attrs.get("format", ""))
    if fmt != FORMAT:
        raise ValueError(f"{path} is not a graspsim episode file (its 'format' attribute is {fmt!r}, expected "
                         f"{FORMAT!r}); export-dataset reads files written by graspsim collect or dagger")
    try:
        config = json.loads(_attr_value(f.attrs["config"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: missing or unreadable 'config' attribute ({e})") from e
    sim = _sim_config(config, path)
    if DATA not in f:
        raise ValueError(f"{path} has no '{DATA}' group")
    data = f[DATA]
    demos = _sorted_demos(data)
    if not demos:
        raise ValueError(f"{path} holds no episodes; leave it out")
    g = _open_episode(path, data, demos[0])
    if OBS not in g or ACTIONS not in g:
        raise ValueError(f"{path}: {demos[0]} has no '{OBS}' group or '{ACTIONS}' array")
    obs = {k: (tuple(v.shape[1:]), v.dtype.str) for k, v in g[OBS].items()}
    for k in (MASK, GRIPPER):
        if k not in obs:
            raise ValueError(f"{path}: episodes have no obs/{k} (they have {sorted(obs)}); it is needed for "
                             f"{MASK_KEY if k == MASK else STATE_KEY}")
    action_shape = tuple(g[ACTIONS].shape[1:])
    priv = {k: (tuple(v.shape[1:]), v.dtype.str) for k, v in g[PRIVILEGED].items()} if PRIVILEGED in g else {}
    has_rewards = "rewards" in g
    lengths = [_check_episode(path, data, n, sorted(obs)) for n in demos]
    layouts = STATE_LAYOUTS
    if obs[GRIPPER][0] not in [(len(st),) for st, _ in layouts]:
        raise ValueError(f"{path}: obs/{GRIPPER} has {obs[GRIPPER][0]} values a step; expected "
                         + " or ".join(f"{len(st)} ({', '.join(st)})" for st, _ in layouts))
    state_names, action_names = next(lay for lay in layouts if obs[GRIPPER][0] == (len(lay[0]),))
    if action_shape != (len(action_names),):
        raise ValueError(f"{path}: actions have shape {action_shape} a step; with {len(state_names)} gripper senses "
                         f"expected ({len(action_names)},) ({', '.join(action_names)})")
    if len(obs[MASK][0]) != 2:
        raise ValueError(f"{path}: obs/{MASK} has per-step shape {obs[MASK][0]}; expected H,W")
    if RGB in obs and (len(obs[RGB][0]) != 3 or obs[RGB][0][2] != 3 or obs[RGB][1] != "|u1"):
        raise ValueError(f"{path}: obs/{RGB} is {obs[RGB][1]} {obs[RGB][0]} a step; expected uint8 H,W,3")
    return Source(path, config, sim, demos, lengths, obs, action_shape, priv, has_rewards)


def check_sources(sources: Sequence[Source], privileged: bool) -> None:
    """ValueError unless the files can share one dataset: the same simulator settings (image size, control rate,
    randomization...), the same observation arrays and shapes, and with ``privileged`` the same privileged arrays."""
    if not sources:
        raise ValueError("no episode files given; name one or more .h5 files")
    seen: dict[Path, int] = {}
    for i, s in enumerate(sources):
        key = s.path.resolve()
        if key in seen:
            raise ValueError(f"{s.path} is given twice (arguments {seen[key] + 1} and {i + 1}); its episodes would "
                             "be exported twice")
        seen[key] = i
    first = sources[0]
    for s in sources[1:]:
        if s.obs != first.obs:
            bad = sorted(k for k in set(s.obs) | set(first.obs) if s.obs.get(k) != first.obs.get(k))
            shown = "; ".join(f"obs/{k}: {_layout(first.obs.get(k))} vs {_layout(s.obs.get(k))}" for k in bad)
            raise ValueError(f"{s.path} and {first.path} store different observations ({shown}); export files "
                             "with the same arrays and image size together")
        diff = config_differences(sim_fields_added(first.sim, s.sim), sim_fields_added(s.sim, first.sim))
        if diff:
            raise ValueError(f"{s.path} was made with other simulator settings than {first.path} (differing: "
                             f"{', '.join('sim.' + k for k in diff[:8])}{' ...' if len(diff) > 8 else ''}); "
                             "export them as separate datasets")
        if privileged and s.privileged != first.privileged:
            raise ValueError(f"{s.path} and {first.path} store different privileged arrays "
                             f"({sorted(s.privileged)} vs {sorted(first.privileged)}); drop --privileged or export "
                             "them separately")
    hz = first.sim.get("control_hz")
    if not isinstance(hz, (int, float)) or hz <= 0 or float(hz) != int(hz):
        raise ValueError(f"{first.path}: sim.control_hz is {hz!r}; a LeRobot dataset needs a whole number of "
                         "frames per second")


def _layout(v: tuple | None) -> str:
    return "missing" if v is None else f"{np.dtype(v[1]).name} {list(v[0])}"


# ------------------------------------------------------------------------------------------ statistics
class FeatureStats:
    """Exact statistics of one feature over the frames given to :meth:`update`.

    ``kind`` ``"image"``: frames N,H,W,3 uint8; per channel over every pixel, from a 256-bin histogram, results
    scaled to 0-1 with shape 3,1,1. ``"array"``: frames N,*shape of any number type (bool counts as 0/1); per
    element, results with the feature's shape. ``count`` is the number of frames.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self.frames = 0
        self.hist = np.zeros((3, 256), np.int64) if kind == "image" else None
        self.parts: list[np.ndarray] = []

    def update(self, x: np.ndarray) -> None:
        self.frames += len(x)
        if self.kind == "image":
            flat = x.reshape(-1, 3)
            for c in range(3):
                self.hist[c] += np.bincount(flat[:, c], minlength=256)
        else:
            self.parts.append(x)

    def result(self) -> dict[str, np.ndarray]:
        if self.kind == "image":
            return _hist_stats(self.hist, self.frames)
        x = np.concatenate(self.parts)
        return _array_stats(x.astype(np.uint8) if x.dtype == np.bool_ else x)


def _quantile_key(q: float) -> str:
    return f"q{int(round(q * 100)):02d}"


def _hist_stats(hist: np.ndarray, frames: int) -> dict[str, np.ndarray]:
    values = np.arange(256, dtype=np.float64)
    n = hist.sum(1).astype(np.float64)  # pixels per channel
    mean = (hist * values).sum(1) / n
    var = (hist * (values - mean[:, None]) ** 2).sum(1) / n
    nz = [np.flatnonzero(h) for h in hist]
    cum = np.cumsum(hist, 1)
    out = {"min": np.array([v[0] for v in nz], np.float64), "max": np.array([v[-1] for v in nz], np.float64),
           "mean": mean, "std": np.sqrt(var)}
    for q in QUANTILES:
        # inverted CDF: the smallest value whose cumulative count reaches q * n (numpy's method="inverted_cdf")
        out[_quantile_key(q)] = np.array([np.searchsorted(cum[c], q * n[c]) for c in range(3)], np.float64)
    stats = {k: (v / 255.0).reshape(3, 1, 1) for k, v in out.items()}
    stats["count"] = np.array([frames], np.int64)
    return stats


def _array_stats(x: np.ndarray) -> dict[str, np.ndarray]:
    """x: N,*shape numbers -> per-element min max mean std (population) and inverted-CDF quantiles, as float64."""
    xf = x.astype(np.float64)
    out = {"min": xf.min(0), "max": xf.max(0), "mean": xf.mean(0), "std": xf.std(0)}
    if x.dtype == np.uint8 and x.size and x.max() <= 1:  # 0/1 data: quantiles from the share of ones (fast, exact)
        ones = out["mean"]
        for q in QUANTILES:
            out[_quantile_key(q)] = (1.0 - ones < q - 1e-12).astype(np.float64)
    else:
        qs = np.quantile(xf, QUANTILES, axis=0, method="inverted_cdf")
        for q, v in zip(QUANTILES, qs):
            out[_quantile_key(q)] = v
    out["count"] = np.array([len(x)], np.int64)
    return out


def _json_stats(stats: dict[str, dict[str, np.ndarray]]) -> str:
    """stats.json text: one line per feature and statistic (the per-pixel mask statistics stay readable)."""
    lines = []
    for k, d in stats.items():
        body = ",\n".join(f"    {json.dumps(s)}: {json.dumps(v.tolist())}" for s, v in d.items())
        lines.append(f"  {json.dumps(k)}: {{\n{body}\n  }}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


# ------------------------------------------------------------------------------------------ writers
class _Rolling:
    """Chunk/file numbering of LeRobot: file-000.. inside chunk-000.., at most :data:`CHUNKS_SIZE` files a chunk."""

    def __init__(self) -> None:
        self.chunk, self.file, self.started = 0, 0, False

    def next(self) -> tuple[int, int]:
        if self.started:
            self.file += 1
            if self.file == CHUNKS_SIZE:
                self.chunk, self.file = self.chunk + 1, 0
        self.started = True
        return self.chunk, self.file


class _DataWriter:
    """Frame rows into ``data/chunk-*/file-*.parquet``, one row group per episode, a new file past the size limit."""

    def __init__(self, root: Path, schema, limit_mb: float):
        self.root, self.schema, self.limit = root, schema, limit_mb * 1024 * 1024
        self.roll, self.writer, self.bytes = _Rolling(), None, 0
        self.where = (0, 0)

    def write(self, table) -> tuple[int, int]:
        import pyarrow.parquet as pq

        if self.writer is None or self.bytes >= self.limit:
            self.close()
            self.where = self.roll.next()
            path = self.root / DATA_PATH.format(chunk_index=self.where[0], file_index=self.where[1])
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(path, self.schema, compression="snappy")
            self.bytes = 0
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.bytes += table.nbytes
        return self.where

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class _VideoWriter:
    """Frames of consecutive episodes into ``videos/<key>/chunk-*/file-*.mp4`` (frame k of a file at k/fps s)."""

    def __init__(self, root: Path, key: str, encoder: str, fps: int, crf: int, size: tuple[int, int],
                 limit_mb: float):
        self.root, self.key, self.encoder, self.fps, self.crf = root, key, encoder, fps, crf
        self.height, self.width = size
        self.limit = limit_mb * 1024 * 1024
        self.roll, self.container, self.stream = _Rolling(), None, None
        self.frames, self.bytes, self.where, self.first_path = 0, 0, (0, 0), None

    def _open(self) -> None:
        import av

        self.close()
        self.where = self.roll.next()
        path = self.root / VIDEO_PATH.format(video_key=self.key, chunk_index=self.where[0], file_index=self.where[1])
        path.parent.mkdir(parents=True, exist_ok=True)
        self.first_path = self.first_path or path
        options = {"g": str(GOP), "crf": str(self.crf)}
        if self.encoder == "libsvtav1":
            options["preset"] = "12"  # the fastest preset, as LeRobot records
        self.container = av.open(str(path), "w", format="mp4")
        try:
            self.stream = self.container.add_stream(self.encoder, rate=self.fps, options=options)
            self.stream.width, self.stream.height, self.stream.pix_fmt = self.width, self.height, PIX_FMT
        except Exception:
            self.container.close()
            raise
        self.frames, self.bytes = 0, 0

    def write_episode(self, rgb: np.ndarray) -> tuple[tuple[int, int], float, float]:
        """rgb: T,H,W,3 uint8 -> ((chunk, file), from_timestamp s, to_timestamp s) of the episode in its file."""
        import av

        if self.container is None or self.bytes >= self.limit:
            self._open()
        start = self.frames
        for im in rgb:
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(im), format="rgb24")
            frame.pts = self.frames
            self.frames += 1
            self._mux(self.stream.encode(frame))
        return self.where, start / self.fps, self.frames / self.fps

    def _mux(self, packets) -> None:
        for p in packets:
            self.bytes += p.size
            self.container.mux(p)

    def close(self) -> None:
        if self.container is not None:
            try:
                self._mux(self.stream.encode(None))
            finally:
                self.container.close()
                self.container = None

    def info(self) -> dict:
        """LeRobot's ``info`` block of a video feature, read back from the first file written."""
        import av

        with av.open(str(self.first_path)) as c:
            s = c.streams.video[0]
            return {"video.height": s.height, "video.width": s.width, "video.codec": s.codec_context.codec.canonical_name,
                    "video.pix_fmt": s.pix_fmt, "video.is_depth_map": False, "video.fps": self.fps,
                    "video.channels": 3, "has_audio": False}


@contextlib.contextmanager
def _quiet_svt() -> Iterator[None]:
    """SVT-AV1 prints its configuration to stderr unless SVT_LOG asks for errors only; set it for the block."""
    old = os.environ.get("SVT_LOG")
    os.environ["SVT_LOG"] = old if old is not None else "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SVT_LOG", None)


def _png(im: np.ndarray) -> bytes:
    import cv2

    ok, buf = cv2.imencode(".png", np.ascontiguousarray(im[..., ::-1]), [cv2.IMWRITE_PNG_COMPRESSION, 6])
    if not ok:
        raise ValueError(f"PNG encoding failed for a frame of shape {im.shape}")
    return buf.tobytes()


# ------------------------------------------------------------------------------------------ the export
@dataclass
class _Plan:
    """What the export writes: features (info.json), arrow schema of the frame rows, and the chosen options."""

    sources: list[Source]
    fps: int
    images: str
    encoder: str | None
    crf: int | None
    task: str
    privileged: list[str]
    rewards: bool
    features: dict[str, dict] = field(default_factory=dict)


def _feature_of(shape: tuple[int, ...], dtype: str, names=None) -> dict:
    dt = np.dtype(dtype)
    name = "bool" if dt == np.bool_ else dt.name
    return {"dtype": name, "shape": list(shape) or [1], "names": names}


def plan_export(paths: Sequence[str | os.PathLike], *, images: str = "video", codec: str = "av1",
                crf: int | None = None, task: str = DEFAULT_TASK, privileged: bool = False) -> _Plan:
    """Scan and check the inputs and the options, reading no frames and writing nothing."""
    require_extra()
    if images not in ("video", "png"):
        raise ValueError(f"--images must be video or png; got {images!r}")
    encoder = check_codec(codec) if images == "video" else None
    crf = DEFAULT_CRF[codec] if crf is None and encoder else crf
    if encoder:
        int_in("export-dataset", "crf", crf, 0, 63 if codec == "av1" else 51)
    if not isinstance(task, str) or not task.strip():
        raise ValueError("--task must be a non-empty text")
    sources = [scan_source(p) for p in paths] if paths else []
    check_sources(sources, privileged)
    first = sources[0]
    plan = _Plan(sources, int(first.sim["control_hz"]), images, encoder, crf, task.strip(),
                 sorted(first.privileged) if privileged else [], all(s.has_rewards for s in sources))
    feats: dict[str, dict] = {}
    if RGB in first.obs:
        h, w, _ = first.obs[RGB][0]
        if images == "video" and (h % 2 or w % 2):
            raise ValueError(f"{first.path}: {h}x{w} images cannot be stored as {PIX_FMT} video (odd size); use "
                             "--images png")
        feats[IMAGE_KEY] = {"dtype": "video" if images == "video" else "image", "shape": [h, w, 3],
                            "names": ["height", "width", "channels"]}
    else:
        log.warning("export-dataset: %s holds no obs/%s (DAgger files keep only masks); the dataset has no image "
                    "feature", first.path, RGB)
    feats[MASK_KEY] = {"dtype": "bool", "shape": list(first.obs[MASK][0]), "names": ["height", "width"]}
    state_names, action_names = next(lay for lay in STATE_LAYOUTS if first.obs[GRIPPER][0] == (len(lay[0]),))
    feats[STATE_KEY] = {"dtype": "float32", "shape": [len(state_names)], "names": list(state_names)}
    feats[ACTION_KEY] = {"dtype": "float32", "shape": [len(action_names)], "names": list(action_names)}
    feats[DONE_KEY] = {"dtype": "bool", "shape": [1], "names": None}
    feats[SUCCESS_KEY] = {"dtype": "bool", "shape": [1], "names": None}
    if plan.rewards:
        feats[REWARD_KEY] = {"dtype": "float32", "shape": [1], "names": None}
    for k in plan.privileged:
        shape, dt = first.privileged[k]
        dt = "|b1" if k == "held" or np.dtype(dt) == np.bool_ else dt  # held is stored as uint8 0/1
        feats[PRIVILEGED_PREFIX + k] = _feature_of(shape, dt)
    feats.update({k: dict(v) for k, v in FIXED_FEATURES.items()})
    plan.features = feats
    return plan


def _arrow_type(ft: dict):
    import pyarrow as pa

    if ft["dtype"] == "image":
        return pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    base = pa.bool_() if ft["dtype"] == "bool" else pa.from_numpy_dtype(np.dtype(ft["dtype"]))
    shape = ft["shape"]
    if shape == [1]:
        return base
    if len(shape) == 1:
        return pa.list_(base, shape[0])  # datasets' Sequence(length=n)
    t = base
    for _ in shape:  # datasets' ArrayND stores nested variable-length lists
        t = pa.list_(t)
    return t


def _hf_feature(ft: dict) -> dict:
    """The feature as the ``datasets`` library describes it in a parquet file's ``huggingface`` metadata."""
    if ft["dtype"] == "image":
        return {"_type": "Image"}
    shape = ft["shape"]
    if shape == [1]:
        return {"dtype": ft["dtype"], "_type": "Value"}
    if len(shape) == 1:
        return {"feature": {"dtype": ft["dtype"], "_type": "Value"}, "length": shape[0], "_type": "List"}
    return {"shape": shape, "dtype": ft["dtype"], "_type": f"Array{len(shape)}D"}


def _schema(features: dict[str, dict]):
    import pyarrow as pa

    cols = {k: ft for k, ft in features.items() if ft["dtype"] != "video"}
    meta = {"huggingface": json.dumps({"info": {"features": {k: _hf_feature(ft) for k, ft in cols.items()}}})}
    return pa.schema([(k, _arrow_type(ft)) for k, ft in cols.items()], metadata=meta)


def _column(values: np.ndarray, ft: dict):
    """N,*shape numpy -> the arrow column of feature ``ft``."""
    import pyarrow as pa

    typ = _arrow_type(ft)
    if ft["dtype"] == "bool":
        values = values.astype(np.bool_)
    else:
        values = values.astype(np.dtype(ft["dtype"]), copy=False)
    n = len(values)
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    shape = ft["shape"]
    if shape == [1]:
        return flat
    if len(shape) == 1:
        return pa.FixedSizeListArray.from_arrays(flat, shape[0])
    arr = flat
    for size in reversed(shape):  # innermost first
        count = len(arr) // size
        arr = pa.ListArray.from_arrays(pa.array(np.arange(count + 1, dtype=np.int32) * size), arr)
    assert len(arr) == n
    return arr.cast(typ)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def export_lerobot(paths: Sequence[str | os.PathLike], out: str | os.PathLike, *, images: str = "video",
                   codec: str = "av1", crf: int | None = None, task: str = DEFAULT_TASK, privileged: bool = False,
                   overwrite: bool = False, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Write the episodes of ``paths`` (in that order, each file's episodes in demo order, renumbered 0..) as a
    LeRobotDataset v3.0 folder ``out`` (layout and field mapping: module docstring).

    ``images``: ``"video"`` (mp4, lossy) or ``"png"`` (PNG bytes in the parquet rows, lossless). ``codec``:
    ``"av1"`` or ``"h264"`` for video, at constant rate factor ``crf`` (None: :data:`DEFAULT_CRF` of the codec).
    ``task``: the one task text of every episode. ``privileged``: also export the privileged arrays as
    ``privileged.<key>``. ``overwrite``: replace an earlier export in ``out`` (otherwise a non-empty ``out`` is
    refused). ``progress(done, total)`` is called after each episode.

    Everything is checked before anything is written; the folder is written beside ``out`` and moved into place
    only when complete, so a failed export leaves ``out`` as it was. Returns a summary dict (``out``,
    ``episodes``, ``frames``, ``fps``, ``images``, ``codec``, ``bytes``, ``seconds``).
    """
    import time

    t0 = time.perf_counter()
    plan = plan_export(paths, images=images, codec=codec, crf=crf, task=task, privileged=privileged)
    out = check_out_dir(out, overwrite=overwrite)
    total_eps = sum(len(s.demos) for s in plan.sources)
    with staged_dir(out, owns=lambda name: name in OUTPUTS) as stage, _quiet_svt():
        frames = _write(plan, stage, total_eps, progress)
        size = sum(p.stat().st_size for p in stage.rglob("*") if p.is_file())
    summary = {"out": str(out), "episodes": total_eps, "frames": frames, "fps": plan.fps, "images": images,
               "codec": codec if images == "video" else None, "crf": plan.crf, "bytes": int(size),
               "seconds": round(time.perf_counter() - t0, 3)}
    log.info("export-dataset: %d episodes, %d frames at %d fps -> %s (%s%s, %.1f MB) in %.1f s", total_eps, frames,
             plan.fps, out, images, f" {codec}" if images == "video" else "", size / 1e6, summary["seconds"])
    return summary


def _check_finite(cols: dict[str, Any], path: Path, demo: str) -> None:
    """ValueError naming the file, the episode and the columns where a float column holds NaN or infinity: such
    values would make the exported statistics invalid JSON and poison any training that reads them."""
    bad = [k for k, v in cols.items()
           if np.issubdtype(np.asarray(v).dtype, np.floating) and not np.isfinite(np.asarray(v)).all()]
    if bad:
        raise ValueError(f"{path} {demo}: {', '.join(bad)} hold NaN or infinite values; leave the file out or "
                         "re-collect the episode")


def _episodes(src: Source, keys: list[str]) -> Iterator[tuple[str, Any]]:
    """(demo name, episode) of ``src`` in order; an episode whose data cannot be read (a file damaged mid-way: h5py
    raises OSError or KeyError, naming neither the file nor the episode) is a ValueError naming both."""
    episodes = read_episodes(src.path, keys=keys)
    for demo in src.demos:
        try:
            ep = next(episodes)
        except StopIteration:
            raise ValueError(f"{src.path}: {demo} vanished while it was exported; was the file replaced?") from None
        except (KeyError, OSError, RuntimeError) as e:
            raise ValueError(f"{src.path} {demo}: its data cannot be read ({_h5_reason(e)}): the file is damaged. "
                             f"{repair_hint(src.path)}") from None
        if ep.num_samples != src.lengths[src.demos.index(demo)] or any(
                len(v) != ep.num_samples for v in ep.obs.values()):
            raise ValueError(f"{src.path} {demo}: arrays of unequal lengths; the file changed while it was exported")
        yield demo, ep


def _write(plan: _Plan, root: Path, total_eps: int, progress) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    feats = plan.features
    schema = _schema(feats)
    data = _DataWriter(root, schema, DATA_FILE_MB)
    video = None
    if feats.get(IMAGE_KEY, {}).get("dtype") == "video":
        h, w, _ = feats[IMAGE_KEY]["shape"]
        video = _VideoWriter(root, IMAGE_KEY, plan.encoder, plan.fps, plan.crf, (h, w), VIDEO_FILE_MB)
    kinds = {k: ("image" if ft["dtype"] in ("image", "video") else "array") for k, ft in feats.items()}
    overall = {k: FeatureStats(kinds[k]) for k in feats}
    episodes: list[dict[str, Any]] = []
    index = 0
    try:
        for src in plan.sources:
            keys = [k for k in (RGB, MASK, GRIPPER) if k in src.obs]
            for demo, ep in _episodes(src, keys):
                e = len(episodes)
                T = ep.num_samples
                cols = _frame_arrays(plan, ep, e, index, T)
                _check_finite(cols, src.path, demo)
                row: dict[str, Any] = {"episode_index": e, "tasks": [plan.task], "length": T}
                if video is not None:
                    (chunk, file), t_from, t_to = video.write_episode(ep.obs[RGB])
                    row.update({f"videos/{IMAGE_KEY}/chunk_index": chunk, f"videos/{IMAGE_KEY}/file_index": file,
                                f"videos/{IMAGE_KEY}/from_timestamp": t_from,
                                f"videos/{IMAGE_KEY}/to_timestamp": t_to})
                table_cols = {}
                for k, ft in feats.items():
                    if ft["dtype"] == "video":
                        continue
                    if ft["dtype"] == "image":
                        table_cols[k] = pa.array([{"bytes": _png(im), "path": None} for im in ep.obs[RGB]],
                                                 type=_arrow_type(ft))
                    else:
                        table_cols[k] = _column(cols[k], ft)
                chunk, file = data.write(pa.Table.from_pydict(table_cols, schema=schema))
                row.update({"data/chunk_index": chunk, "data/file_index": file, "dataset_from_index": index,
                            "dataset_to_index": index + T})
                for k, ft in feats.items():
                    values = ep.obs[RGB] if kinds[k] == "image" else cols[k]
                    overall[k].update(values)
                    if kinds[k] == "array" and len(ft["shape"]) > 1:
                        continue  # per-episode per-pixel mask statistics would outweigh the data; stats.json has them
                    st = FeatureStats(kinds[k])
                    st.update(values)
                    for s, v in st.result().items():
                        row[f"stats/{k}/{s}"] = v.tolist()
                row.update({"seed": _opt_int(ep.attrs.get("seed")), "success": _opt_bool(ep.attrs.get("success")),
                            "failure": None if "failure" not in ep.attrs else str(ep.attrs["failure"]),
                            "source_file": str(src.path), "source_demo": demo})
                episodes.append(row)
                index += T
                if progress is not None:
                    progress(len(episodes), total_eps)
    finally:
        data.close()
        if video is not None:
            video.close()
    if video is not None:
        feats[IMAGE_KEY]["info"] = video.info()
    for row in episodes:
        row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = 0, 0
    ep_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(episodes), ep_path, compression="snappy")
    _write_tasks(root, [plan.task])
    stats = {k: s.result() for k, s in overall.items()}
    atomic_write_text(root / STATS, _json_stats(stats))
    info = {
        "codebase_version": CODEBASE_VERSION, "robot_type": "graspsim", "total_episodes": len(episodes),
        "total_frames": index, "total_tasks": 1, "chunks_size": CHUNKS_SIZE, "data_files_size_in_mb": DATA_FILE_MB,
        "video_files_size_in_mb": VIDEO_FILE_MB, "fps": plan.fps, "splits": {"train": f"0:{len(episodes)}"},
        "data_path": DATA_PATH, "video_path": VIDEO_PATH if video is not None else None, "features": feats,
    }
    atomic_write_text(root / INFO, json.dumps(info, indent=2))
    _write_sidecar(root, plan)
    return index


def _frame_arrays(plan: _Plan, ep, e: int, start: int, T: int) -> dict[str, np.ndarray]:
    """Per-frame arrays T,*shape (shape as in ``plan.features``, ``[1]`` included) of every feature but the image,
    for episode ``e`` whose first frame is global frame ``start``."""
    last = np.zeros(T, np.bool_)
    last[-1] = True
    frame = np.arange(T, dtype=np.int64)
    cols = {
        MASK_KEY: ep.obs[MASK] != 0,
        STATE_KEY: ep.obs[GRIPPER],
        ACTION_KEY: ep.actions,
        DONE_KEY: last,
        SUCCESS_KEY: last & bool(ep.attrs.get("success", False)),
        "timestamp": (frame / plan.fps).astype(np.float32),
        "frame_index": frame,
        "episode_index": np.full(T, e, np.int64),
        "index": start + frame,
        "task_index": np.zeros(T, np.int64),
    }
    if plan.rewards:
        cols[REWARD_KEY] = ep.extras["rewards"]
    for k in plan.privileged:
        cols[PRIVILEGED_PREFIX + k] = ep.privileged[k]
    return {k: v.reshape(T, *plan.features[k]["shape"]) for k, v in cols.items()}


def _opt_int(v) -> int | None:
    return None if v is None else int(v)


def _opt_bool(v) -> bool | None:
    return None if v is None else bool(v)


def _write_tasks(root: Path, tasks: list[str]) -> None:
    """``meta/tasks.parquet``: columns ``task`` and ``task_index``, with pandas metadata that makes ``task`` the
    index (LeRobot reads the file with pandas and looks tasks up by index)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"task": pa.array(tasks, pa.string()), "task_index": pa.array(range(len(tasks)), pa.int64())})
    pandas_meta = {
        "index_columns": ["task"], "column_indexes": [], "pandas_version": "2.2.0", "creator": {"library": "pyarrow"},
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
    }
    table = table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
    pq.write_table(table, root / TASKS)


def _write_sidecar(root: Path, plan: _Plan) -> None:
    from .. import __version__

    first = 0
    files = []
    for s in plan.sources:
        files.append({"path": str(s.path), "sha256": _sha256(s.path), "episodes": len(s.demos),
                      "episode_index": [first, first + len(s.demos) - 1], "config": s.config})
        first += len(s.demos)
    side = {"kind": "graspsim-lerobot-export", "graspsim_version": __version__, "codebase_version": CODEBASE_VERSION,
            "images": plan.images, "encoder": plan.encoder, "crf": plan.crf if plan.encoder else None, "gop":
            GOP if plan.encoder else None, "pix_fmt": PIX_FMT if plan.encoder else None, "task": plan.task,
            "privileged": plan.privileged, "fps": plan.fps, "sim": plan.sources[0].sim, "files": files}
    atomic_write_text(root / SIDECAR, json.dumps(side, indent=2))


__all__ = [
    "ACTION_KEY", "ACTION_NAMES", "CODEBASE_VERSION", "CODECS", "DEFAULT_CRF", "DEFAULT_TASK", "DONE_KEY",
    "FINGERTIP_STATE_NAMES", "FeatureStats", "IMAGE_KEY", "INSTALL_HINT", "MASK_KEY", "PRIVILEGED_PREFIX", "REWARD_KEY", "SIDECAR",
    "STATE_KEY", "STATE_LAYOUTS", "STATE_NAMES", "SUCCESS_KEY", "WRIST_ACTION_NAMES", "WRIST_STATE_NAMES", "Source", "check_codec", "check_sources", "export_lerobot",
    "plan_export", "require_extra", "scan_source",
]
