"""Issue 28's measurement: how much a user's own labelled frames buy (calibrate, fine-tune, BatchNorm adaptation).

The transfer ``val/`` set stands in for a new camera (another renderer over photos training never reads). It is split
**by photo**, so that no two splits share a photograph:

    adapt/   unlabelled frames for BatchNorm re-estimation   robosuite_gray_felt
    tune/    the user's scenes: split by frame (2:1) into        chelsea, coffee, robosuite_clay
      tune_a/  labelled frames: fine-tuning draws k of them (tune_k/), calibration uses the rest (tune_rest_k/)
      tune_b/  only scored: the same scenes, other frames ("same scenes")
    report/  only scored: scenes never seen ("new scenes")  coins, robosuite_dark_wood, robosuite_wood_tiles

and the transfer ``test/`` set (12 other photos) is scored too. Nothing is chosen on tune_b/, report/ or test/.

    python benchmarks/own_camera.py split --out /tmp/own_camera          # writes the splits and tune subsets
    python benchmarks/own_camera.py score NAME=CKPT [NAME=CKPT ...]      # one row per checkpoint, at its stored point
    python benchmarks/own_camera.py piles --out DIR --n 200 --seed 5 [--overwrite]  # the stress set (below)
    python benchmarks/own_camera.py bn-adapt --vision CKPT --images DIR --out CKPT2 [--strength S]

``bn-adapt`` is the unlabelled adaptation that was tried and not kept (it lowered IoU on every split measured,
docs/own_camera.md): every ``nn.BatchNorm2d``'s running statistics are re-estimated on the frames (each also
mirrored) and blended with the stored ones, ``(1 - S) * old + S * new``.

``piles`` writes the stress set: piles of touching target-coloured spheres. The simulator never shows two targets,
so each pile is made from one of our composites on the held-out photos (``data/backgrounds/val``): the frame's whole
target (a disc of diameter d px) is copied, pixels and mask, to 2-4 neighbouring places d px away (left, right, above,
below, diagonal), so that the copies touch it; the mask is the union. Frames whose target is cut by the border or is
smaller than 3 px across are skipped. Copies are pasted over whatever is there (a finger too). ``score --piles DIR``
adds the set to every row (pixel metrics pooled over the piles; every frame holds a pile, so no false-positive
images are counted there).

Caveat: ``train-vision`` by default chooses a net's operating point on the transfer ``val/`` set too (with
composites), so a net's *stored* point has seen report/ frames; rows scored at a point chosen by ``calibrate`` on
tune/ frames do not.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent

SPLITS = {"adapt": ("robosuite_gray_felt.jpg",), "tune": ("chelsea.jpg", "coffee.jpg", "robosuite_clay.jpg"),
          "report": ("coins.jpg", "robosuite_dark_wood.jpg", "robosuite_wood_tiles.jpg")}
SIZES = (10, 30, 100)
FREE_SHARE = 0.25  # of the k labelled frames, this share is target-free (docs/own_camera.md asks for about 25 %)
KEYS = ("iou", "precision", "recall", "false_positive_image_rate", "false_positive_images", "num_empty_images")


def _link(names: list[str], src: Path, dst: Path) -> None:
    """A subset of the image set ``src`` as an image set ``dst`` of symbolic links (the same frames, no copies)."""
    from graspsim.vision.image_set import IMAGES, MASKS, PNG

    for sub in (IMAGES, MASKS):
        (dst / sub).mkdir(parents=True, exist_ok=True)
        for n in names:
            os.symlink(src / sub / f"{n}{PNG}", dst / sub / f"{n}{PNG}")


def split(out: Path, seed: int = 0) -> dict:
    src = REPO / "data" / "transfer" / "val"
    rows = list(csv.DictReader(open(src / "meta.csv")))
    photo_split = {p: s for s, photos in SPLITS.items() for p in photos}
    by = {s: [r for r in rows if photo_split[r["photo"]] == s] for s in SPLITS}
    for s, rs in by.items():
        _link([r["name"] for r in rs], src, out / s)
    rng = np.random.default_rng(seed)
    tune = sorted(by["tune"], key=lambda r: r["name"])
    tune_a = [r for i, r in enumerate(tune) if i % 3 != 2]  # two frames in three
    _link([r["name"] for r in tune_a], src, out / "tune_a")
    _link([r["name"] for r in tune[2::3]], src, out / "tune_b")
    tune = tune_a
    free = [r["name"] for r in tune if r["has_target"] == "0"]
    target = [r["name"] for r in tune if r["has_target"] == "1"]
    counts = {}
    for k in SIZES:
        nf = int(round(k * FREE_SHARE))
        pick = list(rng.choice(free, nf, replace=False)) + list(rng.choice(target, k - nf, replace=False))
        rest = sorted(set(free + target) - set(pick))
        _link(sorted(pick), src, out / f"tune_{k}")
        _link(rest, src, out / f"tune_rest_{k}")
        counts[k] = {"labelled": len(pick), "labelled_free": nf, "calibration": len(rest)}
    summary = {s: {"frames": len(rs), "target_free": sum(r["has_target"] == "0" for r in rs)} for s, rs in by.items()}
    return {"splits": summary, "subsets": counts}


def score(checkpoints: dict[str, Path], root: Path, piles_dir: Path | None = None) -> list[dict]:
    import torch

    from graspsim.vision.calibrate import probabilities
    from graspsim.vision.infer import Segmenter
    from graspsim.vision.labelled import load_labelled
    from graspsim.vision.metrics import evaluate_set, gate_frames

    sets = {"same_scenes": load_labelled(root / "tune_b" / "images"), "new_scenes": load_labelled(root / "report" / "images"),
            "transfer_test": load_labelled(REPO / "data" / "transfer" / "test" / "images")}
    if piles_dir is not None:
        sets["piles"] = load_labelled(piles_dir / "images")
    out = []
    for name, ck in checkpoints.items():
        seg = Segmenter.from_checkpoint(ck, precision="fp32")
        row = {"net": name, "threshold": seg.threshold, "peak_threshold": seg.peak_threshold}
        for sname, fr in sets.items():
            with torch.inference_mode():
                p = gate_frames(probabilities(seg, fr.rgb), seg.peak_threshold)
            s, _ = evaluate_set(p, fr.mask, seg.threshold, 1)
            row[sname] = {k: s[k] for k in KEYS}
        out.append(row)
        cells = [f"{s} iou {m['iou']:.3f} p {m['precision']:.3f} r {m['recall']:.3f} "
                 f"fp {m['false_positive_images']}/{m['num_empty_images']}" for s, m in ((s, row[s]) for s in sets)]
        print(f"{name:<22} t={seg.threshold:.2f} gate={seg.peak_threshold:g} | " + " | ".join(cells), flush=True)
    return out


def piles(out: Path, n: int, seed: int, overwrite: bool = False) -> dict:
    """Write ``n`` pile frames as an image set (images/pile_0000.png ..., masks/, and spheres.csv: the stem and the
    number of spheres) to ``out``; a non-empty ``out`` needs ``overwrite`` (the image-set overwrite rule)."""
    from graspsim.vision.eval_sets import make_set
    from graspsim.vision.image_set import ImageSetWriter
    from graspsim.vision.train import TrainVisionConfig, build_composers

    _, val = build_composers(TrainVisionConfig(out=out, transfer=None, operating_point="composite"))
    rng = np.random.default_rng(seed)
    rows, draw = [], 0
    offsets = [(0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1)]
    with ImageSetWriter(out, overwrite=overwrite, masks=True, prefix="pile", extra_outputs=("spheres.csv",)) as w:
        while len(w) < n:
            rgb, mask = make_set(val, 256, seed * 1000 + draw)
            draw += 1
            for img, m in zip(rgb.permute(0, 2, 3, 1).numpy(), mask.numpy()):
                ys, xs = np.nonzero(m)
                if len(w) >= n or ys.size == 0:
                    continue
                H, W = m.shape
                d = max(ys.max() - ys.min(), xs.max() - xs.min()) + 1
                if d < 3 or ys.min() == 0 or xs.min() == 0 or ys.max() == H - 1 or xs.max() == W - 1:
                    continue
                img, m_all, k = img.copy(), m.copy(), int(rng.integers(2, 5))
                for j in rng.choice(len(offsets), k, replace=False):
                    dy, dx = offsets[j][0] * d, offsets[j][1] * d
                    ty, tx = ys + dy, xs + dx
                    keep = (ty >= 0) & (ty < H) & (tx >= 0) & (tx < W)
                    img[ty[keep], tx[keep]] = img[ys[keep], xs[keep]]
                    m_all[ty[keep], tx[keep]] = True
                stem = w.add(img, m_all)
                rows.append(f"{stem},{k + 1}")
        (w.folder / "spheres.csv").write_text("name,spheres\n" + "\n".join(rows) + "\n")
    return {"frames": len(rows), "spheres": int(sum(int(r.split(",")[1]) for r in rows))}


def bn_adapt(vision: Path, images: Path, out: Path, strength: float = 1.0) -> int:
    """Write ``vision`` with its BatchNorm statistics re-estimated on ``images`` (unlabelled) to ``out``."""
    import torch
    from torch import nn

    from graspsim import runs
    from graspsim.vision.checkpoint import load_checkpoint, save_checkpoint
    from graspsim.vision.image_set import list_images, read_image
    from graspsim.vision.labelled import LabelledFrames
    from graspsim.vision.ensemble import net_from_checkpoint

    ck = load_checkpoint(vision)
    model = net_from_checkpoint(ck, vision)
    rgb = torch.from_numpy(np.stack([read_image(p) for p in list_images(images)])).permute(0, 3, 1, 2).contiguous()
    size = int(ck["image_size"])
    rgb = LabelledFrames(rgb, torch.zeros(rgb.shape[0], *rgb.shape[2:], dtype=torch.bool), [], images).resized(size).rgb
    layers = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    old = [(m.running_mean.clone(), m.running_var.clone()) for m in layers]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over all batches
    model.train()
    with torch.no_grad():
        for i in range(0, rgb.shape[0], 64):
            x = rgb[i:i + 64].float().div_(255.0)
            model(torch.cat([x, x.flip(-1)]))
    for m, (mean, var) in zip(layers, old):
        m.running_mean.mul_(strength).add_(mean, alpha=1.0 - strength)
        m.running_var.mul_(strength).add_(var, alpha=1.0 - strength)
        m.momentum = 0.1
    payload = {k: v for k, v in runs.deployable(ck).items() if k not in ("kind", "format_version")}
    payload.update(model=model.state_dict(), adaptation={"folder": str(images), "n_frames": int(rgb.shape[0]),
                                                          "strength": strength})
    save_checkpoint(out, payload)
    return len(layers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("split")
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--seed", type=int, default=0)
    b = sub.add_parser("score")
    b.add_argument("nets", nargs="+", help="NAME=CHECKPOINT")
    b.add_argument("--root", type=Path, default=Path("/tmp/own_camera"), help="the folder `split` wrote")
    b.add_argument("--json", type=Path, help="also write the rows here")
    b.add_argument("--piles", type=Path, help="also score this pile set (written by `piles`)")
    b.add_argument("--threads", type=int, default=1)
    d = sub.add_parser("piles")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--n", type=int, default=200)
    d.add_argument("--seed", type=int, default=5)
    d.add_argument("--overwrite", action="store_true", help="replace the pile set of a non-empty --out as a whole")
    c = sub.add_parser("bn-adapt")
    c.add_argument("--vision", type=Path, required=True)
    c.add_argument("--images", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--strength", type=float, default=1.0)
    args = ap.parse_args()
    if args.cmd == "piles" and args.n < 1:
        ap.error(f"piles --n must be a positive number of frames; got {args.n}")
    if args.cmd == "bn-adapt" and not 0.0 < args.strength <= 1.0:
        ap.error(f"bn-adapt --strength must be in (0, 1]; got {args.strength}")
    if args.cmd == "score" and any("=" not in n for n in args.nets):
        ap.error(f"score takes NAME=CHECKPOINT pairs; got {[n for n in args.nets if '=' not in n]}")
    if args.cmd == "piles":
        try:
            print(piles(args.out, args.n, args.seed, args.overwrite))
        except (FileExistsError, ValueError) as e:  # the image-set overwrite rule refused --out
            ap.error(f"piles: {e}")
        return
    if args.cmd == "bn-adapt":
        print(f"re-estimated {bn_adapt(args.vision, args.images, args.out, args.strength)} BatchNorm layers")
        return
    if args.cmd == "split":
        print(json.dumps(split(args.out, args.seed), indent=2))
        return
    import torch

    torch.set_num_threads(args.threads)
    rows = score({n.split("=", 1)[0]: Path(n.split("=", 1)[1]) for n in args.nets}, args.root, args.piles)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
