"""``robot-app run``: the onboard process (what systemd starts at boot)."""

from __future__ import annotations


def register(sub, groups) -> None:
    p = sub.add_parser("run", help="run the onboard process (systemd starts this at boot)",
                       description="Run the onboard process: device drivers, control loop, status to systemd. "
                                   "Stops the robot and exits 0 on SIGTERM/SIGINT.")
    p.set_defaults(func=_run)


def _run(args, config) -> int:
    from robot_app.errors import UsageError
    from robot_app.service.app import run_app
    from robot_app.service.models import ModelPolicyError
    from robot_app.ui.server import UiConfigError

    try:
        return run_app(config)
    except (UiConfigError, ModelPolicyError) as exc:
        raise UsageError(str(exc)) from exc
