"""``robot-app eval sim --engine ray``: the instructions of one evaluation fanned out over Ray workers.

Workstation / cluster only (the ``fleet`` extra; Ray is imported when the engine starts). The exploration
and the map are made once by the driver as in a local run; each worker then opens the map, the models
and the exploration log itself (:func:`robot_app.sim.eval.open_eval_context`: on a cluster they must be on
storage every node mounts at the same path) and evaluates the instructions it is given with
:func:`robot_app.sim.eval.eval_instruction`. A row depends only on the instruction's index (its drive
seed is ``seed + 101 k``), so the rows, and the totals computed from them, are those of the local run.
A worker process that dies is restarted and its call retried (Ray's ``max_restarts`` /
``max_task_retries``).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: restarts of a worker actor (and retries of its calls) after its process died
MAX_RESTARTS = 3


class EvalWorker:
    """One Ray actor's evaluation context (the map, CLIP, the VNM, the parser)."""

    def __init__(self, settings, cfg, models_dir: str, map_path: str, log_dir: str) -> None:
        from robot_app.sim.eval import open_eval_context

        self.ctx, self.parse_fn, self._close = open_eval_context(settings, cfg, models_dir, map_path, log_dir)

    def row(self, k: int, ins) -> dict:
        from robot_app.sim.eval import eval_instruction

        return eval_instruction(self.ctx, k, ins, self.parse_fn)

    def grid(self, ins, caps, alphas, scale: float):
        from robot_app.sim.eval_tune import dev_grid

        return dev_grid(self.ctx, ins, caps, alphas, scale)

    def close(self) -> None:
        self._close()


def _fan_out(settings, cfg, models_dir, map_path, log_dir, calls, *, address, workers, what: str) -> list:
    """Run ``calls`` (``(method name, args)`` per item) on a pool of :class:`EvalWorker` actors; results in
    order. Starts (and shuts down) a local Ray runtime when none is running and no address is given."""
    import ray
    from tqdm import tqdm

    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if not calls:
        return []
    started = False
    if not ray.is_initialized():
        ray.init(address=address, num_cpus=workers if address is None else None, include_dashboard=False,
                 log_to_driver=False)
        started = True
    try:
        n = min(workers or max(1, int(ray.cluster_resources().get("CPU", 1))), len(calls))
        actor = ray.remote(num_cpus=1, max_restarts=MAX_RESTARTS, max_task_retries=MAX_RESTARTS)(EvalWorker)
        pool = [actor.remote(settings, cfg, str(models_dir), str(map_path), str(log_dir)) for _ in range(n)]
        pending = {getattr(pool[k % n], name).remote(*a): k for k, (name, a) in enumerate(calls)}
        out: list = [None] * len(calls)
        with tqdm(total=len(calls), desc=f"{what} on ray x{n}", unit="instruction", disable=not settings.progress,
                  leave=False, dynamic_ncols=True) as bar:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    out[pending.pop(ref)] = ray.get(ref)
                    bar.update(1)
        ray.get([a.close.remote() for a in pool])
        log.info("%s: %d instructions on %d Ray workers", what, len(calls), n)
        return out
    finally:
        if started:
            ray.shutdown()


def eval_rows_on_ray(settings, cfg, models_dir, map_path, log_dir, items, *, address: str | None = None,
                     workers: int | None = None) -> list:
    """The report rows of ``items`` (in their order), computed by ``workers`` Ray actors.

    Parameters
    ----------
    settings : robot_app.sim.eval.EvalSettings
    cfg : Config
        The evaluation's configuration (the planner's alpha and cap already chosen).
    models_dir, map_path, log_dir : path
        The models folder, the built map and the exploration log, as the driver resolved them.
    items : sequence of instructions
    address : str, optional
        An existing Ray cluster (the head's ``host:6379``, ``auto``, or ``ray://host:10001`` with
        ``ray[client]``); default: a Ray runtime already started in this process, else a new local one (shut
        down at the end).
    workers : int, optional
        Actors (one CPU each); default: the cluster's CPUs, at most one per instruction.

    Raises
    ------
    ValueError
        If ``workers`` < 1.
    ray.exceptions.RayError
        When a worker fails for good (an error in an instruction, or more deaths than restarts).
    """
    return _fan_out(settings, cfg, models_dir, map_path, log_dir, [("row", (k, ins)) for k, ins in enumerate(items)],
                    address=address, workers=workers, what=f"eval {settings.world}")


def dev_grid_on_ray(settings, cfg, models_dir, map_path, log_dir, dev, caps, alphas, scale: float, *,
                    address: str | None = None, workers: int | None = None):
    """``eval sim-tune --engine ray``: :func:`robot_app.sim.eval_tune.dev_grid` of every development
    instruction on Ray workers; bool ``(len(caps), len(alphas), len(dev))``. Parameters and errors as
    :func:`eval_rows_on_ray`."""
    import numpy as np

    cols = _fan_out(settings, cfg, models_dir, map_path, log_dir,
                    [("grid", (ins, tuple(caps), tuple(alphas), scale)) for ins in dev],
                    address=address, workers=workers, what=f"sim-tune {settings.world}")
    return np.stack(cols, axis=2) if cols else np.zeros((len(caps), len(alphas), 0), dtype=bool)
