"""Where the demo can drive in any world: the path network, a start with GPS, and exploration routes.

Geometry only, in the world's local ENU frame (x east, y north, metres; yaw counter-clockwise from
east, radians; see :mod:`robot_app.sim.world`). Every function takes a loaded
:class:`~robot_app.sim.world.World`, so shipped, hand-written and generated worlds are treated alike.

- :func:`path_network`: the world's paths as a graph, split where paths cross or one ends on another
  (a vertex of degree >= 3 is a junction).
- :func:`demo_start`: the pose the demo starts from: on a path, outside every ``[[gps_dropouts]]``
  zone (the onboard app needs a GPS fix there before it drives).
- :func:`dropout_zone_at` / :func:`no_gps_fix_message`: which zone a point lies in; the one-line
  failure of a start without a fix.
- :func:`junction_routes` / :func:`chain_routes`: candidate exploration routes from the start (out
  along a branch at a junction and back, then on; or straight on), as polylines with the arc lengths
  where their legs begin, for :mod:`robot_app.demo.scenario` to choose an instruction on.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from robot_app.demo.stages import DemoInputError

__all__ = ["PathNetwork", "RouteCandidate", "path_network", "demo_start", "dropout_zone_at",
           "no_gps_fix_message", "junction_routes", "chain_routes", "START_MARGIN_M"]

#: the start keeps this far (m) outside every GPS dropout zone (the plant's zones are exact discs; the
#: robot may creep a little before its first fix is used)
START_MARGIN_M = 2.0
_SNAP_M = 0.5


@dataclass(frozen=True)
class PathNetwork:
    """The paths as an undirected graph: ``xy`` (V, 2) vertex positions m ENU, ``edges`` (E, 2) vertex
    ids, ``length_m`` (E,), ``width_m`` (E,) and ``path`` (E,) the name of the path each edge is on."""

    xy: np.ndarray
    edges: np.ndarray
    length_m: np.ndarray
    width_m: np.ndarray
    path: tuple

    def incident(self, v: int) -> list[tuple[int, int]]:
        """(edge id, other vertex) of the edges at vertex ``v``."""
        out = []
        for e, (a, b) in enumerate(self.edges.tolist()):
            if a == v:
                out.append((e, b))
            elif b == v:
                out.append((e, a))
        return out

    def degree(self, v: int) -> int:
        return len(self.incident(v))


@dataclass(frozen=True)
class RouteCandidate:
    """An exploration route: ``points`` (N, 2) m ENU from the start; ``legs`` the arc lengths (m) where
    its legs begin (``approach`` 0, ``branch`` at the junction, ``back`` at the branch's end, ``onward``
    back at the junction; a chain route has ``approach`` only); ``junction`` (x, y) m or None."""

    points: np.ndarray
    legs: dict
    junction: tuple | None = None

    @property
    def length_m(self) -> float:
        return float(np.linalg.norm(np.diff(self.points, axis=0), axis=1).sum())


def _cross(a, b) -> float:
    return float(a[0] * b[1] - a[1] * b[0])


def path_network(world) -> PathNetwork:
    """The world's paths as a graph (see :class:`PathNetwork`): every path segment is split where another
    crosses it or ends on it (within 0.5 m), and vertices closer than 0.5 m are one.

    Raises
    ------
    DemoInputError
        The world has no path.
    """
    segs = []
    for p in world.paths:
        pts = np.asarray(p.points, dtype=np.float64)
        for a, b in zip(pts[:-1], pts[1:]):
            if np.linalg.norm(b - a) > 1e-6:
                segs.append((a, b, float(p.width_m), p.name))
    if not segs:
        raise DemoInputError(f"world {world.name!r} has no path to explore")
    verts: list[np.ndarray] = []

    def vertex(pt: np.ndarray) -> int:
        for i, q in enumerate(verts):
            if abs(q[0] - pt[0]) <= _SNAP_M and abs(q[1] - pt[1]) <= _SNAP_M and np.linalg.norm(q - pt) <= _SNAP_M:
                return i
        verts.append(np.asarray(pt, dtype=np.float64))
        return len(verts) - 1

    edges: dict[tuple[int, int], tuple[float, float, str]] = {}
    for i, (p, q, width, name) in enumerate(segs):
        r = q - p
        rr = float(r @ r)
        ts = [0.0, 1.0]
        for j, (a, b, _, _) in enumerate(segs):
            if j == i:
                continue
            s = b - a
            den = _cross(r, s)
            if abs(den) > 1e-9:
                t, u = _cross(a - p, s) / den, _cross(a - p, r) / den
                if -1e-9 <= t <= 1 + 1e-9 and -1e-9 <= u <= 1 + 1e-9:
                    ts.append(min(max(t, 0.0), 1.0))
            for e in (a, b):  # an end of another segment on this one (a T-junction)
                t = float((e - p) @ r) / rr
                if 0.0 <= t <= 1.0 and np.linalg.norm(p + t * r - e) <= _SNAP_M:
                    ts.append(t)
        ts = sorted(ts)
        cuts = [p + t * r for t in ts]
        for c0, c1 in zip(cuts[:-1], cuts[1:]):
            u, v = vertex(c0), vertex(c1)
            if u != v:
                key = (min(u, v), max(u, v))
                if key not in edges:
                    edges[key] = (float(np.linalg.norm(verts[v] - verts[u])), width, name)
    keys = sorted(edges)
    return PathNetwork(np.asarray(verts), np.asarray(keys, dtype=np.int64).reshape(-1, 2),
                       np.asarray([edges[k][0] for k in keys]), np.asarray([edges[k][1] for k in keys]),
                       tuple(edges[k][2] for k in keys))


def dropout_zone_at(world, x_m: float, y_m: float, *, margin_m: float = 0.0) -> int | None:
    """Index in ``world.gps_dropouts`` of the first zone that (x, y) m ENU lies in (or within ``margin_m``
    of); None when it lies outside every zone."""
    for i, z in enumerate(world.gps_dropouts):
        if math.hypot(x_m - z.center[0], y_m - z.center[1]) <= z.radius_m + margin_m:
            return i
    return None


def no_gps_fix_message(world, x_m: float, y_m: float, *, waited_s: float | None = None) -> str:
    """One line: no GPS fix at the start (x, y) m ENU, naming the dropout zone (index, centre, radius) it
    lies in, else (after ``waited_s`` s) that the receiver gave none though the start is outside every zone."""
    head = f"no GPS fix at the start ({x_m:.1f}, {y_m:.1f}) m of world {world.name!r}"
    i = dropout_zone_at(world, x_m, y_m)
    if i is not None:
        z = world.gps_dropouts[i]
        return (f"{head}: it lies in GPS dropout zone gps_dropouts[{i}] (centre ({z.center[0]:g}, {z.center[1]:g}) m, "
                f"radius {z.radius_m:g} m); start outside every zone")
    waited = f" within {waited_s:.0f} s" if waited_s is not None else ""
    return f"{head}: the receiver reported none{waited}, though the start lies outside every GPS dropout zone"


def _project(net: PathNetwork, x: float, y: float) -> tuple[int, float, float]:
    """(edge, distance m from the edge's first vertex along it, offset m) of the point of the network
    nearest (x, y)."""
    best = (0, 0.0, math.inf)
    pt = np.array([x, y])
    for e, (a, b) in enumerate(net.edges.tolist()):
        pa, pb = net.xy[a], net.xy[b]
        d = pb - pa
        t = float(np.clip((pt - pa) @ d / max(float(d @ d), 1e-12), 0.0, 1.0))
        off = float(np.linalg.norm(pa + t * d - pt))
        if off < best[2]:
            best = (e, t * net.length_m[e], off)
    return best


def _point_on(net: PathNetwork, e: int, s: float) -> np.ndarray:
    a, b = net.edges[e]
    return net.xy[a] + (net.xy[b] - net.xy[a]) * (s / net.length_m[e])


def demo_start(world, *, margin_m: float = START_MARGIN_M) -> tuple[float, float, float]:
    """The demo's start pose (x_m, y_m, yaw_rad) ENU: on a path's centre line and at least ``margin_m``
    outside every GPS dropout zone.

    The world's ``start`` (projected onto the nearest path) when it lies on a path (within half the
    path's width + 0.5 m) and outside every zone; otherwise the point of the path network nearest the
    world's start that is (sampled every 0.5 m). The yaw runs along the path, in the direction nearer
    the world's start yaw.

    Raises
    ------
    DemoInputError
        The world has no path, or every point of its paths lies in (or within ``margin_m`` of) a GPS
        dropout zone.
    """
    net = path_network(world)
    x0, y0, yaw0 = world.start
    e, s, off = _project(net, x0, y0)
    p = _point_on(net, e, s)
    if off > net.width_m[e] / 2 + _SNAP_M or dropout_zone_at(world, p[0], p[1], margin_m=margin_m) is not None:
        best = None
        for k in range(len(net.edges)):
            n = max(2, int(math.ceil(net.length_m[k] / 0.5)) + 1)
            for sk in np.linspace(0.0, net.length_m[k], n):
                q = _point_on(net, k, float(sk))
                if dropout_zone_at(world, q[0], q[1], margin_m=margin_m) is None:
                    d = math.hypot(q[0] - x0, q[1] - y0)
                    if best is None or d < best[0] - 1e-9:
                        best = (d, k, float(sk))
        if best is None:
            raise DemoInputError(f"world {world.name!r}: every point of its paths lies within {margin_m:g} m of a "
                                 "GPS dropout zone: no start with a GPS fix")
        _, e, s = best
        p = _point_on(net, e, s)
    a, b = net.edges[e]
    heading = math.atan2(*(net.xy[b] - net.xy[a])[::-1])
    if math.cos(heading - yaw0) < 0:
        heading = math.atan2(math.sin(heading + math.pi), math.cos(heading + math.pi))
    return float(p[0]), float(p[1]), float(heading)


# -- routes on the network ------------------------------------------------------------------------------------
class _Graph:
    """The network with the start inserted as its own vertex (splitting the edge it lies on)."""

    def __init__(self, net: PathNetwork, start_xy: tuple):
        self.net = net
        self.xy = [tuple(map(float, v)) for v in net.xy]
        self.adj: dict[int, list[tuple[int, float]]] = {i: [] for i in range(len(self.xy))}
        e, s, _ = _project(net, *start_xy)
        a, b = (int(v) for v in net.edges[e])
        length = float(net.length_m[e])
        for k, (u, v) in enumerate(net.edges.tolist()):
            if k != e:
                self._link(u, v, float(net.length_m[k]))
        if s <= _SNAP_M:
            self.start = a
            self._link(a, b, length)
        elif s >= length - _SNAP_M:
            self.start = b
            self._link(a, b, length)
        else:
            self.start = len(self.xy)
            self.xy.append(tuple(map(float, _point_on(net, e, s))))
            self.adj[self.start] = []
            self._link(a, self.start, s)
            self._link(self.start, b, length - s)

    def _link(self, u: int, v: int, w: float) -> None:
        self.adj[u].append((v, w))
        self.adj[v].append((u, w))

    def shortest_from_start(self) -> tuple[dict, dict]:
        dist, prev = {self.start: 0.0}, {}
        heap = [(0.0, self.start)]
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist.get(u, math.inf):
                continue
            for v, w in self.adj[u]:
                if d + w < dist.get(v, math.inf) - 1e-9:
                    dist[v], prev[v] = d + w, u
                    heapq.heappush(heap, (d + w, v))
        return dist, prev

    def turn_deg(self, a: int, b: int, c: int) -> float:
        """The turn (degrees, 0-180) from the way a -> b to the way b -> c."""
        (ax, ay), (bx, by), (cx, cy) = self.xy[a], self.xy[b], self.xy[c]
        d = math.atan2(cy - by, cx - bx) - math.atan2(by - ay, bx - ax)
        return abs(math.degrees(math.atan2(math.sin(d), math.cos(d))))

    def walk(self, frm: int, first: int, length_m: float, avoid: int | None = None) -> list[tuple]:
        """Points from vertex ``frm`` along the edge to ``first``, then on through each vertex by the least
        turn (never straight back), until ``length_m`` m or a dead end."""
        pts = [self.xy[frm]]
        u, v, left = frm, first, length_m
        seen = {frm}
        while True:
            a, b = np.asarray(self.xy[u]), np.asarray(self.xy[v])
            d = float(np.linalg.norm(b - a))
            if d >= left:
                pts.append(tuple(map(float, a + (b - a) * (left / d))))
                return pts
            pts.append(self.xy[v])
            left -= d
            seen.add(v)
            head = math.atan2(b[1] - a[1], b[0] - a[0])
            options = []
            for w, _ in self.adj[v]:
                if w == u or w in seen or w == avoid:
                    continue
                c = np.asarray(self.xy[w])
                turn = abs(math.atan2(math.sin(math.atan2(c[1] - b[1], c[0] - b[0]) - head),
                                      math.cos(math.atan2(c[1] - b[1], c[0] - b[0]) - head)))
                options.append((turn, w))
            if not options or min(options)[0] > math.radians(100):
                return pts
            u, v = v, min(options)[1]


def _polyline_length(pts) -> float:
    arr = np.asarray(pts, dtype=np.float64)
    return float(np.linalg.norm(np.diff(arr, axis=0), axis=1).sum()) if len(arr) > 1 else 0.0


def _join(*parts) -> np.ndarray:
    out: list = []
    for part in parts:
        for p in part:
            if not out or math.hypot(p[0] - out[-1][0], p[1] - out[-1][1]) > 1e-6:
                out.append(tuple(p))
    return np.asarray(out, dtype=np.float64)


def junction_routes(world, start: tuple, *, max_approach_m: float = 150.0, branch_m: float = 40.0,
                    onward_m: float = 70.0, min_branch_m: float = 15.0, min_onward_m: float = 35.0,
                    max_through_turn_deg: float = 30.0) -> list[RouteCandidate]:
    """Routes from ``start`` (x_m, y_m[, yaw]) through a junction of the path network: the shortest way
    along the paths to a junction at most ``max_approach_m`` m away (the ``approach``), out along one of
    its other paths for up to ``branch_m`` m and back (``branch``, ``back``), then on for up to
    ``onward_m`` m (``onward``) along the path that continues the approach within
    ``max_through_turn_deg`` degrees, each leg following the paths by the least turn.

    A landmark seen only on the branch makes the instruction's best walk a detour from the shortest
    one to its goal (LM-Nav Fig. 5); the map has that shorter walk only where the approach and the
    onward leg meet facing the same way (the VNM joins images that look alike), hence straight on
    through the junction (any onward leg when the start is the junction). Branches shorter than
    ``min_branch_m`` and onward legs shorter than ``min_onward_m`` are left out. Returns [] when no
    junction in reach allows such a route.
    """
    g = _Graph(path_network(world), start[:2])
    dist, prev = g.shortest_from_start()
    out = []
    for j in sorted(dist, key=lambda v: (dist[v], v)):
        if dist[j] > max_approach_m or len(g.adj[j]) < 3:
            continue
        chain = [j]
        while chain[-1] != g.start:
            chain.append(prev[chain[-1]])
        approach = [g.xy[v] for v in reversed(chain)]
        came = chain[1] if len(chain) > 1 else None
        for b, _ in g.adj[j]:
            if b == came:
                continue
            branch = g.walk(j, b, branch_m, avoid=came)
            if _polyline_length(branch) < min_branch_m:
                continue
            for o, _ in g.adj[j]:
                if o in (b, came) or (came is not None and g.turn_deg(came, j, o) > max_through_turn_deg):
                    continue
                onward = g.walk(j, o, onward_m)
                if _polyline_length(onward) < min_onward_m:
                    continue
                a_len, b_len = _polyline_length(approach), _polyline_length(branch)
                pts = _join(approach, branch, branch[::-1], onward)
                out.append(RouteCandidate(pts, {"approach": 0.0, "branch": a_len, "back": a_len + b_len,
                                                "onward": a_len + 2 * b_len}, junction=g.xy[j]))
    return out


def chain_routes(world, start: tuple, *, length_m: float) -> list[RouteCandidate]:
    """Routes of up to ``length_m`` m from ``start`` (x_m, y_m[, yaw]) along the paths by the least turn,
    one per direction the start's path leaves in (the start's yaw direction first when given)."""
    g = _Graph(path_network(world), start[:2])
    x, y = g.xy[g.start]
    firsts = [v for v, _ in g.adj[g.start]]
    if len(start) > 2:
        yaw = start[2]
        firsts.sort(key=lambda v: -math.cos(math.atan2(g.xy[v][1] - y, g.xy[v][0] - x) - yaw))
    out = []
    for v in firsts:
        pts = _join(g.walk(g.start, v, length_m))
        if len(pts) >= 2:
            out.append(RouteCandidate(pts, {"approach": 0.0}))
    return out
