"""The renderer's independent per-pixel reference, shared by the renderer tests (tests/test_sim.py,
tests/test_kinds.py): one float64 ray per pixel through the wrist camera, intersected with each primitive in plain
numpy, so a mask or shadow the batched renderer draws can be compared pixel for pixel with a second computation.

An object is ``(kind, centre (3,), half extents (3,), yaw rad, is_target)`` in world coordinates (m), ``kind`` one of
:data:`graspsim.state.KIND_SPHERE` / ``KIND_BOX`` / ``KIND_CYLINDER`` (a sphere's radius is ``h[0]``).
"""

from __future__ import annotations

import math

import numpy as np

from graspsim.state import KIND_BOX, KIND_SPHERE


def ref_hit(o, d, kind, c, h, yaw):
    """Plain float64 reference intersection of one ray with one primitive (None for a miss)."""
    if kind == KIND_SPHERE:
        oc = o - c
        b = oc @ d
        disc = b * b - (oc @ oc - h[0] ** 2)
        if disc < 0:
            return None
        for t in (-b - math.sqrt(disc), -b + math.sqrt(disc)):
            if t > 1e-5:
                return t
        return None
    cs, sn = math.cos(-yaw), math.sin(-yaw)
    rot = np.array([[cs, -sn, 0], [sn, cs, 0], [0, 0, 1]])
    p, dl = rot @ (o - c), rot @ d
    if kind == KIND_BOX:
        lo, hi = -np.inf, np.inf
        for ax in range(3):
            if abs(dl[ax]) < 1e-12:
                if abs(p[ax]) > h[ax]:
                    return None
                continue
            t1, t2 = sorted(((-h[ax] - p[ax]) / dl[ax], (h[ax] - p[ax]) / dl[ax]))
            lo, hi = max(lo, t1), min(hi, t2)
        if hi < lo:
            return None
        return lo if lo > 1e-5 else (hi if hi > 1e-5 else None)
    # vertical cylinder: sample candidate roots of side and caps
    best = None
    a = dl[0] ** 2 + dl[1] ** 2
    b = p[0] * dl[0] + p[1] * dl[1]
    cc = p[0] ** 2 + p[1] ** 2 - h[0] ** 2
    disc = b * b - a * cc
    if a > 1e-12 and disc >= 0:
        for t in ((-b - math.sqrt(disc)) / a, (-b + math.sqrt(disc)) / a):
            if t > 1e-5 and abs(p[2] + t * dl[2]) <= h[2]:
                best = t if best is None else min(best, t)
    if abs(dl[2]) > 1e-12:
        for zc in (h[2], -h[2]):
            t = (zc - p[2]) / dl[2]
            q = p + t * dl
            if t > 1e-5 and q[0] ** 2 + q[1] ** 2 <= h[0] ** 2:
                best = t if best is None else min(best, t)
    return best



def camera_ray(s, b: int, u: int, v: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Origin (3,) and unit direction (3,) of the ray through the centre of pixel ``(u, v)`` of scene ``b``'s
    ``size`` x ``size`` wrist image (State ``s``: camera at ``tcp_pos + cam_offset``, rotation ``cam_rot``, ``focal``
    in pixels)."""
    o = (s.tcp_pos[b] + s.cam_offset[b]).double().numpy()
    f = float(s.focal[b])
    d = s.cam_rot[b].double().numpy() @ np.array([(u + 0.5 - size / 2) / f, (v + 0.5 - size / 2) / f, 1.0])
    return o, d / np.linalg.norm(d)


def reference_mask(s, b: int, size: int, objs: list) -> np.ndarray:
    """``size`` x ``size`` bool: the pixels of scene ``b`` whose nearest hit among ``objs`` and the table plane
    (z = 0) is a target object."""
    ref = np.zeros((size, size), bool)
    for v in range(size):
        for u in range(size):
            o, d = camera_ray(s, b, u, v, size)
            best, tgt = (-o[2] / d[2]) if d[2] < 0 else np.inf, False
            for kind, c, h, yaw, is_t in objs:
                t = ref_hit(o, d, kind, c, h, yaw)
                if t is not None and t < best:
                    best, tgt = t, is_t
            ref[v, u] = tgt
    return ref
