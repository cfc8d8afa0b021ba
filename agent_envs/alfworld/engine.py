"""Driver of the real ALFWorld engine: textworld's ``PddlEnv`` with a fast, exact reset.

The engine stack is the one ALFWorld itself plays TextWorld games with, minus
``AlfredTWEnv`` (which needs ``traj_data.json`` files the game set lacks)::

    AlfredInfos(AlfredDemangler(RestorablePddlEnv(infos), shuffle=False))

:class:`RestorablePddlEnv` is textworld's :class:`~textworld.envs.pddl.PddlEnv` with one
change: the grounding of the PDDL problem is done once per game and kept.  Upstream builds a
new ``PddlState`` on every ``load`` and every ``reset``, and each construction runs
fast-downward's ``pddl2sas`` translator twice (plain, and optimised for the re-planner);
that is about 90 % of a reset and the same output every time for a given game.  Here the
translation is memoised (process-wide, keyed by the domain and problem text) and a reset
rebuilds the initial state from it:

* the C library is put back in the initial state of the same SAS text: by the state's number
  in the library's registry (``set_state_id``) when the library holds the task, else by
  loading it (``load_sas`` / ``load_sas_replan``, what a fresh construction does after
  translating).  The engines of a process that play one game share one copy of the library
  (:class:`_GameLib`; at most 48 per process, their memory measured in docs/arena.md), each
  setting it to its own state before using it, so a sibling moving to the next game seldom
  parses a SAS text;
* the Python-side fact store is rebuilt by adding the same propositions in the same order as
  a fresh construction, so even the iteration order of its sets (which the text grammar's
  queries follow) is identical.

* the texts the grammar derives for the initial state (the welcome text and the admissible
  command strings — the other half of a reset's cost) are kept from the first reset and
  reused; the applicable operators are read from the restored library state and checked
  against the first reset's.

The translation, the parsed game logic (a tatsu parse of the text grammar) and the initial
texts are kept process-wide (LRU, 256 games), so G sibling environments of one game in one
process ground and derive it once.

A restored state is therefore indistinguishable from a fresh load: the test-suite replays
games through both stacks and compares every observation, admissible-command list, fact set
and won flag.

**Transition memo.**  A step's result — the feedback, the next facts, the admissible
commands, the won flag: everything ``PddlEnv.step`` puts in the game state — is a function
of the game, the engine's current fact state and the command (the derived texts do not
depend on the path that led to the state, nor on the iteration order of the fact store:
outputs are identical under different ``PYTHONHASHSEED`` values).  Siblings, updates, seeds
and methods of an RL comparison revisit the same (game, state) pairs again and again, and
different action histories converge on the same state ("look", "examine" and opening then
closing change nothing; "go to" forgets the way).  So each step is looked up in one
process-wide :class:`TransitionMemo` keyed by ``(game, digest of the fact state,
command)`` (of the facts' numbers in the game's :class:`_FactTable`, sorted); a hit returns
the stored state without touching the engine, and the engine *lags*: it is brought to the current state (restore the initial state, then apply the
recorded operators — C calls, no text derivation) only when a step misses.  Tested equal to
direct play, step by step, on thousands of random steps (``tests/test_alfworld_transitions.py``).

**A step that misses** still runs ``PddlEnv.step``, whose ``_gather_infos`` (the applicable
actions and the text of each one's command) is replaced here by an equivalent that keeps
what a game does not change: each operator name's action (its mapping and templates, built
once per game, process-wide — upstream builds textworld placeholders for every operator of
every state), the command templates and entity names, one fact list for all of a state's
derivations (the grammar reads the ``state``, never that list), and each derivation's memo
key built once per predicate set from the facts' texts (strings compare in C, propositions
in Python).  Tested equal to upstream's ``_gather_infos`` in every state of random play.
An applicable operator's name and action are looked up by its id (the index of the game's
grounded operator), so the library's names are decoded once per game, not once per state.

**Derivation keys.**  A derivation (a command's text, an action's feedback) is memoised by
the game, the template, the facts of the predicates it can query and the part of the
action's mapping it can read: the variables it names, and an unnamed variable only where a
query could have bound it (a query never binds a new placeholder to a variable the mapping
holds, so such a variable changes the matches only if it is of a placeholder's type and an
argument of a queried fact).  "go to desk 1" then has one text and one feedback from
whichever location the agent comes (:func:`derivation_reads`, :func:`_narrowed`).

``fast_downward.pddl2sas`` replaces ``sys.argv`` (a hack of the translator's option parser)
and swaps ``sys.stdout`` while it runs; :func:`preserve_process_state` puts back the caller's
own objects (``sys.argv``, ``sys.stdout``/``sys.stderr``, the working directory, the root
logger's handlers) around every translation, so library code never changes them.

Nothing here is imported by ``import agent_envs``; textworld and alfworld load on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import os
import sys
import threading
from array import array
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

if TYPE_CHECKING:
    from textworld.core import GameState

__all__ = [
    "GameFileError",
    "TransitionMemo",
    "Translation",
    "derivation_inputs",
    "derivation_reads",
    "engine_infos",
    "game_logic",
    "make_engine",
    "make_raw_engine",
    "preserve_process_state",
    "read_game_file",
    "require_engine",
    "transition_memo",
    "translate",
    "translation_cache_clear",
    "translation_cache_info",
    "translation_dir",
]

logger = logging.getLogger(__name__)

#: Keys every ``game.tw-pddl`` file must have.
GAME_KEYS = ("pddl_domain", "grammar", "pddl_problem")


#: The packages of the engine (the ``alfworld`` extra) and the command that installs them.
ENGINE_PACKAGES = ("alfworld", "textworld")
INSTALL = 'pip install "rubricgym[alfworld]"'


def require_engine() -> None:
    """Raise a ``ModuleNotFoundError`` naming :data:`INSTALL` when a package of the engine is
    missing (found without importing it, so making an environment stays cheap)."""
    import importlib.util

    for name in ENGINE_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ModuleNotFoundError(
                f"ALFWorld-Rubric-v0 plays the real ALFWorld engine, whose package {name!r} is not "
                f"installed: {INSTALL}", name=name)


class GameFileError(ValueError):
    """A game file cannot be read, is not JSON, or lacks the PDDL parts (names the path)."""


def read_game_file(path: str | Path) -> dict[str, Any]:
    """Read and check one ``game.tw-pddl`` file.

    Raises:
        GameFileError: unreadable file, invalid JSON, or missing ``pddl_domain`` /
            ``grammar`` / ``pddl_problem``; the message names the path.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO or device would block the read
        raise GameFileError(f"cannot read ALFWorld game file {path}: not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GameFileError(f"cannot read ALFWorld game file {path}: {exc}") from exc
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise GameFileError(f"corrupt ALFWorld game file {path}: not valid JSON "
                            f"({type(exc).__name__}: {exc})") from exc
    check_game_data(data, str(path))
    return data


def check_game_data(data: Any, label: str) -> None:
    """Raise :class:`GameFileError` unless ``data`` is a mapping with the PDDL parts as strings."""
    if not isinstance(data, Mapping):
        raise GameFileError(f"corrupt ALFWorld game file {label}: expected a JSON object")
    missing = [k for k in GAME_KEYS if not isinstance(data.get(k), str) or not data.get(k)]
    if missing:
        raise GameFileError(f"corrupt ALFWorld game file {label}: missing or empty {', '.join(missing)}")


@contextlib.contextmanager
def preserve_process_state() -> Iterator[None]:
    """Run a block that may clobber process state, then restore the caller's.

    Restores ``sys.argv`` (the same list object, with its original items), ``sys.stdout`` and
    ``sys.stderr`` (when the block left others in place), the working directory and the root
    logger's handler list. fast-downward's translator replaces ``sys.argv`` with
    ``['translate.py', 'domain', 'task']``; textworld runs it inside every ``PddlState``.

    Example:
        >>> import sys
        >>> before = sys.argv
        >>> with preserve_process_state():
        ...     sys.argv = ["translate.py", "domain", "task"]
        >>> sys.argv is before
        True
    """
    argv, argv_items = sys.argv, list(sys.argv)
    stdout, stderr = sys.stdout, sys.stderr
    try:
        cwd: str | None = os.getcwd()
    except OSError:  # the working directory was removed: nothing to go back to
        cwd = None
    handlers = list(logging.root.handlers)
    try:
        yield
    finally:
        sys.argv = argv
        if argv != argv_items:
            argv[:] = argv_items
        if sys.stdout is not stdout:
            sys.stdout = stdout
        if sys.stderr is not stderr:
            sys.stderr = stderr
        if cwd is not None:
            with contextlib.suppress(OSError):
                if os.getcwd() != cwd:
                    os.chdir(cwd)
        if logging.root.handlers != handlers:
            logging.root.handlers[:] = handlers


# ------------------------------------------------------------------------------------------
# The memoised translation
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Translation:
    """The grounded problem of one game (the output of fast-downward's translator).

    Attributes:
        task: The normalised PDDL task object (read only).
        sas: SAS text of the plain translation (what the engine steps on).
        sas_replan: SAS text of the optimised translation (what the re-planner uses).
        sas_bytes / sas_replan_bytes: the same, encoded for the C library.
        name2type: object name -> PDDL type name.
        init_facts: the propositions of the problem's ``:init``, in the translator's order.
    """

    task: Any
    sas: str
    sas_replan: str
    sas_bytes: bytes
    sas_replan_bytes: bytes
    name2type: Mapping[str, str]
    init_facts: tuple[Any, ...]


_CACHE_SIZE = 256
_cache: OrderedDict[str, Translation] = OrderedDict()
_cache_lock = threading.Lock()
_translate_lock = threading.Lock()  # pddl2sas swaps sys.stdout/sys.argv: one at a time
_stats = {"hits": 0, "misses": 0}


def _cache_key(domain: str, problem: str) -> str:
    h = hashlib.sha1(domain.encode("utf-8"))
    h.update(b"\0")
    h.update(problem.encode("utf-8"))
    return h.hexdigest()


def _init_propositions(task: Any, name2type: Mapping[str, str]) -> tuple[Any, ...]:
    """The ``:init`` atoms as textworld propositions (equality and numeric fluents dropped)."""
    import fast_downward
    from textworld.logic import Proposition, Variable

    atom_cls = fast_downward.translate.pddl.conditions.Atom
    assign_cls = fast_downward.translate.pddl.f_expression.Assign
    out = []
    for atom in task.init:
        if isinstance(atom, atom_cls):
            if atom.predicate == "=":
                continue
            out.append(Proposition(atom.predicate, [Variable(a, name2type[a]) for a in atom.args]))
        elif isinstance(atom, assign_cls):
            if atom.fluent.symbol == "total-cost":
                continue
            value = f"{atom.expression.value}"
            if value.isdigit():  # distances between locations are not facts
                continue
            out.append(Proposition(value, [Variable(a, name2type[a]) for a in atom.fluent.args]))
    return tuple(out)


def _translate(domain: str, problem: str) -> Translation:
    with _translate_lock, preserve_process_state():  # pddl2sas replaces sys.argv
        import fast_downward

        task, sas = fast_downward.pddl2sas(domain, problem)
        _, sas_replan = fast_downward.pddl2sas(domain, problem, optimize=True)
    name2type = {o.name: o.type_name for o in task.objects}
    return Translation(
        task=task,
        sas=sas,
        sas_replan=sas_replan,
        sas_bytes=sas.encode("utf-8"),
        sas_replan_bytes=sas_replan.encode("utf-8"),
        name2type=name2type,
        init_facts=_init_propositions(task, name2type),
    )


def translation_dir() -> Path | None:
    """Where translations are kept between processes: ``$RUBRICGYM_CACHE/alfworld/translations``
    (``RUBRICGYM_CACHE`` defaults to ``~/.cache/rubricgym``); ``RUBRICGYM_TRANSLATION_CACHE=0``
    turns the disk copy off (``None``)."""
    if os.environ.get("RUBRICGYM_TRANSLATION_CACHE", "1") == "0":
        return None
    from agent_envs.alfworld.data import cache_root

    return cache_root() / "alfworld" / "translations"


#: Version of the translation files' layout (part of their names: a new layout never reads an old file).
_TRANSLATION_FORMAT = 2


@functools.cache
def _translation_tag() -> str:
    """Layout, translator and Python versions of the translation files (read once)."""
    from importlib import metadata

    try:
        version = metadata.version("fast-downward-textworld")
    except metadata.PackageNotFoundError:  # pragma: no cover - installed with alfworld
        version = "unknown"
    return f"v{_TRANSLATION_FORMAT}-fd{version}-py{sys.version_info[0]}{sys.version_info[1]}"


def _translation_file(key: str) -> Path | None:
    folder = translation_dir()
    return None if folder is None else folder / f"{key}-{_translation_tag()}.pickle"


def _load_translation(key: str) -> Translation | None:
    """The translation kept on disk by an earlier process, or ``None`` (absent, unreadable or
    corrupt: a corrupt file is named in a warning and translated again)."""
    import pickle

    path = _translation_file(key)
    if path is None or not path.is_file():
        return None
    try:
        result = pickle.loads(path.read_bytes())
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, TypeError,
            ValueError) as exc:  # a truncated or foreign file: translate again
        logger.warning("ignoring the corrupt ALFWorld translation cache file %s (%s)", path, exc)
        return None
    if not isinstance(result, Translation):
        return None
    # textworld's propositions do not survive pickling (their variables lose what the state's
    # queries match on), so the file keeps them as plain (name, ((variable, type), ...))
    # tuples, in the translator's order (the fact store's iteration order follows it)
    from textworld.logic import Proposition, Variable

    facts = tuple(Proposition(name, [Variable(v, t) for v, t in args]) for name, args in result.init_facts)
    return dataclasses.replace(result, init_facts=facts)


def _store_translation(key: str, result: Translation) -> None:
    """Keep a translation on disk (atomically; a read-only cache is skipped silently)."""
    import pickle
    import tempfile

    path = _translation_file(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".partial-", delete=False) as fh:
            plain = tuple((f.name, tuple((v.name, v.type) for v in f.arguments)) for f in result.init_facts)
            fh.write(pickle.dumps(dataclasses.replace(result, init_facts=plain), protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(fh.name, path)
    except OSError as exc:
        logger.debug("cannot keep the ALFWorld translation in %s: %s", path, exc)


def translate(domain: str, problem: str) -> Translation:
    """Ground a PDDL problem with fast-downward (both translations), memoised per process.

    The result depends only on the two texts, so it is shared by every environment of the
    process that plays the same game (sibling rollouts pay the translation once), and kept
    on disk for later processes (:func:`translation_dir`; a pickle of 0.3-0.6 MB per game
    loads in ~2 ms where translating takes 0.3-1 s).
    """
    key = _cache_key(domain, problem)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            _stats["hits"] += 1
            return hit
    result = _load_translation(key)
    if result is None:
        result = _translate(domain, problem)
        _store_translation(key, result)
    with _cache_lock:
        _stats["misses"] += 1
        _cache[key] = result
        _cache.move_to_end(key)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return result


_logic_cache: OrderedDict[str, Any] = OrderedDict()
_texts_cache: OrderedDict[str, Any] = OrderedDict()
_constants_cache: OrderedDict[str, Any] = OrderedDict()


def _lru_get(cache: OrderedDict[str, Any], key: str) -> Any:
    with _cache_lock:
        value = cache.get(key)
        if value is not None:
            cache.move_to_end(key)
        return value


def _lru_put(cache: OrderedDict[str, Any], key: str, value: Any) -> None:
    with _cache_lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)


def game_logic(domain: str, grammar: str) -> Any:
    """textworld's parsed ``GameLogic`` of a game, memoised per process.

    The parse (a tatsu grammar parse of the whole text grammar) depends only on the two
    texts; the engine only reads the logic (the type hierarchy gets the same types added on
    every state construction, which is idempotent), so environments share it.
    """
    from textworld.envs.pddl import logic as pddl_logic

    key = _cache_key(domain, grammar)
    logic = _lru_get(_logic_cache, key)
    if logic is None:
        logic = pddl_logic.GameLogic(domain=domain, grammar=grammar)
        _lru_put(_logic_cache, key, logic)
    return logic


def translation_cache_info() -> dict[str, int]:
    """Hits, misses and current size of the process-wide translation cache."""
    with _cache_lock:
        return {"hits": _stats["hits"], "misses": _stats["misses"], "size": len(_cache)}


def translation_cache_clear() -> None:
    """Forget every memoised translation, parsed logic and initial text (the next load of
    each game translates and derives again)."""
    with _cache_lock:
        _cache.clear()
        _logic_cache.clear()
        _texts_cache.clear()
        _constants_cache.clear()
        _initial_atoms.clear()
        _stats["hits"] = _stats["misses"] = 0


# ------------------------------------------------------------------------------------------
# The engine with a restorable initial state
# ------------------------------------------------------------------------------------------


def _restored_state(downward_lib: Any, problem: str, logic: Any, tr: Translation) -> Any:
    """A textworld ``PddlState`` in the game's initial state, built from a translation, on a
    library the caller has put in that state (:meth:`_GameLib.restore_initial`).

    Equivalent to ``textworld.envs.pddl.logic.PddlState(downward_lib, problem, logic)`` (which
    translates the problem again): the same attributes, the C library in the initial state of
    the same SAS text, and the same propositions added in the same order.
    """
    import textworld.logic
    from textworld.envs.pddl import logic as pddl_logic

    state = pddl_logic.PddlState.__new__(pddl_logic.PddlState)
    state._facts = defaultdict(set)
    state._vars_by_name = {}
    state._vars_by_type = defaultdict(set)
    state._var_counts = Counter()
    state._logic = logic
    state.downward_lib = downward_lib
    state.pddl_problem = problem
    state.task, state.sas, state.sas_replan = tr.task, tr.sas, tr.sas_replan
    state._actions = {a.name: a for a in tr.task.actions}
    for t in tr.task.types:
        try:
            logic.types.add(textworld.logic.Type(t.name, t.supertype_names))
        except ValueError:  # already known (every reset after the first)
            pass
    state.name2type = dict(tr.name2type)
    state.add_facts(tr.init_facts)
    current = _initial_atoms.get(tr.sas_bytes)
    if current is None:  # the SAS text's initial atoms are the same on every restore
        size = downward_lib.get_state_size()
        atoms = (pddl_logic.Atom * size)()
        downward_lib.get_state(atoms)
        facts = [atom.get_fact(state.name2type) for atom in atoms]
        current = tuple(f for f in facts if not f.is_negation)
        _bounded_put(_initial_atoms, tr.sas_bytes, current, _CACHE_SIZE)
    state.add_facts(current)
    return state


#: SAS text -> the positive facts of its initial atoms (propositions are never mutated by
#: a state: ``apply`` adds and removes whole facts, so states may share them).
_initial_atoms: dict[bytes, tuple[Any, ...]] = {}


@dataclass(frozen=True)
class _InitialTexts:
    """What the grammar derives for a game's initial state (identical on every reset)."""

    intro: str
    command_templates: tuple[str, ...]
    action_ids: tuple[int, ...]
    action_templates: tuple[str, ...]
    valid_commands: tuple[str, ...]
    admissible_commands: tuple[str, ...]
    digest: str


def _fact_text(fact: Any) -> str:
    """``str(fact)``, from the process-wide table."""
    text = _fact_texts.get(fact)
    if text is None:
        text = str(fact)
        if len(_fact_texts) >= _FACT_TEXTS_SIZE:
            _fact_texts.clear()
        _fact_texts[fact] = text
    return text


_FACT_TEXTS_SIZE = 200_000
_fact_texts: dict[Any, str] = {}


def _bounded_put(table: dict[Any, Any], key: Any, value: Any, limit: int) -> None:
    """``table[key] = value``, emptying a full table first (for tables of values that are
    cheap to recompute: clear-when-full keeps memory bounded at no bookkeeping cost)."""
    with _cache_lock:
        if len(table) >= limit:
            table.clear()
        table[key] = value


def _lru_lookup(table: LRUCache, key: Any) -> Any:
    """``table.get(key)`` under the cache lock (an LRU lookup reorders the table)."""
    with _cache_lock:
        return table.get(key)


def _lru_store(table: LRUCache, key: Any, value: Any) -> None:
    """``table[key] = value`` under the cache lock (the least recently used entry goes when full)."""
    with _cache_lock:
        table[key] = value


class _FactTable:
    """One game's propositions by number (kept with the game's :class:`_GameConstants`).

    The transition memo keeps a state's facts as a tuple of these numbers: a tuple of ints is
    an object the garbage collector stops tracking, where a list of some 180 propositions is
    one that every full collection traverses reference by reference (for a memo of thousands
    of transitions, most of a collection's work).  A game has a few thousand distinct facts,
    so the table stays small; equal propositions share one entry.  The numbers also name a
    fact state (:meth:`digest`: the transition memo's key), without formatting and sorting
    the texts of its propositions.

    Example:
        >>> table = _FactTable()
        >>> ids = table.encode(["at a", "at b"]); ids, table.encode(["at b"])
        ((0, 1), (1,))
        >>> table.decode(ids)
        ['at a', 'at b']
        >>> table.digest(ids) == table.digest(table.encode(["at b", "at a"])) != table.digest((1,))
        True
    """

    _serials = itertools.count()

    def __init__(self) -> None:
        self._facts: list[Any] = []
        self._ids: dict[Any, int] = {}
        #: distinguishes this table's digests from another table's (which numbers facts otherwise)
        self._serial = next(_FactTable._serials).to_bytes(8, "little")

    def encode(self, facts: Sequence[Any]) -> tuple[int, ...]:
        """The numbers of ``facts``, in order (new facts get the next numbers)."""
        ids = list(map(self._ids.get, facts))
        if None in ids:
            with _cache_lock:  # one writer; a fact is in the list before a reader can find its number
                for i, fact in enumerate(facts):
                    if ids[i] is None:
                        number = self._ids.get(fact)
                        if number is None:
                            number = len(self._facts)
                            self._facts.append(fact)
                            self._ids[fact] = number
                        ids[i] = number
        return tuple(ids)

    def decode(self, ids: Sequence[int]) -> list[Any]:
        """The facts of ``ids``, as a new list."""
        return list(map(self._facts.__getitem__, ids))

    def digest(self, ids: Sequence[int]) -> str:
        """sha1 of the fact state ``ids`` numbers (order independent; the table's own: two
        tables number facts differently, so a digest never names a state of another table)."""
        return hashlib.sha1(self._serial + array("I", sorted(ids)).tobytes()).hexdigest()


#: The game state's lists of texts, kept in the memo as tuples (which the collector stops tracking).
_TEXT_LISTS = ("command_templates", "_valid_commands", "admissible_commands")


@dataclass(frozen=True)
class _Transition:
    """One memoised step: the game state ``PddlEnv.step`` produced (minus the operator
    objects, which belong to the engine that made them, and the facts, kept as numbers of the
    game's :class:`_FactTable`; lists of texts kept as tuples), the operator applied
    (``None``: nothing happened) and the digest of the next fact state."""

    state: Mapping[str, Any]
    facts: tuple[int, ...]
    table: _FactTable
    op: int | None
    digest: str

    @classmethod
    def of(cls, state: Mapping[str, Any], table: _FactTable, op: int | None, digest: str | None) -> _Transition:
        """The transition that produced ``state`` (as ``PddlEnv.step`` returned it); the digest
        of its facts is computed when ``digest`` is ``None``."""
        kept = {k: tuple(v) if k in _TEXT_LISTS else v for k, v in state.items()
                if k not in ("_valid_actions", "_entity_infos", "_facts")}
        facts = table.encode(state["_facts"])
        return cls(kept, facts, table, op, table.digest(facts) if digest is None else digest)

    def game_state(self) -> dict[str, Any]:
        """The game state as ``PddlEnv.step`` returned it (new lists; the operator objects left out)."""
        state = {k: list(v) if k in _TEXT_LISTS else v for k, v in self.state.items()}
        state["_facts"] = self.table.decode(self.facts)
        return state


class TransitionMemo:
    """The process-wide memo of engine transitions (see the module doc), bounded: when full,
    the least recently used transition is forgotten (a long comparison keeps what its
    current seeds revisit; emptying the whole table when full lost it every ~3 seeds).

    Attributes:
        hits / misses: steps answered from the memo / run by an engine.
        replayed: operators applied to bring a lagging engine to its current state.

    Example:
        >>> memo = TransitionMemo(max_entries=2)
        >>> memo.put(("game", "s0", "look"), "first")
        >>> memo.put(("game", "s0", "inventory"), "second")
        >>> memo.get(("game", "s0", "look"))                   # used: now the most recent
        'first'
        >>> memo.put(("game", "s1", "look"), "third")          # full: "second" goes
        >>> len(memo), memo.get(("game", "s0", "inventory")), memo.get(("game", "s0", "look"))
        (2, None, 'first')
    """

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = int(max_entries)
        self.enabled = True
        self._entries: LRUCache = LRUCache(maxsize=self.max_entries)
        self.hits = self.misses = self.replayed = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, str, str]) -> Any:
        """The stored value of ``key`` or ``None``."""
        return _lru_lookup(self._entries, key)

    def put(self, key: tuple[str, str, str], value: Any) -> None:
        """Store ``value`` (the least recently used entry is forgotten when full)."""
        _lru_store(self._entries, key, value)

    def clear(self) -> None:
        """Forget every transition and zero the counters."""
        with _cache_lock:
            self._entries.clear()
            self.hits = self.misses = self.replayed = 0

    def stats(self) -> dict[str, float]:
        """Counters and hit rate."""
        total = self.hits + self.misses
        return {"transition_hits": self.hits, "transition_misses": self.misses,
                "transition_replayed": self.replayed, "transition_entries": len(self._entries),
                "transition_hit_rate": self.hits / total if total else 0.0}


_transitions = TransitionMemo()

# ------------------------------------------------------------------------------------------
# Memoised text derivations
# ------------------------------------------------------------------------------------------

#: Node types a grammar ``{...}`` expression may use to count as a pure read of its variables.
_PURE_EXPR_NODES = ("Expression", "Name", "Load", "Attribute", "BoolOp", "Or", "And", "BinOp", "Add", "Constant")
_LIST_SYMBOLS = ("list_empty", "list_separator", "list_last_separator")


def _pure_expression(expression: str) -> bool:
    """Whether an eval symbol only reads attributes of the context's variables."""
    import ast

    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if type(node).__name__ not in _PURE_EXPR_NODES:
            return False
        if isinstance(node, ast.Name) and node.id in ("context", "self"):
            return False
    return True


def _query_parts(expression: str) -> tuple[set[str], set[tuple[str, str]]]:
    """The predicates and the (name, type) placeholders of a conjunctive query."""
    import textworld.logic

    rule = textworld.logic.Rule.parse_conjunctive_query(expression)
    return {p.name for p in rule.preconditions}, {(ph.name, ph.type) for ph in rule.placeholders}


@dataclass(frozen=True)
class _Reads:
    """What a derivation can read (:func:`derivation_reads`)."""

    predicates: frozenset[str]  # the facts of these predicates
    names: frozenset[str]  # the action's variables by these placeholder names
    placeholders: frozenset[tuple[str, str]]  # (name, type) of its queries' placeholders


def derivation_inputs(grammar: Any, start: str) -> frozenset[str] | None:
    """The predicates whose facts a derivation of ``start`` can read, or ``None``.

    A derivation reads the context's variables (the entity infos of the action's mapping),
    the facts that its conditional symbols and its rules' conditions query, and nothing
    else — unless an eval symbol runs more than attribute reads (``None``: not memoisable).
    Every rule reachable from ``start`` counts, whichever one a state selects.
    """
    reads = derivation_reads(grammar, start)
    return None if reads is None else reads.predicates


def derivation_reads(grammar: Any, start: str) -> _Reads | None:
    """:func:`derivation_inputs`, with what else a derivation of ``start`` can read of the
    action's mapping: the variables its queries and eval symbols name, and its queries'
    placeholders (a query never binds a placeholder it adds to a variable the mapping already
    holds, so an unnamed mapping variable can still change its matches: see
    :func:`_narrowed`)."""
    from textworld.envs.pddl import textgen

    preds: set[str] = set()
    names: set[str] = set()
    placeholders: set[tuple[str, str]] = set()
    seen: set[str] = set()
    stack = list(textgen._parse_and_convert(start, rule_name="symbols"))

    def add_query(expression: str) -> None:
        query_preds, query_phs = _query_parts(expression)
        preds.update(query_preds)
        placeholders.update(query_phs)

    while stack:
        sym = stack.pop()
        if isinstance(sym, textgen.TerminalSymbol):
            continue
        if isinstance(sym, textgen.EvalSymbol):
            if not _pure_expression(sym.expression):
                return None
            names.update(_expression_names(sym.expression))
        elif isinstance(sym, textgen.ConditionalSymbol):
            if sym.given:
                add_query(sym.given)
            stack.append(sym.expression)
        elif isinstance(sym, textgen.ListSymbol):
            stack.append(sym.symbol)
            stack += [textgen.NonterminalSymbol(name) for name in _LIST_SYMBOLS]
        elif isinstance(sym, textgen.NonterminalSymbol):
            name = str(sym.symbol)
            if name in seen:
                continue
            seen.add(name)
            rules = grammar._rules.get(name)
            if not rules:
                return None  # the real derivation raises its own error
            for rule in rules:
                if rule.condition:
                    add_query(rule.condition)
                stack += list(rule.rhs)
        else:
            return None
    names.update(name for name, _ in placeholders)
    return _Reads(frozenset(preds), frozenset(names), frozenset(placeholders))


def _expression_names(expression: str) -> set[str]:
    """The variable names an eval symbol reads."""
    import ast

    return {node.id for node in ast.walk(ast.parse(expression.strip(), mode="eval")) if isinstance(node, ast.Name)}


class _MemoGrammar:
    """A game's grammar whose ``derive`` is memoised by everything a derivation reads:
    the game (its entity infos), the template, the part of the action's mapping it can read
    and the facts of the predicates the template can query (:func:`derivation_reads`).  A
    step derives the text of every applicable command (25-40 in ALFWorld), and most are the
    same from one step to the next ("go to" a receptacle queries only where receptacles
    are, whichever location the agent goes from)."""

    def __init__(self, grammar: Any, game_key: str) -> None:
        self._grammar, self._game = grammar, game_key

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grammar, name)

    def derive(self, start: str, context: Mapping[str, Any] | None = None, *,
               mapping_key: Any = None, read: dict[frozenset[str], frozenset[str]] | None = None) -> str:
        """The grammar's ``derive(start, context)``, from the memo when its inputs were seen.

        ``mapping_key`` (``frozenset(context["mapping"].items())`` when ``None``) and ``read``
        (a table of one state's fact texts by predicate set, filled on use) let a caller
        deriving many templates in one state compute each part of the key once.
        """
        context = context or {}
        if mapping_key is None and context.get("state") is not None:
            mapping_key = _mapping_key(context.get("mapping", {}))
        key = self.key(start, context.get("state"), mapping_key, read)
        return self.derive_keyed(start, key, lambda: context)

    def key(self, start: str, state: Any, mapping_key: frozenset[Any], read: dict[Any, Any] | None) -> Any:
        """The memo key of deriving ``start`` in ``state`` with the mapping ``mapping_key``
        (``None``: not memoised, when there is no state, the memo is off or the template's reads
        are unknown); ``read`` as :meth:`derive`'s."""
        if state is None or not _transitions.enabled:
            return None
        reads = self._reads(start, state)
        if reads is None:
            return None
        inputs = reads[0].predicates
        facts = read.get(inputs) if read is not None else None
        if facts is None:
            facts = _fact_texts_of(state, inputs)
            if read is not None:
                read[inputs] = facts
        return (self._game, start, _narrowed(reads, mapping_key, state, read), facts)

    def derive_keyed(self, start: str, key: Any, context: Callable[[], Mapping[str, Any]]) -> str:
        """The text of ``start`` stored under ``key`` (:meth:`key`), else derived in the context
        ``context()`` returns (built only then: most derivations are found) and stored."""
        text = None if key is None else _lru_lookup(_derived, key)
        if text is None:
            text = self._grammar.derive(start, context())
            if key is not None:
                _lru_store(_derived, key, text)
        return text

    def _reads(self, start: str, state: Any) -> tuple[_Reads, Any] | None:
        """:func:`derivation_reads` of ``start`` and the state's logic, whose types
        :func:`_narrowed` reads (process-wide per game: a game is loaded again and again)."""
        key = (self._game, start)
        found = _reads_cache.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            reads = derivation_reads(self._grammar, start)
            found = None if reads is None else (reads, state._logic)
            _bounded_put(_reads_cache, key, found, _READS_SIZE)
        return found


def _narrowed(reads: tuple[_Reads, Any], mapping_key: frozenset[Any], state: Any,
              read: dict[Any, Any] | None) -> frozenset[Any]:
    """The part of an action's mapping a derivation can read.

    A derivation reads a mapping variable by its placeholder's name (an eval symbol, or a
    query binding it), or through a query's rule that the placeholders a query adds are never
    bound to a variable the mapping holds: an unnamed variable matters only when it is of a
    (sub)type of such a placeholder *and* an argument of a fact of a queried predicate (the
    only candidates a query tries).  Everything else of the mapping is left out of the key.
    """
    splits = _narrow_cache.get(reads[0])
    if splits is None:
        splits = {}
        _bounded_put(_narrow_cache, reads[0], splits, _READS_SIZE)
    split = splits.get(mapping_key)
    if split is None:
        split = _split_mapping(reads, mapping_key)
        _bounded_put(splits, mapping_key, split, _READS_SIZE)
    named, candidates = split
    if not candidates:
        return named
    key = ("args", reads[0].predicates)
    args = read.get(key) if read is not None else None
    if args is None:
        args = _fact_args_of(state, reads[0].predicates)
        if read is not None:
            read[key] = args
    matched = [item for item in candidates if item[1] in args]
    return named | frozenset(matched) if matched else named


def _split_mapping(reads: tuple[_Reads, Any], mapping_key: frozenset[Any]) -> tuple[frozenset[Any], frozenset[Any]]:
    """(the mapping items a derivation names, the unnamed ones whose type could match a
    placeholder its queries add); every unnamed item is a candidate when a type is unknown."""
    parts, logic = reads
    bound = {(ph.name, ph.type) for ph, _ in mapping_key}
    named = frozenset(item for item in mapping_key if item[0].name in parts.names) or _EMPTY
    rest = mapping_key - named or _EMPTY
    try:
        types = {t.name for n, ty in parts.placeholders if (n, ty) not in bound for t in logic.types.get(ty).subtypes}
    except Exception:  # noqa: BLE001 - a type the logic does not know: keep every variable
        return named, rest
    return named, frozenset(item for item in rest if item[1].type in types) or _EMPTY


def _mapping_key(mapping: Mapping[Any, Any]) -> frozenset[Any]:
    """``frozenset(mapping.items())``, one object per distinct mapping (process-wide): the keys
    of the derivation memo share it instead of each holding a copy the collector must traverse."""
    items = tuple(mapping.items())
    key = _mapping_keys.get(items)
    if key is None:
        key = frozenset(items) or _EMPTY
        _bounded_put(_mapping_keys, items, key, _READS_SIZE)
    return key


def _fact_args_of(state: Any, predicates: frozenset[str]) -> frozenset[Any]:
    """The variables that are arguments of ``state``'s facts of the given predicates."""
    return frozenset(v for sig, group in state._facts.items() if sig.name in predicates for f in group
                     for v in f.arguments)


_READS_SIZE = 100_000
_reads_cache: dict[tuple[str, str], Any] = {}
#: what a derivation reads -> {mapping key -> its split (:func:`_split_mapping`)}
_narrow_cache: dict[_Reads, dict[frozenset[Any], tuple[frozenset[Any], frozenset[Any]]]] = {}
_mapping_keys: dict[tuple[Any, ...], frozenset[Any]] = {}
#: The empty frozenset every cache shares (``frozenset()`` is a new, collector-tracked object each time).
_EMPTY: frozenset[Any] = frozenset()


_UNKNOWN = object()


def _fact_texts_of(state: Any, predicates: frozenset[str]) -> frozenset[str]:
    """The texts of ``state``'s facts of the given predicates (a derivation's fact inputs:
    texts compare as fast strings where propositions compare in Python)."""
    if not predicates:
        return _EMPTY  # most command templates read no facts at all
    return frozenset(_fact_text(f) for sig, group in state._facts.items() if sig.name in predicates for f in group)


class _GameLogicView:
    """A shared ``GameLogic`` seen through one game's :class:`_MemoGrammar`."""

    def __init__(self, logic: Any, game_key: str) -> None:
        self._base = logic
        self.grammar = _MemoGrammar(logic.grammar, game_key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)


_DERIVED_SIZE = 100_000
_derived: LRUCache = LRUCache(maxsize=_DERIVED_SIZE)


def transition_memo() -> TransitionMemo:
    """The process-wide :class:`TransitionMemo`; ``.enabled = False`` turns it off, and with it
    the memoised text derivations (both change speed only)."""
    return _transitions


class _GameLib:
    """A copy of fast-downward's library holding one game's SAS task, for every engine of the
    process that plays the game.

    Loading a task (``load_sas``: parsing the SAS text) was a tenth of a worker's time in an RL
    comparison, whose sibling engines move from game to game.  The library keeps every state
    it reaches in a registry, by number; an engine records the number of its own state and,
    holding :attr:`lock`, puts the library back in that state (``set_state_id``) before using
    it, so that engines of one game share one library.  :attr:`generation` changes whenever the
    library is given a task again (another game, or the same one reloaded to empty a large
    registry): every recorded number of an earlier generation is void, and an engine holding
    one rebuilds its state (initial state, then its operators) as after a reset.
    """

    #: states a registry may hold before the next return to the initial state reloads the task
    MAX_STATES = 50_000

    def __init__(self) -> None:
        self.lib: Any = None  # the library copy, loaded by the first _game_lib call
        self.lock = threading.RLock()
        self.task: bytes | None = None  # the SAS text loaded
        self.generation = 0
        self.initial = 0  # number of the task's initial state
        self.top = 0  # the largest state number an engine has left (the registry's size, near enough)

    def restore_initial(self, tr: Translation, *, reload: bool = False) -> None:
        """Put the library in ``tr``'s initial state (holding :attr:`lock`): by its number when
        the task is loaded, else (or with ``reload``, or a full registry) by loading it."""
        lib = self.lib
        if reload or self.task != tr.sas_bytes or self.top > self.initial + self.MAX_STATES:
            lib.load_sas(tr.sas_bytes)
            lib.load_sas_replan(tr.sas_replan_bytes)
            self.task, self.initial = tr.sas_bytes, lib.get_state_id()
            self.top = self.initial
            self.generation += 1
        else:
            lib.set_state_id(self.initial)
            lib.get_applicable_operators_count()  # the library's applicable set, as after a load

    def enter(self, state_id: int | None) -> None:
        """Put the library in the state numbered ``state_id`` (holding :attr:`lock`)."""
        if state_id is not None and self.lib.get_state_id() != state_id:
            self.lib.set_state_id(state_id)
            self.lib.get_applicable_operators_count()  # the library's applicable set of that state


_GAME_LIBS = 48  # libraries kept per process
_game_libs: OrderedDict[bytes, _GameLib] = OrderedDict()


def _game_lib(tr: Translation) -> _GameLib:
    """The process's library for ``tr``'s game: the one holding its task, else a new one (up to
    ``_GAME_LIBS``), else the least recently used one (given this task on its first restore)."""
    with _cache_lock:
        glib = _game_libs.pop(tr.sas_bytes, None)
        if glib is None and len(_game_libs) >= _GAME_LIBS:
            glib = _game_libs.popitem(last=False)[1]
        glib = _game_libs[tr.sas_bytes] = glib or _GameLib()  # now the most recently used
    if glib.lib is None:
        import fast_downward

        with glib.lock:
            if glib.lib is None:
                glib.lib = fast_downward.load_lib()
    return glib


def _apply_operator(state: Any, op: int) -> None:
    """``state.apply`` of the applicable operator with id ``op``, as after
    ``state.all_applicable_actions()`` but without building its textworld ``Action``
    objects (C calls only: ``apply`` needs only the operator table and the id)."""
    _read_operators(state)
    if op not in state._operators:  # pragma: no cover - defensive
        raise RuntimeError(f"ALFWorld transition memo: operator {op} is not applicable in the replayed state")
    state.apply(_OperatorId(op))


def _read_operators(state: Any) -> None:
    """Set ``state._operators`` (what ``PddlState.apply`` looks an action's operator up in) to
    the library's applicable operators, as ``state.all_applicable_actions()`` does."""
    import fast_downward

    lib = state.downward_lib
    operators = (fast_downward.Operator * lib.get_applicable_operators_count())()
    lib.get_applicable_operators(operators)
    state._operators = {o.id: o for o in operators}


@dataclass(frozen=True)
class _OperatorId:
    """What ``PddlState.apply`` reads of an action: its operator id."""

    id: int


@dataclass(frozen=True)
class _ActionSpec:
    """What every applicable action of one operator name shares (see :func:`_action_spec`)."""

    name: str
    mapping: tuple[tuple[Any, Any], ...]
    mapping_key: frozenset[tuple[Any, Any]]
    variables: tuple[tuple[str, str], ...]  # (placeholder name, entity id) for the context
    command_template: str
    feedback_rule: str
    #: ``dict(mapping)``, for derivation contexts only (never handed out: an action gets its own)
    mapping_dict: dict[Any, Any] = field(default_factory=dict, compare=False, hash=False)


def _action_spec(pddl: Any, logic: Any, operator_name: str,
                 terms: dict[tuple[str, str, str], tuple[Any, Any]]) -> _ActionSpec:
    """The action of an operator name (``"go agent1 loc1 loc2"``), as textworld's
    ``all_applicable_actions`` builds it: the PDDL action's parameters bound to the
    operator's arguments, the logic's command template and feedback rule.

    ``terms`` holds the game's (placeholder, variable) pairs by value: every spec of a game
    shares them (they are only read), which keeps the long-lived objects the garbage collector
    traverses in proportion to a game's entities instead of its grounded operators."""
    from textworld.logic import Placeholder, Variable

    def pair(placeholder: str, variable: str, type_name: str) -> tuple[Any, Any]:
        key = (placeholder, variable, type_name)
        found = terms.get(key)
        if found is None:
            found = terms[key] = (Placeholder(placeholder, type_name), Variable(variable, type_name))
        return found

    name, *arguments = operator_name.split()
    mapping = tuple(pair(p.name.strip("?"), arg, p.type_name) for p, arg in zip(pddl._actions[name].parameters, arguments))
    rule = logic.actions[name]
    return _ActionSpec(name=name, mapping=mapping, mapping_key=frozenset(mapping),
                       variables=tuple((ph.name, var.name) for ph, var in mapping),
                       command_template=rule.template, feedback_rule=rule.feedback_rule, mapping_dict=dict(mapping))


class _Actions(Sequence):
    """A state's applicable actions as ``PddlState.all_applicable_actions()`` lists them, each
    built when first read.

    ``PddlEnv.step`` reads one action of the list, the one its command names; building the
    textworld ``Action`` of every applicable operator (25-40 per ALFWorld state) for every
    state the engine computes was a tenth of a step's work.  An action read twice is the same
    object.

    Args:
        applicable: (operator id, spec) of each action, in the engine's order.
        templates: Each action's command template (the spec's when ``None``).
    """

    def __init__(self, applicable: Sequence[tuple[int, _ActionSpec]], templates: Sequence[str] | None = None) -> None:
        self._applicable = applicable
        self._templates = templates
        self._built: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._applicable)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        index = range(len(self))[index]  # IndexError, negative indices
        action = self._built.get(index)
        if action is None:
            action = self._built[index] = self._build(index)
        return action

    def _build(self, index: int) -> Any:
        import textworld.logic

        op_id, spec = self._applicable[index]
        action = textworld.logic.Action(name=spec.name, preconditions=[], postconditions=[])
        action.id = op_id
        action.mapping = dict(spec.mapping)
        action.command_template = spec.command_template if self._templates is None else self._templates[index]
        action.feedback_rule = spec.feedback_rule
        return action


@dataclass
class _GameConstants:
    """What :meth:`_Restoring._gather_infos` reads of a loaded game, computed once."""

    command_templates: tuple[str, ...]
    names: dict[str, str]  # entity id -> name (after the demangler named them)
    actions: dict[str, _ActionSpec]  # operator name -> its action's parts
    #: operator id -> its name and spec (ids index the game's grounded operators, the same in
    #: every engine of the game: reading a name from the library decodes it every time)
    operators: dict[int, tuple[str, _ActionSpec]] = field(default_factory=dict)
    #: the game's propositions by number (the transition memo's facts)
    facts: _FactTable = field(default_factory=_FactTable)
    #: (placeholder, variable, type) -> the pair every spec of the game shares (:func:`_action_spec`)
    terms: dict[tuple[str, str, str], tuple[Any, Any]] = field(default_factory=dict)


class _Restoring:
    """What :class:`RestorablePddlEnv` changes in textworld's ``PddlEnv`` (see module doc).

    A mixin placed before ``PddlEnv`` (``class RestorablePddlEnv(_Restoring, PddlEnv)``), so
    that this module imports without textworld: :func:`_restorable_env_class` builds the
    class on first use.
    """

    _translation: Translation | None = None
    _initial_texts: _InitialTexts | None = None
    use_memo: bool = True  # consult the process-wide TransitionMemo (see the module doc)
    _path: tuple[int, ...] = ()  # operators applied since reset (the current state)
    _real_path: tuple[int, ...] | None = ()  # operators the engine has applied (None: unknown)
    _digest = ""
    _glib: _GameLib | None = None  # the game's library (shared, see _GameLib)
    _glib_gen = -1  # its generation this engine's state number belongs to
    _state_id: int | None = None  # the number of this engine's state in the library's registry

    def __init__(self, infos: Any = None) -> None:
        # PddlEnv.__init__ minus load_lib(): the library is the game's, shared (_GameLib)
        import textworld

        textworld.Environment.__init__(self, infos)

    @property
    def downward_lib(self) -> Any:
        """The library this engine plays on (its game's, shared; ``None`` without a game)."""
        return None if self._glib is None else self._glib.lib

    def load(self, filename_or_data: str | Path | Mapping[str, Any]) -> None:
        if isinstance(filename_or_data, Mapping):
            check_game_data(filename_or_data, "<game data>")
            data = dict(filename_or_data)
            self._game_file = None
        else:
            data = read_game_file(filename_or_data)
            self._game_file = str(filename_or_data)
        label = self._game_file or "<game data>"
        # Nothing of the engine changes until the new game has loaded: a game that fails
        # leaves the engine without a game (never half of one).
        self._game_data = None
        self._translation = None
        self._initial_texts = None
        self._glib = None
        self.__dict__.pop("_memo_game_key", None)
        self.__dict__.pop("_constants", None)
        self._digest = ""
        try:
            logic = game_logic(data["pddl_domain"], data["grammar"])
            translation = translate(data["pddl_domain"], data["pddl_problem"])
            glib = _game_lib(translation)
            with glib.lock:
                glib.restore_initial(translation, reload=self._replans(data.get("walkthrough")))
                state = _restored_state(glib.lib, data["pddl_problem"], logic, translation)
                self._glib, self._glib_gen, self._state_id = glib, glib.generation, glib.initial
            self._logic, self._pddl_state = logic, state
            self._path = self._real_path = ()
            entity_infos = self._get_entity_infos()
            self._base_logic = logic
        except GameFileError:
            raise
        except Exception as exc:  # tatsu parse errors, translator assertion errors, ...
            raise GameFileError(
                f"corrupt ALFWorld game file {label}: the engine cannot load it "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        self._game_data, self._translation = data, translation
        self._just_loaded = True
        self.walkthrough = data.get("walkthrough", None)
        self._entity_infos = entity_infos

    def _initial_state(self) -> Any:
        """The game's initial state, the library put in it (call holding the library)."""
        glib = self._glib
        if self._translation is None or self._game_data is None or glib is None:
            raise RuntimeError("no ALFWorld game is loaded (the last load failed); load one first")
        # a task the planner runs on is loaded afresh, as upstream does on every reset
        glib.restore_initial(self._translation, reload=self._replans(self.walkthrough))
        self._glib_gen = glib.generation
        return _restored_state(glib.lib, self._game_data["pddl_problem"], self._base_logic, self._translation)

    def _replans(self, walkthrough: Any) -> bool:
        """Whether this engine runs fast-downward's planner on a game with this walkthrough
        (oracle plans; the walkthrough, when the game has none)."""
        infos = self.request_infos
        return bool(infos.policy_commands or ("walkthrough" in infos.extras and not walkthrough))

    @contextlib.contextmanager
    def _lib_held(self) -> Iterator[_GameLib]:
        """Hold the game's library, in this engine's state (see :class:`_GameLib`)."""
        while True:
            glib = self._glib
            if glib is None:
                raise RuntimeError("no ALFWorld game is loaded (the last load failed); load one first")
            with glib.lock:
                if glib.generation == self._glib_gen:
                    glib.enter(self._state_id)
                    try:
                        yield glib
                    finally:
                        self._state_id = glib.lib.get_state_id()
                        glib.top = max(glib.top, self._state_id)
                    return
            self._reattach()

    def _reattach(self) -> None:
        """The library was given a task again: take the game's library and rebuild this
        engine's state in it (the initial state, then the operators applied since)."""
        if self._translation is None or self._game_data is None:
            raise RuntimeError("no ALFWorld game is loaded (the last load failed); load one first")
        glib = _game_lib(self._translation)
        with glib.lock:
            self._glib = glib
            self._pddl_state = self._initial_state()
            path = self._real_path or ()
            for op in path:
                _apply_operator(self._pddl_state, op)
            _read_operators(self._pddl_state)  # the next step applies one of them
            self._real_path = path
            self._state_id = glib.lib.get_state_id()

    def reset(self) -> GameState:
        with self._lib_held():
            return self._reset()

    def _reset(self) -> GameState:
        # Same sequence as PddlEnv.reset, with the kept grounding instead of a new one.
        from textworld.core import GameState

        if not self.__dict__.pop("_just_loaded", False):  # load() has just built this state
            self._pddl_state = self._initial_state()
        if self.use_memo and not isinstance(self._logic, _GameLogicView):
            # after load: the demangler has named the entities, so the game key is final
            self._logic = _GameLogicView(self._base_logic, self._memo_game)
        self.prev_state = None
        self.state = GameState()
        self._last_action = None
        self._moves = 0
        initial = self._initial_texts
        texts_key = None
        if initial is None:
            texts_key = self._memo_game
            initial = self._initial_texts = _lru_get(_texts_cache, texts_key)
        if initial is None:
            self._derive_initial_texts(texts_key)
        else:
            self.state.feedback = initial.intro
            self.state.raw = initial.intro
            self._gather_initial_infos(initial)
        if "walkthrough" in self.request_infos.extras:
            self.state["extra.walkthrough"] = self.walkthrough or self._pddl_state.replan(
                self._entity_infos
            )
        self._path, self._real_path = (), ()
        self._digest = self._initial_texts.digest if self._initial_texts else ""
        return self.state

    def step(self, command: str) -> tuple[Any, int, bool]:
        """``PddlEnv.step``, answered from the transition memo when it knows (module doc)."""
        from textworld.core import GameState

        self.__dict__.pop("_just_loaded", None)
        if not self.use_memo or not _transitions.enabled or not self._digest:
            self._digest = ""  # the rest of this episode runs on the engine alone
            with self._lib_held():
                self._catch_up()
                result = super().step(command)
            if self._last_action is not None:  # what a rebuild of this state replays (_reattach)
                self._path += (int(self._last_action.id),)
                self._real_path = self._path
            return result
        key = (self._memo_game, self._digest, command.strip())
        hit = _transitions.get(key)
        if hit is None:
            _transitions.misses += 1
            with self._lib_held():
                self._catch_up()
                state, _score, _done = super().step(command)
            op = None if self._last_action is None else int(self._last_action.id)
            hit = _Transition.of(state, self._game_constants().facts, op, self._digest if op is None else None)
            _transitions.put(key, hit)
            self._real_path = self._path + ((op,) if op is not None else ())
        else:
            _transitions.hits += 1
            self.prev_state = self.state
            self.state = GameState(hit.game_state())
            self.state["_entity_infos"] = dict(self._entity_infos)
        if hit.op is not None:
            self._path += (hit.op,)
        self._digest = hit.digest
        return self.state, self.state["score"], self.state["done"]

    @property
    def _memo_game(self) -> str:
        """The game part of a transition key (domain, grammar, problem and entity names)."""
        key = self.__dict__.get("_memo_game_key")
        if key is None:
            key = self.__dict__["_memo_game_key"] = self._initial_texts_key()
        return key

    def _catch_up(self) -> None:
        """Bring a lagging engine to the current state: restore the initial state (unless
        the engine is on the way), apply the missing operators, rebuild the operator objects
        the next ``PddlEnv.step`` looks up (the memo keeps texts, not engine objects)."""
        real = self._real_path
        if real != self._path:
            if real is None or real != self._path[: len(real)]:
                self._pddl_state = self._initial_state()
                real = ()
            for op in self._path[len(real):]:
                _apply_operator(self._pddl_state, op)
                _transitions.replayed += 1
            self._real_path = self._path
        if "_valid_actions" not in self.state:
            actions = self._applicable_actions() if self.use_memo else self._pddl_state.all_applicable_actions()
            if len(actions) != len(self.state["_valid_commands"]):  # pragma: no cover - defensive
                raise RuntimeError("ALFWorld transition memo: the engine's operators do not match the stored state")
            self.state["_valid_actions"] = actions

    def _gather_infos(self) -> None:
        """``PddlEnv._gather_infos`` — the same game state, computed with what does not
        change within a game kept: the actions of an operator name (mapping, templates),
        the command templates and entity names, one list of the facts for every command's
        derivation (textgen reads the ``state``, never that list), and each derivation's
        memo key built once per predicate set.  The engine's own (upstream) version runs
        when the memo is off; the test-suite compares both."""
        if not self.use_memo or not _transitions.enabled:
            super()._gather_infos()
            return
        game = self._game_constants()
        s, pddl = self.state, self._pddl_state
        s["command_templates"] = list(game.command_templates)
        s["won"] = pddl.check_goal()
        s["lost"] = False
        s["_entity_infos"] = dict(self._entity_infos)
        facts = s["_facts"] = list(pddl.facts)
        if self.request_infos.facts:
            s["facts"] = list(map(self._get_human_readable_fact, facts))
        s["last_action"] = None
        s["_last_action"] = self._last_action
        applicable = self._applicable()
        grammar, infos, read = self._logic.grammar, self._entity_infos, {}
        commands = s["_valid_commands"] = []
        templates = []
        for _, spec in applicable:
            # the grammar copies the context's mapping before a query extends it: one per spec serves
            def context(spec: _ActionSpec = spec) -> dict[str, Any]:
                return {"state": pddl, "facts": facts, "variables": {ph: infos[var] for ph, var in spec.variables},
                        "mapping": spec.mapping_dict, "entity_infos": infos}

            key = grammar.key(spec.command_template, pddl, spec.mapping_key, read)
            template = grammar.derive_keyed(spec.command_template, key, context)
            templates.append(template)
            commands.append(template.format(**game.names))
        s["_valid_actions"] = _Actions(applicable, templates)
        s["admissible_commands"] = sorted(set(commands))
        if self.request_infos.moves:
            s["moves"] = self._moves
        if self.request_infos.policy_commands:
            s["policy_commands"] = pddl.replan(self._entity_infos)

    def _game_constants(self) -> _GameConstants:
        """What :meth:`_gather_infos` reads of the loaded game: kept until the next load,
        and process-wide for every engine playing the game (by its memo key)."""
        game = self.__dict__.get("_constants")
        if game is None:
            game = _lru_get(_constants_cache, self._memo_game)
            if game is None:
                game = _GameConstants(
                    command_templates=tuple(sorted({a.template for a in self._logic.actions.values()})),
                    names={k: info.name for k, info in self._entity_infos.items()},
                    actions={},
                )
                _lru_put(_constants_cache, self._memo_game, game)
            self.__dict__["_constants"] = game
        return game

    def _applicable_actions(self) -> _Actions:
        """``PddlState.all_applicable_actions()`` of the current state: the same actions in
        the same order (built when read), each operator name's mapping built once per game."""
        return _Actions(self._applicable())

    def _applicable(self) -> list[tuple[int, _ActionSpec]]:
        """The operator id and spec of every applicable action (as :meth:`_applicable_actions`)."""
        import fast_downward

        game = self._game_constants()
        pddl, specs, by_id = self._pddl_state, game.actions, game.operators
        lib = pddl.downward_lib
        operators = (fast_downward.Operator * lib.get_applicable_operators_count())()
        lib.get_applicable_operators(operators)
        ids = [op.id for op in operators]
        pddl._operators = dict(zip(ids, operators))
        applicable, seen = [], set()
        for op_id, operator in zip(ids, operators):
            known = by_id.get(op_id)
            if known is None:
                key = operator.name
                spec = specs.get(key)
                if spec is None:
                    spec = specs[key] = _action_spec(pddl, self._logic, key, game.terms)
                known = by_id[op_id] = (key, spec)
            key, spec = known
            if key not in seen:
                seen.add(key)
                applicable.append((op_id, spec))
        return applicable

    def _initial_texts_key(self) -> str:
        """Key of the initial texts, shared by every engine of the process playing this game
        with the same names."""
        names = sorted((k, str(info.name)) for k, info in self._entity_infos.items())
        data = self._game_data
        h = hashlib.sha1()
        for part in (data["pddl_domain"], data["grammar"], data["pddl_problem"], json.dumps(names)):
            raw = part.encode("utf-8")
            h.update(len(raw).to_bytes(8, "little") + raw)  # length-prefixed: no two splits alike
        return h.hexdigest()

    def _derive_initial_texts(self, texts_key: str | None) -> None:
        """The first reset of a game: the grammar derives the initial texts (then kept)."""
        context = {
            "state": self._pddl_state,
            "facts": list(self._pddl_state.facts),
            "variables": {},
            "mapping": {},
            "entity_infos": self._entity_infos,
        }
        self.state.feedback = self._logic.grammar.derive("#intro#", context)
        self.state.raw = self.state.feedback
        self._gather_infos()
        table = self._game_constants().facts
        self._initial_texts = _InitialTexts(
            intro=self.state.feedback,
            command_templates=tuple(self.state["command_templates"]),
            action_ids=tuple(a.id for a in self.state["_valid_actions"]),
            action_templates=tuple(a.command_template for a in self.state["_valid_actions"]),
            valid_commands=tuple(self.state["_valid_commands"]),
            admissible_commands=tuple(self.state["admissible_commands"]),
            digest=table.digest(table.encode(self.state["_facts"])),
        )
        _lru_put(_texts_cache, texts_key, self._initial_texts)

    def _gather_initial_infos(self, initial: _InitialTexts) -> None:
        """``PddlEnv._gather_infos`` for the initial state, reusing its derived texts.

        The texts (intro, command strings) are what the grammar derives from the
        initial state, which is identical on every reset; everything else is read from
        the restored state as upstream does.  If the applicable operators ever differed
        from the first reset's, the full derivation runs instead.
        """
        s = self.state
        s["command_templates"] = list(initial.command_templates)
        s["won"] = self._pddl_state.check_goal()
        s["lost"] = False
        s["_entity_infos"] = dict(self._entity_infos)
        s["_facts"] = list(self._pddl_state.facts)
        if self.request_infos.facts:
            s["facts"] = list(map(self._get_human_readable_fact, s["_facts"]))
        s["last_action"] = None
        s["_last_action"] = self._last_action
        if self.use_memo:
            applicable = self._applicable()
            ids, actions = tuple(op_id for op_id, _ in applicable), _Actions(applicable, initial.action_templates)
        else:
            actions = list(self._pddl_state.all_applicable_actions())
            ids = tuple(a.id for a in actions)
            for action, template in zip(actions, initial.action_templates):
                action.command_template = template
        if ids != initial.action_ids:  # pragma: no cover - defensive
            logger.warning("initial operators changed between resets; deriving texts again")
            self._gather_infos()
            return
        s["_valid_actions"] = actions
        s["_valid_commands"] = list(initial.valid_commands)
        s["admissible_commands"] = list(initial.admissible_commands)
        if self.request_infos.moves:
            s["moves"] = self._moves
        if self.request_infos.policy_commands:
            s["policy_commands"] = self._pddl_state.replan(self._entity_infos)

    def close(self) -> None:
        # The game's library stays with the process (it is shared, and never dlclose'd:
        # unloading a copy and loading another later crashed the process).
        self._glib = None


def _restorable_env_class() -> type:
    """Build :class:`RestorablePddlEnv` (deferred so that textworld loads on first use)."""
    from textworld.envs.pddl import PddlEnv

    class _RestorablePddlEnv(_Restoring, PddlEnv):
        """textworld's ``PddlEnv`` whose ``reset`` restores the kept grounding (see module doc)."""

    _RestorablePddlEnv.__name__ = _RestorablePddlEnv.__qualname__ = "RestorablePddlEnv"
    return _RestorablePddlEnv


_env_class: type | None = None


def __getattr__(name: str) -> Any:
    if name == "RestorablePddlEnv":
        global _env_class
        if _env_class is None:
            _env_class = _restorable_env_class()
        return _env_class
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def engine_infos(*, facts: bool = False, policy_commands: bool = False) -> Any:
    """The ``textworld.EnvInfos`` the environment requests.

    ``facts=True`` adds human-readable facts to every state (the rubric reads the raw
    ``_facts`` instead, which every state carries); ``policy_commands=True`` adds the
    planner's oracle plan (+~0.5 s per reset).
    """
    import textworld

    return textworld.EnvInfos(
        won=True,
        admissible_commands=True,
        facts=facts,
        policy_commands=policy_commands,
        extras=["gamefile", "walkthrough"],
    )


def make_engine(*, facts: bool = False, policy_commands: bool = False) -> Any:
    """``AlfredInfos(AlfredDemangler(RestorablePddlEnv(infos), shuffle=False))``: our engine."""
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

    cls = __getattr__("RestorablePddlEnv")
    infos = engine_infos(facts=facts, policy_commands=policy_commands)
    return AlfredInfos(AlfredDemangler(cls(infos), shuffle=False))


def make_raw_engine(*, facts: bool = False, policy_commands: bool = False) -> Any:
    """The unmodified upstream stack ``AlfredInfos(AlfredDemangler(PddlEnv(infos)))``.

    Used by the tests (fresh-load equivalence) and the benchmark (speed baseline).
    """
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.pddl import PddlEnv

    infos = engine_infos(facts=facts, policy_commands=policy_commands)
    return AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
