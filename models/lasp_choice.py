"""A constrained LLM diagnoser for LASP: the model only re-ranks the offline diagnoser's candidates.

LASP (Chen et al., RSS 2024, Sec. IV-B) lets an LLM write the cause of a failure, the missing
precondition and its PDDL. A small local model (a few hundred million parameters) cannot write those
reliably; what it may still do is *choose*. :class:`ChoiceLlmDiagnoser` takes the pruned, ranked
candidates of :class:`core.lasp.diagnosis.OfflineDiagnoser` (each false where the action failed,
consistent with the history and the action's definition), shows the top ``top_k`` numbered with their
English descriptions, the task, the failed action and the observation, and asks which number explains
the failure:

- ``mode="choice"``: the answer is generated under a GBNF grammar that allows only those numbers, as a
  ranked list of 1..``max_picks`` ids (``" 3, 1"``); repeated ids are dropped;
- ``mode="score"``: no text is generated; each id is scored by the model's log-probability of writing
  it after the same prompt (:meth:`models.llm.LlmClient.score`, one prompt evaluation) and all
  ``top_k`` are ranked by it;
- ``mode="pmi"``: each candidate's *description* is scored as the continuation of "...It failed.
  <observation> So the failure happened because it was not true that", minus its score without the
  observation (pointwise mutual information between observation and description, which cancels how
  likely the words are anyway; Holtzman et al., EMNLP 2021, "domain-conditional PMI"). The ``top_k``
  are ranked by ``z(offline score) + pmi_weight * z(PMI)`` (z: standardised over the ``top_k``), so the
  model adjusts the offline ranking rather than replacing it. Two score requests per diagnosis; the
  one without the observation is cached per candidate list.

A small base model answering with numbers mostly repeats the order it was shown (position bias):
measured in docs/lasp.md ("Small local LLM (constrained)"), only ``pmi`` improved on the offline order.

The result is the candidate list reordered: the model's picks (all ``top_k`` in ``score`` and
``pmi``) first, in its order, then every other candidate in the offline order, so a model that answers
nothing useful costs no candidate and a failure of the model (error, timeout) leaves the offline
order. Unknown objects (:meth:`rank_objects`) are chosen the same way among the offline diagnoser's
ranked objects (``choice`` and ``score``; ``pmi`` keeps the offline object order). Every exchange
(role, prompt, answer, verdict) is kept for the LASP trace (:meth:`take_exchanges`); ``llm_calls``
counts the model requests for the loop's budget.
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

import numpy as np

from core.lasp.diagnosis import Candidate, DiagnosisContext, OfflineDiagnoser
from core.lasp.similarity import Similarity
from models.llm import LlmError

log = logging.getLogger(__name__)

MODES = ("choice", "score", "pmi")
MAX_TOP_K = 20

_EXAMPLE = (
    "Example.\n"
    "Failed action: (open robot1 door3)\n"
    "Observation: The handle turned but the door would not move; a bolt held it shut.\n"
    "Candidates:\n"
    "1. the robot is holding the door3\n"
    "2. the door3 is unlocked\n"
    "3. the door3 is painted\n"
    "Answer: 2, 1\n\n"
)


def choice_grammar(n: int, max_picks: int = 3) -> str:
    """GBNF for a ranked list of 1..``max_picks`` ids out of ``1..n``: ``" 3"``, ``" 3, 1"``.

    Raises
    ------
    ValueError
        If ``n`` is not in 1..:data:`MAX_TOP_K` or ``max_picks`` < 1.
    """
    if not 1 <= n <= MAX_TOP_K:
        raise ValueError(f"a choice needs 1..{MAX_TOP_K} candidates, got {n}")
    if max_picks < 1:
        raise ValueError(f"max_picks must be >= 1, got {max_picks}")
    ids = " | ".join(f'"{i}"' for i in range(n, 0, -1))  # "10" before "1": longest literal first
    more = f' (", " id){{0,{min(max_picks, n) - 1}}}' if min(max_picks, n) > 1 else ""
    return f'root ::= " " id{more}\nid ::= {ids}\n'


def parse_choice(text: str, n: int) -> list:
    """``" 3, 1, 3"`` -> ``[2, 0]`` (0-based, first occurrence kept).

    Raises
    ------
    ValueError
        If the text is not a comma-separated list of integers, or one is outside 1..n.
    """
    if not re.fullmatch(r"\s*\d{1,2}(\s*,\s*\d{1,2})*\s*", text or ""):
        raise ValueError(f"expected a list of candidate numbers, got {text!r}")
    picks = []
    for tok in text.split(","):
        i = int(tok)
        if not 1 <= i <= n:
            raise ValueError(f"candidate number {i} is not among 1..{n}")
        if i - 1 not in picks:
            picks.append(i - 1)
    return picks


def _header(ctx: DiagnosisContext) -> str:
    goal = f"Task: {ctx.goal_text}\n" if ctx.goal_text else ""
    return (f"{goal}Failed action: {ctx.failure.step}\n"
            f"Observation: {ctx.failure.observation}\n")


def choice_prompt(ctx: DiagnosisContext, candidates: Sequence[Candidate]) -> str:
    """The precondition question: the numbered candidates' descriptions after the failure.

    Raises
    ------
    ValueError
        If ``candidates`` is empty.
    """
    if not candidates:
        raise ValueError("choice_prompt needs at least one candidate")
    lines = "".join(f"{i}. {c.description or c.pddl}\n" for i, c in enumerate(candidates, 1))
    return ("A robot's action failed although its planner believed the action was possible, so the "
            "robot's knowledge lacks a condition that was false. Choose the candidate condition that "
            "explains the observation best, then the next best.\n\n"
            f"{_EXAMPLE}{_header(ctx)}Candidates:\n{lines}Answer:")


def object_choice_prompt(ctx: DiagnosisContext, cause: Candidate, objects: Sequence[Candidate]) -> str:
    """The object question: which unknown object lets the robot satisfy ``cause``.

    Raises
    ------
    ValueError
        If ``objects`` is empty.
    """
    if not objects:
        raise ValueError("object_choice_prompt needs at least one object")
    lines = "".join(f"{i}. {o.pddl}: {o.description}\n" for i, o in enumerate(objects, 1))
    return ("A robot's action failed, and with the condition it learned it finds no plan with the "
            "objects it knows. Choose the object from the environment that helps it most, then the "
            "next best.\n\n"
            f"{_header(ctx)}Condition learned: {cause.description or cause.pddl}\n"
            f"Objects:\n{lines}Answer:")


def pmi_prompts(ctx: DiagnosisContext) -> tuple:
    """``(with the observation, without it)``: the prompts whose continuation is a candidate's
    description (``mode="pmi"``)."""
    head = (f"Task: {ctx.goal_text}\n" if ctx.goal_text else "") + f"A robot tried {ctx.failure.step}.\n"
    tail = "\nSo the failure happened because it was not true that"
    return head + f"It failed. {ctx.failure.observation}" + tail, head + "It failed." + tail


def _z(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    sd = float(x.std())
    return (x - x.mean()) / (sd if sd > 1e-9 else 1.0)


class ChoiceLlmDiagnoser:
    """The offline diagnoser's candidates, re-ranked by an LLM that may only choose among them.

    Parameters
    ----------
    llm : models.llm.LlmClient
        The shared model (``complete`` for ``mode="choice"``, ``score`` for ``mode="score"``).
    similarity : callable, optional
        Text similarity of the offline diagnoser (lexical by default).
    top_k : int
        How many of the offline candidates the model sees (2..20).
    mode : {"choice", "score", "pmi"}
        Grammar-constrained ranked list, log-likelihood of each id, or the descriptions' PMI fused
        with the offline score (module doc).
    pmi_weight : float
        Weight of the standardised PMI against the standardised offline score (``mode="pmi"``, >= 0).
    max_picks : int
        Longest ranked list the grammar allows (``mode="choice"``).
    timeout_s : float
        Limit of one model request, seconds; past it the offline order is kept.
    max_candidates : int
        How many candidates :meth:`diagnose` returns (the offline diagnoser's limit).

    Raises
    ------
    ValueError
        On a ``mode`` other than :data:`MODES`, ``top_k`` outside 2..20, ``max_picks`` < 1 or a
        negative ``pmi_weight``.
    """

    def __init__(self, llm, *, similarity: Similarity | None = None, top_k: int = 8, mode: str = "choice",
                 max_picks: int = 3, timeout_s: float = 30.0, max_candidates: int = 12,
                 pmi_weight: float = 1.0):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not 2 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be in 2..{MAX_TOP_K}, got {top_k}")
        if max_picks < 1:
            raise ValueError(f"max_picks must be >= 1, got {max_picks}")
        if not pmi_weight >= 0.0:
            raise ValueError(f"pmi_weight must be >= 0, got {pmi_weight}")
        self.llm = llm
        self.pmi_weight = float(pmi_weight)
        self._prior: dict = {}
        self.offline = OfflineDiagnoser(similarity, max_candidates=max(max_candidates, top_k))
        self.top_k, self.mode, self.max_picks, self.timeout_s = top_k, mode, max_picks, timeout_s
        self.max_candidates = max_candidates
        self.name = f"llm-{mode}"
        self.llm_calls = 0
        self._exchanges: list = []

    def take_exchanges(self) -> list:
        """The exchanges since the last call (for the trace)."""
        out, self._exchanges = self._exchanges, []
        return out

    def _rank(self, role: str, prompt: str, n: int) -> list | None:
        """The model's order of ids ``0..n-1`` (possibly partial), or None when it failed."""
        self.llm_calls += 1
        ex = {"role": role, "prompt": prompt, "mode": self.mode}
        self._exchanges.append(ex)
        try:
            if self.mode == "score":
                lps = self.llm.score(prompt, [f" {i}" for i in range(1, n + 1)], timeout_s=self.timeout_s)
                if len(lps) != n:
                    raise LlmError(f"expected {n} scores, got {len(lps)}")
                ex["answer"] = ", ".join(f"{i}: {lp:.2f}" for i, lp in enumerate(lps, 1))
                order = sorted(range(n), key=lambda i: (-lps[i], i))
            else:
                ex["answer"] = answer = self.llm.complete(
                    prompt, grammar=choice_grammar(n, self.max_picks), max_tokens=4 * self.max_picks + 4,
                    temperature=0.0, timeout_s=self.timeout_s, stop=["\n"])
                order = parse_choice(answer, n)
        except LlmError as exc:
            ex.update(answer=None, error=str(exc), verdict="failed: the offline order is kept")
            log.warning("LASP LLM %s failed (%s); keeping the offline order", role, exc)
            return None
        except ValueError as exc:
            ex["verdict"] = f"rejected: {exc}; the offline order is kept"
            return None
        ex["verdict"] = "accepted: " + ", ".join(str(i + 1) for i in order)
        return order

    def _rank_pmi(self, ctx: DiagnosisContext, shown: list) -> list | None:
        """``mode="pmi"``: the order of ``shown`` by offline score and PMI (module doc), or None."""
        cond, prior = pmi_prompts(ctx)
        conts = [f" {c.description or c.pddl}." for c in shown]
        ex = {"role": "precondition-choice", "prompt": cond, "mode": "pmi"}
        self._exchanges.append(ex)
        try:
            self.llm_calls += 1
            with_obs = self.llm.score(cond, conts, timeout_s=self.timeout_s)
            key = (prior, tuple(conts))
            if key not in self._prior:
                self.llm_calls += 1
                self._prior[key] = self.llm.score(prior, conts, timeout_s=self.timeout_s)
            without = self._prior[key]
            if len(with_obs) != len(shown) or len(without) != len(shown):
                raise LlmError(f"expected {len(shown)} scores, got {len(with_obs)} and {len(without)}")
        except LlmError as exc:
            ex.update(answer=None, error=str(exc), verdict="failed: the offline order is kept")
            log.warning("LASP LLM precondition-choice failed (%s); keeping the offline order", exc)
            return None
        pmi = np.subtract(with_obs, without)
        fused = _z([c.score for c in shown]) + self.pmi_weight * _z(pmi)
        order = sorted(range(len(shown)), key=lambda i: (-fused[i], i))
        ex["answer"] = ", ".join(f"{i}: pmi {p:.2f} fused {f:.2f}" for i, (p, f) in enumerate(zip(pmi, fused), 1))
        ex["verdict"] = "accepted: " + ", ".join(str(i + 1) for i in order)
        return order

    @staticmethod
    def _reorder(ranked: list, order: list, role: str) -> list:
        picked = [ranked[i] for i in order]
        chosen = set(order)
        rest = [c for i, c in enumerate(ranked) if i not in chosen]
        out = []
        for k, c in enumerate(picked, 1):
            out.append(Candidate(c.kind, c.pddl, c.action, c.score, c.new_properties, c.description,
                                 c.reasons + (f"{role}: the LLM's choice {k} of {len(picked)}",)))
        return out + rest

    def diagnose(self, ctx: DiagnosisContext) -> list:
        """The offline candidates (at most ``max_candidates``), the model's picks among the first
        ``top_k`` moved to the front. No model call when there are fewer than two candidates."""
        ranked = self.offline.diagnose(ctx)
        if len(ranked) < 2:
            return ranked[: self.max_candidates]
        shown = ranked[: self.top_k]
        if self.mode == "pmi":
            order = self._rank_pmi(ctx, shown)
        else:
            order = self._rank("precondition-choice", choice_prompt(ctx, shown), len(shown))
        if order is not None:
            ranked = self._reorder(ranked, order, "precondition-choice")
        return ranked[: self.max_candidates]

    def rank_objects(self, ctx: DiagnosisContext, cause: Candidate) -> list:
        """The offline object ranking, the model's picks among the first ``top_k`` moved first
        (``mode="pmi"``: the offline ranking)."""
        ranked = self.offline.rank_objects(ctx, cause)
        if len(ranked) < 2 or self.mode == "pmi":
            return ranked
        shown = ranked[: self.top_k]
        order = self._rank("object-choice", object_choice_prompt(ctx, cause, shown), len(shown))
        return ranked if order is None else self._reorder(ranked, order, "object-choice")
