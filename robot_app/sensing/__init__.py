"""What the robot knows about itself and its surroundings: the camera, the state estimator (AHRS + wheel
odometry + GPS EKF) and the safety monitor (tilt, stall, battery, geofence)."""
