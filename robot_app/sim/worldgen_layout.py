"""Street layouts of generated worlds (:mod:`robot_app.sim.worldgen`): grid blocks, a ring road with cross
streets, curved streets joined by connectors; cul-de-sacs and yards off them.

Each layout returns streets as polylines (metres ENU, rounded to 1 cm) whose junctions are shared
vertices (the same coordinates in both streets), so that :func:`robot_app.sim.streets.street_graph` finds
them exactly. Every layout is connected and has at least one loop; spurs add dead ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["LAYOUTS", "Street", "make_layout"]

#: The layouts a seed chooses from.
LAYOUTS = ("grid", "ring", "curves")

_NAMES = ("main street", "oak avenue", "mill road", "station road", "park lane", "church street", "market street",
          "river road", "hill street", "school lane", "elm street", "quarry road", "harbour road", "king street",
          "cedar lane", "maple drive", "bridge street", "garden road", "forge lane", "depot road")
_SPUR_NAMES = ("close", "yard", "court", "lane end")


@dataclass
class Street:
    """A street: ``points`` [(x_m, y_m), ...] ENU, ``width_m``."""

    name: str
    width_m: float
    points: list = field(default_factory=list)


def _grid(rng: np.random.Generator, hx: float, hy: float) -> list[Street]:
    nx, ny = ((2, 2), (2, 2), (3, 1), (1, 3))[int(rng.integers(4))]
    w = min(2 * hx, nx * rng.uniform(50.0, min(75.0, 150.0 / nx)))
    h = min(2 * hy, ny * rng.uniform(50.0, min(75.0, 150.0 / ny)))
    xs = np.linspace(-w / 2, w / 2, nx + 1)
    ys = np.linspace(-h / 2, h / 2, ny + 1)
    xs[1:-1] += rng.uniform(-6.0, 6.0, nx - 1)
    ys[1:-1] += rng.uniform(-6.0, 6.0, ny - 1)
    edges = {((i, j), (i + 1, j)) for i in range(nx) for j in range(ny + 1)}
    edges |= {((i, j), (i, j + 1)) for i in range(nx + 1) for j in range(ny)}
    n_nodes = (nx + 1) * (ny + 1)
    for _ in range(int(rng.integers(0, 3))):  # drop a block side or two: T-junctions, a dead end
        order = sorted(edges)
        cand = order[int(rng.integers(len(order)))]
        rest = edges - {cand}
        if _connected(rest, n_nodes) and len(rest) - n_nodes + 1 >= 1:
            edges = rest
    streets = []
    for vertical in (True, False):
        for line in range(nx + 1 if vertical else ny + 1):
            run: list = []
            for k in range(ny if vertical else nx):
                a, b = ((line, k), (line, k + 1)) if vertical else ((k, line), (k + 1, line))
                if (a, b) in edges:
                    run = run or [a]
                    run.append(b)
                elif run:
                    streets.append(run)
                    run = []
            if run:
                streets.append(run)
    width = rng.uniform(2.6, 3.6)
    return [Street("", round(width if len(s) > 2 else width - 0.3, 2), [(xs[i], ys[j]) for i, j in s]) for s in streets]


def _connected(edges, n_nodes: int) -> bool:
    adj: dict = {}
    for a, b in edges:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    if len(adj) != n_nodes:
        return False
    start = next(iter(sorted(adj)))
    seen, todo = {start}, [start]
    while todo:
        for m in adj[todo.pop()]:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return len(seen) == n_nodes


def _ring(rng: np.random.Generator, hx: float, hy: float) -> list[Street]:
    a, b = rng.uniform(50.0, min(72.0, hx)), rng.uniform(45.0, min(68.0, hy))
    phase, wobble = rng.uniform(0, math.tau), rng.uniform(0.0, 0.08)
    n = 24
    ang = np.arange(n) * math.tau / n
    r = 1.0 + wobble * np.sin(2 * ang + phase)
    ring = [(a * r[k] * math.cos(ang[k]), b * r[k] * math.sin(ang[k])) for k in range(n)]
    ring.append(ring[0])
    streets = [Street("ring road", round(rng.uniform(3.0, 4.0), 2), ring)]
    centre = (0.0, 0.0)
    streets.append(Street("", round(rng.uniform(2.6, 3.4), 2), [ring[12], centre, ring[0]]))
    kind = int(rng.integers(3))  # north-south street: through (crossroads), half (T), or none
    if kind == 0:
        streets.append(Street("", round(rng.uniform(2.6, 3.4), 2), [ring[18], centre, ring[6]]))
    elif kind == 1:
        end = ring[6] if rng.random() < 0.5 else ring[18]
        streets.append(Street("", round(rng.uniform(2.6, 3.4), 2), [centre, end]))
    return streets


def _curves(rng: np.random.Generator, hx: float, hy: float) -> list[Street]:
    gap = rng.uniform(55.0, min(85.0, 2 * hy - 40.0))
    amp, wave = rng.uniform(4.0, 12.0), rng.uniform(90.0, 180.0)
    n_conn = int(rng.integers(2, 4))
    stub_w, stub_e = rng.uniform(12.0, 30.0), rng.uniform(12.0, 30.0)
    span = min(2 * hx - stub_w - stub_e, rng.uniform(60.0, 75.0) * (n_conn - 1))
    conn_x = np.round(np.linspace(-span / 2, span / 2, n_conn), 2)
    grid = np.arange(-span / 2 - stub_w, span / 2 + stub_e + 1e-6, 10.0)
    keep = [x for x in grid if np.min(np.abs(conn_x - x)) > 3.0]
    xs = np.unique(np.round(np.concatenate([keep, conn_x]), 2))

    def curve(c: float, phase: float):
        return [(float(x), round(c + amp * math.sin(math.tau * x / wave + phase), 2)) for x in xs]

    south, north = curve(-gap / 2, rng.uniform(0, math.tau)), curve(gap / 2, rng.uniform(0, math.tau))
    widths = rng.uniform(2.8, 3.8, 2)
    streets = [Street("", round(widths[0], 2), south), Street("", round(widths[1], 2), north)]
    idx = {x: k for k, x in enumerate(xs.tolist())}
    for k, x in enumerate(conn_x.tolist()):
        s, n = south[idx[x]], north[idx[x]]
        mid = ((s[0] + n[0]) / 2 + rng.uniform(-6.0, 6.0), (s[1] + n[1]) / 2)
        pts = [s, mid, n]
        ext = min(rng.uniform(15.0, 25.0), hy + 6.0 - n[1])
        if k == n_conn // 2 and rng.random() < 0.6 and ext >= 12.0:  # the middle one crosses on: crossroads
            pts.append((n[0], n[1] + ext))
        streets.append(Street("", round(rng.uniform(2.5, 3.2), 2), pts))
    return streets


def _spurs(rng: np.random.Generator, streets: list[Street], count: int, hx: float, hy: float) -> None:
    """Add up to ``count`` dead-end spurs (cul-de-sacs, yards) square off existing streets: rooted at least
    12 m from any other street, and 14 m clear of the others along their length."""
    for _ in range(count):
        for _try in range(40):
            host = streets[int(rng.integers(len(streets)))]
            seg = int(rng.integers(len(host.points) - 1))
            p0, p1 = np.asarray(host.points[seg]), np.asarray(host.points[seg + 1])
            seg_len = float(np.linalg.norm(p1 - p0))
            if seg_len >= 30.0:
                root = p0 + rng.uniform(12.0, seg_len - 12.0) / seg_len * (p1 - p0)
                t, insert = (p1 - p0) / seg_len, True
            elif seg >= 1:  # an inner vertex of a curved street
                root, insert = p0, False
                t = p1 - np.asarray(host.points[seg - 1])
                t = t / max(float(np.linalg.norm(t)), 1e-9)
            else:
                continue
            others = [q for q in streets if q is not host]
            if others and min(_dist_to_streets(root[None], q) for q in others) < 12.0:
                continue
            n = np.array([-t[1], t[0]]) * (1.0 if rng.random() < 0.5 else -1.0)
            length = rng.uniform(18.0, 32.0)
            end = root + n * length
            if abs(end[0]) > hx + 8 or abs(end[1]) > hy + 8:
                continue
            along = np.linspace(4.0, length, 8)
            probe = root[None, :] + n[None, :] * along[:, None]
            if others and min(_dist_to_streets(probe, q) for q in others) < 14.0:
                continue
            poly = np.asarray(host.points, dtype=np.float64)
            if np.any(_dists(probe, poly) < 0.8 * along):
                continue
            root_t = (round(float(root[0]), 2), round(float(root[1]), 2))
            if insert:
                host.points.insert(seg + 1, root_t)
            streets.append(Street(f"@{_SPUR_NAMES[int(rng.integers(len(_SPUR_NAMES)))]}",
                                  round(rng.uniform(2.5, 3.0), 2),
                                  [root_t if insert else host.points[seg], (float(end[0]), float(end[1]))]))
            break


def _dists(pts: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """(P,) distance (m) of each point to the polyline ``poly``."""
    a, d = poly[:-1], np.diff(poly, axis=0)
    dd = np.maximum((d * d).sum(axis=1), 1e-12)
    t = np.clip(((pts[:, None, :] - a[None]) * d[None]).sum(axis=2) / dd[None], 0.0, 1.0)
    return np.linalg.norm(a[None] + t[..., None] * d[None] - pts[:, None, :], axis=2).min(axis=1)


def _dist_to_streets(pts: np.ndarray, street: Street) -> float:
    return float(_dists(pts, np.asarray(street.points, dtype=np.float64)).min())


def make_layout(rng: np.random.Generator, layout: str, hx: float, hy: float) -> list[Street]:
    """Streets of ``layout`` (one of :data:`LAYOUTS`) within +-(``hx`` + 8) m east and +-(``hy`` + 8) m
    north, turned by a random angle where that fits, named (the longest is "main street", unless it is a
    ring road), longest first; vertices rounded to 1 cm.

    Raises
    ------
    ValueError
        For an unknown layout.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
    streets = {"grid": _grid, "ring": _ring, "curves": _curves}[layout](rng, hx, hy)
    _spurs(rng, streets, int(rng.integers(1, 3)), hx, hy)
    theta = rng.uniform(-0.3, 0.3) + (math.pi / 2 if layout == "curves" and rng.random() < 0.5 else 0.0)
    for angle in (theta, 0.0):  # unturned, every layout fits by construction
        c, s = math.cos(angle), math.sin(angle)
        out = [Street(st.name, st.width_m, [(round(c * x - s * y, 2), round(s * x + c * y, 2)) for x, y in st.points])
               for st in streets]
        allp = np.asarray([p for st in out for p in st.points])
        if np.all(np.abs(allp[:, 0]) <= hx + 8) and np.all(np.abs(allp[:, 1]) <= hy + 8):
            break
    out.sort(key=lambda q: -_length(q))
    pool = [_NAMES[int(k)] for k in rng.permutation(len(_NAMES)) if _NAMES[int(k)] != "main street"]
    main = False
    for st in out:
        if st.name.startswith("@"):
            st.name = f"{pool.pop().split()[0]} {st.name[1:]}"
        elif not st.name:
            st.name = pool.pop() if main else "main street"
            main = True
    return out


def _length(st: Street) -> float:
    p = np.asarray(st.points)
    return float(np.linalg.norm(np.diff(p, axis=0), axis=1).sum())
