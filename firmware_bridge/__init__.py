"""Serial protocols and drivers (base MCU, GPS NMEA, IMU) and their device simulators."""
