"""``robot-app demo``: the main job end to end in the simulated world (sim-only stand-in models).

1. scripted exploration of the world while recording (:mod:`robot_app.demo.offline`),
2. the map (LM-Nav Algorithm 2 with the sim VNM; image embeddings with the sim VLM),
3. the instruction parsed, grounded and planned (LM-Nav search), scored against ground truth computed
   from the world's geometry (:mod:`robot_app.demo.truth`),
4. the onboard app on the simulated devices drives the walk, operated through its HTTP API
   (:mod:`robot_app.demo.onboard`),
5. a LASP task job recovers from a failure the world injects (a closed gate),
6. the report: JSON, PNG, HTML (:mod:`robot_app.demo.report`).

:mod:`robot_app.demo.runner` runs the stages; :mod:`robot_app.demo.scenario` holds each world's route
and default instruction (hand-picked for the shipped worlds, derived for any other from a start with a
GPS fix and a junction of its paths, :mod:`robot_app.demo.routes`). Needs the ``sim`` extra (pybullet).
"""
