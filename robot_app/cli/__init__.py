"""``robot-app`` command line: one entry point, one subcommand module per job.

Each module listed in :data:`COMMAND_MODULES` defines ``register(subparsers)``, which adds its
subcommand(s) and sets ``func`` (``func(args, config) -> int``) as the parser default. Modules import
their heavy dependencies inside the handlers so ``robot-app --help`` stays fast.

Exit status: 0 success, 1 the job failed (the reason is printed), 2 bad usage, config or input.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Sequence

from robot_app import __version__
from robot_app.config import ConfigError, load_config

log = logging.getLogger(__name__)

COMMAND_MODULES = (
    "robot_app.cli.config_cmd",
    # "robot_app.cli.map_cmd",
    # "robot_app.cli.plan_cmd",
    # "robot_app.cli.bench_cmd",
)


class UsageError(Exception):
    """Bad input given on the command line or in a file it names (exit status 2)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="robot-app",
        description="Onboard language-guided navigation and task planning for a Jackal-class robot.",
    )
    parser.add_argument("--version", action="version", version=f"robot-app {__version__}")
    parser.add_argument("--config", metavar="PATH", default=None,
                        help="TOML config file (default: /etc/robot-app/config.toml if present, else built-in defaults)")
    parser.add_argument("--log-level", default="WARNING",
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="logging level (default WARNING)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        config = load_config(args.config)
        return int(args.func(args, config) or 0)
    except (ConfigError, UsageError) as exc:
        print(f"robot-app: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("robot-app: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
