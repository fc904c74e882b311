"""Following a planned walk: the pure navigation policy (:mod:`robot_app.nav.policy`) and its async shell
on the robot (:mod:`robot_app.nav.shell`); ``eval sim``'s driver (:mod:`robot_app.sim.eval_drive`) steps
the same policy on the simulation clock."""
