"""The arena's text-only policy setting: features from what an LLM agent's prompt shows.

An LLM agent trained by the project's trainer reads, at every decision, the goal sentence,
the current observation, the admissible actions and the most recent (observation, action)
pairs (:func:`agent_envs.agent.prompts.build_prompt`; ``history_length`` pairs,
:class:`trainers.config.PromptSettings`).  :class:`TextFeaturizer` gives the arena's linear
policy exactly that and nothing more: no rubric channel (``info["rubric"]``), no matching key
(``info["keys"]``), no parsed task spec (``info["task"]`` beyond its goal sentence) and no
engine state.  Whatever it knows about progress it must read from the text, as an LLM would:
which goal words an action names, which objects the admissible actions let it move (what it
holds), where it went in the last turns, what the observation just said.

Every action gets (``v`` = verb; ``o`` / ``r`` = the text role of the action's object /
receptacle: ``L`` the goal's last content word, ``G`` another goal word, ``O`` any other
entity, ``-`` none; ``H`` = what the admissible actions say is held: ``HG`` a goal word, ``HO``
something else, ``H0`` nothing; ``V`` = whether the receptacle was gone to in the recent
turns):

* ``bias|v``, ``goal|v`` (share of the action's words in the goal), ``hit|v|h`` and ``ctx|v``
  (goal words in the action plus the observation text after its argument);
* ``x|g|w`` for every goal word ``g`` and action word ``w`` (scaled by 1/sqrt(count));
* ``role|v|o|r|H``, and ``gr|g|v|o|r|H`` and ``tr|g|receptacle|v|H`` for every goal word
  ``g`` (what to do with which entity, per kind of goal; where goal things lie), each scaled by
  1/sqrt(number of goal words), so that the goal's words together weigh one unit however long
  the goal sentence is;
* ``vis|v|r|H|V``, ``last|v`` / ``back|v`` (repeats of the last two actions) and
  ``out|w|v`` (``w``: the first two content words of the observation, what just happened).

Example:
    >>> feat = TextFeaturizer(dim=2**12)
    >>> d = feat.decision(goal="put a clean apple in fridge", observation="You see a apple 1.",
    ...                   actions=["take apple 1 from countertop 1", "look"], history=[])
    >>> d.n_actions, len(d.indices) > 0
    (2, True)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from cachetools import LRUCache

from trainers.arena.policy import (
    DecisionFeatures,
    Featurizer,
    Hashed,
    _content,
    _entities,
    _goal_words,
    _parse_action,
    _put,
    _tokens,
    _verb,
    add_observation_features,
    after_argument,
)

__all__ = ["HISTORY_LENGTH", "TextFeaturizer"]

#: Recent (observation, action) pairs the text policy sees: the trainer prompt's default
#: (``PromptSettings.history_length``).
HISTORY_LENGTH = 2
#: Decisions kept whole, least recently used forgotten first (a memory bound of some 50 MB).
_DECISIONS = 2048
#: Verbs whose admissible use means the agent holds the object (ALFWorld's ``move``, ``put``).
_HOLD_VERBS = frozenset({"move", "put"})


@functools.lru_cache(maxsize=1 << 12)
def _goal_order(goal: str) -> tuple[str, ...]:
    """The goal's content words in order (the last names where things go, or the lamp)."""
    return tuple(_content(_tokens(goal)))


@functools.lru_cache(maxsize=1 << 14)
def _outcome(observation: str) -> str:
    """The first two content words of the observation's first non-empty line."""
    line = next((ln for ln in observation.lower().splitlines() if ln.strip()), "")
    return " ".join(_content(_tokens(line))[:2]) or "-"


def _held(actions: Sequence[str]) -> frozenset[str]:
    """Object types the admissible actions let the agent move (what it holds, read from the list)."""
    return frozenset(obj for a in actions if _verb(a) in _HOLD_VERBS and (obj := _entities(a)[0]))


class TextFeaturizer:
    """Hashed features of a decision from the prompt's text alone (see the module docstring).

    Args:
        dim: Number of hashed weights.
        history_length: Recent (observation, action) pairs read (the trainer prompt's).
        crosses: Include the goal-word x action-word crosses.
        context_words: Observation words after an action's argument that count as its context.
    """

    def __init__(self, dim: int = 2**18, *, history_length: int = HISTORY_LENGTH, crosses: bool = True,
                 context_words: int = 16) -> None:
        if not isinstance(history_length, int) or history_length < 0:
            raise ValueError(f"history_length must be an int >= 0, got {history_length!r}")
        self._hash = Featurizer(dim, crosses=crosses, context_words=context_words, roles=False)
        self.dim, self.history_length = self._hash.dim, history_length
        self._head_cache: dict[tuple[str, str, str | None], Hashed] = {}
        self._head_by_count: dict[tuple[frozenset[str], str, int], Hashed] = {}
        self._tail_cache: dict[tuple[Any, ...], Hashed] = {}
        self._decisions: LRUCache = LRUCache(maxsize=_DECISIONS)

    def turn_decision(self, turn: Any, *, goal: str, actions: Sequence[str], task: Mapping[str, Any] | None = None,
                      task_type: str = "-") -> DecisionFeatures:
        """The decision of an episode's turn (:class:`~agent_envs.rollout.Turn`): its observation and
        history, with what the environment's family reads off the observation
        (:func:`~trainers.arena.policy.add_observation_features`; ``task_type`` names the
        environment, as the prompt's system message does); ``task`` and ``turn.info`` are not read."""
        decision = self.decision(goal=goal, observation=str(turn.observation), actions=actions, history=turn.history)
        return add_observation_features(decision, task_type=task_type, observation=str(turn.observation),
                                        index=self._hash.index)

    def decision(self, *, goal: str, observation: str, actions: Sequence[str],
                 history: Sequence[tuple[str, str]] = ()) -> DecisionFeatures:
        """Features of every admissible action, from the goal sentence, the observation, the
        actions and the last :attr:`history_length` ``(observation, action)`` pairs of ``history``.

        Raises:
            ValueError: no admissible action.
        """
        if not actions:
            raise ValueError("a decision needs at least one admissible action")
        recent = [str(a) for _obs, a in list(history)[-self.history_length:]] if self.history_length else []
        # the whole decision by everything it reads (siblings in lock step and repeated episodes ask again)
        key = (goal, observation, tuple(actions), tuple(recent))
        hit = self._decisions.get(key)
        if hit is None:
            hit = self._decisions[key] = _frozen(self._decide(goal, observation, actions, recent))
        return hit

    def _decide(self, goal: str, observation: str, actions: Sequence[str], recent: list[str]) -> DecisionFeatures:
        """:meth:`decision` computed (its caches: the head by goal, observation and action, the tail
        by the action and what it reads of the state)."""
        obs = observation.lower()
        held = _held(actions)
        goal_words = _goal_words(goal)
        hand = "H0" if not held else "HG" if held & goal_words else "HO"
        visited = frozenset(_entities(a)[1] for a in recent if _verb(a) == "go")
        state = (goal, hand, _outcome(observation))
        last, back = (recent[-1] if recent else ""), (recent[-2] if len(recent) >= 2 else "")
        context = self._hash.context_words > 0
        heads, tails = self._head_cache, self._tail_cache
        idx: list[int] = []
        val: list[float] = []
        own: list[int] = []
        for k, action in enumerate(actions):
            n0 = len(idx)
            # keyed by what the head reads of the observation: the text after the action's argument
            after = after_argument(_parse_action(action)[3], obs) if context else None
            key = (goal, action, after)
            head = heads.get(key)
            if head is None:
                head = _put(heads, key, self._head(action, goal_words, obs), 100_000)
            rec = _entities(action)[1]
            # keyed by what the tail reads: whether the action repeats the last two, not their text
            repeats = (action == last, action == back)
            seen = bool(rec) and rec in visited
            key = (action, seen, *state, *repeats)
            tail = tails.get(key)
            if tail is None:
                tail = _put(tails, key, self._tail(action, state, seen, repeats), 200_000)
            idx += head[0]
            idx += tail[0]
            val += head[1]
            val += tail[1]
            own += [k] * (len(idx) - n0)
        return DecisionFeatures(actions=tuple(actions), indices=np.asarray(idx, dtype=np.int64),
                                values=np.asarray(val, dtype=np.float64), owner=np.asarray(own, dtype=np.int64))

    def _head(self, action: str, goal_words: frozenset[str], obs: str) -> Hashed:
        """Verb, goal-overlap and context features and the crosses, hashed (by the goal words,
        the action and how many goal words its context holds: all the features read)."""
        key = (goal_words, action, len(goal_words & self._hash.context_of(action, obs)))
        hit = self._head_by_count.get(key)
        if hit is None:
            hit = _put(self._head_by_count, key, self._hashed_head(action, goal_words, obs), 100_000)
        return hit

    def _hashed_head(self, action: str, goal_words: frozenset[str], obs: str) -> Hashed:
        """:meth:`_head` computed."""
        feats, words = self._hash._head_part(action, goal_words=goal_words, task_type="-", signature="-",
                                             channels=(), observation_lower=obs, graded=())
        head = {k: v for k, v in feats.items() if not k.startswith(("type|", "rub|"))}
        idx: list[int] = []
        val: list[float] = []
        self._hash._emit(head, idx, val)
        if self._hash.crosses and goal_words and words:
            c_idx, c_val = self._hash._hashed_crosses(goal_words, words)
            idx += c_idx
            val += c_val
        return tuple(idx), tuple(val)

    def _tail(self, action: str, state: tuple[str, str, str], visited: bool,
              repeats: tuple[bool, bool]) -> Hashed:
        """Text roles, where goal things lie, recent visits and repeats (whether the action is the
        last / the one before), what just happened; hashed."""
        goal, hand, outcome = state
        verb = _parse_action(action)[0]
        obj, rec = _entities(action)
        order = _goal_order(goal)
        o, r = _role(obj, order), _role(rec, order)
        feats = {f"role|{verb}|{o}|{r}|{hand}": 1.0, f"vis|{verb}|{r}|{hand}|V{int(visited)}": 1.0,
                 f"out|{outcome}|{verb}": 1.0}
        words = sorted(set(order))
        # one unit of norm for all goal words together, as the crosses: a long goal sentence that
        # every task shares (a grid game's legend) must not become a many-fold bias of each verb
        scale = 1.0 / np.sqrt(len(words)) if words else 1.0
        for g in words:
            feats[f"gr|{g}|{verb}|{o}|{r}|{hand}"] = scale
            if rec:
                feats[f"tr|{g}|{rec}|{verb}|{hand}"] = scale
        if repeats[0]:
            feats[f"last|{verb}"] = 1.0
        if repeats[1]:
            feats[f"back|{verb}"] = 1.0
        idx: list[int] = []
        val: list[float] = []
        self._hash._emit(feats, idx, val)
        return tuple(idx), tuple(val)


def _frozen(decision: DecisionFeatures) -> DecisionFeatures:
    """``decision`` with read-only arrays (it is shared by every caller that asks again)."""
    for arr in (decision.indices, decision.values, decision.owner):
        arr.setflags(write=False)
    return decision


def _role(entity: str, goal_order: Sequence[str]) -> str:
    """``L``: the goal's last content word; ``G``: another goal word; ``O``: another entity; ``-``: none."""
    if not entity:
        return "-"
    if goal_order and entity == goal_order[-1]:
        return "L"
    return "G" if entity in goal_order else "O"
