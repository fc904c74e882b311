"""First-person rendering of a :class:`~robot_app.sim.world.World` with pybullet's CPU TinyRenderer.

Headless (``p.DIRECT``, no OpenGL, no display): the world's ground, paths, buildings and catalogue
objects become static visual bodies in a private pybullet client; :meth:`WorldRenderer.render` places a
pinhole camera at the robot's pose (REP-103: x forward, z up; ``camera_height_m`` above the ground) and
returns an RGB image. Pixels the scene does not cover (segmentation id -1) get a sky gradient. The
ground, path and sky colours and the light come from the world's ``[render]`` table
(:class:`~robot_app.sim.world.RenderStyle`; its defaults are the shipped worlds' look). A small
Gaussian sensor noise, seeded by ``(seed, index)``, makes frames deterministic for a given seed and frame
index and different between seeds.

Source: pybullet quickstart guide, "getCameraImage", "computeViewMatrix", "computeProjectionMatrixFOV"
(ER_TINY_RENDERER is the CPU rasteriser built into the module).
"""

from __future__ import annotations

import logging
import math

import numpy as np

from robot_app.sim.world import World, object_parts

__all__ = ["WorldRenderer", "encode_jpeg"]

log = logging.getLogger(__name__)

_FLOOR_M = 3.5  # storey height of the dark floor bands on glass buildings


def encode_jpeg(rgb: np.ndarray, *, quality: int = 85) -> bytes:
    """RGB uint8 (H, W, 3) -> JPEG bytes (OpenCV).

    Raises
    ------
    ValueError
        If the array is not (H, W, 3) uint8 or cannot be encoded.
    """
    import cv2

    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"encode_jpeg: expected (H, W, 3) uint8, got {rgb.shape} {rgb.dtype}")
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(rgb[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError("encode_jpeg: OpenCV could not encode the image")
    return buf.tobytes()


def _quat_yaw(yaw_rad: float) -> tuple:
    return (0.0, 0.0, math.sin(yaw_rad / 2), math.cos(yaw_rad / 2))


class WorldRenderer:
    """Renders first-person frames of a world.

    Parameters
    ----------
    world : World
        The loaded world.
    width, height : int
        Image size in pixels.
    hfov_deg : float
        Horizontal field of view of the pinhole camera, degrees.
    camera_height_m : float
        Camera height above the ground (Jackal with a mast: ~0.5 m).
    seed : int
        Seed of the sensor noise.
    noise_std : float
        Std of the additive pixel noise, 0-255 units (0 = none).
    far_m : float
        Far clipping plane, m.

    Raises
    ------
    ImportError
        If pybullet (extra ``sim``) is not installed.
    """

    def __init__(self, world: World, *, width: int = 160, height: int = 120, hfov_deg: float = 90.0,
                 camera_height_m: float = 0.5, seed: int = 0, noise_std: float = 2.0, far_m: float = 250.0) -> None:
        try:
            import pybullet as p
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError("the simulated world renders with pybullet: pip install 'robot-app[sim]'") from exc
        if not (8 <= width <= 4096 and 8 <= height <= 4096):
            raise ValueError(f"WorldRenderer: image size {width}x{height} must be 8-4096 px per side")
        if not 10.0 <= hfov_deg <= 170.0:
            raise ValueError(f"WorldRenderer: hfov_deg {hfov_deg} must be 10-170 degrees")
        self._p = p
        self.world, self.width, self.height = world, int(width), int(height)
        self.camera_height_m, self.seed, self.noise_std = camera_height_m, int(seed), float(noise_std)
        self._cid = p.connect(p.DIRECT)
        aspect = self.width / self.height
        vfov = math.degrees(2 * math.atan(math.tan(math.radians(hfov_deg) / 2) / aspect))
        self._proj = p.computeProjectionMatrixFOV(vfov, aspect, 0.1, far_m, physicsClientId=self._cid)
        self._bodies = 0
        self._build()
        style = world.render
        sky_top, sky_horizon = (np.round(np.asarray(c, dtype=np.float64) * 255.0, 6)
                                for c in (style.sky_top_rgb, style.sky_horizon_rgb))
        rows = np.linspace(0.0, 1.0, self.height)[:, None]
        self._sky = ((1 - rows) * sky_top + rows * sky_horizon)[:, None, :].repeat(self.width, axis=1)
        log.debug("world %s: %d visual bodies", world.name, self._bodies)

    # -- scene ---------------------------------------------------------------------------------
    def _add(self, shape: str, size, pos, yaw: float, rgb) -> None:
        p, cid = self._p, self._cid
        rgba = [*rgb, 1.0]
        if shape == "box":
            vs = p.createVisualShape(p.GEOM_BOX, halfExtents=[s / 2 for s in size], rgbaColor=rgba, physicsClientId=cid)
        elif shape == "cylinder":
            vs = p.createVisualShape(
                p.GEOM_CYLINDER, radius=size[0], length=size[1], rgbaColor=rgba, physicsClientId=cid
            )
        else:
            vs = p.createVisualShape(p.GEOM_SPHERE, radius=size[0], rgbaColor=rgba, physicsClientId=cid)
        p.createMultiBody(baseMass=0, baseVisualShapeIndex=vs, basePosition=list(pos),
                          baseOrientation=_quat_yaw(yaw), physicsClientId=cid)
        self._bodies += 1

    def _build(self) -> None:
        w = self.world
        ex, ey = w.extent_m
        self._add("box", (ex + 400.0, ey + 400.0, 0.1), (0.0, 0.0, -0.05), 0.0, w.render.ground_rgb)
        # Each path segment is one flat box, lengthened by half the path's width at both ends so that
        # corners and junctions are covered (square joints). No round caps: TinyRenderer does not clip
        # triangles against the near plane, and a cap's triangle fan under the camera rendered as dark
        # garbage in the frames taken on it (about 7 % of an exploration's frames, all at junctions).
        for path in w.paths:
            for (x0, y0), (x1, y1) in zip(path.points[:-1], path.points[1:]):
                length = math.hypot(x1 - x0, y1 - y0)
                if length > 1e-6:
                    self._add("box", (length + path.width_m, path.width_m, 0.02),
                              ((x0 + x1) / 2, (y0 + y1) / 2, 0.0), math.atan2(y1 - y0, x1 - x0), w.render.path_rgb)
        for b in w.buildings:
            sx, sy, sz = b.size_m
            self._add("box", b.size_m, (b.center[0], b.center[1], sz / 2), b.yaw_rad, b.rgb)
            if b.glass:  # floor bands make glass facades read as glass, not as a flat blue box
                for k in range(1, int(sz / _FLOOR_M) + 1):
                    self._add("box", (sx + 0.1, sy + 0.1, 0.3), (b.center[0], b.center[1], k * _FLOOR_M),
                              b.yaw_rad, (0.2, 0.22, 0.25))
        for o in w.objects:
            c, s = math.cos(o.yaw_rad), math.sin(o.yaw_rad)
            for part in object_parts(o):
                dx, dy, z = part.offset
                pos = (o.at[0] + c * dx - s * dy, o.at[1] + s * dx + c * dy, z)
                self._add(part.shape, part.size, pos, o.yaw_rad, part.rgb)

    # -- frames --------------------------------------------------------------------------------
    def render(self, x_m: float, y_m: float, yaw_rad: float, *, index: int = 0) -> np.ndarray:
        """RGB uint8 (height, width, 3) seen from the robot at (x, y) m ENU facing ``yaw_rad``.

        ``index`` (the frame number) seeds the sensor noise together with ``seed``.
        """
        p = self._p
        style = self.world.render
        eye = [x_m, y_m, self.camera_height_m]
        target = [x_m + math.cos(yaw_rad), y_m + math.sin(yaw_rad), self.camera_height_m]
        view = p.computeViewMatrix(eye, target, [0.0, 0.0, 1.0], physicsClientId=self._cid)
        _, _, rgba, _, seg = p.getCameraImage(
            self.width, self.height, view, self._proj, renderer=p.ER_TINY_RENDERER, shadow=0,
            lightDirection=list(style.light_direction), lightAmbientCoeff=style.ambient,
            lightDiffuseCoeff=style.diffuse,
            lightSpecularCoeff=0.05, physicsClientId=self._cid)
        img = np.asarray(rgba, dtype=np.uint8).reshape(self.height, self.width, 4)[:, :, :3].astype(np.float32)
        sky = np.asarray(seg).reshape(self.height, self.width) < 0
        img[sky] = self._sky[sky]
        if self.noise_std > 0:
            rng = np.random.default_rng([self.seed, int(index)])
            img += rng.normal(0.0, self.noise_std, img.shape).astype(np.float32)
        return np.clip(img + 0.5, 0, 255).astype(np.uint8)

    def render_jpeg(self, x_m: float, y_m: float, yaw_rad: float, *, index: int = 0, quality: int = 85) -> bytes:
        """:meth:`render` encoded as JPEG bytes."""
        return encode_jpeg(self.render(x_m, y_m, yaw_rad, index=index), quality=quality)

    def close(self) -> None:
        """Disconnect the private pybullet client (idempotent)."""
        if self._cid is not None:
            try:
                self._p.disconnect(physicsClientId=self._cid)
            finally:
                self._cid = None

    def __enter__(self) -> "WorldRenderer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
