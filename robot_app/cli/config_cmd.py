"""``robot-app config show|defaults|reference``: the effective configuration, the defaults, the reference page."""

from __future__ import annotations

import dataclasses
import json


def register(sub, groups) -> None:
    p = sub.add_parser("config", help="show the effective configuration, the defaults or the reference",
                       description="show the effective configuration, the defaults or the reference")
    csub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = csub.add_parser("show", help="validate the config file and print the effective values as JSON")
    show.set_defaults(func=_show)
    defaults = csub.add_parser("defaults", help="print a complete default config.toml")
    defaults.set_defaults(func=_defaults)
    ref = csub.add_parser("reference", help="print the configuration reference (docs/configuration.md) as Markdown")
    ref.set_defaults(func=_reference)


def _show(args, config) -> int:
    print(json.dumps(dataclasses.asdict(config), indent=2))
    return 0


def _defaults(args, config) -> int:
    from robot_app.config import default_config_toml

    print(default_config_toml(), end="")
    return 0


def _reference(args, config) -> int:
    from robot_app.config import config_reference_markdown

    print(config_reference_markdown(), end="")
    return 0
