"""A :class:`~robot_app.sim.render.WorldRenderer` in a child process, for the ``sim`` camera.

pybullet's TinyRenderer keeps Python's global interpreter lock while it draws a frame (about 35 ms at
320x240 and several times that at 640x480 on the robot's 2 cores), so a renderer in a thread of the onboard
process stalls its event loop: the control loop misses ticks and the base's command gate stops the robot
("no drive command for 0.52 s"). In a child process the render runs beside the event loop; the camera's
worker thread only waits on a pipe, which releases the lock.

The child is started with the ``spawn`` method (no copy of the parent's threads, sockets or serial ports),
gets the world by pickling, and answers one JPEG per request. It exits when the pipe closes, so a crashed
parent leaves no renderer behind.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection

__all__ = ["RenderProcess", "RenderProcessError"]


class RenderProcessError(RuntimeError):
    """The renderer process could not start, failed a frame, or exited."""


def _serve(conn: multiprocessing.connection.Connection, world, kwargs: dict) -> None:  # pragma: no cover - child
    try:
        from robot_app.sim.render import WorldRenderer

        ren = WorldRenderer(world, **kwargs)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    try:
        while True:
            try:
                req = conn.recv()
            except (EOFError, OSError):
                return
            if req is None:
                return
            x_m, y_m, yaw_rad, index, quality = req
            try:
                conn.send(("ok", ren.render_jpeg(x_m, y_m, yaw_rad, index=index, quality=quality)))
            except Exception as exc:  # noqa: BLE001
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        ren.close()


class RenderProcess:
    """:meth:`render_jpeg` of a :class:`~robot_app.sim.render.WorldRenderer` that runs in a child process.

    Parameters
    ----------
    world : robot_app.sim.world.World
        The world to draw (pickled to the child).
    start_timeout_s : float
        How long the child may take to import pybullet and build the scene (s).
    frame_timeout_s : float
        How long one frame may take (s).
    **renderer_kwargs
        ``width``, ``height``, ``hfov_deg``, ``camera_height_m``, ``seed``, ``noise_std`` as
        :class:`~robot_app.sim.render.WorldRenderer` takes them.

    Raises
    ------
    RenderProcessError
        If the child does not come up within ``start_timeout_s`` or its renderer cannot be built (the
        child's error in one line).
    """

    def __init__(self, world, *, start_timeout_s: float = 60.0, frame_timeout_s: float = 10.0, **renderer_kwargs):
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._frame_timeout_s = frame_timeout_s
        self._proc = ctx.Process(target=_serve, args=(child, world, renderer_kwargs), name="sim-render", daemon=True)
        self._proc.start()
        child.close()
        try:
            self._reply(start_timeout_s, "start")
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _reply(self, timeout_s: float, what: str):
        if not self._conn.poll(timeout_s):
            raise RenderProcessError(f"sim renderer process: no answer to {what} within {timeout_s:g} s")
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(1.0)
            raise RenderProcessError(f"sim renderer process exited (exit code {self._proc.exitcode}) "
                                     f"during {what}") from None
        if kind == "error":
            raise RenderProcessError(f"sim renderer: {value}")
        return value

    def render_jpeg(self, x_m: float, y_m: float, yaw_rad: float, *, index: int = 0, quality: int = 85) -> bytes:
        """The JPEG frame at pose ``(x_m, y_m, yaw_rad)`` (world frame: m, m, rad CCW from east), as
        :meth:`robot_app.sim.render.WorldRenderer.render_jpeg` draws it.

        Raises
        ------
        RenderProcessError
            If the child fails the frame, exits, or takes longer than ``frame_timeout_s``.
        """
        try:
            self._conn.send((float(x_m), float(y_m), float(yaw_rad), int(index), int(quality)))
        except (BrokenPipeError, OSError):
            self._proc.join(1.0)
            raise RenderProcessError(f"sim renderer process exited (exit code {self._proc.exitcode})") from None
        return self._reply(self._frame_timeout_s, "a frame")

    def close(self) -> None:
        """Stop the child (a clean exit, then SIGTERM after 5 s). Safe to call twice."""
        try:
            self._conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self._proc.join(5.0)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5.0)
        self._conn.close()

    def __enter__(self) -> "RenderProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
