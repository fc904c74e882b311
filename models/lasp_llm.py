"""The LLM diagnoser of LASP: the paper's five roles on the shared llama.cpp model, each answer
constrained by a GBNF grammar and checked before it is used.

LASP (Chen et al., RSS 2024, Sec. IV-B and App. prompts) asks an LLM, in turn:

1. cause analyser: why did the action fail, given the domain, the history and the observation?
   -> a numbered list of reasons;
2. precondition generator: which precondition of the action would have caught this reason?
   -> one sentence;
3. property-completeness evaluator: can that precondition be written with the robot's predicates and
   functions? -> ``Yes: name[, name]`` (drawn from the robot's own) or ``No: new-name[, new-name]``;
   a new name is mapped to the environment property most similar in meaning, whose values it takes;
4. NL-to-PDDL translator: the precondition as a PDDL literal or comparison over the action's
   parameters -> a grammar built from exactly those names, parameters and arities;
5. object expander: when the planner finds no plan, which object the environment lists should the
   robot add -> one of the candidates.

Answers that still name unknown predicates, parameters or objects (a grammar narrows the form, the
model may still be wrong about meaning) are rejected, never applied. Every exchange (role, prompt,
answer, verdict) is kept for the LASP trace.
"""

from __future__ import annotations

import logging
import re
from typing import Sequence

import numpy as np

from core.lasp.diagnosis import Candidate, DiagnosisContext, unknown_objects
from core.lasp.model import describe_name
from core.lasp.sexpr import PddlSyntaxError, fnode_text, parse_sexpr, to_text
from core.lasp.similarity import Similarity, check_similarity_output, lexical_similarity
from models.llm import LlmError

log = logging.getLogger(__name__)

ROLES = ("cause-analyser", "precondition-generator", "property-evaluator", "nl-to-pddl",
         "object-expander")

_SENT = "[A-Za-z] [A-Za-z0-9 ,'()-]{2,160}"

REASONS_GBNF = (
    'root ::= "1. " sent "\\n" ("2. " sent "\\n" ("3. " sent "\\n")?)?\n'
    f"sent ::= {_SENT}\n"
)
SENTENCE_GBNF = f'root ::= {_SENT} "."\n'


def _alts(names: Sequence[str]) -> str:
    return " | ".join('"' + n.replace('"', "") + '"' for n in names)


def property_grammar(known: Sequence[str]) -> str:
    """``Yes: known[, known]`` or ``No: new-name[, new-name]`` (new names: lower-case words with
    hyphens)."""
    yes = '"Yes: " known (", " known)?' if known else None
    rules = ["root ::= " + " | ".join(x for x in (yes, '"No: " new (", " new)?') if x)]
    if known:
        rules.append(f"known ::= {_alts(known)}")
    rules.append("new ::= [a-z] [a-z]{1,19} (\"-\" [a-z] [a-z]{1,19}){0,3}")
    return "\n".join(rules) + "\n"


def pddl_grammar(predicates: dict, functions: dict, params: Sequence[str]) -> str:
    """A literal ``(p ?x ...)``, its negation, or a comparison ``(op (f ?x) (g ?y))``.

    Parameters
    ----------
    predicates, functions : dict
        name -> list (one entry per argument position) of the parameter names (without ``?``)
        allowed there, e.g. by type; a name with an empty position is left out.
    params : sequence of str
        The action's parameter names (used where a position lists none).

    Raises
    ------
    ValueError
        If there is nothing to build from.
    """
    def atom_alts(table):
        out = []
        for name, positions in sorted(table.items()):
            if any(not pos for pos in positions):
                continue
            args = "".join(' " " (' + _alts(["?" + p for p in pos]) + ")" for pos in positions)
            out.append('"(' + name + '"' + args + ' ")"')
        return " | ".join(out)
    rules, root = [], []
    atoms, terms = atom_alts(predicates), atom_alts(functions)
    if atoms:
        rules.append(f"atom ::= {atoms}")
        root += ["atom", '"(not " atom ")"']
    if terms:
        rules.append(f"term ::= {terms}")
        rules.append('cmp ::= "(" ("<=" | ">=" | "<" | ">") " " term " " term ")"')
        root.append("cmp")
    if not params or not root:
        raise ValueError("a PDDL grammar needs parameters and at least one usable predicate or function")
    return "root ::= " + " | ".join(root) + "\n" + "\n".join(rules) + "\n"


def one_of_grammar(options: Sequence[str]) -> str:
    """Exactly one of ``options``."""
    if not options:
        raise ValueError("one_of_grammar needs at least one option")
    return f"root ::= {_alts(options)}\n"


# ---------------------------------------------------------------------------- parsing answers
def parse_reasons(text: str) -> list:
    """Numbered list -> reasons (empty list when nothing parses)."""
    out = []
    for line in (text or "").splitlines():
        m = re.match(r"^\s*\d{1,2}[.)]\s*(.+?)\s*$", line)
        if m and m.group(1):
            out.append(m.group(1))
    return out


def parse_property_answer(text: str, known: Sequence[str]):
    """``Yes: a, b`` / ``No: x, y`` -> ``(complete, names)``.

    Raises
    ------
    ValueError
        On another form, or a ``Yes`` that names a property the robot does not have.
    """
    m = re.fullmatch(r"\s*(Yes|No):\s*([a-z][a-z0-9-]*(?:,\s*[a-z][a-z0-9-]*)?)\s*", text or "")
    if not m:
        raise ValueError(f"expected 'Yes: name' or 'No: name', got {text!r}")
    names = [n.strip() for n in m.group(2).split(",")]
    if m.group(1) == "Yes":
        bad = [n for n in names if n not in known]
        if bad:
            raise ValueError(f"'Yes' names unknown properties {bad}")
        return True, names
    return False, names


def check_pddl_answer(text: str, arities: dict, params: Sequence[str]) -> str:
    """Validate a translated precondition: known names, their arities, the action's parameters.

    Returns the normalised PDDL text.

    Raises
    ------
    PddlSyntaxError
        On malformed text or an unknown predicate, function, parameter or a wrong arity.
    """
    e = parse_sexpr(text)

    def walk(x):
        if isinstance(x, str):
            if x.startswith("?") and x[1:] not in params:
                raise PddlSyntaxError(f"unknown parameter {x}")
            if not x.startswith("?"):
                try:
                    float(x)
                except ValueError:
                    raise PddlSyntaxError(f"unexpected object or constant {x!r}") from None
            return
        if not x:
            raise PddlSyntaxError("empty expression")
        head = x[0]
        if head in ("not", "<=", ">=", "<", ">"):
            for a in x[1:]:
                walk(a)
            return
        if head not in arities:
            raise PddlSyntaxError(f"unknown predicate or function {head!r}")
        if len(x) - 1 != arities[head]:
            raise PddlSyntaxError(f"{head} takes {arities[head]} argument(s), got {len(x) - 1}")
        for a in x[1:]:
            walk(a)
    walk(e)

    return to_text(e)


# ---------------------------------------------------------------------------- prompts
def _domain_block(ctx: DiagnosisContext) -> str:
    task = ctx.task
    lines = ["Predicates and functions the robot knows:"]
    for f in task.problem.fluents:
        sig = " ".join(f"?{p.name} - {p.type.name}" for p in f.signature)
        kind = "function" if not f.type.is_bool_type() else "predicate"
        lines.append(f"- ({f.name}{' ' + sig if sig else ''}) [{kind}]: {task.describe(f.name)}")
    a = task.action(ctx.failure.step.name)
    params = " ".join(f"?{p.name} - {p.type.name}" for p in a.parameters)
    pre = " ".join(fnode_text(c) for c in task.conjuncts(a.name)) or "none"
    lines.append(f"Action ({a.name} {params}) has the preconditions: {pre}")
    return "\n".join(lines)


def _situation(ctx: DiagnosisContext) -> str:
    hist = ", ".join(str(s) for s, _ in ctx.history[-8:]) or "nothing yet"
    goal = f"Task: {ctx.goal_text}\n" if ctx.goal_text else ""
    return (f"{goal}Executed so far: {hist}\nFailed action: {ctx.failure.step}\n"
            f"Observation: {ctx.failure.observation}")


def cause_prompt(ctx: DiagnosisContext) -> str:
    """Cause analyser (role 1)."""
    return ("You are the cause analyser of a robot's task planner. An action failed although the "
            "planner believed it was possible, so the robot's knowledge is incomplete.\n"
            f"{_domain_block(ctx)}\n{_situation(ctx)}\n"
            "List up to three possible reasons for the failure, most likely first.\n"
            "Example: Observation: The door did not move when the robot pushed it.\n"
            "1. The door was locked.\n2. The robot was not close enough to the door.\n"
            "Reasons:\n")


def precondition_prompt(ctx: DiagnosisContext, reason: str) -> str:
    """Precondition generator (role 2)."""
    a = ctx.task.action(ctx.failure.step.name)
    params = ", ".join(f"?{p.name} ({p.type.name}, here {o})"
                       for p, o in zip(a.parameters, ctx.failure.step.args))
    return ("You are the precondition generator of a robot's task planner.\n"
            f"{_situation(ctx)}\nReason: {reason}\n"
            f"Parameters of {a.name}: {params}\n"
            "In one sentence, state the precondition the action is missing, using the parameters.\n"
            "Example: the door ?d must be unlocked before the robot can push it.\n"
            "Precondition:")


def property_prompt(ctx: DiagnosisContext, precondition: str, known: Sequence[str]) -> str:
    """Property-completeness evaluator (role 3)."""
    props = "\n".join(f"- {n}: {ctx.task.describe(n)}" for n in known)
    return ("You are the property-completeness evaluator of a robot's task planner.\n"
            f"Precondition: {precondition}\nThe robot's properties:\n{props}\n"
            "Can the precondition be written with these properties? Answer 'Yes: ' and the one "
            "predicate or the two functions it needs, or 'No: ' and names for the missing "
            "properties (lower-case words joined by hyphens).\n"
            "Example: Precondition: the box ?b must be lighter than what the arm ?a can carry.\n"
            "Answer: No: box-weight, arm-payload\nAnswer: ")


def translate_prompt(ctx: DiagnosisContext, precondition: str, arities: dict) -> str:
    """NL-to-PDDL translator (role 4)."""
    a = ctx.task.action(ctx.failure.step.name)
    params = " ".join(f"?{p.name}" for p in a.parameters)
    names = ", ".join(f"{n}/{k}" for n, k in sorted(arities.items()))
    return ("You are the natural-language-to-PDDL translator of a robot's task planner.\n"
            f"Precondition: {precondition}\nAction: ({a.name} {params})\n"
            f"Use only these predicates and functions (name/arity): {names}\n"
            "Write the precondition as one PDDL literal or comparison over the action's parameters.\n"
            "Example: (<= (box-weight ?b) (arm-payload ?a))\nPDDL: ")


def object_prompt(ctx: DiagnosisContext, cause: Candidate, objects: Sequence[str]) -> str:
    """Object expander (role 5)."""
    return ("You are the object expander of a robot's task planner. With the new precondition "
            f"{cause.pddl} the planner finds no plan with the objects the robot knows.\n"
            f"{_situation(ctx)}\nObjects in the environment the robot does not know yet: "
            f"{', '.join(objects)}\nWhich one object should the robot use? Object: ")


# ---------------------------------------------------------------------------- the diagnoser
class LlmDiagnoser:
    """LASP's five LLM roles behind :class:`core.lasp.diagnosis.Diagnoser`.

    Parameters
    ----------
    llm : models.llm.LlmClient
        The shared model (``complete(prompt, grammar=..., max_tokens=..., temperature=0.0, ...)``).
    similarity : callable
        Maps a proposed new property to the most similar environment property (by name and
        description), and orders objects after the expander's choice; lexical by default.
    max_reasons : int
        Reasons taken from the cause analyser (each costs three more calls).
    """

    name = "llm"

    def __init__(self, llm, *, similarity: Similarity | None = None, max_reasons: int = 3,
                 max_tokens: int = 96, timeout_s: float = 30.0):
        self.llm = llm
        self.similarity = similarity or lexical_similarity
        self.max_reasons = max_reasons
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.llm_calls = 0
        self._exchanges: list = []

    def take_exchanges(self) -> list:
        """The exchanges since the last call (for the trace)."""
        out, self._exchanges = self._exchanges, []
        return out

    def _ask(self, role: str, prompt: str, grammar: str, max_tokens: int | None = None) -> str | None:
        self.llm_calls += 1
        try:
            answer = self.llm.complete(prompt, grammar=grammar, max_tokens=max_tokens or self.max_tokens,
                                       temperature=0.0, timeout_s=self.timeout_s)
        except LlmError as exc:
            self._exchanges.append({"role": role, "prompt": prompt, "answer": None, "error": str(exc)})
            log.warning("LASP LLM %s failed: %s", role, exc)
            return None
        self._exchanges.append({"role": role, "prompt": prompt, "answer": answer})
        return answer

    def _verdict(self, verdict: str) -> None:
        if self._exchanges:
            self._exchanges[-1]["verdict"] = verdict

    def _env_props(self, ctx: DiagnosisContext) -> dict:
        known = {f.name for f in ctx.task.problem.fluents}
        return {p.name: p for p in ctx.sensing.properties() if p.name not in known}

    def _map_new(self, ctx: DiagnosisContext, proposed: list) -> list:
        """Each proposed property name -> the environment's most similar property (Sec. IV-B)."""
        env = self._env_props(ctx)
        if not env:
            return []
        names = list(env)
        texts = [f"{describe_name(n)}: {env[n].description}" for n in names]
        sim = check_similarity_output(self.similarity([describe_name(p) for p in proposed], texts),
                                      len(proposed), len(names))
        # a name unlike every environment property maps to none (its values would be made up)
        return list(dict.fromkeys(names[int(np.argmax(row))] for row in sim if row.max() > 0.05))

    def diagnose(self, ctx: DiagnosisContext) -> list:
        """Candidates from the five-role chain, in the cause analyser's order."""
        answer = self._ask("cause-analyser", cause_prompt(ctx), REASONS_GBNF, self.max_tokens * 2)
        reasons = parse_reasons(answer or "")[: self.max_reasons]
        if answer is not None and not reasons:
            self._verdict("rejected: no numbered reasons")
        out, seen = [], set()
        for rank, reason in enumerate(reasons):
            cand = self._one_reason(ctx, reason, rank)
            if cand is not None and cand.pddl not in seen:
                seen.add(cand.pddl)
                out.append(cand)
        return out

    def _one_reason(self, ctx: DiagnosisContext, reason: str, rank: int) -> Candidate | None:
        task, step = ctx.task, ctx.failure.step
        pre = self._ask("precondition-generator", precondition_prompt(ctx, reason), SENTENCE_GBNF)
        if not pre:
            return None
        known = [f.name for f in task.problem.fluents]
        ans = self._ask("property-evaluator", property_prompt(ctx, pre, known), property_grammar(known), 32)
        try:
            complete, names = parse_property_answer(ans or "", known)
        except ValueError as exc:
            self._verdict(f"rejected: {exc}")
            return None
        new = [] if complete else self._map_new(ctx, names)
        action = task.action(step.name)
        ptype = {p.name: p.type.name for p in action.parameters}
        params = list(ptype)
        types = {t.name for t in task.problem.user_types}

        def allowed(sig_types):
            return [[p for p in params if t not in types or task.is_subtype(ptype[p], t)]
                    for t in sig_types]
        env = self._env_props(ctx)
        bools, nums = {}, {}
        for f in task.problem.fluents:
            table = bools if f.type.is_bool_type() else nums
            table[f.name] = allowed([p.type.name for p in f.signature])
        for n in new:
            (nums if env[n].numeric else bools)[n] = allowed(env[n].param_types)
        arities = {n: len(v) for n, v in {**bools, **nums}.items()}
        if complete:  # keep the translator to what the evaluator chose
            bools = {n: v for n, v in bools.items() if n in names} or bools
            nums = {n: v for n, v in nums.items() if n in names} or nums
        try:
            grammar = pddl_grammar(bools, nums, params)
        except ValueError:
            return None
        shown = {n: len(v) for n, v in {**bools, **nums}.items()}
        text = self._ask("nl-to-pddl", translate_prompt(ctx, pre, shown), grammar, 48)
        try:
            pddl = check_pddl_answer(text or "", arities, params)
        except PddlSyntaxError as exc:
            self._verdict(f"rejected: {exc}")
            return None
        self._verdict("accepted")
        used_new = tuple(n for n in new if re.search(r"\(" + re.escape(n) + r"[ )]", pddl))
        return Candidate("precondition", pddl, step.name, score=1.0 / (1 + rank),
                         new_properties=used_new, description=pre,
                         reasons=(f"cause analyser: {reason}", f"precondition generator: {pre}",
                                  f"property evaluator: {ans}"))

    def rank_objects(self, ctx: DiagnosisContext, cause: Candidate) -> list:
        """The expander's choice first, then the other unknown objects by similarity."""
        objs = unknown_objects(ctx)
        if not objs:
            return []
        texts = [ctx.sensing.describe_object(o) for o in objs]
        sim = check_similarity_output(self.similarity([f"{ctx.failure.observation} {cause.description}"],
                                                      texts), 1, len(objs))[0]
        order = sorted(range(len(objs)), key=lambda i: -sim[i])
        answer = self._ask("object-expander", object_prompt(ctx, cause, objs), one_of_grammar(objs), 16)
        chosen = (answer or "").strip()
        if chosen in objs:
            self._verdict("accepted")
            order.remove(objs.index(chosen))
            order.insert(0, objs.index(chosen))
        elif answer is not None:
            self._verdict(f"rejected: {chosen!r} is not one of the candidates")
        return [Candidate("object", objs[i], cause.action, float(sim[i]), (), texts[i],
                          ("chosen by the object expander" if objs[i] == chosen else
                           f"similarity {sim[i]:.2f}",)) for i in order]
