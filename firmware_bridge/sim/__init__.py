"""Device simulators that speak the real bytes on virtual serial ports (pty pairs) or in-process.

- :mod:`.vport`: pty pairs with a stable link name that can vanish and come back.
- :mod:`.plant`: the physics interface (wheel commands in, true pose and motion out) and a kinematic plant.
- :mod:`.mcu`: the Jackal base MCU (rosserial) with fault injection.
- :mod:`.gps`: an NMEA receiver replaying real logs or following the plant.
- :mod:`.imu`: a Microstrain MIP IMU following the plant.
"""
