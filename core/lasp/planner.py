"""Calling a symbolic planner on a :class:`~core.lasp.model.Task`: status enum, time limit, and
validation of every plan against the task's own model before it is used.

Default engine: Kairos (``up-kairos``, in-process, proves unsolvability); any unified-planning
oneshot engine name works (e.g. ``enhsp``, Java). Engines are registered explicitly here
(``up_kairos.register()``) rather than relying on UP's auto-discovery, and UP's credits banner is
silenced. Results are values, never exceptions: misuse (unknown engine name) is the only error.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
from dataclasses import dataclass, field

from core.lasp.model import GroundAction, PddlError, Task

log = logging.getLogger(__name__)

ENGINES = ("kairos", "enhsp")


class PlanStatus(enum.Enum):
    """Outcome of one planner call."""

    SOLVED = "solved"
    UNSOLVABLE = "unsolvable"   # proven, or the engine gave up without a plan
    TIMEOUT = "timeout"
    ERROR = "error"             # the engine failed, or returned a plan our model rejects


@dataclass(frozen=True)
class PlanResult:
    """A planner answer: status, plan (ground actions) and what it cost."""

    status: PlanStatus
    plan: tuple = ()
    engine: str = ""
    wall_s: float = 0.0
    message: str = ""
    metrics: dict = field(default_factory=dict)

    @property
    def solved(self) -> bool:
        return self.status is PlanStatus.SOLVED


class UnknownEngine(ValueError):
    """The planner name is not one of :data:`ENGINES` or is not installed."""


_REGISTERED = set()


def _engine_name(engine: str) -> str:
    if engine not in ENGINES:
        raise UnknownEngine(f"unknown planner engine {engine!r} (one of {', '.join(ENGINES)})")
    if engine in _REGISTERED:
        return engine
    from unified_planning.environment import get_environment

    env = get_environment()
    env.credits_stream = None
    try:
        if engine == "kairos":
            import up_kairos

            up_kairos.register(env)
        elif engine == "enhsp" and "enhsp" not in env.factory.engines:
            env.factory.add_engine("enhsp", "up_enhsp.enhsp_planner", "ENHSPEngine")
    except ImportError as exc:
        raise UnknownEngine(f"planner engine {engine!r} is not installed: {exc}") from exc
    _REGISTERED.add(engine)
    return engine


def warm_up(engine: str = "kairos") -> None:
    """Import the planning stack and register ``engine`` now, so the first :func:`solve` does not pay it.

    The first ``unified_planning.engines`` import in a process takes about 1 s (it pulls ConfigSpace and
    scipy.stats); the service calls this in a worker thread right after READY.

    Raises
    ------
    UnknownEngine
        If ``engine`` is not a known or installed engine.
    """
    import unified_planning.engines  # noqa: F401 - the import is the work
    import unified_planning.io  # noqa: F401
    import unified_planning.shortcuts  # noqa: F401

    _engine_name(engine)


def solve(task: Task, *, engine: str = "kairos", timeout_s: float = 10.0) -> PlanResult:
    """Plan for ``task`` from its initial state and validate the plan on the task's own model.

    Parameters
    ----------
    engine : str
        One of :data:`ENGINES`.
    timeout_s : float
        Planner time limit in seconds.

    Returns
    -------
    PlanResult
        ``SOLVED`` only with a plan that is applicable step by step and reaches the goal in
        ``task`` (checked by :meth:`validate`); otherwise the status says why there is none.

    Raises
    ------
    UnknownEngine
        If ``engine`` is not a known or installed engine.
    """
    from unified_planning.engines import PlanGenerationResultStatus as S
    from unified_planning.shortcuts import OneshotPlanner

    name = _engine_name(engine)
    t0 = time.perf_counter()
    try:
        with OneshotPlanner(name=name) as planner, _kind_computed_once(task.problem):
            res = planner.solve(task.problem, timeout=timeout_s)
    except Exception as exc:  # the engine crashed or refused the problem
        return PlanResult(PlanStatus.ERROR, engine=name, wall_s=time.perf_counter() - t0,
                          message=f"{type(exc).__name__}: {exc}")
    wall = time.perf_counter() - t0
    if res.status in (S.SOLVED_SATISFICING, S.SOLVED_OPTIMALLY) and res.plan is not None:
        plan = tuple(GroundAction(ai.action.name, tuple(str(p) for p in ai.actual_parameters))
                     for ai in res.plan.actions)
        problem = validate(task, plan)
        if problem:
            return PlanResult(PlanStatus.ERROR, plan, name, wall, f"plan rejected: {problem}")
        return PlanResult(PlanStatus.SOLVED, plan, name, wall, metrics=dict(res.metrics or {}))
    status = {S.UNSOLVABLE_PROVEN: PlanStatus.UNSOLVABLE, S.UNSOLVABLE_INCOMPLETELY:
              PlanStatus.UNSOLVABLE, S.TIMEOUT: PlanStatus.TIMEOUT}.get(res.status, PlanStatus.ERROR)
    msg = "; ".join(str(m.message) for m in (res.log_messages or []))[:500]
    return PlanResult(status, (), name, wall, msg or res.status.name)


_KIND_ONCE: dict = {}


@contextlib.contextmanager
def _kind_computed_once(problem):
    """Within one planner call, compute the problem's kind once.

    unified-planning 1.3 recomputes ``Problem.kind`` (a walk over every expression) on each access,
    and one Kairos solve reads it about nine times: about two thirds of a replanning round on the
    kitchen tasks. The problem does not change during the call, so it is safe to compute it once;
    the instance gets a subclass with a cached ``kind`` for the duration of the call only.
    """
    cls = problem.__class__
    sub = _KIND_ONCE.get(cls)
    if sub is None:
        def kind(self):
            cached = self.__dict__.get("_lasp_kind")
            if cached is None:
                cached = self.__dict__["_lasp_kind"] = cls.kind.fget(self)
            return cached
        sub = _KIND_ONCE[cls] = type(f"{cls.__name__}KindOnce", (cls,), {"kind": property(kind)})
    problem.__class__ = sub
    try:
        yield
    finally:
        problem.__class__ = cls
        problem.__dict__.pop("_lasp_kind", None)


def validate(task: Task, plan) -> str:
    """Check a plan against the task's own model from its initial state.

    Returns
    -------
    str
        Empty if every step is applicable and the goal holds at the end, else what is wrong.
    """
    state = task.initial_state()
    for i, step in enumerate(plan):
        try:
            failed = task.failed_conjunct(step.name, step.args, state)
        except PddlError as exc:
            return f"step {i + 1} {step}: {exc}"
        if failed is not None:
            return f"step {i + 1} {step}: precondition {failed} is false"
        state = task.apply(step.name, step.args, state)
    if not task.goal_holds(state):
        return "the goal does not hold after the last step"
    return ""
