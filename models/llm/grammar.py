"""GBNF grammars: a syntax check run before llama.cpp sees a grammar, and the landmark-list grammar.

llama.cpp's GBNF parser (``grammars/README.md`` in llama.cpp) accepts rules ``name ::= alternatives``;
items are string literals, character classes ``[...]``/``[^...]``, ``.``, rule references and
parenthesised groups, each optionally followed by ``*``, ``+``, ``?`` or ``{m}``, ``{m,}``, ``{m,n}``.
A grammar that references an undefined rule or lacks ``root`` can crash the whole process inside
generation, so :func:`validate_gbnf` rejects those (and any syntax error) with a :class:`GrammarError`
that names the line.
"""

from __future__ import annotations

import re

from models.llm.errors import GrammarError

_NAME = re.compile(r"[A-Za-z0-9-]+")
_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:(,)\s*(\d*)\s*)?\}")
_ESCAPES = {"n", "t", "r", "\\", '"', "[", "]", "-", "^", "x", "u", "U", "/"}
MAX_LIST_ITEMS = 10
MAX_PHRASE_WORDS = 8
MAX_WORD_CHARS = 20


class _Parser:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.defined: dict[str, int] = {}
        self.refs: list[tuple[str, int]] = []

    def line(self, pos: int | None = None) -> int:
        return self.s.count("\n", 0, self.i if pos is None else pos) + 1

    def fail(self, msg: str) -> GrammarError:
        return GrammarError(f"GBNF line {self.line()}: {msg}")

    def skip(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            elif c in " \t\r" or (newlines and c == "\n"):
                self.i += 1
            else:
                break

    def escape(self) -> None:
        self.i += 1  # backslash
        if self.i >= len(self.s) or self.s[self.i] not in _ESCAPES:
            raise self.fail(f"bad escape sequence at {self.s[self.i - 1:self.i + 1]!r}")
        kind = self.s[self.i]
        self.i += 1
        width = {"x": 2, "u": 4, "U": 8}.get(kind, 0)
        digits = self.s[self.i:self.i + width]
        if width and not re.fullmatch(r"[0-9A-Fa-f]{%d}" % width, digits):
            raise self.fail(f"\\{kind} needs {width} hex digits")
        self.i += width

    def literal(self) -> None:
        self.i += 1
        while True:
            if self.i >= len(self.s) or self.s[self.i] == "\n":
                raise self.fail("unterminated string literal")
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\":
                self.escape()
            else:
                self.i += 1

    def char_class(self) -> None:
        self.i += 1
        if self.s[self.i:self.i + 1] == "^":
            self.i += 1
        count = 0
        while True:
            if self.i >= len(self.s) or self.s[self.i] == "\n":
                raise self.fail("unterminated character class")
            c = self.s[self.i]
            if c == "]":
                if count == 0:
                    raise self.fail("empty character class")
                self.i += 1
                return
            if c == "\\":
                self.escape()
            else:
                self.i += 1
            count += 1

    def repeat(self) -> None:
        self.skip(newlines=False)
        if self.i < len(self.s) and self.s[self.i] in "*+?":
            self.i += 1
        elif self.s.startswith("{", self.i):
            m = _REPEAT.match(self.s, self.i)
            if not m:
                raise self.fail("bad repetition, expected {m}, {m,} or {m,n}")
            lo, comma, hi = m.group(1), m.group(2), m.group(3)
            if comma and hi and int(hi) < int(lo):
                raise self.fail(f"repetition {{{lo},{hi}}} has max below min")
            self.i = m.end()

    def sequence(self, nested: bool) -> None:
        items = 0
        while True:
            self.skip(newlines=nested)
            if self.i >= len(self.s):
                break
            c = self.s[self.i]
            if c == '"':
                self.literal()
            elif c == "[":
                self.char_class()
            elif c == ".":
                self.i += 1
            elif c == "(":
                self.i += 1
                self.alternatives(nested=True)
                self.skip(newlines=True)
                if self.s[self.i:self.i + 1] != ")":
                    raise self.fail("missing ')'")
                self.i += 1
            else:
                m = _NAME.match(self.s, self.i)
                if not m:
                    break
                if re.match(r"[A-Za-z0-9-]+\s*::=", self.s[self.i:]):
                    break  # the next rule starts
                self.refs.append((m.group(0), self.i))
                self.i = m.end()
            items += 1
            self.repeat()
        if items == 0 and not nested:
            raise self.fail("empty alternative")

    def alternatives(self, nested: bool) -> None:
        self.sequence(nested)
        while True:
            self.skip(newlines=nested)
            if self.s[self.i:self.i + 1] != "|":
                return
            self.i += 1
            self.skip(newlines=True)
            self.sequence(nested)

    def grammar(self) -> None:
        while True:
            self.skip(newlines=True)
            if self.i >= len(self.s):
                break
            m = _NAME.match(self.s, self.i)
            if not m:
                raise self.fail(f"expected a rule name, got {self.s[self.i:self.i + 10]!r}")
            name, self.i = m.group(0), m.end()
            self.skip(newlines=False)
            if not self.s.startswith("::=", self.i):
                raise self.fail(f"expected '::=' after rule name {name!r}")
            if name in self.defined:
                raise self.fail(f"rule {name!r} defined twice (first on line {self.defined[name]})")
            self.defined[name] = self.line()
            self.i += 3
            self.alternatives(nested=False)
            self.skip(newlines=False)
            if self.i < len(self.s) and self.s[self.i] != "\n":
                raise self.fail(f"unexpected {self.s[self.i]!r}")


def validate_gbnf(text: str) -> None:
    """Check a GBNF grammar's syntax and references without llama.cpp.

    Parameters
    ----------
    text : str
        GBNF source.

    Raises
    ------
    GrammarError
        On a syntax error (with its line), a reference to an undefined rule, a rule defined twice or
        a missing ``root`` rule.
    """
    if not isinstance(text, str) or not text.strip():
        raise GrammarError("GBNF grammar is empty")
    p = _Parser(text)
    p.grammar()
    for name, pos in p.refs:
        if name not in p.defined:
            raise GrammarError(f"GBNF line {p.line(pos)}: rule {name!r} is referenced but not defined")
    if "root" not in p.defined:
        raise GrammarError("GBNF grammar has no 'root' rule")


def numbered_list_rule(item: str, max_items: int = MAX_LIST_ITEMS) -> str:
    """The GBNF expression ``"1. " ITEM "\\n" ("2. " ITEM "\\n" (...)?)?`` for 1..``max_items`` items, each the
    rule named ``item`` (nested optionals: item k only after item k-1).

    Raises
    ------
    ValueError
        If ``max_items`` is outside 1..99.
    """
    if not 1 <= max_items <= 99:
        raise ValueError(f"max_items must be in 1..99, got {max_items}")
    tail = ""
    for k in range(max_items, 1, -1):
        tail = f'("{k}. " {item} "\\n"{(" " + tail) if tail else ""})?'
    return f'"1. " {item} "\\n" {tail}'


def landmark_list_grammar(max_items: int = MAX_LIST_ITEMS) -> str:
    """GBNF for a numbered list ``1. phrase\\n2. phrase\\n...`` of 1..``max_items`` short noun phrases.

    A phrase is 1..8 words of letters, digits, ``'`` and ``-`` (a comma may follow a word, as in
    "a big, blue tree"). Whatever the model, constrained output parses with
    :func:`models.llm.prompts.parse_numbered_list`.
    """
    return (
        f'root ::= {numbered_list_rule("phrase", max_items)}\n'
        f'phrase ::= word (","? " " word){{0,{MAX_PHRASE_WORDS - 1}}}\n'
        f"word ::= [A-Za-z0-9] [A-Za-z0-9'-]{{0,{MAX_WORD_CHARS - 1}}}\n"
    )


LANDMARK_LIST_GBNF = landmark_list_grammar()
