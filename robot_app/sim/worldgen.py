"""Simulated worlds generated from a seed: streets, buildings, landmark objects, GPS dropouts, a look.

``generate_world(seed)`` returns the TOML text of a world file (format: :mod:`robot_app.sim.world`)
that depends on the seed alone (``numpy.random.default_rng(seed)``; the same seed gives the same bytes
with the same :data:`GENERATOR_VERSION`):

- **streets** (:mod:`robot_app.sim.worldgen_layout`): a layout drawn from :data:`LAYOUTS` (grid blocks,
  a ring road with cross streets, curved streets joined by connectors), with crossroads, T-junctions,
  loops and one or two dead-end spurs (cul-de-sacs, yards); every street connected, widths 2.5-4 m;
- **buildings**: every building category of :data:`robot_app.sim.world.BUILDING_COLOURS` at least once
  and a few more of look-alike categories (red / brick, white / grey, glass), set back 3-10 m from the
  street they face, sizes per category, colours jittered around the category's colour;
- **objects**: every category of :data:`robot_app.sim.world.CATALOGUE`, most several times, beside the
  streets (their footprint off the paved width and 1 m clear of every path centreline; drive-over
  manhole covers lie in the street near its edge, off the centreline), stop signs at junction corners,
  look-alike pairs (:data:`LOOKALIKES`) next to each other as distractors, each with a ``scale`` and
  ``tint`` drawn in the category's plausible range; nothing overlaps, everything inside the extent;
- **GPS dropout zones**: one or two discs on the streets, their edge at least
  :data:`DROPOUT_START_CLEARANCE_M` from the start and none covering a junction;
- **anchor** latitude/longitude anywhere in -60..70 deg N, -175..175 deg E (both hemispheres);
- **start**: a dead end (else a street node), facing along the street;
- **exploration**: ``[exploration] route``, a drive over every street from the start with loop closures
  (:func:`robot_app.sim.streets.exploration_route`);
- **look**: a ``[render]`` table (grass and paving colours, sky, sun direction, light).

:data:`SEED_RANGES` names the seeds of training, development and test worlds (:func:`seeds`).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_app.sim.streets import StreetGraph, street_graph, walk_points
from robot_app.sim.world import BUILDING_COLOURS, CATALOGUE, PathSpec, World, world_from_mapping
from robot_app.sim.worldgen_layout import LAYOUTS, make_layout

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on the robot's Python 3.10
    import tomli as tomllib

__all__ = ["SEED_RANGES", "GENERATOR_VERSION", "LAYOUTS", "LOOKALIKES", "DROPOUT_START_CLEARANCE_M",
           "GeneratedWorld", "seeds", "split_of", "generate", "generate_world", "write_text"]

#: Named seed ranges of generated worlds; never overlapping. Training uses "train", model and parameter
#: choices "dev", reported figures "test" only.
SEED_RANGES: dict[str, range] = {"train": range(1000, 2000), "dev": range(2000, 2100), "test": range(3000, 3100)}
#: Bumped whenever the same seed would give a different world.
GENERATOR_VERSION = 1
#: Look-alike object categories placed next to each other as distractors.
LOOKALIKES = (("stop sign", "fire hydrant"), ("blue dumpster", "mailbox"), ("white truck", "trailer"),
              ("bench", "picnic table"), ("street lamp", "stop sign"), ("traffic cone", "fire hydrant"))
_BUILDING_LOOKALIKES = (("red building", "brick building"), ("white building", "grey building"),
                        ("glass building", "grey building"), ("red building", "red building"))
#: GPS dropout zones keep their edge at least this far (m) from the start.
DROPOUT_START_CLEARANCE_M = 30.0

# category: (count low, high), street-edge gap (m) low, high, scale low, high, yaw rule
_OBJECTS = {
    "stop sign": ((2, 4), (0.3, 1.0), (0.9, 1.1), "junction"),
    "traffic cone": ((2, 4), (0.1, 1.0), (0.8, 1.2), "any"),
    "fire hydrant": ((2, 4), (0.3, 1.5), (0.85, 1.15), "any"),
    "white truck": ((1, 2), (0.3, 1.5), (0.9, 1.1), "along"),
    "blue dumpster": ((1, 3), (0.5, 3.0), (0.85, 1.15), "along"),
    "picnic table": ((1, 3), (1.0, 5.0), (0.9, 1.15), "any"),
    "bench": ((2, 4), (0.3, 1.5), (0.9, 1.2), "face"),
    "trailer": ((1, 2), (0.5, 2.0), (0.9, 1.1), "along"),
    "manhole cover": ((2, 4), (0.0, 0.0), (0.9, 1.15), "street"),
    "tree": ((4, 8), (1.0, 4.0), (0.7, 1.4), "any"),
    "street lamp": ((3, 6), (0.3, 1.0), (0.85, 1.2), "face"),
    "mailbox": ((1, 3), (0.3, 1.2), (0.9, 1.1), "face"),
}
# category: (length along the street, depth, height) ranges, m
_BUILDINGS = {
    "building": ((12, 28), (10, 18), (6, 14)), "red building": ((14, 30), (10, 20), (6, 14)),
    "brick building": ((12, 24), (10, 16), (8, 18)), "white building": ((14, 30), (10, 18), (5, 12)),
    "glass building": ((14, 24), (12, 20), (15, 35)), "grey building": ((20, 34), (12, 22), (6, 12)),
}
_CLEAR_M = 1.0  # an obstacle's footprint keeps this far from every path centreline (robot 0.33 m + slack)


class _Retry(Exception):
    """A draw could not be completed: draw the layout again (the rng goes on, so still reproducible)."""


def seeds(split: str) -> range:
    """The seeds of a named split of :data:`SEED_RANGES` (``train``, ``dev``, ``test``).

    Raises
    ------
    KeyError
        For an unknown name (the message lists the known ones).
    """
    try:
        return SEED_RANGES[split]
    except KeyError:
        raise KeyError(f"unknown seed split {split!r} (known: {', '.join(SEED_RANGES)})") from None


def split_of(seed: int) -> str | None:
    """The name of the split ``seed`` belongs to, or None."""
    return next((name for name, r in SEED_RANGES.items() if seed in r), None)


@dataclass(frozen=True)
class GeneratedWorld:
    """A generated world: its TOML ``text``, the loaded :class:`World`, the layout's name and the street
    graph (junctions, dead ends)."""

    seed: int
    layout: str
    text: str
    world: World
    graph: StreetGraph


def _half_extent(category: str) -> float:
    """Horizontal radius (m) of a catalogue object at scale 1: the parts' farthest reach from its centre."""
    half = 0.0
    for p in CATALOGUE[category].parts:
        r = math.hypot(p.size[0], p.size[1]) / 2 if p.shape == "box" else p.size[0]
        half = max(half, math.hypot(p.offset[0], p.offset[1]) + r)
    return half


class _Site:
    """Geometry of the streets for placement checks: segments (S, 2) with widths and graph edges."""

    def __init__(self, graph: StreetGraph, paths: list[PathSpec], extent: tuple):
        segs = [(p0, p1, p.width_m) for p in paths for p0, p1 in zip(p.points[:-1], p.points[1:])]
        self.a = np.array([s[0] for s in segs], dtype=np.float64)
        self.d = np.array([s[1] for s in segs], dtype=np.float64) - self.a
        self.w = np.array([s[2] for s in segs], dtype=np.float64)
        n = [max(2, int(math.ceil(np.linalg.norm(d) / 0.5)) + 1) for d in self.d]
        self.samples = np.concatenate([a + np.linspace(0, 1, k)[:, None] * d for a, d, k in zip(self.a, self.d, n)])
        self.sample_w = np.concatenate([np.full(k, w) for w, k in zip(self.w, n)])
        self.graph, self.half = graph, (extent[0] / 2, extent[1] / 2)
        deg = graph.degree()
        self.junctions = graph.nodes[deg >= 3]
        self.edges = [e for e in graph.edges if e.length_m >= 14.0]
        self.lengths = np.array([e.length_m for e in self.edges])

    def clearance(self, xy) -> tuple[float, float]:
        """(distance to the nearest centreline, that minus its half width), m."""
        p = np.asarray(xy, dtype=np.float64)
        dd = np.maximum((self.d * self.d).sum(axis=1), 1e-12)
        t = np.clip(((p - self.a) * self.d).sum(axis=1) / dd, 0.0, 1.0)
        dist = np.linalg.norm(self.a + t[:, None] * self.d - p, axis=1)
        return float(dist.min()), float((dist - self.w / 2).min())

    def spot(self, rng: np.random.Generator, margin_m: float, edge=None, s=None):
        """(edge, arc length, point, unit tangent) of a random place on a street, ``margin_m`` from its ends."""
        if edge is None:
            edge = self.edges[int(rng.choice(len(self.edges), p=self.lengths / self.lengths.sum()))]
        seg = np.linalg.norm(np.diff(edge.points, axis=0), axis=1)
        cum = np.concatenate([[0.0], np.cumsum(seg)])
        if s is None:
            if cum[-1] < 2 * margin_m:
                return None
            s = rng.uniform(margin_m, cum[-1] - margin_m)
        s = min(max(s, 0.0), cum[-1])
        k = min(int(np.searchsorted(cum, s, side="right")) - 1, len(seg) - 1)
        t = (edge.points[k + 1] - edge.points[k]) / max(seg[k], 1e-9)
        return edge, s, edge.points[k] + t * (s - cum[k]), t

    def inside(self, xy, r: float) -> bool:
        return abs(xy[0]) <= self.half[0] - r - 1.0 and abs(xy[1]) <= self.half[1] - r - 1.0


def _rect_dist(pts: np.ndarray, b: dict) -> np.ndarray:
    c, s = math.cos(math.radians(b["yaw_deg"])), math.sin(math.radians(b["yaw_deg"]))
    dx, dy = pts[:, 0] - b["center"][0], pts[:, 1] - b["center"][1]
    u = np.abs(c * dx + s * dy) - b["size_m"][0] / 2
    v = np.abs(-s * dx + c * dy) - b["size_m"][1] / 2
    out = np.hypot(np.maximum(u, 0.0), np.maximum(v, 0.0))
    return np.where((u <= 0) & (v <= 0), np.maximum(u, v), out)


def _rect_outline(b: dict, step: float = 0.5) -> np.ndarray:
    lx, ly = b["size_m"][0] / 2, b["size_m"][1] / 2
    c, s = math.cos(math.radians(b["yaw_deg"])), math.sin(math.radians(b["yaw_deg"]))
    us = np.linspace(-lx, lx, int(2 * lx / step) + 2)
    vs = np.linspace(-ly, ly, int(2 * ly / step) + 2)
    local = np.concatenate([np.stack([us, np.full_like(us, v)], 1) for v in (-ly, ly)]
                           + [np.stack([np.full_like(vs, u), vs], 1) for u in (-lx, lx)])
    return np.stack([b["center"][0] + c * local[:, 0] - s * local[:, 1],
                     b["center"][1] + s * local[:, 0] + c * local[:, 1]], 1)


def _place_building(rng, site: _Site, category: str, placed: list, near=None) -> dict | None:
    (l0, l1), (d0, d1), (h0, h1) = _BUILDINGS[category]
    for _ in range(150):
        length, depth, height = rng.uniform(l0, l1), rng.uniform(d0, d1), rng.uniform(h0, h1)
        if near is not None:  # a look-alike beside an earlier building on the same street
            edge, s0, side = near
            got = site.spot(rng, 0.0, edge, s0 + rng.choice([-1.0, 1.0]) * rng.uniform(length / 2 + 14, length + 24))
        else:
            got, side = site.spot(rng, length / 2 + 4.0), rng.choice([-1.0, 1.0])
        if got is None:
            continue
        edge, s, p, t = got
        n = np.array([-t[1], t[0]]) * side
        setback = rng.uniform(3.0, 10.0)
        c = p + n * (edge.width_m / 2 + setback + depth / 2)
        b = {"category": category, "center": [round(float(c[0]), 2), round(float(c[1]), 2)],
             "size_m": [round(length, 1), round(depth, 1), round(height, 1)],
             "yaw_deg": round(math.degrees(math.atan2(t[1], t[0])) + rng.uniform(-4.0, 4.0), 1)}
        outline = _rect_outline(b)
        if np.any(np.abs(outline) > np.array(site.half) - 1.0):  # inside the extent
            continue
        if np.any(_rect_dist(site.samples, b) < site.sample_w / 2 + 3.0):
            continue
        if any(_rect_dist(_rect_outline(o), b).min() < 4.0 or _rect_dist(outline, o).min() < 4.0 for o in placed):
            continue
        base = np.asarray(BUILDING_COLOURS[category])
        jitter = 0.02 if category == "glass building" else 0.05
        rgb = np.clip(base * rng.uniform(0.9, 1.08) + rng.uniform(-jitter, jitter, 3), 0.0, 1.0)
        b["colour"] = [round(float(v), 3) for v in rgb]
        b["_at"] = (edge, s, side)
        return b
    return None


def _place_object(rng, site: _Site, category: str, buildings: list, objects: list, start, near=None,
                  junction=None) -> dict | None:
    _, (g0, g1), (k0, k1), rule = _OBJECTS[category]
    fp0, half0 = CATALOGUE[category].footprint_m, _half_extent(category)
    for _ in range(150):
        scale = rng.uniform(k0, k1)
        fp = fp0 * scale
        half = max(half0 * scale, fp)  # what it covers: its parts or its collision disc
        if junction is not None:  # on the right of the traffic approaching a junction, short of the corner
            edge, forward = junction
            got = site.spot(rng, 0.0, edge, edge.width_m / 2 + rng.uniform(1.5, 4.0) if forward
                            else edge.length_m - edge.width_m / 2 - rng.uniform(1.5, 4.0))
            side = 1.0 if forward else -1.0
        elif near is not None:
            edge, s0 = near
            got, side = site.spot(rng, 0.0, edge, s0 + rng.choice([-1.0, 1.0]) * rng.uniform(5.0, 15.0)), \
                rng.choice([-1.0, 1.0])
        else:
            got, side = site.spot(rng, 5.0), rng.choice([-1.0, 1.0])
        if got is None:
            continue
        edge, s, p, t = got
        n = np.array([-t[1], t[0]]) * side
        lateral = edge.width_m / 2 - 0.45 * scale if rule == "street" else \
            edge.width_m / 2 + rng.uniform(g0, g1) + max(fp, 0.3)
        xy = p + n * lateral
        if not site.inside(xy, half):
            continue
        centre, off_street = site.clearance(xy)
        if rule == "street":
            if centre < 0.6 or any(np.hypot(*(site.junctions - xy).T) < 6.0):
                continue
        elif off_street < fp + 0.1 or centre < fp + _CLEAR_M or math.hypot(xy[0] - start[0], xy[1] - start[1]) < fp + 2:
            continue
        if any(_rect_dist(xy[None], b)[0] < half + 0.5 for b in buildings):
            continue
        if any(math.hypot(xy[0] - o["at"][0], xy[1] - o["at"][1]) < half + o["_r"] + 0.3 for o in objects):
            continue
        heading = math.atan2(t[1], t[0])
        yaw = {"junction": heading + (0.0 if junction is None or junction[1] else math.pi),
               "along": heading + (0.0 if side > 0 else math.pi), "face": math.atan2(-n[1], -n[0]),
               "street": rng.uniform(0, math.tau), "any": rng.uniform(0, math.tau)}[rule]
        if category == "bench":  # its seat faces +y: turn it so the sitter looks at the street
            yaw -= math.pi / 2
        tint = np.clip(rng.uniform(0.88, 1.1) * rng.uniform(0.96, 1.04, 3), 0.5, 1.5)
        return {"category": category, "at": [round(float(xy[0]), 2), round(float(xy[1]), 2)],
                "yaw_deg": round(math.degrees(yaw) % 360.0, 1), "scale": round(scale, 3),
                "tint": [round(float(v), 3) for v in tint], "_r": half, "_at": (edge, s)}
    return None


def _render_style(rng) -> dict:
    g = rng.uniform()
    grey = rng.uniform(0.45, 0.68)
    az, el = rng.uniform(0, math.tau), math.radians(rng.uniform(35.0, 80.0))
    haze = rng.uniform()
    r3 = lambda v: [round(float(x), 3) for x in v]  # noqa: E731
    return {
        "ground_colour": r3(np.clip((1 - g) * np.array([0.26, 0.47, 0.18]) + g * np.array([0.46, 0.5, 0.28])
                                    + rng.uniform(-0.02, 0.02, 3), 0, 1)),
        "path_colour": r3(np.clip(np.array([grey + 0.01, grey - 0.01, grey - 0.05]) + rng.uniform(-0.02, 0.02, 3),
                                  0, 1)),
        "sky_top_colour": r3((1 - haze) * np.array([0.3, 0.5, 0.86]) + haze * np.array([0.56, 0.66, 0.8])),
        "sky_horizon_colour": r3((1 - haze) * np.array([0.78, 0.86, 0.94]) + haze * np.array([0.86, 0.86, 0.86])),
        "light_direction": r3([math.cos(el) * math.cos(az), math.cos(el) * math.sin(az), math.sin(el)]),
        "ambient": round(float(rng.uniform(0.45, 0.65)), 3), "diffuse": round(float(rng.uniform(0.35, 0.6)), 3),
    }


def _draw(rng: np.random.Generator, name: str, layout: str | None) -> tuple[str, dict]:
    """One draw of a world as plain data (raises :class:`_Retry` when it cannot be completed)."""
    ext = (float(rng.choice([200.0, 220.0, 240.0])), float(rng.choice([200.0, 220.0, 240.0])))
    layout = layout or LAYOUTS[int(rng.integers(len(LAYOUTS)))]
    streets = make_layout(rng, layout, ext[0] / 2 - 30.0, ext[1] / 2 - 30.0)
    paths = [PathSpec(st.name, st.width_m, tuple(st.points)) for st in streets]
    graph = street_graph(paths)
    if not graph.connected() or len(graph.junctions()) == 0:
        raise _Retry
    dead = graph.dead_ends()
    start_node = int(dead[int(rng.integers(len(dead)))]) if len(dead) else int(rng.integers(len(graph.nodes)))
    route = walk_points(graph, start_node)
    start = route[0]
    yaw0 = math.degrees(math.atan2(route[1][1] - start[1], route[1][0] - start[0]))
    site = _Site(graph, paths, ext)
    if not site.edges:
        raise _Retry

    buildings: list = []
    for k in rng.permutation(len(BUILDING_COLOURS)):  # every category once
        b = _place_building(rng, site, list(BUILDING_COLOURS)[int(k)], buildings)
        if b is None:
            raise _Retry
        buildings.append(b)
    for k in rng.choice(len(_BUILDING_LOOKALIKES), size=int(rng.integers(1, 3)), replace=False):
        first, second = _BUILDING_LOOKALIKES[int(k)]
        b = _place_building(rng, site, first, buildings)
        if b is not None:
            buildings.append(b)
            b2 = _place_building(rng, site, second, buildings, near=b["_at"])
            if b2 is not None:
                buildings.append(b2)
    for _ in range(int(rng.integers(0, 3))):
        b = _place_building(rng, site, str(rng.choice(["red building", "grey building", "glass building",
                                                       "white building", "brick building"])), buildings)
        if b is not None:
            buildings.append(b)

    want = {c: int(rng.integers(lo, hi + 1)) for c, ((lo, hi), *_) in _OBJECTS.items()}
    objects: list = []
    have = dict.fromkeys(_OBJECTS, 0)

    def add(o) -> bool:
        if o is not None:
            objects.append(o)
            have[o["category"]] += 1
        return o is not None

    corners = [(e, e.a == j) for j in np.flatnonzero(graph.degree() >= 3) for e in site.edges if j in (e.a, e.b)]
    for k in rng.permutation(len(corners))[: want["stop sign"]]:
        add(_place_object(rng, site, "stop sign", buildings, objects, start, junction=corners[int(k)]))
    for k in rng.choice(len(LOOKALIKES), size=int(rng.integers(2, 4)), replace=False):
        first, second = LOOKALIKES[int(k)]
        o = _place_object(rng, site, first, buildings, objects, start)
        if add(o):
            add(_place_object(rng, site, second, buildings, objects, start, near=o["_at"]))
    for cat in _OBJECTS:
        for _ in range(max(0, want[cat] - have[cat])):
            add(_place_object(rng, site, cat, buildings, objects, start))
        if have[cat] == 0:
            raise _Retry

    zones: list = []
    for _ in range(int(rng.integers(1, 3))):
        for _try in range(100):
            _, _, p, t = site.spot(rng, 0.0)
            c = p + np.array([-t[1], t[0]]) * rng.uniform(-4.0, 4.0)
            r = round(float(rng.uniform(6.0, 12.0)), 1)
            c = (round(float(c[0]), 2), round(float(c[1]), 2))
            if math.hypot(c[0] - start[0], c[1] - start[1]) < r + DROPOUT_START_CLEARANCE_M \
                    or any(math.hypot(c[0] - j[0], c[1] - j[1]) < r + 5.0 for j in site.junctions) \
                    or any(math.hypot(c[0] - z[0][0], c[1] - z[0][1]) < r + z[1] + 5.0 for z in zones):
                continue
            zones.append((c, r))
            break
    if not zones:
        raise _Retry
    data = {"extent": ext, "start": (start[0], start[1], round(yaw0, 1)), "route": route, "paths": paths,
            "buildings": buildings, "objects": objects, "zones": zones,
            "anchor": (round(float(rng.uniform(-60.0, 70.0)), 5), round(float(rng.uniform(-175.0, 175.0)), 5)),
            "render": _render_style(rng), "name": name}
    return layout, data


def _num(x, nd: int = 2) -> str:
    v = round(float(x), nd)
    return repr(v if v != 0 else 0.0)


def _vec(v, nd: int = 2) -> str:
    return "[" + ", ".join(_num(x, nd) for x in v) + "]"


def _points(pts, per_line: int = 6) -> str:
    items = [_vec(p) for p in pts]
    if len(items) <= per_line:
        return "[" + ", ".join(items) + "]"
    rows = [", ".join(items[k:k + per_line]) for k in range(0, len(items), per_line)]
    return "[\n  " + ",\n  ".join(rows) + ",\n]"


def _toml(seed: int, layout: str, d: dict, flags: str) -> str:
    q = '"'
    out = [f"# Simulated world {q}{d['name']}{q}, generated from seed {seed} by robot_app.sim.worldgen "
           f"(version {GENERATOR_VERSION}, layout {layout}).",
           f"# Regenerate it with `robot-app sim generate --seed {seed}{flags}` rather than edit it.",
           "# Coordinates: metres east/north of the anchor.", "",
           "[world]", f"name = {q}{d['name']}{q}", f"extent_m = {_vec(d['extent'], 1)}",
           f"anchor_latlon = {_vec(d['anchor'], 5)}", f"start = {_vec(d['start'])}", "", "[render]"]
    for k, v in d["render"].items():
        out.append(f"{k} = {_vec(v, 3) if isinstance(v, list) else _num(v, 3)}")
    out += ["", "[exploration]", f"route = {_points(d['route'])}"]
    for p in d["paths"]:
        out += ["", "[[paths]]", f"name = {q}{p.name}{q}", f"width_m = {_num(p.width_m)}",
                f"points = {_points(p.points)}"]
    for b in d["buildings"]:
        out += ["", "[[buildings]]", f"category = {q}{b['category']}{q}", f"center = {_vec(b['center'])}",
                f"size_m = {_vec(b['size_m'], 1)}", f"yaw_deg = {_num(b['yaw_deg'], 1)}",
                f"colour = {_vec(b['colour'], 3)}"]
    for o in d["objects"]:
        out += ["", "[[objects]]", f"category = {q}{o['category']}{q}", f"at = {_vec(o['at'])}",
                f"yaw_deg = {_num(o['yaw_deg'], 1)}", f"scale = {_num(o['scale'], 3)}", f"tint = {_vec(o['tint'], 3)}"]
    for c, r in d["zones"]:
        out += ["", "[[gps_dropouts]]", f"center = {_vec(c)}", f"radius_m = {_num(r, 1)}"]
    return "\n".join(out) + "\n"


def generate(seed: int, *, name: str | None = None, layout: str | None = None) -> GeneratedWorld:
    """Generate the world of ``seed`` (module docstring) and load it back through the world format's
    validation.

    Parameters
    ----------
    seed : int
        Any integer >= 0; the world depends on it alone (and on ``name`` and ``layout`` when given).
    name : str, optional
        The world's name (default ``gen-<seed>``).
    layout : str, optional
        One of :data:`LAYOUTS` instead of the seed's choice.

    Raises
    ------
    ValueError
        A negative or non-integer seed, an empty name or one with a quote, backquote, backslash or
        control character, an unknown layout.
    RuntimeError
        If no complete world could be drawn (not seen for any seed; report it with the seed).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    name = f"gen-{int(seed)}" if name is None else name
    if not name.strip() or any(ch in '"\\`' or ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise ValueError(f"name: expected a non-empty name without quotes, backquotes, backslashes or control "
                         f"characters, got {name!r}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
    rng = np.random.default_rng(int(seed))
    for _ in range(20):
        try:
            lay, data = _draw(rng, name, layout)
        except _Retry:
            continue
        flags = (f' --name "{name}"' if name != f"gen-{int(seed)}" else "") + (f" --layout {layout}" if layout else "")
        text = _toml(int(seed), lay, data, flags)
        world = world_from_mapping(tomllib.loads(text), origin=f"<generated world {int(seed)}>")
        return GeneratedWorld(int(seed), lay, text, world, street_graph(world))
    raise RuntimeError(f"seed {seed}: no complete world in 20 draws (a generator bug: please report the seed)")


def generate_world(seed: int, *, name: str | None = None, layout: str | None = None) -> str:
    """The TOML text of :func:`generate`'s world (the same seed gives the same bytes). Raises as it."""
    return generate(seed, name=name, layout=layout).text


def write_text(path: str | Path, text: str, *, overwrite: bool = False) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file beside it, then a rename.

    Raises
    ------
    FileExistsError
        If ``path`` exists and ``overwrite`` is false.
    OSError
        If the folder does not exist or is not writable.
    """
    p = Path(path)
    if p.exists() and not overwrite:
        raise FileExistsError(f"{p}: exists (give --overwrite to replace it)")
    tmp = p.with_name(f".{p.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(p)
    finally:
        tmp.unlink(missing_ok=True)
    return p
