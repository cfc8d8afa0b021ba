"""Faster TextWorld text generation for ALFWorld steps, with identical outputs.

Profiling an ALFWorld step (``ALFWorld-Rubric-v0`` on a generated game) shows about 98% of
its time in TextWorld's context-sensitive grammar: every step re-derives the text of every
admissible command, and every derivation re-parses the same template strings with TatSu
(``textgen._parse_and_convert`` and ``Rule.parse_conjunctive_query``), then deep-copies
symbols together with a context that holds the whole PDDL state (``Symbol.copy``).

:func:`enable` patches six pure spots, process-wide:

* ``textgen._parse_and_convert`` — memoised by its arguments; each call gets a fresh copy of
  the cached, context-free parse (unpickled from the bytes kept: callers mutate the symbols
  they get);
* ``Rule.parse_conjunctive_query`` — memoised by the expression (the rule is only read);
* ``Symbol.copy`` — copies the symbol *without* its old context, which the copy replaces
  straight away anyway, from its pickled bytes (kept per symbol: a conditional symbol copies
  its expression once per query match);
* ``textgen.copy_context`` — copies a derivation context's ``variables`` and ``mapping``
  dicts instead of deep-copying them.  The derivation only ever adds keys to those dicts
  (``query`` updates them); their values — the game's ``EntityInfo`` objects and
  ``textworld.logic`` placeholders/variables — are only read (the grammar's ``{...}``
  expressions read attributes such as ``o.name``), so sharing them gives the same texts.
  Deep-copying them was about 60 % of a patched step.
* ``ContextSensitiveGrammar.replace`` — the rule chosen is the first whose condition holds,
  as upstream's (which tests every rule's condition, then takes the first); its right-hand
  side is copied from pickled bytes kept per rule (as the parses) instead of deep-copied;
* ``ContextSensitiveGrammar.derive`` — the same derivation stack, with its two debugging
  flags (``TW_CSG_TRACE``, ``TW_CSG_DEBUG``) read once per derivation instead of at every
  symbol (an environment lookup each); with either flag set, upstream's own ``derive`` runs.

Outputs are unchanged (``tests/test_alfworld_fast_grammar.py`` compares whole episodes, in
separate processes, with and without it); the first three patches make steps about 2-3x faster, the fourth
about 2x faster again (random play on 12 generated games, 1,080 steps, one process each:
17.9 ms of CPU per step with the first three, 8.0 ms with all four, the same outputs — a
measurement script that was not kept; ``python bench/alfworld_env.py --split generated``
measures today's steps: 5.4 ms median for the upstream engine under all four patches).
``ALFWorld-Rubric-v0`` enables it when it is made (``fast_grammar=True``, the default); pass
``fast_grammar=False`` in a fresh process to run TextWorld untouched (a patch, once made,
stays for the life of the process).

Example:
    >>> from agent_envs.alfworld import fast_grammar
    >>> fast_grammar.enable()   # doctest: +SKIP
    True
"""

from __future__ import annotations

import copy
import logging
import pickle
import weakref
from typing import Any

__all__ = ["enable", "enabled"]

log = logging.getLogger(__name__)
_ENABLED = False


def enabled() -> bool:
    """Whether :func:`enable` has patched TextWorld in this process."""
    return _ENABLED


def enable() -> bool:
    """Patch TextWorld's grammar as described in the module doc (idempotent).

    Returns ``False`` (and changes nothing) when TextWorld is not installed.
    """
    global _ENABLED
    if _ENABLED:
        return True
    try:
        import textworld.logic as tw_logic
        from textworld.envs.pddl import textgen
    except ImportError:
        return False

    parse = textgen._parse_and_convert
    parsed: dict[Any, Any] = {}

    def cached_parse(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            hit = parsed[key]
        except KeyError:
            hit = parsed[key] = pickle.dumps(parse(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except TypeError:  # unhashable arguments: no memo
            return parse(*args, **kwargs)
        return pickle.loads(hit)  # a fresh copy (about 3x faster than copy.deepcopy)

    query = tw_logic.Rule.parse_conjunctive_query.__func__
    queries: dict[str, Any] = {}

    def cached_query(cls: type, expr: str) -> Any:
        rule = queries.get(expr)
        if rule is None:
            rule = queries[expr] = query(cls, expr)
        return rule

    copied: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()

    def copy_without_context(self: Any, context: Any) -> Any:
        # only ConditionalSymbol.derive copies, once per query match, its expression (which
        # nothing mutates): pickled once, each copy unpickled (as the parses)
        saved = self.context
        self.context = {}
        try:
            data = copied.get(self)
            if data is None:
                data = copied[self] = pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)
            clone = pickle.loads(data)
        except (pickle.PicklingError, TypeError, ValueError, AttributeError):  # unpicklable: deep-copy
            clone = copy.deepcopy(self)
        finally:
            self.context = saved
        clone.context = textgen.copy_context(context)
        return clone

    def shallow_context(context: Any) -> dict[str, Any]:
        return {
            "state": context["state"],
            "facts": context["facts"],
            "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]),
            "entity_infos": context["entity_infos"],
        }

    textgen._parse_and_convert = cached_parse
    tw_logic.Rule.parse_conjunctive_query = classmethod(cached_query)
    textgen.Symbol.copy = copy_without_context
    textgen.copy_context = shallow_context
    _patch_derivation(textgen)
    _ENABLED = True
    log.info("TextWorld grammar memoisation enabled")
    return True


def _patch_derivation(textgen: Any) -> None:
    """Patch ``ContextSensitiveGrammar.replace`` and ``.derive`` (the module doc's last two spots)."""
    from textworld.logic import Rule
    from textworld.utils import check_flag

    grammar_class = textgen.ContextSensitiveGrammar
    upstream_derive = grammar_class.derive
    rhs_bytes: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()  # rule -> its pickled rhs

    def holds(rule: Any, start: Any) -> bool:
        if not rule.condition:
            return True
        query = Rule.parse_conjunctive_query(rule.condition)
        return any(True for _ in start.context["state"].all_assignments(query, start.context["mapping"]))

    def replace(self: Any, start: Any) -> list[Any]:
        rules = self._rules.get(str(start))
        if not rules:
            raise textgen.CSGUnknownSymbolError(start)
        rule = next((r for r in rules if holds(r, start)), None)
        if rule is None:
            raise IndexError("list index out of range")  # upstream's rules[0] of no rule
        kept = rhs_bytes.get(rule)
        if kept is None:
            kept = rhs_bytes[rule] = pickle.dumps(rule.rhs, protocol=pickle.HIGHEST_PROTOCOL)
        symbols = pickle.loads(kept)
        for symbol in symbols:
            symbol.context = textgen.copy_context(start.context)
        return symbols

    def derive(self: Any, start: str, context: Any = {}) -> str:  # noqa: B006 - upstream's signature
        if check_flag("TW_CSG_TRACE") or check_flag("TW_CSG_DEBUG"):
            return upstream_derive(self, start, context)
        stack = textgen._parse_and_convert(start, rule_name="symbols", trace=False)[::-1]
        for symbol in stack:
            symbol.context = textgen.copy_context(context)
        derived = []
        while stack:
            symbol = stack.pop()
            if isinstance(symbol, textgen.TerminalSymbol):
                derived.append(symbol)
            elif isinstance(symbol, textgen.NonterminalSymbol):
                stack += self.replace(symbol)[::-1]
            elif isinstance(symbol, (textgen.ConditionalSymbol, textgen.EvalSymbol, textgen.ListSymbol)):
                stack += symbol.derive()[::-1]
            else:
                raise NotImplementedError(f"Unknown symbol: {type(symbol)}")
        return "".join(map(str, derived))

    grammar_class.replace = replace
    grammar_class.derive = derive
