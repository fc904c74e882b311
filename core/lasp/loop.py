"""The LASP loop, Algorithm 1 of Chen et al. (RSS 2024): plan, execute, and on failure
``refine_and_replan``.

``refine_and_replan(error)`` asks the diagnoser for candidate reasons, ranked; for each reason
``refining_step`` adds the precondition (and the properties it needs), and when the planner then
finds no plan, asks for objects to add (object expansion). The new plan is executed: success ends
the run; a NEW error recurses; the SAME error (the same ground action fails again) moves on to the
next reason. Bounded by recursion depth, LLM calls and — because on a robot each trial is a real
failure — failed executions per distinct error. Every step goes into a trace (prompt, answer,
knowledge change, plan) for the UI and the logs.

The robot replans from where it is: its belief state is the model's prediction along the executed
prefix, refreshed with the environment's values whenever knowledge is added.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from core.lasp.diagnosis import Candidate, DiagnosisContext, Failure
from core.lasp.knowledge import LearnedPrecondition, add_object, adopt_property, to_pddl_diff
from core.lasp.model import PddlError, State, Task
from core.lasp.planner import PlanStatus, solve
from core.lasp.sexpr import PddlSyntaxError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopConfig:
    """Bounds and planner settings of one LASP run (see ``[lasp]`` in the config)."""

    engine: str = "kairos"
    planner_timeout_s: float = 10.0
    max_depth: int = 6
    max_failures_per_error: int = 2
    max_llm_calls: int = 60
    max_objects_tried: int = 6
    max_plan_steps: int = 60


@dataclass
class RunResult:
    """What a run did: ``success`` means the final plan reached the goal in the environment."""

    success: bool
    plan: list
    executed: list
    replans: int
    failed_executions: int
    planner_calls: int
    llm_calls: int
    learned: list
    trace: list
    reason: str = ""
    wall_s: float = 0.0
    knowledge_diff: str = ""

    def as_dict(self) -> dict:
        return {"success": self.success, "plan": [str(s) for s in self.plan],
                "executed": [str(s) for s in self.executed], "replans": self.replans,
                "failed_executions": self.failed_executions, "planner_calls": self.planner_calls,
                "llm_calls": self.llm_calls, "learned": [e.as_dict() for e in self.learned],
                "trace": self.trace, "reason": self.reason, "wall_s": round(self.wall_s, 4),
                "knowledge_diff": self.knowledge_diff}


class _Stop(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class LaspRun:
    """One LASP episode of a robot (``task``: its knowledge) in an environment.

    Parameters
    ----------
    task : Task
        The robot's domain and problem (copied; the caller's task is not changed).
    env : SimulatedEnvironment or anything with ``execute``, ``goal_reached`` and the sensing
        methods (:class:`core.lasp.diagnosis.Sensing`).
    diagnoser : Diagnoser
    config : LoopConfig
    goal_text : str
        The task in words (for LLM prompts and object ranking).
    """

    def __init__(self, task: Task, env, diagnoser, config: LoopConfig | None = None, *,
                 goal_text: str = ""):
        self.knowledge = task.copy()
        self.env = env
        self.diagnoser = diagnoser
        self.config = config or LoopConfig()
        self.goal_text = goal_text
        self.belief: State = self.knowledge.initial_state()
        self.history: list = []        # (step, belief before it) of successful executions
        self.failures: dict = {}       # error key -> failed executions
        self.learned: list = []
        self.trace: list = []
        self.replans = 0
        self.planner_calls = 0
        self.last_plan: list = []

    # ------------------------------------------------------------------ Algorithm 1: main
    def run(self) -> RunResult:
        t0 = time.perf_counter()
        try:
            plan = self._plan(self.knowledge, "initial plan")
            if plan is None:
                raise _Stop("no plan for the initial task")
            error = self._execute(plan)
            ok = error is None or self._refine_and_replan(error, depth=1)
            reason = "" if ok else "the loop ended without reaching the goal"
        except _Stop as stop:
            ok, reason = False, stop.reason
        if ok and not self.env.goal_reached():
            ok, reason = False, "the robot's model says the goal holds, the environment disagrees"
        self._log("end", success=ok, reason=reason)
        return RunResult(ok, list(self.last_plan), [h[0] for h in self.history], self.replans,
                         sum(self.failures.values()), self.planner_calls,
                         getattr(self.diagnoser, "llm_calls", 0), list(self.learned), self.trace,
                         reason, time.perf_counter() - t0, to_pddl_diff(self.learned))

    # ------------------------------------------------------------------ refine_and_replan
    def _refine_and_replan(self, error: Failure, depth: int) -> bool:
        if depth > self.config.max_depth:
            raise _Stop(f"recursion depth {self.config.max_depth} reached")
        self._check_llm_budget()
        ctx = self._context(error)
        reasons = self.diagnoser.diagnose(ctx)
        self._log("diagnose", error=error.key, observation=error.observation, depth=depth,
                  candidates=[c.as_dict() for c in reasons],
                  exchanges=self._exchanges())
        before = (self.knowledge, list(self.learned))
        for reason in reasons:
            if self.failures.get(error.key, 0) >= self.config.max_failures_per_error:
                raise _Stop(f"{error.key} failed {self.failures[error.key]} times "
                            f"(budget {self.config.max_failures_per_error})")
            self._check_llm_budget()
            refined = self._refining_step(reason, self._context(error))
            if refined is None:
                continue
            knowledge, plan, edits = refined
            self.knowledge = knowledge
            self.learned.extend(edits)
            self.replans += 1
            new_error = self._execute(plan)
            if new_error is None:
                return True
            if new_error.key != error.key:
                return self._refine_and_replan(new_error, depth + 1)
            self._log("same-error", error=error.key, dropped=reason.pddl)
            # the same error: this reason did not explain it; the next reason refines the
            # knowledge as it was before this one (Algorithm 1: refining_step(D, P, reason))
            self.knowledge, self.learned = before
        return False

    # ------------------------------------------------------------------ refining_step
    def _refining_step(self, reason: Candidate, ctx: DiagnosisContext):
        """Add ``reason`` (precondition + properties); expand objects if no plan. Returns
        ``(knowledge, plan, edits)`` or None when the planner rejects the reason."""
        k = self.knowledge.copy()
        edits = []
        try:
            for prop in reason.new_properties:
                if not k.problem.has_fluent(prop):
                    edits.append(adopt_property(k, self.env, prop, pddl=reason.pddl,
                                                action=reason.action))
            k.add_precondition(reason.action, reason.pddl)
            edits.append(LearnedPrecondition(reason.action, reason.pddl))
        except (PddlSyntaxError, PddlError) as exc:
            self._log("reject", candidate=reason.pddl, why=str(exc))
            return None
        self._log("refine", candidate=reason.as_dict(), change=[e.as_dict() for e in edits])
        belief = self._resense(k)
        plan = self._plan(k, f"after adding {reason.pddl}", belief)
        if plan is not None:
            self.belief = belief
            return k, plan, edits
        ctx.task = k
        for obj in self.diagnoser.rank_objects(ctx, reason)[: self.config.max_objects_tried]:
            k2 = k.copy()
            try:
                learned_obj = add_object(k2, self.env, obj.pddl)
            except (PddlSyntaxError, PddlError) as exc:
                self._log("reject", candidate=obj.pddl, why=str(exc))
                continue
            belief2 = self._resense(k2)
            plan = self._plan(k2, f"after adding object {obj.pddl}", belief2)
            if plan is not None:
                self.belief = belief2
                self._log("expand", object=obj.as_dict(), exchanges=self._exchanges())
                return k2, plan, edits + [learned_obj]
        self._log("no-plan", candidate=reason.pddl, exchanges=self._exchanges())
        return None

    # ------------------------------------------------------------------ helpers
    def _resense(self, k: Task) -> State:
        """The belief extended to ``k``: atoms the robot tracked keep its belief; atoms of new
        properties and objects take the values ``k`` got from the environment when they were added."""
        state = dict(k.initial_state())
        state.update(self.belief)
        return State(state)

    def _plan(self, k: Task, why: str, belief: State | None = None):
        k = k.copy()
        k.set_initial_state(belief if belief is not None else self.belief)
        self.planner_calls += 1
        res = solve(k, engine=self.config.engine, timeout_s=self.config.planner_timeout_s)
        self._log("plan", why=why, status=res.status.value, plan=[str(s) for s in res.plan],
                  planner_s=round(res.wall_s, 4), message=res.message)
        if res.status is PlanStatus.SOLVED:
            self.last_plan = list(res.plan)
            return list(res.plan)
        if res.status is PlanStatus.ERROR:
            log.warning("planner error (%s): %s", why, res.message)
        return None

    def _execute(self, plan) -> Failure | None:
        """Execute ``plan``: the first failure, or None when every step succeeded. A plan longer than
        ``max_plan_steps`` stops the run after that many steps with its own result ("step limit
        reached"), never a diagnosis."""
        cap = self.config.max_plan_steps
        for step in plan[:cap]:
            out = self.env.execute(step)
            if not out.ok:
                err = Failure(step, out.observation)
                self.failures[err.key] = self.failures.get(err.key, 0) + 1
                self._log("execute", step=str(step), ok=False, observation=out.observation,
                          true_cause=out.failed_condition)
                return err
            self.history.append((step, self.belief))
            self.belief = self.knowledge.apply(step.name, step.args, self.belief)
            self._log("execute", step=str(step), ok=True)
        if len(plan) > cap:
            raise _Stop(f"step limit reached, {cap} steps (the plan has {len(plan)}; [lasp] max_plan_steps)")
        return None

    def _context(self, error: Failure) -> DiagnosisContext:
        return DiagnosisContext(self.knowledge, self.belief, error, self.env, list(self.history),
                                self.goal_text)

    def _check_llm_budget(self) -> None:
        if getattr(self.diagnoser, "llm_calls", 0) >= self.config.max_llm_calls:
            raise _Stop(f"LLM-call budget {self.config.max_llm_calls} spent")

    def _exchanges(self) -> list:
        take = getattr(self.diagnoser, "take_exchanges", None)
        return take() if take else []

    def _log(self, kind: str, **detail) -> None:
        self.trace.append({"kind": kind, **detail})
        log.debug("lasp %s %s", kind, detail)


def run_lasp(task: Task, env, diagnoser, config: LoopConfig | None = None, *,
             goal_text: str = "") -> RunResult:
    """Run Algorithm 1 once (see :class:`LaspRun`)."""
    return LaspRun(task, env, diagnoser, config, goal_text=goal_text).run()
