"""The street network of a world's paths, and an exploration route that drives every street.

:func:`street_graph` turns a world's paths (polylines, metres ENU) into a graph: its nodes are the
paths' ends and the places where paths meet (a shared vertex, one path's end on another path, or two
segments crossing), its edges the stretches of path between consecutive nodes. Points closer than
``snap_m`` are one node. A node with three or more edge ends is a junction (T-junction: 3, crossroads: 4),
one with a single edge end a dead end (cul-de-sac, spur).

:func:`exploration_route` is a scripted drive for :func:`robot_app.sim.explore.record_exploration`: a
closed-form greedy walk over the graph that takes an undriven street at every node where there is one
(dead-end spurs first, then the one straightest ahead), else the shortest way to the nearest node that
still has one, until every edge is driven. Where the network has loops the walk comes back to places
it passed before (the loop closures a map builder needs); spurs are driven out and back.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from robot_app.sim.world import World

__all__ = ["StreetEdge", "StreetGraph", "street_graph", "covering_walk", "walk_points", "exploration_route"]


@dataclass(frozen=True)
class StreetEdge:
    """A stretch of path from node ``a`` to node ``b``: ``points`` (M, 2) m ENU from a to b, ``width_m``."""

    a: int
    b: int
    points: np.ndarray
    width_m: float
    path: str

    @property
    def length_m(self) -> float:
        return float(np.linalg.norm(np.diff(self.points, axis=0), axis=1).sum())


@dataclass(frozen=True)
class StreetGraph:
    """Nodes (N, 2) m ENU and edges of a street network (module docstring)."""

    nodes: np.ndarray
    edges: tuple

    def degree(self) -> np.ndarray:
        """(N,) int: edge ends at each node (a loop edge counts twice)."""
        deg = np.zeros(len(self.nodes), dtype=np.int64)
        for e in self.edges:
            deg[e.a] += 1
            deg[e.b] += 1
        return deg

    def junctions(self) -> np.ndarray:
        """(J, 2) m ENU: nodes where three or more street ends meet."""
        return self.nodes[self.degree() >= 3]

    def dead_ends(self) -> np.ndarray:
        """(D,) int: nodes with a single street end."""
        return np.flatnonzero(self.degree() == 1)

    def connected(self) -> bool:
        """Whether every node can be reached from every other along the edges."""
        if len(self.nodes) == 0:
            return True
        adj: dict[int, set] = {i: set() for i in range(len(self.nodes))}
        for e in self.edges:
            adj[e.a].add(e.b)
            adj[e.b].add(e.a)
        seen, todo = {0}, [0]
        while todo:
            for m in adj[todo.pop()]:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        return len(seen) == len(self.nodes)


def _nearest_on(poly: np.ndarray, pts: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each point of ``pts`` (P, 2): the segment index, parameter t in [0, 1] and distance (m) of
    its nearest point on the polyline ``poly`` (M, 2)."""
    a, d = poly[:-1], np.diff(poly, axis=0)  # (S, 2)
    dd = np.maximum((d * d).sum(axis=1), 1e-12)
    t = np.clip(((pts[:, None, :] - a[None]) * d[None]).sum(axis=2) / dd[None], 0.0, 1.0)  # (P, S)
    dist = np.linalg.norm(a[None] + t[..., None] * d[None] - pts[:, None, :], axis=2)
    m = np.argmin(dist, axis=1)
    rows = np.arange(len(pts))
    return m, t[rows, m], dist[rows, m]


def _crossings(p: np.ndarray, q: np.ndarray) -> list[tuple[int, float, int, float]]:
    """(segment of p, t, segment of q, u) where a segment of polyline p properly crosses one of q."""
    a, r = p[:-1, None, :], np.diff(p, axis=0)[:, None, :]
    c, s = q[None, :-1, :], np.diff(q, axis=0)[None, :, :]
    den = r[..., 0] * s[..., 1] - r[..., 1] * s[..., 0]
    ok = np.abs(den) > 1e-12
    den = np.where(ok, den, 1.0)
    w = c - a
    t = (w[..., 0] * s[..., 1] - w[..., 1] * s[..., 0]) / den
    u = (w[..., 0] * r[..., 1] - w[..., 1] * r[..., 0]) / den
    eps = 1e-9
    hit = ok & (t > eps) & (t < 1 - eps) & (u > eps) & (u < 1 - eps)
    return [(int(m), float(t[m, n]), int(n), float(u[m, n])) for m, n in zip(*np.nonzero(hit))]


def street_graph(paths, *, snap_m: float = 0.5) -> StreetGraph:
    """The street graph of ``paths`` (:class:`~robot_app.sim.world.PathSpec` s, or a :class:`World`).

    Raises
    ------
    ValueError
        If ``snap_m`` is not positive.
    """
    if not snap_m > 0:
        raise ValueError(f"snap_m: expected > 0, got {snap_m}")
    specs = list(paths.paths if isinstance(paths, World) else paths)
    polys = [np.asarray(p.points, dtype=np.float64) for p in specs]
    # cuts[i]: (segment index, t) positions along path i where it must be split
    cuts: list[set] = [{(0, 0.0), (len(q) - 2, 1.0)} for q in polys]
    boxes = [(q.min(axis=0) - snap_m, q.max(axis=0) + snap_m) for q in polys]
    for i, pi in enumerate(polys):
        last = len(pi) - 1
        for j, pj in enumerate(polys):
            if i == j or np.any(boxes[i][0] > boxes[j][1]) or np.any(boxes[j][0] > boxes[i][1]):
                continue
            # a vertex of path i on path j: one of its ends (T-junction), a vertex they share, or a touch
            m, t, dist = _nearest_on(pj, pi)
            shared = np.min(np.linalg.norm(pi[:, None, :] - pj[None], axis=2), axis=1) <= snap_m
            for k in np.flatnonzero((dist <= snap_m) & (shared | (dist <= 1e-6)
                                                        | (np.arange(len(pi)) % last == 0))):
                cuts[j].add((int(m[k]), float(t[k])))
                cuts[i].add((min(int(k), last - 1), 0.0 if k < last else 1.0))
            if i < j:
                for m_i, t_i, m_j, t_j in _crossings(pi, pj):
                    cuts[i].add((m_i, t_i))
                    cuts[j].add((m_j, t_j))
    nodes: list[np.ndarray] = []

    def node_of(p: np.ndarray) -> int:
        for idx, q in enumerate(nodes):
            if float(np.linalg.norm(q - p)) <= snap_m:
                return idx
        nodes.append(p.copy())
        return len(nodes) - 1

    edges = []
    for spec, poly, cut in zip(specs, polys, cuts):
        marks = [(m, t, poly[m] if t <= 0.0 else poly[m + 1] if t >= 1.0 else poly[m] + t * (poly[m + 1] - poly[m]))
                 for m, t in sorted(cut)]
        ids = [node_of(p) for _, _, p in marks]
        for (m0, _, p0), (m1, _, p1), a, b in zip(marks[:-1], marks[1:], ids[:-1], ids[1:]):
            pts = np.asarray([p0, *poly[m0 + 1:m1 + 1], p1], dtype=np.float64)
            pts = pts[np.concatenate([[True], np.linalg.norm(np.diff(pts, axis=0), axis=1) > 1e-9])]
            if len(pts) < 2 or (a == b and float(np.linalg.norm(np.diff(pts, axis=0), axis=1).sum()) < 2 * snap_m):
                continue
            edges.append(StreetEdge(a, b, pts, float(spec.width_m), spec.name))
    return StreetGraph(np.asarray(nodes, dtype=np.float64).reshape(-1, 2), tuple(edges))


def _heading(pts: np.ndarray, at_end: bool) -> float:
    d = pts[-1] - pts[-2] if at_end else pts[1] - pts[0]
    return math.atan2(d[1], d[0])


def covering_walk(graph: StreetGraph, start: int) -> list[tuple[int, bool]]:
    """The greedy covering walk of :func:`exploration_route` as (edge index, reversed) steps from node
    ``start``. Covers the edges of ``start``'s connected part.

    Raises
    ------
    ValueError
        If ``start`` is not a node of the graph.
    """
    if not 0 <= start < len(graph.nodes):
        raise ValueError(f"start: node {start} is not in the graph ({len(graph.nodes)} nodes)")
    inc: dict[int, list[int]] = {i: [] for i in range(len(graph.nodes))}
    for k, e in enumerate(graph.edges):
        inc[e.a].append(k)
        if e.b != e.a:
            inc[e.b].append(k)
    deg = graph.degree()
    done = [False] * len(graph.edges)
    walk: list[tuple[int, bool]] = []
    here, heading = start, None

    def far(k: int, node: int) -> int:
        e = graph.edges[k]
        return e.b if e.a == node else e.a

    def step(k: int, node: int) -> tuple[int, float]:
        e = graph.edges[k]
        rev = e.a != node
        walk.append((k, rev))
        pts = e.points[::-1] if rev else e.points
        return far(k, node), _heading(pts, True)

    while True:
        todo = [k for k in inc[here] if not done[k]]
        if todo:
            def rank(k: int) -> tuple:
                e = graph.edges[k]
                pts = e.points if e.a == here else e.points[::-1]
                turn = 0.0 if heading is None else abs(math.remainder(_heading(pts, False) - heading, math.tau))
                return (deg[far(k, here)] != 1, round(turn, 6), k)

            k = min(todo, key=rank)
            done[k] = True
            here, heading = step(k, here)
            continue
        # the shortest way (Dijkstra over edge lengths) to the nearest node with an undriven edge
        dist, prev = {here: 0.0}, {}
        heap, target = [(0.0, here)], None
        while heap:
            d, u = heapq.heappop(heap)
            if d > dist.get(u, math.inf):
                continue
            if any(not done[k] for k in inc[u]):
                target = u
                break
            for k in inc[u]:
                v = far(k, u)
                nd = d + graph.edges[k].length_m
                if nd < dist.get(v, math.inf) - 1e-9:
                    dist[v], prev[v] = nd, (u, k)
                    heapq.heappush(heap, (nd, v))
        if target is None:
            return walk
        back = []
        while target != here:
            u, k = prev[target]
            back.append((k, u))
            target = u
        for k, u in reversed(back):
            here, heading = step(k, u)


def exploration_route(world: World, *, start_xy: tuple | None = None) -> list[tuple[float, float]]:
    """Waypoints (x_m, y_m) ENU of a drive over every street of ``world`` (module docstring).

    The world's own ``[exploration] route`` when it has one; otherwise the covering walk from the street
    node nearest ``start_xy`` (default: the world's start position). Only the streets connected to that
    node are driven.

    Raises
    ------
    ValueError
        If the world has no paths.
    """
    if world.exploration_route and start_xy is None:
        return [tuple(p) for p in world.exploration_route]
    if not world.paths:
        raise ValueError(f"world {world.name!r} has no paths to explore")
    g = street_graph(world)
    sx, sy = world.start[:2] if start_xy is None else start_xy
    return walk_points(g, int(np.argmin(np.hypot(g.nodes[:, 0] - sx, g.nodes[:, 1] - sy))))


def walk_points(graph: StreetGraph, start: int) -> list[tuple[float, float]]:
    """Waypoints (x_m, y_m) of :func:`covering_walk` from node ``start``: the node, then each driven
    edge's points after its first.

    Raises
    ------
    ValueError
        If ``start`` is not a node of the graph.
    """
    pts = [tuple(map(float, graph.nodes[start]))]
    for k, rev in covering_walk(graph, start):
        e = graph.edges[k].points
        for p in (e[::-1] if rev else e)[1:]:
            pts.append((float(p[0]), float(p[1])))
    return pts
