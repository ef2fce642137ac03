"""Session 22's screen: weighted logit averages of S and M on the three validation folders (float32)."""
import json, sys, time
import numpy as np, torch
from graspsim.vision.checkpoint import load_checkpoint
from graspsim.vision.infer import Segmenter, to_frame_size
from graspsim.vision.image_set import resolve_frame_crop, read_kinds
from graspsim.vision.labelled import load_labelled
from graspsim.vision.metrics import GATE_GRIDS, choose_thresholds_on, decide, evaluate_set, kind_groups, subset_metrics
import cv2

torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
FOLDERS = ["data/transfer_so101/val", "data/transfer_so101/val_extra", "data/transfer_so101/val_warm"]
NETS = {"S": "/work/runs/S.pt", "M": "vision/assets/candidates/segnet_so101_M.pt"}
segs = {k: Segmenter.from_payload(load_checkpoint(p), p, precision="fp32") for k, p in NETS.items()}
crop = resolve_frame_crop("auto", segs["S"].embodiment, "screen")
sets = [load_labelled(f + "/images", None) for f in FOLDERS]
if crop == "square":
    sets = [s.square() for s in sets]
print("crop", crop, [tuple(s.rgb.shape) for s in sets], flush=True)
logits = {}
for k, seg in segs.items():
    t = time.time()
    out = []
    for fr in sets:
        S = seg.image_size
        x = fr.rgb.permute(0, 2, 3, 1).numpy()
        n, h, w = x.shape[0], x.shape[1], x.shape[2]
        if (h, w) != (S, S):
            x = np.stack([cv2.resize(f, (S, S), interpolation=cv2.INTER_AREA if max(h, w) > S else cv2.INTER_LINEAR) for f in x])
        xt = torch.from_numpy(np.ascontiguousarray(x)).permute(0, 3, 1, 2).contiguous()
        out.append(torch.cat([seg.logits(xt[i:i + 64]) for i in range(0, n, 64)]))
    logits[k] = out
    print(k, "logits", round(time.time() - t, 1), "s", flush=True)
torch.save(logits, "/work/runs/screen_logits.pt")
kinds = [kind_groups([read_kinds(f.folder, f.names)[n] for n in f.names], f.has_target.numpy()) for f in sets]
rows = {}
for w in [0, 0.25, 0.5, 0.625, 0.75, 0.875, 1]:
    probs = []
    for i, fr in enumerate(sets):
        p = torch.sigmoid(w * logits["M"][i] + (1 - w) * logits["S"][i]).numpy()
        h, wd = fr.rgb.shape[-2:]
        probs.append(torch.from_numpy(np.stack([to_frame_size(q, h, wd) for q in p])))
    thr, peak = choose_thresholds_on([(p, f.mask) for p, f in zip(probs, sets)], 0.025, 0.94, 1, GATE_GRIDS["fine"], True)
    row = {"threshold": thr, "peak": peak, "folders": {}}
    dec = [decide(p, peak, thr, True) for p in probs]
    for name, d, f, g in zip(FOLDERS, dec, sets, kinds):
        s, _ = evaluate_set(d, f.mask, thr, 1)
        by = subset_metrics(d, f.mask, {k: torch.from_numpy(v) for k, v in g.items()}, thr, 1)
        row["folders"][name.split("/")[-1]] = {"all": {k: s[k] for k in ("iou", "precision", "recall", "false_positive_image_rate", "false_positive_images")},
                                             **{k: {m: v[m] for m in ("iou", "precision", "recall")} for k, v in by.items()}}
    # sphere pooled over the three folders
    sph = [torch.from_numpy(g["sphere"]) for g in kinds]
    ds = torch.cat([d[s] for d, s in zip(dec, sph)]); ms = torch.cat([f.mask[s] for f, s in zip(sets, sph)])
    sp, _ = evaluate_set(ds, ms, thr, 1)
    row["sphere_pooled"] = {k: sp[k] for k in ("iou", "precision", "recall")}
    rows[w] = row
    print(json.dumps({"w": w, **row}), flush=True)
json.dump(rows, open("/work/runs/screen.json", "w"), indent=1)
