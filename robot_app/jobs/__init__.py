"""The operator's jobs: route jobs (plan, confirm, drive; :mod:`robot_app.jobs.mission`) and multi-step
PDDL task jobs driven by LASP (:mod:`robot_app.jobs.task_jobs`, :mod:`robot_app.jobs.lasp_setup`)."""
