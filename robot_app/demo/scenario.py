"""What the demo does in a world: the exploration route, the default instruction, the task job's places.

A :class:`Scenario` is fixed per shipped world (hand-picked so the instruction's landmarks are seen
along the explored route, in order, with the same categories elsewhere in the world as distractors);
a world file without a scenario gets one derived from its first path (:func:`derive_scenario`).
Landmark phrases are tied to world categories by :func:`phrase_categories` (head noun plus modifiers),
which is also how an ``--instruction`` naming something the world does not have is refused.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Scenario", "DemoInputError", "scenario_for", "phrase_categories", "derive_scenario",
           "TASK_GOAL", "TASK_START"]

#: The LASP task job of stage 5: from the yard (where the route ended), inspect site B; the gate between
#: them is closed in the world, which the robot's domain does not model
#: (robot_app/data/lasp/jackal/robot_domain.pddl). One drive of about 8 m once the gate is open.
TASK_GOAL = "(inspected site-b)"
TASK_START = "yard"


class DemoInputError(ValueError):
    """The demo's input cannot be used (unknown world, an instruction naming what the world lacks)."""


@dataclass(frozen=True)
class Scenario:
    """Route (N, 2) m ENU of the world, the default instruction, and the exploration speed (m/s)."""

    world: str
    route: tuple
    instruction: str
    speed_mps: float = 1.0  # the sim VNM's training speed: map edges in its time steps


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
    """The scenario of a loaded world (shipped one, else derived), with ``instruction`` if given.

    Raises
    ------
    DemoInputError
        A world without paths long enough to explore.
    """
    sc = _SCENARIOS.get((world.name, quick)) or derive_scenario(world, quick=quick)
    if instruction is not None:
        sc = Scenario(sc.world, sc.route, instruction, sc.speed_mps)
    return sc


def derive_scenario(world, *, quick: bool = False) -> Scenario:
    """A scenario for any world: its first path (the first 70 m when ``quick``), and an instruction
    naming categories that occur once near that path, in driving order, the last one at least 20 m
    before the route's end (room for the task job's places). Where the first path has too few such
    landmarks and the world has an ``[exploration] route`` (generated worlds,
    :mod:`robot_app.sim.worldgen`), the first stretch of that route, from one of its waypoints, that has them.

    Raises
    ------
    DemoInputError
        If the world has no path, or fewer than two distinct landmark categories lie near it.
    """
    if not world.paths:
        raise DemoInputError(f"world {world.name!r} has no path to explore")
    route = list(getattr(world, "exploration_route", ()))
    for pts in [world.paths[0].points] + [route[k:] for k in range(len(route) - 1)]:
        sc = _scenario_along(world, np.asarray(pts, dtype=np.float64), quick)
        if sc is not None:
            return sc
    raise DemoInputError(f"world {world.name!r}: fewer than two distinct landmarks near the path "
                         f"{world.paths[0].name!r}" + (" or along its exploration route" if route else "")
                         + "; give --instruction")


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
