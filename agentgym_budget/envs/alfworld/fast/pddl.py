"""A small reader for ALFWorld PDDL problems (objects, initial facts, goal formula).

It reads what Fast Downward's translator reads from ``game.tw-pddl``'s ``pddl_problem``:
names are lower-cased (Fast Downward's lisp parser lower-cases every token), ``;`` starts a
comment, untyped objects are of type ``object``, numeric assignments such as
``(= (distance a b) 3)`` and negative initial literals are ignored (they add no fact), and
duplicate object names are an error.  The goal is kept as a nested tuple formula that
:class:`GoalChecker` evaluates against a state.

Example:
    >>> problem = parse_problem('''(define (problem p) (:domain alfred)
    ...   (:objects agent1 - agent Apple_bar_1 - object Fridge_bar_1 - receptacle)
    ...   (:init (inReceptacle Apple_bar_1 Fridge_bar_1))
    ...   (:goal (exists (?o - object) (inReceptacle ?o Fridge_bar_1))))''')
    >>> problem.types["apple_bar_1"], sorted(problem.init)
    ('object', [('inreceptacle', 'apple_bar_1', 'fridge_bar_1')])
    >>> GoalChecker(problem.goal, problem.types).holds(SetFacts(problem.init))
    True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

__all__ = ["FactSource", "GoalChecker", "PddlSyntaxError", "Problem", "SetFacts", "parse_problem", "parse_sexpr"]

SExpr = Union[str, list["SExpr"]]
Fact = tuple[str, ...]
#: A goal formula: ``("atom", pred, args)``, ``("=", a, b)``, ``("not", f)``, ``("and", [f...])``,
#: ``("or", [f...])``, ``("exists", [(var, type)...], f)``, ``("forall", [(var, type)...], f)``,
#: ``("imply", f, g)``.
Formula = tuple[Any, ...]

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class PddlSyntaxError(ValueError):
    """The PDDL text is not a problem this reader (or Fast Downward) accepts."""


def parse_sexpr(text: str) -> SExpr:
    """Parse one s-expression; comments (``;`` to end of line) are dropped, tokens lower-cased."""
    text = re.sub(r";[^\n]*", "", text).lower()
    stack: list[list[SExpr]] = [[]]
    for token in _TOKEN.findall(text):
        if token == "(":
            stack.append([])
        elif token == ")":
            if len(stack) == 1:
                raise PddlSyntaxError("unbalanced ')' in PDDL text")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(token)
    if len(stack) != 1:
        raise PddlSyntaxError("unbalanced '(' in PDDL text")
    if len(stack[0]) != 1:
        raise PddlSyntaxError(f"expected one s-expression, found {len(stack[0])}")
    return stack[0][0]


@dataclass(frozen=True)
class Problem:
    """A parsed problem: declared ``types`` (name -> type), the ``init`` facts, the ``goal`` formula."""

    name: str
    types: dict[str, str]
    init: frozenset[Fact]
    goal: Formula


def _typed_list(items: Sequence[SExpr], default: str = "object") -> Iterator[tuple[str, str]]:
    """``a b - t c`` -> (a, t), (b, t), (c, default)."""
    pending: list[str] = []
    index = 0
    while index < len(items):
        item = items[index]
        if not isinstance(item, str):
            raise PddlSyntaxError(f"unexpected list {item!r} in a typed list")
        if item == "-":
            if index + 1 >= len(items) or not isinstance(items[index + 1], str):
                raise PddlSyntaxError("'-' without a type name in a typed list")
            type_name = items[index + 1]
            assert isinstance(type_name, str)
            yield from ((name, type_name) for name in pending)
            pending = []
            index += 2
            continue
        pending.append(item)
        index += 1
    yield from ((name, default) for name in pending)


def parse_problem(text: str) -> Problem:
    """Parse a PDDL problem (see the module docstring)."""
    tree = parse_sexpr(text)
    if not isinstance(tree, list) or len(tree) < 2 or tree[0] != "define":
        raise PddlSyntaxError("a PDDL problem starts with '(define (problem NAME) ...'")
    header = tree[1]
    if not (isinstance(header, list) and len(header) == 2 and header[0] == "problem"):
        raise PddlSyntaxError("a PDDL problem starts with '(define (problem NAME) ...'")
    types: dict[str, str] = {}
    init: set[Fact] = set()
    goal: Formula | None = None
    for section in tree[2:]:
        if not isinstance(section, list) or not section or not isinstance(section[0], str):
            raise PddlSyntaxError(f"unexpected problem section {section!r}")
        keyword = section[0]
        if keyword == ":objects":
            for name, type_name in _typed_list(section[1:]):
                if name in types:
                    raise PddlSyntaxError(f"error: duplicate object {name!r}")
                types[name] = type_name
        elif keyword == ":init":
            for literal in section[1:]:
                fact = _init_fact(literal)
                if fact is not None:
                    init.add(fact)
        elif keyword == ":goal":
            if len(section) != 2:
                raise PddlSyntaxError("(:goal ...) holds exactly one formula")
            goal = _formula(section[1])
    if goal is None:
        raise PddlSyntaxError("the PDDL problem has no (:goal ...)")
    for fact in init:
        for argument in fact[1:]:
            if argument not in types:
                raise PddlSyntaxError(f"initial fact {fact!r} names an undeclared object {argument!r}")
    return Problem(str(header[1]), types, frozenset(init), goal)


def _init_fact(literal: SExpr) -> Fact | None:
    if not isinstance(literal, list) or not literal or not isinstance(literal[0], str):
        raise PddlSyntaxError(f"unexpected initial literal {literal!r}")
    if literal[0] in ("=", "not"):  # numeric assignment / negative literal: no fact
        return None
    if not all(isinstance(arg, str) for arg in literal):
        raise PddlSyntaxError(f"unexpected initial literal {literal!r}")
    return tuple(literal)  # type: ignore[arg-type]


def _formula(node: SExpr) -> Formula:
    if not isinstance(node, list) or not node or not isinstance(node[0], str):
        raise PddlSyntaxError(f"unexpected goal formula {node!r}")
    head = node[0]
    if head == "and" or head == "or":
        return (head, [_formula(part) for part in node[1:]])
    if head == "not":
        if len(node) != 2:
            raise PddlSyntaxError("(not ...) takes one formula")
        return ("not", _formula(node[1]))
    if head == "imply":
        if len(node) != 3:
            raise PddlSyntaxError("(imply ...) takes two formulas")
        return ("imply", _formula(node[1]), _formula(node[2]))
    if head in ("exists", "forall"):
        if len(node) != 3 or not isinstance(node[1], list):
            raise PddlSyntaxError(f"({head} (vars) formula) expected")
        variables = list(_typed_list(node[1]))
        return (head, variables, _formula(node[2]))
    if not all(isinstance(arg, str) for arg in node[1:]):
        raise PddlSyntaxError(f"unexpected goal atom {node!r}")
    if head == "=":
        if len(node) != 3:
            raise PddlSyntaxError("(= a b) takes two arguments")
        return ("=", node[1], node[2])
    return ("atom", head, tuple(node[1:]))


class SetFacts:
    """A :class:`FactSource` over a plain set of facts (reference semantics, slow)."""

    def __init__(self, facts: Iterable[Fact]) -> None:
        self.facts = set(facts)

    def has(self, predicate: str, args: tuple[str, ...]) -> bool:
        return (predicate, *args) in self.facts

    def match(self, predicate: str, pattern: tuple[str | None, ...]) -> Iterable[tuple[str, ...]]:
        for fact in sorted(self.facts):
            if fact[0] == predicate and len(fact) == len(pattern) + 1:
                if all(p is None or p == v for p, v in zip(pattern, fact[1:])):
                    yield fact[1:]


class FactSource(Protocol):
    """What :class:`GoalChecker` reads: membership and pattern look-ups (``None`` = any value)."""

    def has(self, predicate: str, args: tuple[str, ...]) -> bool: ...

    def match(self, predicate: str, pattern: tuple[str | None, ...]) -> Iterable[tuple[str, ...]]: ...


_Check = Callable[[dict[str, str], FactSource], bool]


class GoalChecker:
    """Evaluates a goal formula against a :class:`FactSource`.

    The formula is compiled once: each existential block over a conjunction becomes a join
    plan (atoms with the most bound arguments first, each enumerating only the facts that
    match what is bound so far), so ALFWorld's goals cost a few look-ups per check.  Types
    follow Fast Downward: ``object`` is the root type (any declared name), other types match
    exactly (alfred.pddl's types are flat).
    """

    def __init__(self, goal: Formula, types: dict[str, str]) -> None:
        self.goal = goal
        self._types = types
        self._objects_of_type: dict[str, list[str]] = {"object": sorted(types)}
        for name in sorted(types):
            if types[name] != "object":
                self._objects_of_type.setdefault(types[name], []).append(name)
        self.predicates = frozenset(_predicates(goal))
        self._check = self._compile(goal, frozenset())

    def holds(self, facts: FactSource) -> bool:
        return self._check({}, facts)

    # -- compilation --------------------------------------------------------------------
    def _compile(self, f: Formula, bound: frozenset[str]) -> _Check:
        kind = f[0]
        if kind == "atom":
            predicate, terms = f[1], f[2]
            if not any(t.startswith("?") for t in terms):
                return lambda binding, src: src.has(predicate, terms)
            return lambda binding, src: src.has(predicate, tuple(binding.get(t, t) for t in terms))
        if kind == "=":
            left, right = f[1], f[2]
            return lambda binding, src: binding.get(left, left) == binding.get(right, right)
        if kind == "not":
            inner = self._compile(f[1], bound)
            return lambda binding, src: not inner(binding, src)
        if kind == "and":
            parts = [self._compile(p, bound) for p in f[1]]
            return lambda binding, src: all(p(binding, src) for p in parts)
        if kind == "or":
            parts = [self._compile(p, bound) for p in f[1]]
            return lambda binding, src: any(p(binding, src) for p in parts)
        if kind == "imply":
            premise, conclusion = self._compile(f[1], bound), self._compile(f[2], bound)
            return lambda binding, src: not premise(binding, src) or conclusion(binding, src)
        if kind == "exists":
            variables, body = _flatten_exists(f)
            return self._compile_join(variables, _conjuncts(body), bound)
        if kind == "forall":
            variables, body = dict(f[1]), f[2]
            inner = self._compile(body, bound | set(variables))
            domains = [(name, self._objects_of_type.get(t, [])) for name, t in variables.items()]

            def check_all(binding: dict[str, str], src: FactSource, index: int = 0) -> bool:
                if index == len(domains):
                    return inner(binding, src)
                name, values = domains[index]
                for value in values:
                    binding[name] = value
                    if not check_all(binding, src, index + 1):
                        del binding[name]
                        return False
                binding.pop(name, None)
                return True

            return check_all
        raise PddlSyntaxError(f"unknown goal formula {kind!r}")

    def _compile_join(self, variables: dict[str, str], parts: list[Formula], outer: frozenset[str]) -> _Check:
        """A nested-loop join for ``exists variables: and(parts)``."""
        bound = set(outer)
        pending = list(parts)
        steps: list[tuple[Any, ...]] = []
        while pending or any(v not in bound for v in variables):
            ready = [p for p in pending if _free(p) <= bound]
            if ready:
                for part in ready:
                    pending.remove(part)
                    steps.append(("test", self._compile(part, frozenset(bound))))
                continue
            atoms = [p for p in pending if p[0] == "atom"]
            if atoms:
                best = max(atoms, key=lambda a: (sum(1 for t in a[2] if not t.startswith("?") or t in bound), -len(a[2])))
                pending.remove(best)
                terms = best[2]
                new = tuple(dict.fromkeys(t for t in terms if t.startswith("?") and t not in bound))
                steps.append(("enum", best[1], terms, new, tuple(variables.get(v, "object") for v in new)))
                bound.update(new)
                continue
            name = next((v for v in variables if v not in bound), None)
            if name is None:  # a part with free variables bound nowhere: FD would reject the goal
                raise PddlSyntaxError(f"goal part {pending[0]!r} uses unbound variables")
            steps.append(("domain", name, self._objects_of_type.get(variables[name], [])))
            bound.add(name)
        types = self._types
        new_names = [s[3] if s[0] == "enum" else (s[1],) if s[0] == "domain" else () for s in steps]

        def run(binding: dict[str, str], src: FactSource, index: int = 0) -> bool:
            if index == len(steps):
                return True
            step = steps[index]
            if step[0] == "test":
                return step[1](binding, src) and run(binding, src, index + 1)
            if step[0] == "domain":
                name = step[1]
                for value in step[2]:
                    binding[name] = value
                    if run(binding, src, index + 1):
                        _unbind(binding, new_names[index])
                        return True
                _unbind(binding, new_names[index])
                return False
            _, predicate, terms, new, new_types = step
            pattern = tuple(None if t in new else binding.get(t, t) for t in terms)
            for fact in src.match(predicate, pattern):
                ok = True
                for term, value in zip(terms, fact):
                    if term in new:
                        current = binding.get(term)
                        if current is None:
                            wanted = new_types[new.index(term)]
                            if wanted != "object" and types.get(value) != wanted:
                                ok = False
                                break
                            binding[term] = value
                        elif current != value:
                            ok = False
                            break
                if ok and run(binding, src, index + 1):
                    _unbind(binding, new)
                    return True
                _unbind(binding, new)
            return False

        return run


def _unbind(binding: dict[str, str], names: tuple[str, ...]) -> None:
    for name in names:
        binding.pop(name, None)


def _free(f: Formula) -> set[str]:
    """Free variables of a formula."""
    kind = f[0]
    if kind == "atom":
        return {t for t in f[2] if t.startswith("?")}
    if kind == "=":
        return {t for t in f[1:] if t.startswith("?")}
    if kind == "not":
        return _free(f[1])
    if kind in ("and", "or"):
        return set().union(*(_free(p) for p in f[1])) if f[1] else set()
    if kind == "imply":
        return _free(f[1]) | _free(f[2])
    if kind in ("exists", "forall"):
        return _free(f[2]) - {name for name, _ in f[1]}
    raise PddlSyntaxError(f"unknown goal formula {kind!r}")


def _flatten_exists(f: Formula) -> tuple[dict[str, str], Formula]:
    """``exists(x, exists(y, phi))`` -> ({x: type, y: type}, phi)."""
    variables: dict[str, str] = {}
    while f[0] == "exists":
        variables.update(dict(f[1]))
        f = f[2]
    return variables, f


def _conjuncts(f: Formula) -> list[Formula]:
    """Flatten nested ``and``s into one list of parts."""
    if f[0] == "and":
        out: list[Formula] = []
        for part in f[1]:
            out.extend(_conjuncts(part))
        return out
    return [f]


def _predicates(f: Formula) -> Iterator[str]:
    kind = f[0]
    if kind == "atom":
        yield f[1]
    elif kind in ("and", "or"):
        for part in f[1]:
            yield from _predicates(part)
    elif kind == "not":
        yield from _predicates(f[1])
    elif kind == "imply":
        yield from _predicates(f[1])
        yield from _predicates(f[2])
    elif kind in ("exists", "forall"):
        yield from _predicates(f[2])
