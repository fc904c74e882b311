"""World files of the simulated Jackal world: format, catalogue, loading and validation.

A world is one TOML file describing a flat outdoor area in a local ENU frame (metres east/north of the
GPS anchor, REP-103; yaw counter-clockwise from east)::

    [world]
    name = "campus"
    extent_m = [200.0, 200.0]          # east x north size, centred on the anchor
    anchor_latlon = [37.8719, -122.2585]  # WGS-84 degrees of (0, 0)
    start = [0.0, -80.0, 90.0]         # x_m, y_m, yaw_deg of the robot at t = 0

    [[paths]]                          # drivable paths (drawn on the ground; never obstacles)
    name = "main"
    width_m = 3.0
    points = [[0.0, -90.0], [0.0, 60.0]]

    [[buildings]]                      # boxes; obstacles; `glass` ones render as tinted glass
    name = "library"
    category = "red building"
    center = [20.0, 10.0]
    size_m = [30.0, 20.0, 12.0]        # length along yaw, width, height
    yaw_deg = 0.0
    colour = [0.7, 0.15, 0.1]          # optional RGB 0-1 (default from the category)
    glass = false                      # optional

    [[objects]]                        # landmark objects from the catalogue (CATALOGUE)
    category = "stop sign"
    at = [3.0, 12.0]
    yaw_deg = 0.0
    name = "stop sign by the library"  # optional
    scale = 1.1                        # optional: size factor of all its parts and its footprint (0.5-2)
    tint = [1.0, 0.95, 0.95]           # optional: factors (0.5-1.5) on the RGB of every part (clipped to 1)

    [[gps_dropouts]]                   # optional: areas without sky view (quality-0 fixes)
    center = [20.0, 30.0]
    radius_m = 10.0

    [exploration]                      # optional: the scripted drive that maps the world (`sim record`)
    route = [[0.0, -85.0], [0.0, 60.0], [0.0, -85.0]]   # waypoints, m ENU (at least 2 distinct)

    [render]                           # optional: the world's look (defaults: the shipped worlds' look)
    ground_colour = [0.33, 0.5, 0.22]  # RGB 0-1 of the ground (grass)
    path_colour = [0.62, 0.6, 0.55]    # RGB 0-1 of the paths
    sky_top_colour = [0.353, 0.549, 0.843]      # RGB 0-1 at the top of the frame
    sky_horizon_colour = [0.784, 0.863, 0.941]  # RGB 0-1 at the bottom of the sky
    light_direction = [0.4, -0.3, 1.0] # towards the light, ENU (any length; z > 0: from above)
    ambient = 0.55                     # TinyRenderer light coefficients, 0-1
    diffuse = 0.5

Every landmark (building or object) has a category name and a GPS position (the anchor plus its ENU
offset). :func:`load_world` rejects anything else with a :class:`WorldError` naming the file and the
entry (``objects[3] (stop sign): at: ...``). Worlds generated from a seed (:mod:`robot_app.sim.worldgen`)
use every optional table and key. This module needs no renderer (pybullet is imported
only by :mod:`robot_app.sim.render`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the robot's Python 3.10
    import tomli as tomllib

__all__ = ["WorldError", "Part", "CATALOGUE", "Building", "WorldObject", "PathSpec", "DropoutZone", "RenderStyle",
           "World", "load_world", "world_from_mapping", "shipped_worlds", "resolve_world", "object_parts",
           "object_footprint_m"]

WORLDS_DIR = Path(__file__).resolve().parents[1] / "data" / "worlds"


class WorldError(ValueError):
    """A world file is unreadable or has a missing, unknown or invalid entry (the message names both)."""


@dataclass(frozen=True)
class Part:
    """One primitive of a catalogue object, in the object's frame (x forward along its yaw, z up).

    ``shape`` is ``box`` (``size`` = full x, y, z extents, m), ``cylinder`` (``size`` = radius, height)
    or ``sphere`` (``size`` = radius,); ``offset`` is the centre (x, y, z) m; ``rgb`` 0-1.
    """

    shape: str
    size: tuple
    offset: tuple
    rgb: tuple


@dataclass(frozen=True)
class CatalogueEntry:
    """A landmark category: its parts, collision footprint radius (m; 0 = drive-over) and words."""

    parts: tuple
    footprint_m: float
    caption: str


def _box(sx, sy, sz, z0, rgb, x=0.0, y=0.0):
    return Part("box", (sx, sy, sz), (x, y, z0 + sz / 2), rgb)


def _cyl(r, h, z0, rgb, x=0.0, y=0.0):
    return Part("cylinder", (r, h), (x, y, z0 + h / 2), rgb)


_GREY, _WHITE, _BROWN = (0.5, 0.5, 0.52), (0.93, 0.93, 0.93), (0.45, 0.3, 0.15)

#: Landmark object categories (sizes are typical real ones, metres). Buildings use the categories
#: "building", "red building", "glass building", ... and are sized in the world file.
CATALOGUE: dict[str, CatalogueEntry] = {
    "stop sign": CatalogueEntry(
        (_cyl(0.04, 2.1, 0.0, _GREY), _box(0.05, 0.75, 0.75, 1.75, (0.8, 0.05, 0.05))),
        0.2,
        "a red octagonal stop sign on a pole",
    ),
    "traffic cone": CatalogueEntry(
        (
            _cyl(0.2, 0.05, 0.0, (1.0, 0.4, 0.0)),
            _cyl(0.15, 0.25, 0.05, (1.0, 0.45, 0.0)),
            _cyl(0.1, 0.2, 0.3, _WHITE),
            _cyl(0.06, 0.2, 0.5, (1.0, 0.45, 0.0)),
        ),
        0.25,
        "an orange traffic cone",
    ),
    "fire hydrant": CatalogueEntry(
        (
            _cyl(0.13, 0.65, 0.0, (0.85, 0.1, 0.05)),
            _cyl(0.09, 0.12, 0.65, (0.85, 0.6, 0.1)),
            _box(0.36, 0.08, 0.08, 0.4, (0.85, 0.1, 0.05)),
        ),
        0.25,
        "a red fire hydrant",
    ),
    "white truck": CatalogueEntry(
        (
            _box(5.0, 2.3, 2.4, 0.5, _WHITE, x=-0.8),
            _box(1.8, 2.2, 1.9, 0.5, (0.9, 0.9, 0.95), x=2.6),
            _box(6.8, 2.0, 0.5, 0.0, (0.1, 0.1, 0.1)),
        ),
        3.6,
        "a white box truck",
    ),
    "blue dumpster": CatalogueEntry(
        (_box(1.9, 1.4, 1.3, 0.1, (0.1, 0.25, 0.75)), _box(1.95, 1.45, 0.08, 1.4, (0.05, 0.15, 0.5))),
        1.2,
        "a blue dumpster",
    ),
    "picnic table": CatalogueEntry(
        (
            _box(1.8, 0.8, 0.06, 0.72, _BROWN),
            _box(1.8, 0.3, 0.05, 0.42, _BROWN, y=0.6),
            _box(1.8, 0.3, 0.05, 0.42, _BROWN, y=-0.6),
            _box(0.1, 1.4, 0.7, 0.0, (0.35, 0.22, 0.1)),
        ),
        1.1,
        "a wooden picnic table",
    ),
    "bench": CatalogueEntry(
        (
            _box(1.6, 0.45, 0.06, 0.42, _BROWN),
            _box(1.6, 0.06, 0.45, 0.5, _BROWN, y=-0.22),
            _box(0.08, 0.4, 0.42, 0.0, (0.2, 0.2, 0.2)),
        ),
        0.9,
        "a wooden park bench",
    ),
    "trailer": CatalogueEntry(
        (
            _box(7.5, 2.5, 2.6, 1.0, (0.85, 0.85, 0.8)),
            _box(7.5, 2.3, 0.4, 0.5, (0.15, 0.15, 0.15)),
            _cyl(0.45, 0.3, 0.0, (0.05, 0.05, 0.05), x=-2.5),
        ),
        4.0,
        "a long white trailer",
    ),
    "manhole cover": CatalogueEntry((_cyl(0.35, 0.02, 0.0, (0.2, 0.2, 0.22)),), 0.0, "a round manhole cover"),
    "tree": CatalogueEntry(
        (_cyl(0.2, 2.5, 0.0, (0.4, 0.26, 0.12)), Part("sphere", (2.0,), (0.0, 0.0, 3.8), (0.15, 0.45, 0.12))),
        0.4,
        "a leafy green tree",
    ),
    "street lamp": CatalogueEntry(
        (
            _cyl(0.07, 5.0, 0.0, (0.25, 0.25, 0.28)),
            _box(0.8, 0.25, 0.15, 4.9, (0.25, 0.25, 0.28), x=0.35),
            _box(0.5, 0.2, 0.04, 4.86, (1.0, 0.95, 0.7), x=0.45),
        ),
        0.2,
        "a tall street lamp",
    ),
    "mailbox": CatalogueEntry(
        (_cyl(0.05, 1.0, 0.0, _GREY), _box(0.5, 0.4, 0.5, 1.0, (0.1, 0.2, 0.6))), 0.35, "a blue mailbox"
    ),
}

BUILDING_COLOURS = {
    "building": (0.75, 0.72, 0.65),
    "red building": (0.7, 0.15, 0.1),
    "brick building": (0.6, 0.3, 0.2),
    "white building": (0.9, 0.9, 0.88),
    "glass building": (0.45, 0.65, 0.78),
    "grey building": (0.55, 0.55, 0.57),
}


@dataclass(frozen=True)
class Building:
    """An obstacle box: ``center`` (x, y) m ENU, ``size_m`` (length along yaw, width, height), ``yaw_rad``."""

    name: str
    category: str
    center: tuple
    size_m: tuple
    yaw_rad: float
    rgb: tuple
    glass: bool


@dataclass(frozen=True)
class WorldObject:
    """A catalogue object at ``at`` (x, y) m ENU facing ``yaw_rad``, its parts scaled by ``scale`` and
    their RGB multiplied by ``tint`` (:func:`object_parts`)."""

    name: str
    category: str
    at: tuple
    yaw_rad: float
    scale: float = 1.0
    tint: tuple = (1.0, 1.0, 1.0)


def object_parts(o: WorldObject) -> tuple:
    """The catalogue parts of ``o`` in its frame: sizes and offsets (m) times ``o.scale``, RGB times
    ``o.tint`` (clipped to 1). A default object (scale 1, tint 1) gets the catalogue's parts unchanged."""
    parts = CATALOGUE[o.category].parts
    if o.scale == 1.0 and o.tint == (1.0, 1.0, 1.0):
        return parts
    k = o.scale
    return tuple(Part(p.shape, tuple(v * k for v in p.size), tuple(v * k for v in p.offset),
                      tuple(min(1.0, c * t) for c, t in zip(p.rgb, o.tint))) for p in parts)


def object_footprint_m(o: WorldObject) -> float:
    """Collision radius (m) of ``o``: its category's footprint times ``o.scale`` (0 = drive-over)."""
    return CATALOGUE[o.category].footprint_m * o.scale


@dataclass(frozen=True)
class PathSpec:
    """A drivable path: polyline ``points`` (N, 2) m ENU, ``width_m``."""

    name: str
    width_m: float
    points: tuple


@dataclass(frozen=True)
class DropoutZone:
    """A disc (``center`` m, ``radius_m``) where the GPS receiver has no fix."""

    center: tuple
    radius_m: float


@dataclass(frozen=True)
class RenderStyle:
    """The look of a world (its optional ``[render]`` table): ground and path RGB, the sky's RGB at the
    top of the frame and at the horizon (0-1 each), the direction towards the light (x, y, z ENU, z > 0),
    and TinyRenderer's ambient and diffuse coefficients (0-1). The defaults are the shipped worlds' look."""

    ground_rgb: tuple = (0.33, 0.5, 0.22)
    path_rgb: tuple = (0.62, 0.6, 0.55)
    sky_top_rgb: tuple = (90.0 / 255, 140.0 / 255, 215.0 / 255)
    sky_horizon_rgb: tuple = (200.0 / 255, 220.0 / 255, 240.0 / 255)
    light_direction: tuple = (0.4, -0.3, 1.0)
    ambient: float = 0.55
    diffuse: float = 0.5


@dataclass(frozen=True)
class World:
    """A loaded, validated world (see the module docstring for the file format).

    ``exploration_route`` is the ``[exploration] route`` ((x_m, y_m), ...) or () when the file has none;
    ``render`` the ``[render]`` look (defaults when absent).
    """

    name: str
    source: str
    extent_m: tuple
    anchor_latlon: tuple
    start: tuple  # x_m, y_m, yaw_rad
    paths: tuple
    buildings: tuple
    objects: tuple
    gps_dropouts: tuple
    exploration_route: tuple = ()
    render: RenderStyle = RenderStyle()

    def path(self, name: str) -> PathSpec:
        """The path called ``name``. Raises KeyError naming the known paths."""
        for p in self.paths:
            if p.name == name:
                return p
        raise KeyError(f"world {self.name!r} has no path {name!r} (paths: {', '.join(p.name for p in self.paths)})")

    def landmarks(self) -> list[tuple[str, str, float, float]]:
        """(name, category, x_m, y_m) of every building and object."""
        out = [(b.name, b.category, b.center[0], b.center[1]) for b in self.buildings]
        return out + [(o.name, o.category, o.at[0], o.at[1]) for o in self.objects]

    def in_gps_dropout(self, x_m: float, y_m: float) -> bool:
        """Whether (x, y) lies in one of the world's GPS dropout zones."""
        return any(math.hypot(x_m - z.center[0], y_m - z.center[1]) <= z.radius_m for z in self.gps_dropouts)


class _Entry:
    """Reads the keys of one table, raising WorldError that names the file and the entry."""

    def __init__(self, table: Any, where: str, origin: str):
        self.where, self.origin = where, origin
        if not isinstance(table, Mapping):
            self.fail(f"must be a table, got {table!r}")
        self.table, self.used = table, set()

    def fail(self, msg: str):
        raise WorldError(f"{self.origin}: {self.where}: {msg}")

    def get(self, key: str, kind: str, default: Any = ...) -> Any:
        self.used.add(key)
        if key not in self.table:
            if default is ...:
                self.fail(f"missing key {key!r}")
            return default
        v = self.table[key]
        if kind == "str":
            if not isinstance(v, str) or not v.strip():
                self.fail(f"{key}: expected a non-empty string, got {v!r}")
            return v
        if kind == "bool":
            if not isinstance(v, bool):
                self.fail(f"{key}: expected true or false, got {v!r}")
            return v
        if kind == "num":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                self.fail(f"{key}: expected a finite number, got {v!r}")
            return float(v)
        n = int(kind[3:])  # "vec2", "vec3"
        if (not isinstance(v, list) or len(v) != n
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)):
            self.fail(f"{key}: expected a list of {n} numbers, got {v!r}")
        return tuple(float(x) for x in v)

    def done(self) -> None:
        extra = sorted(set(self.table) - self.used)
        if extra:
            self.fail(f"unknown key {extra[0]!r} (known: {', '.join(sorted(self.used))})")


def _in_extent(e: _Entry, key: str, xy: tuple, extent: tuple) -> None:
    if abs(xy[0]) > extent[0] / 2 or abs(xy[1]) > extent[1] / 2:
        e.fail(f"{key}: {list(xy)} lies outside the world's extent (+-{extent[0] / 2:g} m east, "
               f"+-{extent[1] / 2:g} m north)")


def _point_in_building(x: float, y: float, b: Building, margin_m: float = 0.0) -> bool:
    c, s = math.cos(b.yaw_rad), math.sin(b.yaw_rad)
    dx, dy = x - b.center[0], y - b.center[1]
    u, v = c * dx + s * dy, -s * dx + c * dy
    return abs(u) <= b.size_m[0] / 2 + margin_m and abs(v) <= b.size_m[1] / 2 + margin_m


def _tables(data: Mapping, key: str, origin: str) -> list:
    items = data.get(key, [])
    if not isinstance(items, list):
        raise WorldError(f"{origin}: [[{key}]] must be an array of tables, got {items!r}")
    return items


def _read_header(data: Mapping, origin: str) -> tuple:
    e = _Entry(data.get("world"), "[world]", origin) if "world" in data else None
    if e is None:
        raise WorldError(f"{origin}: missing [world] table")
    name = e.get("name", "str")
    extent = e.get("extent_m", "vec2")
    if not (10.0 <= extent[0] <= 5000.0 and 10.0 <= extent[1] <= 5000.0):
        e.fail(f"extent_m: {list(extent)} must be 10-5000 m on each side")
    anchor = e.get("anchor_latlon", "vec2")
    if not (-80.0 <= anchor[0] <= 84.0 and -180.0 <= anchor[1] <= 180.0):
        e.fail(f"anchor_latlon: {list(anchor)} is not a latitude, longitude in the UTM range")
    start = e.get("start", "vec3", (0.0, 0.0, 0.0))
    _in_extent(e, "start", start[:2], extent)
    e.done()
    return name, extent, anchor, (start[0], start[1], math.radians(start[2]))


def _read_building(e: _Entry, i: int, extent: tuple) -> Building:
    category = e.get("category", "str")
    if category not in BUILDING_COLOURS:
        e.fail(f"category: unknown building category {category!r} (known: {', '.join(BUILDING_COLOURS)})")
    center, size = e.get("center", "vec2"), e.get("size_m", "vec3")
    if not all(0.5 <= s <= 500.0 for s in size):
        e.fail(f"size_m: {list(size)} must be 0.5-500 m on each axis")
    _in_extent(e, "center", center, extent)
    rgb = e.get("colour", "vec3", BUILDING_COLOURS[category])
    if not all(0.0 <= c <= 1.0 for c in rgb):
        e.fail(f"colour: {list(rgb)} must be RGB values in 0-1")
    glass = e.get("glass", "bool", category == "glass building")
    b = Building(e.get("name", "str", f"{category} {i}"), category, center, size,
                 math.radians(e.get("yaw_deg", "num", 0.0)), rgb, glass)
    e.done()
    return b


def _read_object(e: _Entry, i: int, extent: tuple, buildings: list) -> WorldObject:
    category = e.get("category", "str")
    if category not in CATALOGUE:
        e.fail(f"category: unknown object category {category!r} (catalogue: {', '.join(CATALOGUE)})")
    at = e.get("at", "vec2")
    _in_extent(e, "at", at, extent)
    for b in buildings:
        if _point_in_building(at[0], at[1], b):
            e.fail(f"at: {list(at)} is inside building {b.name!r}")
    scale = e.get("scale", "num", 1.0)
    if not 0.5 <= scale <= 2.0:
        e.fail(f"scale: {scale} must be 0.5-2")
    tint = e.get("tint", "vec3", (1.0, 1.0, 1.0))
    if not all(0.5 <= t <= 1.5 for t in tint):
        e.fail(f"tint: {list(tint)} must be factors of 0.5-1.5 per RGB channel")
    o = WorldObject(e.get("name", "str", f"{category} {i}"), category, at, math.radians(e.get("yaw_deg", "num", 0.0)),
                    scale, tint)
    e.done()
    return o


def _read_points(e: _Entry, key: str, extent: tuple) -> tuple:
    """A list of at least 2 [x, y] points (m) inside the extent, from key ``key``."""
    e.used.add(key)
    raw = e.table.get(key)
    if not isinstance(raw, list) or len(raw) < 2:
        e.fail(f"{key}: expected a list of at least 2 [x, y] points, got {raw!r}")
    pts = []
    for j, p in enumerate(raw):
        if (not isinstance(p, list) or len(p) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in p)):
            e.fail(f"{key}[{j}]: expected [x, y] in metres, got {p!r}")
        _in_extent(e, f"{key}[{j}]", (float(p[0]), float(p[1])), extent)
        pts.append((float(p[0]), float(p[1])))
    return tuple(pts)


def _read_render(e: _Entry) -> RenderStyle:
    d = RenderStyle()
    rgb = {}
    for key, attr in (("ground_colour", "ground_rgb"), ("path_colour", "path_rgb"),
                      ("sky_top_colour", "sky_top_rgb"), ("sky_horizon_colour", "sky_horizon_rgb")):
        rgb[attr] = e.get(key, "vec3", getattr(d, attr))
        if not all(0.0 <= c <= 1.0 for c in rgb[attr]):
            e.fail(f"{key}: {list(rgb[attr])} must be RGB values in 0-1")
    light = e.get("light_direction", "vec3", d.light_direction)
    if not (light[2] > 0 and math.hypot(*light) <= 100.0):
        e.fail(f"light_direction: {list(light)} must point up (z > 0) and be at most 100 long")
    coef = {}
    for key in ("ambient", "diffuse"):
        coef[key] = e.get(key, "num", getattr(d, key))
        if not 0.0 <= coef[key] <= 1.0:
            e.fail(f"{key}: {coef[key]} must be 0-1")
    e.done()
    return RenderStyle(light_direction=light, **rgb, **coef)


def _read_path(e: _Entry, i: int, extent: tuple) -> PathSpec:
    pts = _read_points(e, "points", extent)
    width = e.get("width_m", "num", 3.0)
    if not 0.5 <= width <= 50.0:
        e.fail(f"width_m: {width} must be 0.5-50 m")
    ps = PathSpec(e.get("name", "str", f"path {i}"), width, pts)
    e.done()
    return ps


def world_from_mapping(data: Mapping[str, Any], *, origin: str = "<world>") -> World:
    """Validate parsed TOML and build a :class:`World`.

    Raises
    ------
    WorldError
        On a missing or unknown table or key, a wrong type, an unknown category, a position outside
        the extent, an object inside a building, a start pose or exploration waypoint inside a building,
        an exploration route without 2 distinct points; the message names ``origin`` and the entry
        (e.g. ``objects[2] (stop sign): at: ...``).
    """
    known = {"world", "paths", "buildings", "objects", "gps_dropouts", "exploration", "render"}
    for key in data:
        if key not in known:
            raise WorldError(f"{origin}: unknown table {key!r} (known: {', '.join(sorted(known))})")
    name, extent, anchor, start = _read_header(data, origin)

    def entry(kind: str, i: int, table: Any) -> _Entry:
        label = table.get("name") or table.get("category") if isinstance(table, Mapping) else None
        return _Entry(table, f"{kind}[{i}]" + (f" ({label})" if isinstance(label, str) else ""), origin)

    paths = [_read_path(entry("paths", i, t), i, extent) for i, t in enumerate(_tables(data, "paths", origin))]
    buildings: list = []
    for i, t in enumerate(_tables(data, "buildings", origin)):
        buildings.append(_read_building(entry("buildings", i, t), i, extent))
    objects = [_read_object(entry("objects", i, t), i, extent, buildings)
               for i, t in enumerate(_tables(data, "objects", origin))]
    zones = []
    for i, t in enumerate(_tables(data, "gps_dropouts", origin)):
        e = entry("gps_dropouts", i, t)
        c, r = e.get("center", "vec2"), e.get("radius_m", "num")
        if not 0.5 <= r <= 1000.0:
            e.fail(f"radius_m: {r} must be 0.5-1000 m")
        e.done()
        zones.append(DropoutZone(c, r))
    for b in buildings:
        if _point_in_building(start[0], start[1], b, margin_m=0.5):
            raise WorldError(f"{origin}: [world] start: {list(start[:2])} is inside building {b.name!r}")
    route: tuple = ()
    if "exploration" in data:
        e = _Entry(data["exploration"], "[exploration]", origin)
        route = _read_points(e, "route", extent)
        e.done()
        if all(p == route[0] for p in route):
            e.fail("route: needs at least 2 distinct points")
        for j, p in enumerate(route):
            for b in buildings:
                if _point_in_building(p[0], p[1], b, margin_m=0.5):
                    e.fail(f"route[{j}]: {list(p)} is inside building {b.name!r}")
    style = _read_render(_Entry(data["render"], "[render]", origin)) if "render" in data else RenderStyle()
    return World(name, origin, extent, anchor, start, tuple(paths), tuple(buildings), tuple(objects), tuple(zones),
                 route, style)


def shipped_worlds() -> dict[str, Path]:
    """Name -> file of the worlds shipped in ``robot_app/data/worlds``."""
    return {p.stem: p for p in sorted(WORLDS_DIR.glob("*.toml"))}


def resolve_world(name_or_path: str | Path) -> Path:
    """A shipped world's name (``campus``) or a path to a ``.toml`` file -> the file.

    Raises
    ------
    WorldError
        If it is neither an existing file nor a shipped world's name.
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    shipped = shipped_worlds()
    if str(name_or_path) in shipped:
        return shipped[str(name_or_path)]
    raise WorldError(f"{name_or_path}: no such world file and no shipped world of that name "
                     f"(shipped: {', '.join(shipped) or 'none'})")


def load_world(name_or_path: str | Path) -> World:
    """Load and validate a world file (or a shipped world by name).

    Raises
    ------
    WorldError
        If the file cannot be read, is not valid TOML, or fails validation (see :func:`world_from_mapping`).
    """
    path = resolve_world(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WorldError(f"{path}: cannot read the world file: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise WorldError(f"{path}: not valid TOML: {exc}") from exc
    return world_from_mapping(data, origin=str(path))
