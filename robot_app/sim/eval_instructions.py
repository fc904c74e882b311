"""Instruction sets with ground truth in world terms, for ``robot-app eval sim``.

One JSON file per world (``robot_app/data/worlds/<world>-instructions.json``)::

    {
      "format": "robot-app-sim-instructions",
      "version": 1,
      "world": "campus",
      "exploration": {"route": [[0.0, -88.0], [0.0, 0.0], ...], "speed_mps": 1.0},
      "instructions": [
        {"id": "campus-01",
         "text": "Go past the fire hydrant and stop at the stop sign.",
         "start": [0.0, -85.0, 90.0],
         "landmarks": [{"phrase": "fire hydrant", "targets": ["fire hydrant 6"]},
                       {"phrase": "stop sign", "targets": ["stop sign 0"]}]}
      ]
    }

- ``exploration.route``: waypoints (metres ENU of the world's anchor) of the scripted drive that maps
  the world (:func:`robot_app.sim.explore.record_exploration`); it should cover every path the
  instructions use. ``speed_mps`` is the driving speed of that exploration.
- ``start``: x_m, y_m, yaw_deg (CCW from east) where the robot stands when it gets the instruction.
- ``landmarks``: in the order the robot should reach them; ``phrase`` is what the instruction calls
  it (for people reading the file), ``targets`` the names of the world's buildings or objects that
  count as that landmark (several when more than one is equally right). Objects without a name in the
  world file are called ``"<category> <index>"`` (:func:`robot_app.sim.world.load_world`).

:func:`load_instructions` rejects anything else with an :class:`InstructionFileError` that names the
file and the entry (``instructions[3] (campus-04): landmarks[1]: targets: ...``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from robot_app.sim.plant import JACKAL_RADIUS_M, obstacle_at
from robot_app.sim.world import WORLDS_DIR, World

__all__ = ["InstructionFileError", "LandmarkTruth", "SimInstruction", "InstructionSet", "load_instructions",
           "instructions_from_mapping", "shipped_instructions", "FORMAT"]

FORMAT = "robot-app-sim-instructions"
MAX_LANDMARKS = 8


class InstructionFileError(ValueError):
    """An instruction file is unreadable or has a missing or invalid entry (the message names both)."""


@dataclass(frozen=True)
class LandmarkTruth:
    """One landmark of an instruction: its words and the world names that count as it."""

    phrase: str
    targets: tuple


@dataclass(frozen=True)
class SimInstruction:
    """One instruction: ``start`` is (x_m, y_m, yaw_rad) ENU; ``landmarks`` in visiting order."""

    id: str
    text: str
    start: tuple
    landmarks: tuple


@dataclass(frozen=True)
class InstructionSet:
    """A validated instruction file (see the module docstring)."""

    world: str
    source: str
    route: tuple  # ((x_m, y_m), ...) exploration waypoints, ENU
    speed_mps: float
    instructions: tuple


def _fail(origin: str, where: str, msg: str):
    raise InstructionFileError(f"{origin}: {where}: {msg}" if where else f"{origin}: {msg}")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_keys(table: Mapping, known: set, origin: str, where: str) -> None:
    extra = sorted(set(table) - known)
    if extra:
        _fail(origin, where, f"unknown key {extra[0]!r} (known: {', '.join(sorted(known))})")


def _read_xy_list(raw: Any, origin: str, where: str, world: World | None) -> tuple:
    if not isinstance(raw, list) or len(raw) < 2:
        _fail(origin, where, f"expected a list of at least 2 [x, y] points in metres, got {raw!r}")
    pts = []
    for j, p in enumerate(raw):
        if not isinstance(p, list) or len(p) != 2 or not all(_number(x) for x in p):
            _fail(origin, f"{where}[{j}]", f"expected [x, y] in metres, got {p!r}")
        if world is not None and (abs(p[0]) > world.extent_m[0] / 2 or abs(p[1]) > world.extent_m[1] / 2):
            _fail(origin, f"{where}[{j}]", f"{p} lies outside the world {world.name!r}")
        pts.append((float(p[0]), float(p[1])))
    return tuple(pts)


def _read_landmark(raw: Any, origin: str, where: str, names: set | None) -> LandmarkTruth:
    if not isinstance(raw, Mapping):
        _fail(origin, where, f"expected an object with 'phrase' and 'targets', got {raw!r}")
    _check_keys(raw, {"phrase", "targets"}, origin, where)
    phrase = raw.get("phrase")
    if not isinstance(phrase, str) or not phrase.strip():
        _fail(origin, where, f"phrase: expected a non-empty string, got {phrase!r}")
    targets = raw.get("targets")
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) and t.strip() for t in targets):
        _fail(origin, where, f"targets: expected a non-empty list of world names, got {targets!r}")
    if names is not None:
        for t in targets:
            if t not in names:
                _fail(origin, where, f"targets: {t!r} is not a building or object of the world "
                                     f"(e.g. {', '.join(sorted(names)[:6])}, ...)")
    return LandmarkTruth(phrase.strip(), tuple(targets))


def _read_instruction(raw: Any, i: int, origin: str, world: World | None, names: set | None) -> SimInstruction:
    where = f"instructions[{i}]"
    if not isinstance(raw, Mapping):
        _fail(origin, where, f"expected an object, got {raw!r}")
    if isinstance(raw.get("id"), str):
        where += f" ({raw['id']})"
    _check_keys(raw, {"id", "text", "start", "landmarks"}, origin, where)
    ident, text = raw.get("id"), raw.get("text")
    if not isinstance(ident, str) or not ident.strip():
        _fail(origin, where, f"id: expected a non-empty string, got {ident!r}")
    if not isinstance(text, str) or not text.strip():
        _fail(origin, where, f"text: expected the instruction as a non-empty string, got {text!r}")
    start = raw.get("start")
    if not isinstance(start, list) or len(start) != 3 or not all(_number(x) for x in start):
        _fail(origin, where, f"start: expected [x_m, y_m, yaw_deg], got {start!r}")
    if world is not None:
        if abs(start[0]) > world.extent_m[0] / 2 or abs(start[1]) > world.extent_m[1] / 2:
            _fail(origin, where, f"start: {start[:2]} lies outside the world {world.name!r}")
        hit = obstacle_at(world, float(start[0]), float(start[1]), JACKAL_RADIUS_M)
        if hit is not None:
            _fail(origin, where, f"start: {start[:2]} touches {hit[0]!r} ({hit[1]})")
    lms = raw.get("landmarks")
    if not isinstance(lms, list) or not 1 <= len(lms) <= MAX_LANDMARKS:
        _fail(origin, where, f"landmarks: expected a list of 1-{MAX_LANDMARKS} landmarks, got {lms!r}")
    landmarks = tuple(_read_landmark(x, origin, f"{where}: landmarks[{j}]", names) for j, x in enumerate(lms))
    return SimInstruction(ident, text.strip(), (float(start[0]), float(start[1]), math.radians(start[2])), landmarks)


def instructions_from_mapping(
    data: Any, *, origin: str = "<instructions>", world: World | None = None
) -> InstructionSet:
    """Validate parsed JSON and build an :class:`InstructionSet`.

    Parameters
    ----------
    data : parsed JSON (see the module docstring).
    origin : str, the file name used in error messages.
    world : World, optional; when given, the file must be for this world, every target must name one
        of its buildings or objects, and positions must lie in it (starts not touching an obstacle).

    Raises
    ------
    InstructionFileError
        Naming ``origin`` and the entry: wrong format tag or version, missing or unknown keys, wrong
        types, a duplicate id, an unknown target name, a position outside the world.
    """
    if not isinstance(data, Mapping):
        _fail(origin, "", "expected a JSON object at the top level")
    _check_keys(data, {"format", "version", "world", "exploration", "instructions"}, origin, "")
    if data.get("format") != FORMAT:
        _fail(origin, "format", f"expected {FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != 1:
        _fail(origin, "version", f"expected 1, got {data.get('version')!r}")
    wname = data.get("world")
    if not isinstance(wname, str) or not wname.strip():
        _fail(origin, "world", f"expected the world's name, got {wname!r}")
    if world is not None and wname != world.name:
        _fail(origin, "world", f"the file is for world {wname!r}, not {world.name!r}")
    expl = data.get("exploration")
    if not isinstance(expl, Mapping):
        _fail(origin, "exploration", f"expected an object with 'route' (and 'speed_mps'), got {expl!r}")
    _check_keys(expl, {"route", "speed_mps"}, origin, "exploration")
    route = _read_xy_list(expl.get("route"), origin, "exploration: route", world)
    speed = expl.get("speed_mps", 1.0)
    if not _number(speed) or not 0.1 <= speed <= 5.0:
        _fail(origin, "exploration: speed_mps", f"expected 0.1-5 m/s, got {speed!r}")
    items = data.get("instructions")
    if not isinstance(items, list) or not items:
        _fail(origin, "instructions", f"expected a non-empty list, got {items!r}")
    names = {n for n, *_ in world.landmarks()} if world is not None else None
    out, seen = [], set()
    for i, raw in enumerate(items):
        ins = _read_instruction(raw, i, origin, world, names)
        if ins.id in seen:
            _fail(origin, f"instructions[{i}] ({ins.id})", "id: duplicate of an earlier instruction")
        seen.add(ins.id)
        out.append(ins)
    return InstructionSet(wname, origin, route, float(speed), tuple(out))


def load_instructions(path: str | Path, *, world: World | None = None) -> InstructionSet:
    """Read and validate an instruction file (see :func:`instructions_from_mapping`).

    Raises
    ------
    InstructionFileError
        Unreadable file, invalid JSON (with line and column), or a validation error.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InstructionFileError(f"{p}: cannot read the instruction file: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise InstructionFileError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstructionFileError(f"{p}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from exc
    return instructions_from_mapping(data, origin=str(p), world=world)


def shipped_instructions(world_name: str) -> Path:
    """The shipped instruction file of a world (``robot_app/data/worlds/<world>-instructions.json``).

    Raises
    ------
    InstructionFileError
        If no instruction set ships for that world.
    """
    p = WORLDS_DIR / f"{world_name}-instructions.json"
    if not p.is_file():
        have = sorted(q.name[: -len("-instructions.json")] for q in WORLDS_DIR.glob("*-instructions.json"))
        raise InstructionFileError(f"{p}: no shipped instruction set for world {world_name!r} "
                                   f"(shipped: {', '.join(have) or 'none'}); give --instructions FILE")
    return p
