"""Renderer behaviour beyond the mask (tests/test_sim.py checks the mask against a per-pixel reference):
exact shadows against an independent float64 shadow-ray reference, seeded pixel noise, depth, and the
public postprocess."""

from __future__ import annotations

import numpy as np
import torch
from pixel_ref import ref_hit

from graspsim import GraspEnv, SimConfig
from graspsim.config import RandomizationConfig
from graspsim.physics import finger_boxes
from graspsim.render import pixel_rays, postprocess, render
from graspsim.state import KIND_BOX, KIND_NONE, KIND_SPHERE


def _scene(size=24, n=6, seed=11):
    cfg = SimConfig(image_size=size, randomization=RandomizationConfig(max_distractors=4, start_height=(0.03, 0.08),
                                                                       start_offset=(-0.02, 0.02)))
    return cfg, GraspEnv(cfg, num_envs=n, seed=seed).state


def test_table_shadows_equal_independent_shadow_rays():
    """A table pixel is darker with shadows on exactly when a float64 ray from its table point towards the
    light meets an object (boxes, cylinders, spheres, fingers)."""
    cfg, s = _scene()
    size = cfg.image_size
    lit = render(s, cfg, post=False, shadows=False)
    sh = render(s, cfg, post=False, shadows=True)
    darker = (sh.color < lit.color - 1e-6).any(1) & ~sh.alpha  # B,H,W table pixels in shadow
    fc, fh = finger_boxes(s.tcp_pos, s.finger_width, cfg)
    mismatches, shadowed = 0, 0
    for b in range(s.batch_size):
        objs = [(KIND_SPHERE, s.sphere_pos[b], s.sphere_radius[b].repeat(3), 0.0)]
        objs += [(KIND_BOX, fc[b, i], fh[b, i], 0.0) for i in range(2)]
        objs += [(int(s.dist_kind[b, k]), s.dist_pos[b, k], s.dist_size[b, k], float(s.dist_yaw[b, k]))
                 for k in range(s.dist_kind.shape[1]) if int(s.dist_kind[b, k]) != KIND_NONE]
        objs = [(k, c.double().numpy(), h.double().numpy(), y) for k, c, h, y in objs]
        o = (s.tcp_pos[b] + s.cam_offset[b]).double().numpy()
        R, f = s.cam_rot[b].double().numpy(), float(s.focal[b])
        L = s.light_dir[b].double().numpy()
        for v in range(size):
            for u in range(size):
                if sh.alpha[b, v, u]:
                    continue
                d = R @ np.array([(u + 0.5 - size / 2) / f, (v + 0.5 - size / 2) / f, 1.0])
                p = o + (-o[2] / d[2]) * d
                ref = any(ref_hit(p, L, kind, c, h, yaw) is not None for kind, c, h, yaw in objs)
                shadowed += ref
                mismatches += ref != bool(darker[b, v, u])
    assert shadowed > 20, "the reference scenes should contain table shadows"
    assert mismatches == 0


def test_noise_is_seeded_and_leaves_the_mask_alone():
    cfg, s = _scene(size=32, n=4)
    a = render(s, cfg, generator=torch.Generator().manual_seed(3))
    b = render(s, cfg, generator=torch.Generator().manual_seed(3))
    c = render(s, cfg, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.rgb, b.rgb) and torch.equal(a.mask, c.mask)
    noisy = s.image_noise > 0.005
    assert not torch.equal(a.rgb[noisy], c.rgb[noisy])


def test_postprocess_noise_statistics_and_identity():
    color = torch.full((64, 3, 32, 32), 0.5)
    zero = torch.zeros(64)
    assert torch.equal(postprocess(color, zero, zero), color)  # no blur, no noise: unchanged
    out = postprocess(color, zero, torch.full((64,), 0.02), torch.Generator().manual_seed(0))
    resid = out - color
    assert abs(float(resid.mean())) < 1e-3 and abs(float(resid.std()) - 0.02) < 1e-3
    blurred = postprocess(torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)), torch.ones(2), zero[:2])
    assert blurred.shape == (2, 3, 16, 16) and float(blurred.std()) < 0.29  # the 3x3 blur smooths


def test_depth_matches_table_distance_and_objects_are_closer():
    cfg, s = _scene(size=16, n=3)
    out = render(s, cfg, post=False)
    size = cfg.image_size
    o, d = pixel_rays(s, size)
    d = d.view(-1, size, size, 3)
    t_table = -o[:, 2, None, None] / d[..., 2]
    table = ~out.alpha
    assert torch.allclose(out.depth[table], t_table[table], rtol=1e-4)
    assert (out.depth[out.alpha] < t_table[out.alpha]).all()


def test_chunked_render_equals_one_pass(monkeypatch):
    """Batches above CHUNK_PIXELS are rendered in passes; the result is the same as one pass."""
    import sys

    cfg, s = _scene(size=16, n=5)
    one = render(s, cfg, post=False)
    monkeypatch.setattr(sys.modules["graspsim.render"], "CHUNK_PIXELS", 2 * 16 * 16)  # 2 scenes per pass
    parts = render(s, cfg, post=False)
    for name in ("rgb", "mask", "alpha", "depth", "color"):
        assert torch.equal(getattr(one, name), getattr(parts, name)), name
