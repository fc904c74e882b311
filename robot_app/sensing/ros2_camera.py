"""``[camera] source = "ros2"``: the camera component fed by the ``ros2`` backend's camera driver.

The driver (:class:`firmware_bridge.ros2.sensors.Ros2Camera`, started with the other drivers) turns
``sensor_msgs/CompressedImage`` or ``Image`` samples into JPEG :class:`~firmware_bridge.readings.CameraImage`
readings stamped with the monotonic receive time; this component hands each to the camera's subscribers
as a :class:`~robot_app.sensing.camera.Frame`, as the V4L2 camera does, so recorder, navigator and UI see
no difference.
"""

from __future__ import annotations

from firmware_bridge.driver import queue_get
from firmware_bridge.readings import CameraImage
from robot_app.sensing.camera import Frame, FramePublisher


class Ros2CameraComponent(FramePublisher):
    """Supervised component (``name = "camera"``) republishing a ROS 2 camera driver's frames."""

    def __init__(self, driver) -> None:
        super().__init__()
        self.driver = driver

    async def run(self) -> None:
        q = self.driver.subscribe(kinds=(CameraImage,), maxsize=2)  # the newest frames only
        try:
            while True:
                r = await queue_get(q, None)
                frame = Frame(r.jpeg, r.t_mono_s, self.frames_read)
                self.frames_read += 1
                self._deliver(frame)
        finally:
            self.driver.unsubscribe(q)
