"""Pure pursuit along a path that may fold back over itself: the GPS controller's geometry (pure numpy).

:class:`PathPursuit` keeps the progress along a path (metres, only forward) and picks the point to steer
at; :mod:`robot_app.nav.policy` turns it into a command with :func:`core.control.line_follow_velocity`
(LM-Nav's GPS controller: the straight-line rule towards a point ahead on the walk).

- Progress: :func:`core.control.advance_along` over the path from the progress so far to
  ``2 lookahead + 2`` m beyond it, the EARLIEST point within ``tolerance_m`` of the nearest one (pure pursuit's
  projection; where the path folds back
  onto itself both legs pass the robot, and the earlier is the one it is on).
- Folds: nodes where the path turns back by more than :data:`FOLD_DEG`; the robot drives to a fold's tip
  (within :data:`FOLD_REACHED_M`) before the leg back counts.
- Target: the first point beyond the progress that is ``lookahead_m`` from the robot, searched every
  0.25 m up to 1.5 ``lookahead_m`` along the path and never past the next fold; none there: the farthest
  of those points from the robot.

Frames and units: positions in one metric frame (UTM / ENU m), arc lengths in metres.
"""

from __future__ import annotations

import math

import numpy as np

from core.control import advance_along

__all__ = ["PathPursuit", "FOLD_DEG", "FOLD_REACHED_M"]

#: a path turning back by more than this at a node folds there
FOLD_DEG = 120.0
#: within this of a fold's tip (m), the robot is at it
FOLD_REACHED_M = 1.0


def _folds(path: np.ndarray, arc: np.ndarray) -> np.ndarray:
    """Arc lengths (m) of the path's nodes where it turns back by more than :data:`FOLD_DEG` (the directions
    of the path over the 1 m before and after the node)."""
    if path.shape[0] < 3 or arc[-1] < 2.0:
        return np.zeros(0)
    out = []
    for k in range(1, path.shape[0] - 1):
        if arc[k] < 1.0 or arc[-1] - arc[k] < 1.0:
            continue
        back = np.array([np.interp(arc[k] - 1.0, arc, path[:, j]) for j in (0, 1)])
        fwd = np.array([np.interp(arc[k] + 1.0, arc, path[:, j]) for j in (0, 1)])
        u, v = path[k] - back, fwd - path[k]
        nu, nv = math.hypot(*u), math.hypot(*v)
        if nu > 0.3 and nv > 0.3 and float(u @ v) / (nu * nv) < math.cos(math.radians(FOLD_DEG)):
            out.append(float(arc[k]))
    return np.asarray(out)


class PathPursuit:
    """Pure pursuit state along ``path`` (n, 2) m with lookahead ``lookahead_m`` (module docstring).

    Raises
    ------
    ValueError
        A path that is not (n >= 1, 2) finite metres, or a lookahead that is not > 0.
    """

    def __init__(self, path, *, lookahead_m: float):
        p = np.asarray(path, dtype=np.float64).reshape(-1, 2)
        if p.shape[0] < 1 or not np.isfinite(p).all() or not lookahead_m > 0:
            raise ValueError(f"PathPursuit: a finite (n >= 1, 2) path and lookahead_m > 0 expected, got {p.shape}, "
                             f"{lookahead_m}")
        self.path, self.lookahead_m = p, float(lookahead_m)
        self.arc = (np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(p, axis=0).T))]) if p.shape[0] > 1
                    else np.zeros(1))
        self.folds_m = _folds(p, self.arc)
        self.progress_m = 0.0

    @property
    def length_m(self) -> float:
        return float(self.arc[-1])

    def index(self) -> int:
        """The path node at the progress (its index)."""
        return min(int(np.searchsorted(self.arc, self.progress_m + 1e-9, side="right")) - 1, self.path.shape[0] - 1)

    def near_end(self, radius_m: float) -> bool:
        """Progressed to the path's last nodes, or to within ``radius_m`` + 1 m of its end."""
        n = self.path.shape[0]
        return self.progress_m >= self.arc[max(0, n - 3)] or self.length_m - self.progress_m <= radius_m + 1.0

    def _next_fold(self) -> float | None:
        ahead = self.folds_m[self.folds_m > self.progress_m + 1e-6]
        return float(ahead[0]) if ahead.size else None

    def _point(self, s: float) -> tuple[float, float]:
        return float(np.interp(s, self.arc, self.path[:, 0])), float(np.interp(s, self.arc, self.path[:, 1]))

    def advance(self, x: float, y: float, *, tolerance_m: float = 0.3, samples: int = 60) -> float:
        """Move the progress on for the robot at (x, y) (module docstring); returns it (m)."""
        if self.path.shape[0] < 2:
            return 0.0
        self.progress_m = advance_along(self.path, self.arc, self.progress_m, x, y,
                                        span_m=2.0 * self.lookahead_m + 2.0, samples=samples, tolerance_m=tolerance_m)
        fold = self._next_fold()
        if fold is not None and math.hypot(*(np.subtract(self._point(fold), (x, y)))) <= FOLD_REACHED_M:
            self.progress_m = fold  # at a fold's tip: on along the leg back
        return self.progress_m

    def target(self, x: float, y: float) -> tuple[float, float]:
        """The point to steer at for the robot at (x, y) (module docstring), metres."""
        p, arc = self.path, self.arc
        if p.shape[0] < 2:
            return float(p[0, 0]), float(p[0, 1])
        fold = self._next_fold()
        end = min(self.progress_m + 1.5 * self.lookahead_m, self.length_m, *([fold] if fold is not None else []))
        s = np.append(np.arange(self.progress_m, end, 0.25), end)
        px, py = np.interp(s, arc, p[:, 0]), np.interp(s, arc, p[:, 1])
        d = np.hypot(px - x, py - y)
        far = np.flatnonzero(d >= self.lookahead_m)
        k = int(far[0]) if far.size else int(np.argmax(d))
        return float(px[k]), float(py[k])
