"""Camera capture with OpenCV: timestamped JPEG frames, dropped rather than queued.

A worker thread reads the device (``cv2.VideoCapture``: a V4L2 index or path; a video file works the
same way, which the tests use) and keeps only the newest frame; every frame is stamped with the
monotonic time it was read (the control clock) and handed to subscribers as JPEG bytes. A consumer
slower than the camera simply sees fewer frames. The raw frame is what the log and the map keep;
rectification and model preprocessing happen later, as functions of the config (docs/design.md, "Camera images").
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger(__name__)


class CameraError(RuntimeError):
    """The camera cannot be opened or stopped delivering frames."""


@dataclass(frozen=True)
class Frame:
    """One captured frame: ``jpeg`` bytes, ``t_mono_s`` receive time, ``index`` since start."""

    jpeg: bytes
    t_mono_s: float
    index: int


def _open_capture(source: str, cfg):
    import cv2

    src: int | str = int(source) if source.isdigit() else source
    cap = cv2.VideoCapture(src)
    if not cap.isOpened():
        raise CameraError(f"[camera] source {source!r}: cannot open the camera")
    if isinstance(src, int) or source.startswith("/dev/"):
        cap.set(cv2.CAP_PROP_FRAME_WIDTH, cfg.width)
        cap.set(cv2.CAP_PROP_FRAME_HEIGHT, cfg.height)
        cap.set(cv2.CAP_PROP_FPS, cfg.fps)
    return cap


class FramePublisher:
    """What every camera component offers: ``latest`` (newest :class:`Frame` or None), ``frames_read``,
    and ``subscribe(callback)``: ``callback(frame)`` is called in the event loop for every frame."""

    name = "camera"

    def __init__(self) -> None:
        self.latest: Frame | None = None
        self.frames_read = 0
        self._subs: list[Callable[[Frame], None]] = []

    def subscribe(self, callback: Callable[[Frame], None]) -> None:
        self._subs.append(callback)

    def unsubscribe(self, callback: Callable[[Frame], None]) -> None:
        if callback in self._subs:
            self._subs.remove(callback)

    def _deliver(self, frame: Frame) -> None:
        self.latest = frame
        for cb in list(self._subs):
            try:
                cb(frame)
            except Exception:  # noqa: BLE001 - a consumer's bug must not stop the camera
                log.exception("camera subscriber failed")

    async def _run_worker(self, work: Callable[[threading.Event, Callable[[bytes, float], None]], None],
                          name: str) -> None:
        """Run ``work(stop, publish)`` in a daemon thread until it returns or raises, or this task is
        cancelled (then ``stop`` is set and the thread joined). ``publish(jpeg, t_mono_s)`` hands a frame
        to the event loop, which numbers it and delivers it to the subscribers; what ``work`` raises is
        raised here."""
        loop = asyncio.get_running_loop()
        stop = threading.Event()
        done: asyncio.Future = loop.create_future()

        def finish(exc: BaseException | None) -> None:
            if not done.done():
                done.set_result(None) if exc is None else done.set_exception(exc)

        def publish(jpeg: bytes, t_mono_s: float) -> None:
            frame = Frame(jpeg, t_mono_s, self.frames_read)
            self.frames_read += 1
            loop.call_soon_threadsafe(self._deliver, frame)

        def target() -> None:
            try:
                work(stop, publish)
            except Exception as exc:  # noqa: BLE001 - raised in the awaiting task instead
                loop.call_soon_threadsafe(finish, exc)
            else:
                loop.call_soon_threadsafe(finish, None)

        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        try:
            await done
        finally:
            stop.set()
            await asyncio.to_thread(thread.join, 2.0)


class Camera(FramePublisher):
    """Supervised component (``name = "camera"``) publishing the frames of an OpenCV capture."""

    def __init__(self, cfg, *, loop_video: bool | None = None):
        from pathlib import Path

        super().__init__()
        self.cfg = cfg
        # a video file (not a device) is replayed in a loop at the configured rate, like a camera
        self.loop_video = Path(cfg.source).is_file() if loop_video is None else loop_video

    async def run(self) -> None:
        def reader(stop: threading.Event, publish) -> None:
            import cv2

            cap = _open_capture(self.cfg.source, self.cfg)
            period = 1.0 / self.cfg.fps
            params = [cv2.IMWRITE_JPEG_QUALITY, int(self.cfg.jpeg_quality)]
            failures = 0
            try:
                while not stop.is_set():
                    ok, img = cap.read()
                    if not ok:
                        if self.loop_video:
                            cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
                            continue
                        failures += 1
                        if failures > 20:
                            raise CameraError(f"[camera] source {self.cfg.source!r}: no frames")
                        time.sleep(0.05)
                        continue
                    failures = 0
                    t = time.monotonic()
                    ok, buf = cv2.imencode(".jpg", img, params)
                    if ok:
                        publish(buf.tobytes(), t)
                    if self.loop_video:  # a file plays at the configured rate, like a device
                        time.sleep(period)
            finally:
                cap.release()

        await self._run_worker(reader, "camera-reader")
