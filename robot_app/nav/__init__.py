"""Following a planned walk.

- :mod:`robot_app.nav.policy`: the navigation policy, one synchronous ``step(observation) -> directive``
  (its module docstring has the state table) and its options;
- :mod:`robot_app.nav.walk_following`: the VNM loop's localisation and subgoal rules (GNM deployment) and
  the split of a walk into VNM and GPS stretches;
- :mod:`robot_app.nav.shell`: the robot's async shell around the policy (sensors in, commands out);
- :mod:`robot_app.nav.gps`: the pose source (GPS + gyro, or the fused estimate) and GPS mode's navigator;
- :mod:`robot_app.nav.vnm`: the VNM navigator (node images, positions and headings to the policy).

``eval sim``'s driver (:mod:`robot_app.sim.eval_drive`) steps the same policy on the simulation clock.
"""
