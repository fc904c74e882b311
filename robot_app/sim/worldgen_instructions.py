"""Instruction sets for generated worlds, in the shipped ``*-instructions.json`` format.

:func:`generate_instructions` makes the instructions the way ``robot-app eval sim-tune`` makes its
development sets (:func:`robot_app.sim.eval_tune.generate_dev_set`), from the world's ground truth
alone: a stretch of the world's exploration drive, 2-4 landmark categories it passes in the order it
first sees them, and as targets the instances that a perfect category detector's shortest walk visits
(both when two are about as short). The drive is the exploration route sampled every metre with the
route's heading, which is where a map recorded along that route puts its nodes (1 m apart). Each
instruction is then worded with a template in the shipped sets' style ("Drive north past the hydrant
and the lamp post, then stop at the bench.") and a phrasing per landmark drawn from the category's
train and held-out phrasings (:data:`robot_app.sim.views.PHRASES`) and the shipped sets' synonyms
(:data:`SYNONYMS`). Everything is drawn from ``numpy.random.default_rng`` seeded by the given seed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from robot_app.sim.eval_instructions import FORMAT, instructions_from_mapping
from robot_app.sim.eval_truth import TruthParams
from robot_app.sim.eval_tune import generate_dev_set
from robot_app.sim.streets import exploration_route
from robot_app.sim.views import PHRASES
from robot_app.sim.world import World
from robot_app.sim.worldgen import write_text

__all__ = ["SYNONYMS", "route_nodes", "generate_instructions", "instructions_json", "write_instructions"]

#: Wordings of the shipped instruction sets (campus, industrial) beyond the categories' phrasings.
SYNONYMS: dict[str, tuple[str, ...]] = {
    "stop sign": ("red sign", "red octagonal sign"),
    "traffic cone": ("cone", "orange cone", "orange traffic cone", "pylon"),
    "fire hydrant": ("hydrant", "red fire hydrant"),
    "white truck": ("white box truck", "white lorry", "white van"),
    "blue dumpster": ("dumpster", "blue trash bin", "blue skip"),
    "picnic table": ("wooden picnic table",),
    "bench": ("wooden bench", "wooden park bench"),
    "manhole cover": ("manhole",),
    "tree": ("leafy tree", "tall tree"),
    "street lamp": ("lamp post", "street light", "tall street lamp"),
    "red building": ("big red building",),
    "white building": ("long white building",),
    "glass building": ("glass office",),
    "grey building": ("big grey warehouse",),
}
_HEADINGS = ("east", "north", "west", "south")


def route_nodes(route, *, spacing_m: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Poses every ``spacing_m`` along a route: (N, 2) positions (m ENU) and (N,) headings (rad, CCW
    from east), each the heading of the route segment it lies on.

    Raises
    ------
    ValueError
        If the route has fewer than 2 distinct points or ``spacing_m`` is not positive.
    """
    pts = np.asarray(route, dtype=np.float64).reshape(-1, 2)
    pts = pts[np.concatenate([[True], np.linalg.norm(np.diff(pts, axis=0), axis=1) > 1e-9])]
    if len(pts) < 2 or not spacing_m > 0:
        raise ValueError(f"route_nodes: need >= 2 distinct points and spacing_m > 0, got {len(pts)}, {spacing_m}")
    seg = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    s = np.arange(0.0, cum[-1] + 1e-9, spacing_m)
    k = np.clip(np.searchsorted(cum, s, side="right") - 1, 0, len(seg) - 1)
    xy = np.stack([np.interp(s, cum, pts[:, 0]), np.interp(s, cum, pts[:, 1])], axis=1)
    d = np.diff(pts, axis=0)[k]
    return xy, np.arctan2(d[:, 1], d[:, 0])


def _strip(phrase: str) -> str:
    for art in ("a ", "an ", "the "):
        if phrase.startswith(art):
            return phrase[len(art):]
    return phrase


def _phrasings(category: str) -> list[str]:
    train, held_out = PHRASES[category]
    out: list[str] = []
    for p in (*train, *held_out, *SYNONYMS.get(category, ())):
        p = _strip(p)
        if p not in out:
            out.append(p)
    return out


def _word(rng: np.random.Generator, phrases: list[str], yaw_rad: float) -> str:
    """The instruction's text for landmark ``phrases`` in order, the robot starting with heading ``yaw_rad``."""
    the = [f"the {p}" for p in phrases]
    first, mids, last = the[0], the[1:-1], the[-1]
    then = "".join(f", then {m}" for m in mids)
    listed = first if len(the) == 2 else ", ".join(the[:-2]) + f" and {the[-2]}"
    head = _HEADINGS[int(round(yaw_rad / (math.pi / 2))) % 4]
    go = str(rng.choice(["Go", "Drive", f"Drive {head}", f"Head {head}"]))
    k = int(rng.integers(6))
    if k == 0:
        text = f"{go} past {first}{then}{',' if mids else ''} and stop at {last}."
    elif k == 1:
        text = f"Pass {listed}, then go to {last}."
    elif k == 2:
        text = f"{go} past {listed}, then stop at {last}."
    elif k == 3:
        text = f"Drive by {first}{then}{',' if mids else ''} and finish at {last}."
    elif k == 4:
        text = f"Find {first}{then}, then go to {last}."
    else:
        text = f"{go} to {first}{then}{',' if mids else ''} and stop at {last}."
    return text[0].upper() + text[1:]


def generate_instructions(world: World, seed: int, *, n: int = 20, params: TruthParams = TruthParams(),
                          speed_mps: float = 1.0) -> dict:
    """An instruction set (the parsed JSON of the shipped format) for ``world`` (module docstring).

    Parameters
    ----------
    world : World
        A loaded world; its exploration route is ``[exploration] route`` or else
        :func:`robot_app.sim.streets.exploration_route`.
    seed : int
        Seed of the draws (>= 0).
    n : int
        Instructions wanted (1-500); fewer come back only where the world offers too few landmarks.
    params : TruthParams
        Ground-truth viewing rules (as ``eval sim``).
    speed_mps : float
        ``exploration.speed_mps`` of the set (0.1-5 m/s).

    Raises
    ------
    ValueError
        A bad ``seed``, ``n`` or ``speed_mps``, or no instruction could be made for the world.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    if not 1 <= n <= 500:
        raise ValueError(f"n: expected 1-500 instructions, got {n}")
    if not 0.1 <= speed_mps <= 5.0:
        raise ValueError(f"speed_mps: expected 0.1-5 m/s, got {speed_mps}")
    route = [list(p) for p in exploration_route(world)]
    xy, yaw = route_nodes(route)
    dev = generate_dev_set(world, None, xy, yaw, n=n, seed=int(seed), params=params)
    if not dev:
        raise ValueError(f"world {world.name!r}: no instruction could be made (too few landmarks along the route)")
    rng = np.random.default_rng([int(seed), 1])
    items = []
    for i, d in enumerate(dev):
        phrases = [str(rng.choice(_phrasings(c))) for c in d.categories]
        x, y = xy[d.start_node]
        items.append({"id": f"{world.name}-{i + 1:02d}", "text": _word(rng, phrases, float(yaw[d.start_node])),
                      "start": [round(float(x), 2), round(float(y), 2),
                                round(math.degrees(float(yaw[d.start_node])) % 360.0, 1)],
                      "landmarks": [{"phrase": p, "targets": list(t)} for p, t in zip(phrases, d.targets)]})
    doc = {"format": FORMAT, "version": 1, "world": world.name,
           "exploration": {"route": route, "speed_mps": float(speed_mps)}, "instructions": items}
    instructions_from_mapping(doc, origin=f"<instructions of {world.name}>", world=world)
    return doc


def instructions_json(doc: dict) -> str:
    """``doc`` as the shipped files lay it out: one instruction per line (deterministic bytes)."""
    head = {k: doc[k] for k in ("format", "version", "world")}
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items()]
    lines.append(f'  "exploration": {json.dumps(doc["exploration"])},')
    lines.append('  "instructions": [')
    lines += [f"    {json.dumps(item)}" + ("," if i < len(doc["instructions"]) - 1 else "")
              for i, item in enumerate(doc["instructions"])]
    return "\n".join(lines + ["  ]", "}"]) + "\n"


def write_instructions(path: str | Path, doc: dict, *, overwrite: bool = False) -> Path:
    """Write :func:`instructions_json` of ``doc`` to ``path``. Raises as
    :func:`robot_app.sim.worldgen.write_text` (FileExistsError, OSError)."""
    return write_text(path, instructions_json(doc), overwrite=overwrite)
