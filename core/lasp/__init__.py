"""LASP: open-world task planning with incomplete PDDL knowledge (Chen et al., RSS 2024).

A symbolic planner (unified-planning + Kairos) plans with the robot's domain; when an action fails,
a diagnoser (LLM or offline) explains the failure observation as a missing precondition, property
or object, the knowledge is refined and the planner replans (:mod:`core.lasp.loop`, Algorithm 1).
"""

from core.lasp.diagnosis import BeliefSensing, Candidate, DiagnosisContext, Failure, OfflineDiagnoser
from core.lasp.environment import Outcome, SimulatedEnvironment
from core.lasp.loop import LoopConfig, RunResult, run_lasp
from core.lasp.model import GroundAction, PddlError, State, Task
from core.lasp.planner import PlanResult, PlanStatus, solve
from core.lasp.similarity import lexical_similarity

__all__ = ["BeliefSensing", "Candidate", "DiagnosisContext", "Failure", "GroundAction",
           "LoopConfig", "OfflineDiagnoser", "Outcome", "PddlError", "PlanResult", "PlanStatus",
           "RunResult", "SimulatedEnvironment", "State", "Task", "lexical_similarity", "run_lasp",
           "solve"]
