"""``robot-app`` command line: one entry point, one subcommand module per job.

Each module listed in :data:`COMMAND_MODULES` defines ``register(sub, groups)``: ``sub`` is the
top-level subparsers action, ``groups`` maps each command group of :data:`GROUPS` (``bench``, ``eval``,
``map``, ...) to that group's subparsers action, so several modules can add e.g. ``bench <thing>``.
Each leaf parser sets ``func`` (``func(args, config) -> int``) as its default.

This registry is the one place project code is imported inside functions: a handler imports the
modules its command runs, so ``robot-app --help`` and ``robot-app config`` start in a fraction of a
second on the robot. Everywhere else project imports are at module level. A command that needs an
optional extra (``sim``, ``export``, ``recon``, ``llm``) calls :func:`robot_app.extras.require` first.

Exit status: 0 success, 1 the job failed (the reason is printed), 2 bad usage, config or input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Sequence

from robot_app import __version__
from robot_app.config import ConfigError, load_config, resolve_path_value
from robot_app.errors import UsageError

log = logging.getLogger(__name__)

GROUPS = {
    "map": "topological maps: inspect, build, examples",
    "bench": "benchmarks: speed, latency and memory on this machine (figures in docs/benchmarks.md)",
    "eval": "evaluations against ground truth",
    "models": "model files: export, inspect",
    "gps": "GPS receiver tools",
    "sim": "device simulators and the simulated world",
    "lasp": "open-world task planning (LASP)",
    "log": "traversal logs",
    "imu": "IMU tools: magnetometer calibration",
    "kernels": "the walk-search kernels compiled ahead of time for this CPU",
}

#: the help of every command's --json option
JSON_HELP = "print the result as JSON (one object) instead of text"

#: options whose value is a path that may be given in the config's ``package:robot_app/...`` form (what
#: ``robot-app demo`` writes for shipped data): :func:`main` resolves them with :func:`path_option`
PATH_OPTIONS = frozenset({"--models"})

COMMAND_MODULES = (
    "robot_app.cli.config_cmd",
    "robot_app.cli.gps_cmd",
    "robot_app.cli.sim_devices_cmd",
    "robot_app.cli.sim_ros2_cmd",
    "robot_app.cli.sim_world_cmd",
    "robot_app.cli.map_cmd",
    "robot_app.cli.log_cmd",
    "robot_app.cli.plan_cmd",
    "robot_app.cli.bench_cmd",
    "robot_app.cli.run_cmd",
    "robot_app.cli.lasp_cmd",
    "robot_app.cli.lasp_eval_cmd",
    "robot_app.cli.landmarks_cmd",
    "robot_app.cli.models_cmd",
    "robot_app.cli.train_sim_cmd",
    "robot_app.cli.imu_cmd",
    "robot_app.cli.demo_cmd",
    "robot_app.cli.eval_sim_cmd",
    "robot_app.cli.kernels_cmd",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robot-app",
        description="Onboard language-guided navigation and task planning for a Jackal-class robot.",
    )
    parser.add_argument("--version", action="version", version=f"robot-app {__version__}")
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="TOML config file (default: /etc/robot-app/config.toml if present, else built-in defaults)",
    )
    parser.add_argument("--log-level", default="WARNING",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups = {}
    for group, help_text in GROUPS.items():
        gp = sub.add_parser(group, help=help_text, description=help_text)
        groups[group] = gp.add_subparsers(dest=f"{group}_command", metavar="ACTION")
        gp.set_defaults(func=None, _group_parser=gp)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub, groups)
    for group in list(groups):
        if not groups[group].choices:  # a group no module filled yet
            sub._name_parser_map.pop(group, None)
            sub._choices_actions = [a for a in sub._choices_actions if a.dest != group]
    # the global options are accepted after the subcommand too (`robot-app run --config X`); given there,
    # they replace the ones before it
    def leaves(p: argparse.ArgumentParser):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield p
        for a in subs:
            for child in a.choices.values():
                yield from leaves(child)

    # every command's --help starts with its one-line description (the help line of its listing)
    def describe(p: argparse.ArgumentParser) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for choice in a._choices_actions:
                    child = a.choices[choice.dest]
                    if not child.description and choice.help:
                        child.description = choice.help[0].upper() + choice.help[1:] + "."
                    describe(child)

    describe(parser)
    for p in {id(q): q for q in leaves(parser)}.values():
        if p is parser:
            continue
        for a in p._actions:  # one wording for --json everywhere
            if "--json" in a.option_strings:
                a.help = JSON_HELP
        # every --models takes the package: form too (resolved in main, before the command runs)
        paths = {a.dest: a.option_strings[0] for a in p._actions if set(a.option_strings) & PATH_OPTIONS}
        if paths:
            p.set_defaults(_path_options=paths)
        p.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="as before the command")
        p.add_argument("--log-level", default=argparse.SUPPRESS, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                       help="as before the command")
    return parser


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (the journal and the operator's terminal read one line per error)."""
    return " ".join(str(exc).split("\n")).strip()


def path_option(value: str | None, flag: str) -> str | None:
    """The value of a path option as the command gets it: ``package:robot_app/REL`` (the form of a config
    written by ``robot-app demo``, e.g. ``package:robot_app/data/models/sim``) -> the absolute path of REL
    in the installed package, through the config's own resolver
    (:func:`robot_app.config.resolve_path_value`); any other value unchanged; None stays None.

    Raises
    ------
    UsageError
        A ``package:`` value that is malformed or names nothing in the installed package (one line,
        starting with ``flag``).
    """
    if value is None:
        return None
    try:
        return resolve_path_value(str(value), flag)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        (getattr(args, "_group_parser", None) or parser).print_help()
        return 2
    try:
        for dest, flag in getattr(args, "_path_options", {}).items():
            setattr(args, dest, path_option(getattr(args, dest), flag))
        config = load_config(args.config)
        return int(args.func(args, config) or 0)
    except (ConfigError, UsageError) as exc:
        print(f"robot-app: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("robot-app: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`robot-app map info | head`): not an error of ours; keep Python from
        # complaining again when it flushes stdout at exit
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by it
    except MemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bad file or model must never end in a traceback
        # integrity and model errors (a damaged map, log or model file, a tampered model) and anything a
        # handler did not turn into a UsageError: one line, exit 1; the traceback at --log-level DEBUG
        logging.getLogger("robot_app.cli").debug("the command failed", exc_info=True)
        what = "" if type(exc).__name__ in ("MapFormatError", "MapError", "LogFormatError", "ModelTampered",
                                            "ModelMissing", "ModelInvalid", "WorldError") else f"{type(exc).__name__}: "
        print(f"robot-app: error: {what}{_one_line(exc)}" + ("" if what == "" else " (--log-level DEBUG shows where)"),
              file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
