"""Navigation metrics as LM-Nav defines them (Shah et al., CoRL 2022, Sec. 5).

- Planning success: the planned walk visits every landmark, in the instructed order, at a node that
  truly shows it (a ground-truth node set per landmark).
- Planning efficiency: ``min(1, L_intended / L_planned)``, the length of the walk a person intended
  over the length of the planned walk (both in the same unit, e.g. VNM time steps or metres).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


def planning_success(landmark_nodes: Sequence[int], truth: Sequence[Iterable[int]]) -> bool:
    """True when landmark i is visited at a node of ``truth[i]`` for every i.

    Parameters
    ----------
    landmark_nodes : (K,) ints, the node chosen for each landmark (``WalkResult.landmark_nodes``);
        they are visited in order by construction of the walk.
    truth : K collections of node indices that show landmark i.

    Raises
    ------
    ValueError
        If the two have different lengths.
    """
    nodes = [int(v) for v in np.asarray(landmark_nodes).ravel()]
    if len(nodes) != len(truth):
        raise ValueError(f"planning_success: {len(nodes)} landmark nodes but {len(truth)} ground-truth sets")
    return all(v in set(int(t) for t in ts) for v, ts in zip(nodes, truth))


def planning_efficiency(intended_length: float, planned_length: float) -> float:
    """``min(1, intended / planned)`` (LM-Nav Sec. 5); 1.0 when both are 0.

    Raises
    ------
    ValueError
        On a negative or non-finite length.
    """
    for name, value in (("intended_length", intended_length), ("planned_length", planned_length)):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name}: expected a finite length >= 0, got {value}")
    if planned_length == 0:
        return 1.0
    return float(min(1.0, intended_length / planned_length))
