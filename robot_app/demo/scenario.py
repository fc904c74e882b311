"""What the demo does in a world: the exploration route, the default instruction, the task job's places.

A :class:`Scenario` is fixed per shipped world (hand-picked so the instruction's landmarks are seen
along the explored route, in order, with the same categories elsewhere in the world as distractors);
any other world file (a copy edited, a generated world) gets one derived from its geometry
(:func:`derive_scenario`): a start with a GPS fix (:func:`robot_app.demo.routes.demo_start`), a route
out along a branch at a junction and back, then on, and an instruction whose landmarks are seen along
it, one only from the branch, so that the best walk is a detour from the shortest one to the goal.
Landmark phrases are tied to world categories by :func:`phrase_categories` (head noun plus modifiers),
which is also how an ``--instruction`` naming something the world does not have is refused.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robot_app.demo.routes import (
    START_MARGIN_M,
    RouteCandidate,
    chain_routes,
    demo_start,
    dropout_zone_at,
    junction_routes,
    no_gps_fix_message,
)
from robot_app.demo.stages import DemoInputError
from robot_app.sim.eval_truth import TruthParams, footprint_distance, landmark_nodes

log = logging.getLogger(__name__)

__all__ = ["Scenario", "DemoInputError", "scenario_for", "phrase_categories", "derive_scenario",
           "check_start", "TASK_GOAL", "TASK_START"]

#: The LASP task job of stage 5: from the yard (where the route ended), inspect site B; the gate between
#: them is closed in the world, which the robot's domain does not model
#: (robot_app/data/lasp/jackal/robot_domain.pddl). One drive of about 8 m once the gate is open.
TASK_GOAL = "(inspected site-b)"
TASK_START = "yard"


@dataclass(frozen=True)
class Scenario:
    """Route (N, 2) m ENU of the world, the default instruction, the exploration speed (m/s), and a line
    on how the start was chosen (empty for the hand-picked scenarios)."""

    world: str
    route: tuple
    instruction: str
    speed_mps: float = 1.0  # the sim VNM's training speed: map edges in its time steps
    start_note: str = ""

    @property
    def start(self) -> tuple[float, float, float]:
        """The start pose (x_m, y_m, yaw_rad) ENU: the route's first point, facing its second (where the
        exploration and the drive begin)."""
        (x0, y0), (x1, y1) = self.route[0], self.route[1]
        return float(x0), float(y0), math.atan2(y1 - y0, x1 - x0)


# Hand-picked per shipped world; "quick" is a shorter route for CI (two landmarks). The full ones explore
# a map with a junction (campus: the main path, out along the west spur and back, then on north; industrial:
# the loop of the yard lane, the ring road's south-west quarter and the cross street) and name a landmark
# off the direct way, so that LM-Nav's walk (about 160 / 280 m) is not the shortest one to its goal (the
# report shows both, as the paper's Fig. 5).
_SCENARIOS = {
    ("campus", False): Scenario("campus", ((0.0, -88.0), (0.0, 0.0), (-45.0, 0.0), (0.0, 0.0), (0.0, 45.0)),
                                "Go past the fire hydrant, then the picnic table, and stop at the traffic cone."),
    ("campus", True): Scenario("campus", ((0.0, -90.0), (0.0, -15.0)),
                               "Go past the fire hydrant and stop at the stop sign."),
    ("industrial", False): Scenario("industrial", ((0.0, -40.0), (0.0, -80.0), (-80.0, -80.0), (-80.0, 0.0),
                                                   (0.0, 0.0), (0.0, -48.0)),
                                    "Go past the trailer, then the blue dumpster, and stop at the mailbox."),
    ("industrial", True): Scenario("industrial", ((0.0, -80.0), (0.0, 0.0), (20.0, 0.0)),
                                   "Go past the traffic cone and stop at the stop sign."),
}

_STOP = {"a", "an", "the", "of", "on", "with", "near", "by", "big", "large", "small", "tall", "little"}


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if w not in _STOP]


def phrase_categories(phrase: str, categories) -> list[str]:
    """The world categories a landmark phrase names: those whose head noun (last word) is in the phrase
    and, when some of them also match all their other words (colour, kind), only those.

    ``"a red building"`` -> ``["red building"]``; ``"the building"`` -> every building category;
    ``"a hydrant"`` -> ``["fire hydrant"]``; ``"a purple elephant"`` -> ``[]``.

    Parameters
    ----------
    phrase : str
        A landmark as the parser returned it.
    categories : iterable of str
        The world's categories (:meth:`robot_app.sim.world.World.landmarks`).
    """
    words = set(_words(phrase))
    words |= {w[:-1] for w in words if w.endswith("s")}  # plural heads ("trees")
    words |= {"lamp"} if words & {"light", "streetlight", "lamppost"} else set()  # synonyms of "lamp"
    heads = [c for c in sorted(set(categories)) if c.split()[-1] in words]
    # "a red building" names the red one only; "a building" (or "a red octagonal sign") every match of the head
    exact = [c for c in heads if set(c.split()) <= words]
    return exact or heads


def scenario_for(world, *, quick: bool = False, instruction: str | None = None) -> Scenario:
    """The scenario of a loaded world: the hand-picked one of a shipped world (its own file, unchanged),
    else one derived from the world's geometry (:func:`derive_scenario`); with ``instruction`` if given.

    Raises
    ------
    DemoInputError
        A world without a path, without a start that has a GPS fix, or (without ``instruction``) without
        a route that shows two landmarks in order.
    """
    sc = _SCENARIOS.get((world.name, quick)) if _is_shipped(world) else None
    if sc is None:
        return derive_scenario(world, quick=quick, instruction=instruction)
    if instruction is not None:
        sc = dataclasses.replace(sc, instruction=instruction)
    return sc


def _is_shipped(world) -> bool:
    """Whether ``world`` was loaded from the shipped file of its name (or a byte-identical copy)."""
    from robot_app.sim.world import shipped_worlds

    shipped = shipped_worlds().get(world.name)
    try:
        src = Path(world.source)
        return shipped is not None and (src.resolve() == shipped.resolve() or src.read_bytes() == shipped.read_bytes())
    except OSError:
        return False


def check_start(world, scenario: Scenario) -> None:
    """Refuse a scenario whose start lies in a GPS dropout zone (the onboard app would wait for a fix).

    Raises
    ------
    DemoInputError
        One line: ``no GPS fix at the start ...`` naming the zone (:func:`robot_app.demo.routes.no_gps_fix_message`).
    """
    x, y, _ = scenario.start
    if dropout_zone_at(world, x, y) is not None:
        raise DemoInputError(no_gps_fix_message(world, x, y))


#: how far (m) apart the derived route's samples are, the least distance (m) a landmark must be seen before the
#: route's end (the task job's places lie beyond it), and how much longer (m) the best walk must be than the
#: shortest one to its goal
SAMPLE_M = 1.0
END_ROOM_M = 20.0
MIN_DETOUR_M = 10.0


def derive_scenario(world, *, quick: bool = False, instruction: str | None = None) -> Scenario:
    """A scenario for any world, from its geometry.

    The start is :func:`robot_app.demo.routes.demo_start` (on a path, outside every GPS dropout zone).
    Full: of the routes through a junction (:func:`robot_app.demo.routes.junction_routes`: out along a
    branch and back, then straight on), one whose
    instruction names a landmark seen only on the way to the junction (when there is one), one seen
    only on the branch (out and back) and one seen only after it, at least 20 m before the route's
    end, and whose best walk through them is at least 10 m longer than the shortest walk to its goal;
    routes that stay out of the dropout zones, with three landmarks, and shorter ones first. Quick, or a
    world whose junction routes allow no such instruction (a warning): up to 70 m, else 100 m (200 m)
    along the paths from the start, naming two (up to three) landmarks seen one after the other.
    "Seen" is the demo's ground truth (:func:`robot_app.sim.eval_truth.landmark_nodes`, 90 degree field
    of view) from poses every metre along the route, facing along it. Positions are m ENU of the world.

    Parameters
    ----------
    world : robot_app.sim.world.World
    quick : bool
        The short route with two landmarks.
    instruction : str, optional
        The operator's instruction: only the route is chosen (the best one that would show a derived
        instruction, else the first candidate).

    Raises
    ------
    DemoInputError
        The world has no path, no start with a GPS fix, or (without ``instruction``) no route from the
        start that shows two landmarks in order.
    """
    start = demo_start(world)
    cands = [] if quick else junction_routes(world, start)
    picked = _best([(c, _junction_instruction(world, c)) for c in cands], world)
    chains: list = []
    if picked is None:
        for length in (70.0, 100.0) if quick else (200.0,):
            chains = chain_routes(world, start, length_m=length)
            picked = _best([(c, _chain_instruction(world, c, 2 if quick else 3)) for c in chains], world)
            if picked is not None:
                break
        if picked is not None and not quick:
            log.warning("world %r: no route from the start through a junction shows a landmark only off the way "
                        "to the goal; the demo explores %.0f m straight on (its walk is the shortest one)",
                        world.name, picked[0].length_m)
    if picked is None and instruction is not None and (cands or chains):
        picked = ((cands or chains)[0], None)  # the operator's instruction: any route from the start
    if picked is None and instruction is None:
        sc = _along_exploration(world, quick)
        if sc is not None:
            return sc
    if picked is None:
        raise DemoInputError(f"world {world.name!r}: no route from the start ({start[0]:.1f}, {start[1]:.1f}) m along "
                             "its paths shows two landmarks one after the other; give --instruction")
    route, phrases = picked
    return Scenario(world.name, tuple(map(tuple, route.points.tolist())),
                    instruction if instruction is not None else _text(phrases), start_note=_start_note(world, start))


def _start_note(world, start: tuple) -> str:
    x, y, _ = start
    x0, y0, _ = world.start
    where = f"start ({x:.1f}, {y:.1f}) m"
    if math.hypot(x - x0, y - y0) <= 0.5 + max((p.width_m for p in world.paths), default=0.0):
        return f"{where}: the world's start"
    i = dropout_zone_at(world, x0, y0, margin_m=START_MARGIN_M)
    why = (f"lies in (or within {START_MARGIN_M:g} m of) GPS dropout zone gps_dropouts[{i}]" if i is not None
           else "is not on a path")
    return f"{where}: the nearest point of a path with a GPS fix (the world's start ({x0:g}, {y0:g}) m {why})"


def _best(scored: list, world) -> tuple | None:
    """The best (route, phrases) of those with phrases: out of the dropout zones first, then more
    landmarks, then shorter; None when none has phrases."""
    ok = [(c, ph) for c, ph in scored if ph is not None]
    if not ok:
        return None

    def key(item):
        c, ph = item
        in_zone = any(dropout_zone_at(world, x, y) is not None for x, y in _samples(c.points)[0])
        return (in_zone, -len(ph), c.length_m)

    return min(ok, key=key)


def _samples(points: np.ndarray, step_m: float = SAMPLE_M) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poses every ``step_m`` m along a polyline, facing along it: xy (N, 2) m, yaw (N,) rad, arc (N,) m."""
    xy, yaw, arc = [], [], []
    s0 = 0.0
    for a, b in zip(points[:-1], points[1:]):
        d = float(np.linalg.norm(b - a))
        n = max(1, int(math.ceil(d / step_m)))
        h = math.atan2(b[1] - a[1], b[0] - a[0])
        for i in range(n):
            xy.append(a + (b - a) * (i / n))
            yaw.append(h)
            arc.append(s0 + d * i / n)
        s0 += d
    xy.append(points[-1])
    yaw.append(yaw[-1])
    arc.append(s0)
    return np.asarray(xy), np.asarray(yaw), np.asarray(arc)


def _seen(world, xy: np.ndarray, yaw: np.ndarray) -> dict[str, np.ndarray]:
    """For each phrase ``the <category>`` of the world: the sample indices it is seen from (any category
    the phrase names, :func:`phrase_categories`), non-empty ones only. Objects are listed before buildings."""
    cats = sorted({c for _, c, _, _ in world.landmarks()})
    buildings = {b.name: b for b in world.buildings}
    masks: dict[str, np.ndarray] = {}
    params = TruthParams()
    for name, cat, x, y in world.landmarks():
        far = (footprint_distance(buildings[name], xy).min() if name in buildings
               else np.hypot(xy[:, 0] - x, xy[:, 1] - y).min())
        if far > params.object_view_max_m + 5.0 and far > params.building_view_m + 5.0:
            continue
        seen = landmark_nodes(world, name, xy, yaw, params=params)
        masks[cat] = masks.get(cat, np.zeros(len(xy), dtype=bool)) | seen
    building_cats = {b.category for b in world.buildings}
    out = {}
    for cat in sorted(cats, key=lambda c: (c in building_cats, c)):
        named = phrase_categories(f"the {cat}", cats)
        mask = np.zeros(len(xy), dtype=bool)
        for c in named:
            mask |= masks.get(c, mask)
        if mask.any():
            out[f"the {cat}"] = np.flatnonzero(mask)
    return out


def _text(phrases: list[str]) -> str:
    if len(phrases) == 2:
        return f"Go past {phrases[0]} and stop at {phrases[1]}."
    return f"Go past {phrases[0]}" + "".join(f", then {p}" for p in phrases[1:-1]) + f", and stop at {phrases[-1]}."


def _objects_first(world, items: list) -> list:
    """``items`` ((phrase, indices)) naming objects when there are any, else all (the sim VLM's shipped
    instructions name objects; a building is seen from far along the route)."""
    buildings = {f"the {b.category}" for b in world.buildings}
    objects = [it for it in items if it[0] not in buildings]
    return objects or items


def _junction_instruction(world, cand: RouteCandidate) -> list[str] | None:
    """The phrases of a junction route's instruction (:func:`derive_scenario`), or None when its landmarks
    do not allow one."""
    xy, yaw, arc = _samples(cand.points)
    seen = _seen(world, xy, yaw)
    total, legs = arc[-1], cand.legs

    def only_between(lo: float, hi: float) -> list:
        return [(p, idx) for p, idx in seen.items() if arc[idx[0]] >= lo and arc[idx[-1]] < hi]

    firsts = _objects_first(world, only_between(5.0, legs["branch"]))
    branch = _objects_first(world, only_between(legs["branch"] + 8.0, legs["onward"]))
    lasts = _objects_first(world, only_between(legs["onward"] + 5.0, total - END_ROOM_M + 1e-9))
    if not branch or not lasts:
        return None
    far = max(branch, key=lambda item: arc[item[1][0]])  # the farthest out: the longest detour
    chosen = firsts[:1] + [far, lasts[0]]
    if _walk_detour_m(xy, yaw, arc, [idx for _, idx in chosen]) < MIN_DETOUR_M:
        return None
    return [p for p, _ in chosen]


def _chain_instruction(world, cand: RouteCandidate, k: int) -> list[str] | None:
    """Up to ``k`` (at least two) phrases seen one after the other along a straight-on route (each first seen
    at least 10 m after the one before and last seen after it), the last at least 20 m before the route's
    end, in driving order (objects when enough of them are); None when fewer than two fit."""
    xy, yaw, arc = _samples(cand.points)
    seen = _seen(world, xy, yaw)
    usable = [(p, idx) for p, idx in seen.items() if arc[idx[0]] >= 3.0 and arc[idx[-1]] <= arc[-1] - END_ROOM_M]
    for pool in (_objects_first(world, usable), usable):
        picked: list = []
        for p, idx in sorted(pool, key=lambda u: arc[u[1][0]]):
            prev = picked[-1][1] if picked else None
            if prev is None or (arc[idx[0]] >= arc[prev[0]] + 10.0 and arc[idx[-1]] > arc[prev[-1]]):
                picked.append((p, idx))
        if len(picked) >= 2:
            return [p for p, _ in picked[:k]]
    return None


def _walk_detour_m(xy: np.ndarray, yaw: np.ndarray, arc: np.ndarray, sets: list[np.ndarray], *,
                   link_m: float = 5.0, link_turn_deg: float = 45.0) -> float:
    """How much longer (m) the shortest walk from sample 0 through ``sets`` (sample indices) in order is
    than the shortest walk to where it ends, on a stand-in for the demo's map: the samples (xy (N, 2) m,
    yaw (N,) rad, arc (N,) m along the route), consecutive ones joined, and any two within ``link_m`` m
    facing within ``link_turn_deg`` of each other and more than ``2 * link_m`` m apart along the route
    (where passes meet facing the same way: the VNM joins images that look alike, not a pass and the
    one back). -inf when no walk goes through the sets."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import dijkstra
    from scipy.spatial import cKDTree

    n = len(xy)
    pairs = cKDTree(xy).query_pairs(link_m, output_type="ndarray").reshape(-1, 2)
    turn = np.abs(np.angle(np.exp(1j * (yaw[pairs[:, 0]] - yaw[pairs[:, 1]]))))
    pairs = pairs[(np.abs(arc[pairs[:, 0]] - arc[pairs[:, 1]]) > 2 * link_m) & (turn <= math.radians(link_turn_deg))]
    src = np.concatenate([np.arange(n - 1), pairs[:, 0]]).astype(np.int64)
    dst = np.concatenate([np.arange(1, n), pairs[:, 1]]).astype(np.int64)
    w = np.maximum(np.linalg.norm(xy[src] - xy[dst], axis=1), 1e-3)
    size = n + 1  # the last vertex: a source joined to a layer's nodes at their walk lengths so far
    best = np.full(n, np.inf)
    best[0] = 0.0
    for idx in sets:
        into = np.isfinite(best)
        s2 = np.concatenate([src, dst, np.full(into.sum(), n)])
        d2 = np.concatenate([dst, src, np.flatnonzero(into)])
        w2 = np.concatenate([w, w, best[into] + 1e-3])
        g = coo_matrix((w2, (s2, d2)), shape=(size, size)).tocsr()
        dist = dijkstra(g, indices=n)[:n]
        best = np.full(n, np.inf)
        best[idx] = dist[idx]
    end = int(np.argmin(best))
    if not np.isfinite(best[end]):
        return -math.inf
    g = coo_matrix((np.concatenate([w, w]), (np.concatenate([src, dst]), np.concatenate([dst, src]))),
                   shape=(n, n)).tocsr()
    direct = dijkstra(g, indices=0)[end]
    return float(best[end] - len(sets) * 1e-3 - direct)


def _along_exploration(world, quick: bool) -> Scenario | None:
    """A scenario on a stretch of the world's ``[exploration] route`` (generated worlds,
    :mod:`robot_app.sim.worldgen`), from the first of its waypoints that lies outside every GPS dropout zone
    and whose stretch shows two landmarks in order; None when there is none."""
    route = list(getattr(world, "exploration_route", ()) or ())
    for k in range(len(route) - 1):
        x, y = route[k]
        if dropout_zone_at(world, x, y, margin_m=START_MARGIN_M) is not None:
            continue
        sc = _scenario_along(world, np.asarray(route[k:], dtype=np.float64), quick)
        if sc is not None:
            return dataclasses.replace(sc, start_note=f"start ({x:.1f}, {y:.1f}) m: waypoint {k} of the world's "
                                                      "exploration route (no route through a junction qualified)")
    return None


def _scenario_along(world, pts: np.ndarray, quick: bool) -> Scenario | None:
    """:func:`derive_scenario`'s scenario along the polyline ``pts`` (m ENU), or None."""
    seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    length = min(float(s[-1]), 70.0 if quick else 200.0)
    keep = [tuple(p) for p, si in zip(pts, s) if si < length]
    end = (np.interp(length, s, pts[:, 0]), np.interp(length, s, pts[:, 1]))
    route = np.asarray(keep + [end], dtype=np.float64)
    near = _landmarks_along(world, route, max_offset_m=6.0)
    counts: dict[str, int] = {}
    for _, cat, _ in near:
        counts[cat] = counts.get(cat, 0) + 1
    picked, last_s = [], -math.inf
    for arc, cat, _ in near:
        if counts[cat] == 1 and arc - last_s >= 15.0 and arc <= length - 20.0 and cat not in picked:
            picked.append(cat)
            last_s = arc
    picked = picked[:2] if quick else picked[:3]
    if len(picked) < 2:
        return None
    text = f"Go past the {picked[0]}" + "".join(f", then find the {c}" for c in picked[1:-1]) + \
        f", and stop at the {picked[-1]}."
    return Scenario(world.name, tuple(map(tuple, route.tolist())), text)


def _landmarks_along(world, route: np.ndarray, *, max_offset_m: float) -> list[tuple[float, str, str]]:
    """(arc length m, category, name) of objects within ``max_offset_m`` of the route, by arc length."""
    seg_len = np.linalg.norm(np.diff(route, axis=0), axis=1)
    s0 = np.concatenate([[0.0], np.cumsum(seg_len)])
    out = []
    for name, cat, x, y in world.landmarks():
        best = (math.inf, 0.0)
        for i in range(len(route) - 1):
            a, b = route[i], route[i + 1]
            d = b - a
            t = float(np.clip(np.dot([x - a[0], y - a[1]], d) / max(np.dot(d, d), 1e-9), 0.0, 1.0))
            off = math.hypot(x - (a[0] + t * d[0]), y - (a[1] + t * d[1]))
            if off < best[0]:
                best = (off, s0[i] + t * seg_len[i])
        if best[0] <= max_offset_m:
            out.append((best[1], cat, name))
    return sorted(out)
