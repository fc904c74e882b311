"""``robot-app config show|defaults``: print the effective or the default configuration."""

from __future__ import annotations

import dataclasses
import json


def register(sub, groups) -> None:
    p = sub.add_parser("config", help="show the effective configuration or the defaults")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = csub.add_parser("show", help="validate the config file and print the effective values as JSON")
    show.set_defaults(func=_show)
    defaults = csub.add_parser("defaults", help="print a complete default config.toml")
    defaults.set_defaults(func=_defaults)


def _show(args, config) -> int:
    print(json.dumps(dataclasses.asdict(config), indent=2))
    return 0


def _defaults(args, config) -> int:
    from robot_app.config import default_config_toml

    print(default_config_toml(), end="")
    return 0
