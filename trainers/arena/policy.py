"""The arena's policy: a softmax over the admissible actions with hashed linear scores.

The arena needs a policy that learns within minutes on one CPU core and whose every
quantity (log-probabilities, entropies, gradients) is exact and cheap, so that the
difference between two runs is the credit estimator and nothing else.  This module gives
one, in pure numpy:

* :class:`Featurizer` turns one decision — goal, task type, observation, pre-action rubric
  status, the episode's earlier actions and the admissible actions — into sparse features
  per action (hashed strings: action verb, goal/action word overlap, goal-word x action-word
  crosses, rubric channels x verb, repeated-action flags).  Hashing is ``zlib.crc32``, so
  feature indices are identical in every process (Python's ``hash`` of a string is not).
* :class:`DecisionFeatures` holds those features for one decision.
* :class:`LinearSoftmaxPolicy` scores every admissible action with ``θ·φ(a)`` and samples
  from ``softmax(score / temperature)``; :meth:`LinearSoftmaxPolicy.evaluate` computes
  log π(chosen), entropies and their gradients for a batch of decisions at once.

Two *policy settings* (``rubricgym arena --policy``, :data:`POLICIES`, :func:`make_featurizer`)
choose what the features read: ``rubric`` (the default, :class:`Featurizer`) adds to the text
the engine's rubric status (``info["rubric"]``) and the task's parsed spec (ALFWorld's target,
destination and lamp types) and the whole action history; ``text``
(:class:`~trainers.arena.text_features.TextFeaturizer`) reads only what an LLM agent's prompt
shows: the goal sentence, the observation, the admissible actions and the last two turns.

Example:
    >>> import numpy as np
    >>> feat = Featurizer(dim=2**12)
    >>> d = feat.decision(goal="put a clean apple in fridge", task_type="clean",
    ...                   observation="You see a apple 1 and a fridge 1.",
    ...                   actions=["take apple 1 from countertop 1", "go to fridge 1", "look"])
    >>> pol = LinearSoftmaxPolicy(dim=2**12)
    >>> pol.probabilities(d).round(3).tolist()        # zero weights: uniform
    [0.333, 0.333, 0.333]
    >>> a, logp = pol.sample(d, np.random.default_rng(0))
    >>> round(float(logp), 4) == round(float(np.log(1 / 3)), 4)
    True
"""

from __future__ import annotations

import functools
import math
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["POLICIES", "BatchEval", "DecisionFeatures", "Featurizer", "LinearSoftmaxPolicy", "action_noise",
           "add_observation_features", "after_argument", "make_featurizer", "segment_softmax"]

_TOKEN = re.compile(r"[a-z]+|\d+")
#: Words that carry no information about which action fits the goal.
STOPWORDS = frozenset(
    ["a", "an", "the", "to", "from", "in", "on", "into", "onto", "with", "of", "and", "or", "for", "it", "its", "at", "by", "is", "are", "be", "then", "some", "sep"]
)


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def _content(tokens: Sequence[str]) -> list[str]:
    """Alphabetic, non-stopword tokens longer than one character, order kept, no repeats."""
    seen: dict[str, None] = {}
    for tok in tokens:
        if len(tok) > 1 and not tok.isdigit() and tok not in STOPWORDS:
            seen.setdefault(tok, None)
    return list(seen)


def _verb(action: str) -> str:
    """The action's verb: the first word, or the command name before ``[`` (WebShop)."""
    head = action.strip().lower()
    if "[" in head:
        head = head.split("[", 1)[0]
    parts = head.split()
    return parts[0] if parts else "<empty>"


def _argument(action: str) -> str:
    """The action's argument: text inside ``[...]`` (WebShop), else the words after the verb."""
    if "[" in action and action.rstrip().endswith("]"):
        return action[action.index("[") + 1 : action.rstrip().rindex("]")]
    parts = action.split(None, 1)
    return parts[1] if len(parts) > 1 else ""


#: Verbs whose first entity is a receptacle (``go to fridge 1``, ``open drawer 2``).
_RECEPTACLE_VERBS = frozenset({"go", "open", "close"})
#: Verbs whose first entity is an object and second (if any) a receptacle.
_OBJECT_VERBS = frozenset({"take", "put", "move", "clean", "heat", "cool", "slice"})
_ENTITY = re.compile(r"([a-z][a-z ]*?)\s+\d+")


#: Hashed features: (indices, values).  Caches hold them as tuples, which the garbage collector
#: stops tracking, where lists of numbers stay tracked for as long as the cache keeps them.
Hashed = tuple[tuple[int, ...], tuple[float, ...]]


def after_argument(arg_text: str, observation_lower: str) -> str | None:
    """The observation text (400 characters) after the first mention of an action's argument
    (``None``: no argument, or the observation does not mention it): all that an action's
    context features read of the observation.

    Example:
        >>> after_argument("apple 1", "you see a apple 1 and a mug 2.")
        ' and a mug 2.'
        >>> after_argument("fridge 1", "you see a apple 1.") is None
        True
    """
    if not arg_text:
        return None
    pos = observation_lower.find(arg_text)
    if pos < 0:
        return None
    start = pos + len(arg_text)
    return observation_lower[start : start + 400]


def _memo(cache: dict[Any, Any], key: Any, limit: int, compute: Any) -> Any:
    """``cache[key]``, computed on a miss; the cache is emptied when it outgrows ``limit``
    (a memory bound: results never depend on it)."""
    hit = cache.get(key)
    if hit is None:
        hit = _put(cache, key, compute(), limit)
    return hit


def _put(cache: dict[Any, Any], key: Any, value: Any, limit: int) -> Any:
    """``cache[key] = value`` (returned), as :func:`_memo` stores a miss: for hot loops that
    look up first and build no ``compute`` closure on a hit."""
    if len(cache) > limit:
        cache.clear()
    cache[key] = value
    return value


@functools.lru_cache(maxsize=1 << 16)
def _parse_action(action: str) -> tuple[str, tuple[str, ...], tuple[str, ...], str]:
    """Verb, content words, argument content words and lowercased argument of an action
    (memoised: the same action strings recur in every sibling and update)."""
    arg = _argument(action)
    return _verb(action), tuple(_content(_tokens(action))), tuple(_content(_tokens(arg))), arg.strip().lower()


@functools.lru_cache(maxsize=1 << 12)
def _goal_words(goal: str) -> frozenset[str]:
    """The goal's content words (memoised: every decision of an episode asks for them)."""
    return frozenset(_content(_tokens(goal)))


@functools.lru_cache(maxsize=1 << 16)
def _entities(action: str) -> tuple[str, str]:
    """``(object type, receptacle type)`` named by an ALFWorld-style action ("" if none).

    Entity types are the words before an instance number, spaces removed
    (``"take bread 2 from side table 1"`` -> ``("bread", "sidetable")``).

    Example:
        >>> _entities("move bread 2 to diningtable 1"), _entities("go to fridge 1")
        (('bread', 'diningtable'), ('', 'fridge'))
    """
    low = action.strip().lower()
    verb = _verb(low)
    rest = low[len(verb):]
    ents = []
    for m in _ENTITY.finditer(rest):
        words = [w for w in m.group(1).split() if w not in STOPWORDS and w not in {"from", "with"}]
        ents.append("".join(words))
    if not ents:
        return "", ""
    if verb in _RECEPTACLE_VERBS:
        return "", ents[0]
    if verb in _OBJECT_VERBS:
        return ents[0], ents[1] if len(ents) > 1 else ""
    return ents[0], ""  # use / examine / anything else: the first entity


def _norm_type(name: Any) -> str:
    return "".join(str(name or "").lower().split())


def _graded(rubric: Mapping[str, Any] | None) -> list[str]:
    """``channel=bin`` for numeric (non-boolean) positive channels: counts as themselves,
    fractions in (0, 1] binned to quarters (so 0.5 and 1.0 differ)."""
    if not rubric:
        return []
    out = []
    for name, value in rubric.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            continue
        if not math.isfinite(value) or value <= 0:
            continue
        if isinstance(value, (int, np.integer)) or value > 1:
            out.append(f"{name}={int(value)}")
        else:
            out.append(f"{name}~{round(4 * float(value))}")
    return sorted(out)


def _active(rubric: Mapping[str, Any] | None) -> list[str]:
    """Rubric channels that are boolean true or a finite positive number (SPEC §3.1 C)."""
    if not rubric:
        return []
    out = []
    for name, value in rubric.items():
        if isinstance(value, bool):
            if value:
                out.append(str(name))
        elif isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(value) and value > 0:
            out.append(str(name))
    return sorted(out)


@dataclass(frozen=True)
class DecisionFeatures:
    """Sparse features of every admissible action of one decision.

    Attributes:
        actions: The admissible actions, in the environment's order.
        indices: Hashed feature indices of all actions, concatenated (int64).
        values: Feature values aligned with ``indices`` (float64).
        owner: For each entry of ``indices``, the position of its action in ``actions``.
    """

    actions: tuple[str, ...]
    indices: np.ndarray
    values: np.ndarray
    owner: np.ndarray

    @property
    def n_actions(self) -> int:
        """Number of admissible actions."""
        return len(self.actions)

    def __post_init__(self) -> None:
        if not self.actions:
            raise ValueError("a decision needs at least one admissible action")
        if not (len(self.indices) == len(self.values) == len(self.owner)):
            raise ValueError("indices, values and owner must have the same length")


class Featurizer:
    """Hashed goal/observation/action features for :class:`LinearSoftmaxPolicy`.

    Every action gets these features (``T`` = task type, ``v`` = verb, ``h`` = whether any
    content word of the action occurs in the goal, ``S`` = sorted active rubric channels):

    * ``bias|v`` and ``type|T|v`` — a prior per verb and task family;
    * ``goal|T|v`` valued by the share of the action's content words found in the goal, and
      ``hit|T|v|h``;
    * ``ctx|v`` — the share of goal words found in the action plus the observation text that
      follows the action's argument (a WebShop result line's title; an ALFWorld listing);
    * ``x|g|w`` for every goal word ``g`` and action word ``w`` (scaled by 1/sqrt(count)),
      letting the policy learn which words go together ("heat" with "microwave");
    * ``rub|T|S|v|h`` and ``ch|c|v|h`` per active channel ``c``, and ``gv|c=n|v|h`` /
      ``gv|c~q|v|h`` for graded channels (counts; fractions in quarters) — progress-conditioned
      choices (e.g. "buy now" once the purchase readiness reaches 1);
    * ``seen|v`` if the action was taken before in this episode, ``last|v`` if it repeats the
      previous action, ``back|v`` if it repeats the one before.

    When the decision's task names a target type (ALFWorld: ``info["task"]["target"]``,
    ``destination``, ``lamp``), role features that carry over between games are added.  With
    ``o`` the action's object role (``T`` target type, ``L`` lamp type, ``O`` other, ``-``
    none), ``r`` its receptacle role (``D`` destination type, ``R`` other, ``-`` none), ``H``
    whether the target is in hand (``info["rubric"]["target_in_hand"]``) and ``V`` whether
    the receptacle was gone to before in this episode:

    * ``role|v|o|r|H``, ``roleS|v|o|r|S`` and ``roleT|T|v|o|r|S`` — e.g. "take the target",
      "move the held target to the destination", per rubric status and task family;
    * ``vis|v|r|H|V`` — avoid revisiting receptacles while searching;
    * ``tr|target|receptacle|v|H`` — where objects of the target's type tend to lie (a
      hashed cross learned across games), and ``proc|T|receptacle|v|o|S`` — which
      receptacle processes the target (sinkbasin for clean, microwave for heat, ...).

    Args:
        dim: Number of hashed weights (a power of two is customary).
        crosses: Include the goal-word x action-word crosses.
        context_words: How many observation words after an action's argument count as its
            context.
        roles: Add the ALFWorld role features when the decision's task names a target.
    """

    def __init__(
        self, dim: int = 2**18, *, crosses: bool = True, context_words: int = 16, roles: bool = True
    ) -> None:
        if not isinstance(dim, int) or dim < 16:
            raise ValueError(f"dim must be an int >= 16, got {dim!r}")
        self.dim = dim
        self.crosses = crosses
        self.context_words = int(context_words)
        self.roles = bool(roles)
        self._cache: dict[str, int] = {}
        self._cross_cache: dict[tuple[frozenset[str], tuple[str, ...]], Hashed] = {}
        self._head_cache: dict[tuple[Any, str], Hashed] = {}
        self._tail_cache: dict[tuple[Any, ...], Hashed] = {}

    def index(self, feature: str) -> int:
        """Stable hashed index of a feature string (crc32, same in every process)."""
        hit = self._cache.get(feature)  # the common case, without building the miss's closure
        if hit is None:
            hit = _memo(self._cache, feature, 1_000_000, lambda: zlib.crc32(feature.encode("utf-8")) % self.dim)
        return hit

    def action_features(
        self,
        action: str,
        *,
        goal_words: frozenset[str],
        task_type: str,
        signature: str,
        channels: Sequence[str],
        observation_lower: str,
        history: Sequence[str],
        graded: Sequence[str] = (),
        roles: Mapping[str, Any] | None = None,
    ) -> dict[str, float]:
        """The named features of one action (before hashing).

        ``roles`` (ALFWorld) holds the task's ``target``/``destination``/``lamp`` types, the
        task type, ``hand`` (whether the target is held) and ``visited`` (receptacles gone to
        earlier in the episode); with it the action also gets the role features described in
        :class:`Featurizer`.
        """
        feats, words = self._head_part(action, goal_words=goal_words, task_type=task_type, signature=signature,
                                       channels=channels, observation_lower=observation_lower, graded=graded)
        if self.crosses and goal_words and words:
            feats.update(self._cross_features(goal_words, words))
        feats.update(self._tail_part(action, history=history, roles=roles, signature=signature))
        return feats

    @staticmethod
    def _cross_features(goal_words: frozenset[str], words: Sequence[str]) -> dict[str, float]:
        """``x|g|w`` for every goal word ``g`` and action word ``w``, scaled by 1/sqrt(count)."""
        scale = 1.0 / np.sqrt(len(goal_words) * len(words))
        return {f"x|{g}|{w}": scale for g in sorted(goal_words) for w in words}

    def _hashed_crosses(self, goal_words: frozenset[str], words: tuple[str, ...]) -> Hashed:
        """:meth:`_cross_features` hashed, memoised per (goal words, action words): siblings,
        updates and seeds score the same actions against the same goals again and again."""
        key = (goal_words, words)
        hit = self._cross_cache.get(key)
        if hit is None:
            feats = self._cross_features(goal_words, words)
            hit = _put(self._cross_cache, key, (tuple(self.index(k) for k in feats), tuple(feats.values())), 200_000)
        return hit

    def _head_part(
        self,
        action: str,
        *,
        goal_words: frozenset[str],
        task_type: str,
        signature: str,
        channels: Sequence[str],
        observation_lower: str,
        graded: Sequence[str],
    ) -> tuple[dict[str, float], tuple[str, ...]]:
        """The history-independent features before the crosses, and the action's content words."""
        verb, words = _parse_action(action)[:2]
        hits = [w for w in words if w in goal_words]
        frac = len(hits) / len(words) if words else 0.0
        h = "1" if hits else "0"
        feats: dict[str, float] = {
            f"bias|{verb}": 1.0,
            f"type|{task_type}|{verb}": 1.0,
            f"goal|{task_type}|{verb}": frac,
            f"hit|{task_type}|{verb}|{h}": 1.0,
            f"rub|{task_type}|{signature}|{verb}|{h}": 1.0,
        }
        for ch in channels:
            feats[f"ch|{ch}|{verb}|{h}"] = 1.0
        for g in graded:
            feats[f"gv|{g}|{verb}|{h}"] = 1.0
        if goal_words:
            feats[f"ctx|{verb}"] = len(goal_words & self.context_of(action, observation_lower)) / len(goal_words)
        return feats, words

    def context_of(self, action: str, observation_lower: str) -> set[str]:
        """An action's context words: its argument's, plus the first :attr:`context_words`
        observation words after the argument's first mention."""
        args, arg_text = _parse_action(action)[2:]
        ctx_words = set(args)
        after = after_argument(arg_text, observation_lower) if self.context_words > 0 else None
        if after is not None:
            ctx_words.update(_content(_tokens(after)[: self.context_words]))
        return ctx_words

    def _tail_part(
        self, action: str, *, history: Sequence[str], roles: Mapping[str, Any] | None, signature: str
    ) -> dict[str, float]:
        """The features after the crosses: ALFWorld roles and the repeat flags (history)."""
        verb = _parse_action(action)[0]
        tail: dict[str, float] = {}
        if roles is not None:
            tail.update(self._role_features(action, verb, roles, signature))
        if history:
            if action in history:
                tail[f"seen|{verb}"] = 1.0
            if history[-1] == action:
                tail[f"last|{verb}"] = 1.0
            if len(history) >= 2 and history[-2] == action:
                tail[f"back|{verb}"] = 1.0
        return tail

    def _hashed_head(
        self, action: str, context: tuple[Any, ...], *, goal_words: frozenset[str], task_type: str,
        signature: str, channels: Sequence[str], observation_lower: str, graded: Sequence[str],
    ) -> Hashed:
        """The head features and crosses of ``action``, hashed; memoised per (decision
        context, action), since siblings and updates revisit the same pages."""
        def compute() -> Hashed:
            head, words = self._head_part(action, goal_words=goal_words, task_type=task_type, signature=signature,
                                          channels=channels, observation_lower=observation_lower, graded=graded)
            idx: list[int] = []
            val: list[float] = []
            self._emit(head, idx, val)
            if self.crosses and goal_words and words:
                c_idx, c_val = self._hashed_crosses(goal_words, words)
                idx += c_idx
                val += c_val
            return tuple(idx), tuple(val)

        return _memo(self._head_cache, (context, action), 100_000, compute)

    def _hashed_tail(
        self, action: str, *, history: Sequence[str], roles: Mapping[str, Any] | None, signature: str
    ) -> Hashed:
        """:meth:`_tail_part` hashed, memoised by everything it reads: the action, the
        signature, the roles (of ``visited``, only whether it holds the action's receptacle)
        and the three repeat flags."""
        role_key: tuple[Any, ...] | None = None
        if roles is not None:
            rec = _entities(action)[1]
            role_key = (roles.get("target", ""), roles.get("destination", ""), roles.get("lamp", ""),
                        roles.get("type", "-"), bool(roles.get("hand")), bool(rec) and rec in roles.get("visited", ()))
        flags = (action in history, history[-1] == action, len(history) >= 2 and history[-2] == action) \
            if history else (False, False, False)

        def compute() -> Hashed:
            idx: list[int] = []
            val: list[float] = []
            self._emit(self._tail_part(action, history=history, roles=roles, signature=signature), idx, val)
            return tuple(idx), tuple(val)

        return _memo(self._tail_cache, (action, signature, role_key, flags), 200_000, compute)

    def _emit(self, feats: Mapping[str, float], idx: list[int], val: list[float]) -> None:
        """Append the non-zero features' hashed indices and values."""
        cache = self._cache
        for name, value in feats.items():
            if value:
                hit = cache.get(name)
                idx.append(self.index(name) if hit is None else hit)
                val.append(value)

    @staticmethod
    def _role_features(action: str, verb: str, roles: Mapping[str, Any], signature: str) -> dict[str, float]:
        """Game-independent features: what the action does to the task's target, destination
        and lamp, conditioned on the rubric status (see :class:`Featurizer`)."""
        obj, rec = _entities(action)
        target, dest, lamp = roles.get("target", ""), roles.get("destination", ""), roles.get("lamp", "")
        o = "-" if not obj else "T" if obj == target else "L" if lamp and obj == lamp else "O"
        r = "-" if not rec else "D" if rec == dest else "R"
        hand = "H1" if roles.get("hand") else "H0"
        tt = roles.get("type", "-")
        vis = "V1" if rec and rec in roles.get("visited", ()) else "V0"
        feats = {
            f"role|{verb}|{o}|{r}|{hand}": 1.0,
            f"roleS|{verb}|{o}|{r}|{signature}": 1.0,
            f"roleT|{tt}|{verb}|{o}|{r}|{signature}": 1.0,
            f"vis|{verb}|{r}|{hand}|{vis}": 1.0,
        }
        if rec:
            # Where targets of this kind lie, and which receptacle processes them.
            feats[f"tr|{target}|{rec}|{verb}|{hand}"] = 1.0
            feats[f"proc|{tt}|{rec}|{verb}|{o}|{signature}"] = 1.0
        return feats

    def turn_decision(self, turn: Any, *, goal: str, actions: Sequence[str], task: Mapping[str, Any] | None = None,
                      task_type: str = "-") -> DecisionFeatures:
        """:meth:`decision` of an episode's turn (:class:`~agent_envs.rollout.Turn`): its observation,
        pre-action rubric status (``turn.info["rubric"]``) and earlier actions, with the task's
        ``task`` and ``task_type``."""
        decision = self.decision(goal=goal, task_type=task_type, observation=str(turn.observation), actions=actions,
                                 rubric=turn.info.get("rubric"), history=[action for _obs, action in turn.history],
                                 task=task)
        return add_observation_features(decision, task_type=task_type, observation=str(turn.observation),
                                        index=self.index)

    def decision(
        self,
        *,
        goal: str,
        task_type: str,
        observation: str,
        actions: Sequence[str],
        rubric: Mapping[str, Any] | None = None,
        history: Sequence[str] = (),
        task: Mapping[str, Any] | None = None,
    ) -> DecisionFeatures:
        """Features of every admissible action of one decision.

        Args:
            goal: The task's goal text.
            task_type: The task family (``info["task"]["type"]``).
            observation: The text the agent sees before acting.
            actions: The admissible actions (non-empty).
            rubric: The pre-action rubric status (channel -> value), optional.
            history: The episode's earlier actions, oldest first.
            task: The task's ``info["task"]``; when it names a ``target`` (ALFWorld), the
                role features are added.

        Raises:
            ValueError: no admissible action.
        """
        if not actions:
            raise ValueError("a decision needs at least one admissible action")
        goal_words = _goal_words(goal)
        channels = _active(rubric)
        graded = _graded(rubric)
        signature = "+".join(channels) if channels else "-"
        obs = observation.lower()
        task_type = str(task_type or "-")
        roles: dict[str, Any] | None = None
        if self.roles and task and task.get("target"):
            visited = {_entities(h)[1] for h in history if _verb(h) == "go"}
            roles = {
                "target": _norm_type(task.get("target")),
                "destination": _norm_type(task.get("destination")),
                "lamp": _norm_type(task.get("lamp")),
                "type": task_type,
                "hand": bool((rubric or {}).get("target_in_hand", False)),
                "visited": frozenset(visited),
            }
        idx: list[int] = []
        val: list[float] = []
        own: list[int] = []
        context = (goal, task_type, obs, tuple(channels), tuple(graded))
        for k, action in enumerate(actions):
            h_idx, h_val = self._hashed_head(action, context, goal_words=goal_words, task_type=task_type,
                                             signature=signature, channels=channels, observation_lower=obs,
                                             graded=graded)
            n0 = len(idx)
            idx += h_idx
            val += h_val
            t_idx, t_val = self._hashed_tail(action, history=history, roles=roles, signature=signature)
            idx += t_idx
            val += t_val
            own += [k] * (len(idx) - n0)
        return DecisionFeatures(
            actions=tuple(actions),
            indices=np.asarray(idx, dtype=np.int64),
            values=np.asarray(val, dtype=np.float64),
            owner=np.asarray(own, dtype=np.int64),
        )


@functools.lru_cache(maxsize=256)
def _observation_reader(task_type: str) -> Any:
    """The ``observation_features`` function of the family whose tasks have this type, or ``None``."""
    from agent_envs.family import family_of_task, load_entry

    fam = family_of_task(task_type)
    return load_entry(fam.observation_features) if fam is not None and fam.observation_features else None


def add_observation_features(decision: DecisionFeatures, *, task_type: str, observation: str,
                             index: Any) -> DecisionFeatures:
    """``decision`` with the features its environment family reads off the observation text
    (:attr:`agent_envs.family.Family.observation_features`, found from the task's type, which
    names the environment as an agent's system prompt does), hashed by ``index``; the same
    ``decision`` for a family that declares none.

    Example:
        >>> feat = Featurizer(2**10)
        >>> d = feat.decision(goal="g", task_type="webshop", observation="o", actions=["search[x]"])
        >>> add_observation_features(d, task_type="webshop", observation="o", index=feat.index) is d
        True
    """
    reader = _observation_reader(str(task_type))
    if reader is None:
        return decision
    idx: list[int] = []
    val: list[float] = []
    own: list[int] = []
    for k, feats in enumerate(reader(observation, decision.actions)):
        for name, value in feats.items():
            if value:
                idx.append(index(name))
                val.append(float(value))
                own.append(k)
    if not idx:
        return decision
    return DecisionFeatures(actions=decision.actions, indices=np.concatenate([decision.indices, idx]).astype(np.int64),
                            values=np.concatenate([decision.values, val]),
                            owner=np.concatenate([decision.owner, own]).astype(np.int64))


#: The arena's policy settings (``rubricgym arena --policy``): ``rubric``, :class:`Featurizer` (the
#: rubric channels and the task's parsed spec beside the text); ``text``,
#: :class:`~trainers.arena.text_features.TextFeaturizer` (only what an LLM agent's prompt shows).
POLICIES = ("rubric", "text")


def make_featurizer(policy: str, dim: int) -> Any:
    """The featurizer of a policy setting of :data:`POLICIES` (both have ``turn_decision``).

    Raises:
        ValueError: an unknown policy setting.
    """
    if policy == "rubric":
        return Featurizer(dim)
    if policy == "text":
        from trainers.arena.text_features import TextFeaturizer

        return TextFeaturizer(dim)
    raise ValueError(f"unknown arena policy {policy!r}; choose one of {', '.join(POLICIES)}")


def segment_softmax(scores: np.ndarray, starts: np.ndarray, seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Log-softmax within contiguous segments.

    Args:
        scores: Concatenated logits of all segments.
        starts: Start offset of every segment (non-empty segments, increasing).
        seg: For each logit, the index of its segment.

    Returns:
        ``(log_probs, probs)`` aligned with ``scores``.
    """
    m = np.maximum.reduceat(scores, starts)
    shifted = scores - m[seg]
    e = np.exp(shifted)
    z = np.add.reduceat(e, starts)
    logp = shifted - np.log(z)[seg]
    return logp, np.exp(logp)


@dataclass
class BatchEval:
    """Per-decision quantities of a batch under the current weights.

    Attributes:
        logp: log π(chosen action) per decision (at temperature 1).
        entropy: Entropy of the full action distribution per decision.
        grad: A function ``grad(coef_logp, coef_entropy) -> dense gradient`` that returns
            Σ_r coef_logp[r]·∇θ log π_r(a_r) + coef_entropy[r]·∇θ H_r.
        logp_all: log π of every admissible action of every decision, concatenated.
        starts: Offset of each decision's actions in ``logp_all``.
    """

    logp: np.ndarray
    entropy: np.ndarray
    grad: Any
    logp_all: np.ndarray | None = None
    starts: np.ndarray | None = None

    def kl_from(self, old_logp_all: np.ndarray) -> np.ndarray:
        """KL(π_old ‖ π) per decision, exact over the admissible actions, given the old
        policy's ``logp_all`` of the same decisions."""
        p_old = np.exp(old_logp_all)
        return np.add.reduceat(p_old * (old_logp_all - self.logp_all), self.starts)


_MASK64 = (1 << 64) - 1


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, elementwise on uint64 (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def action_noise(key: int, actions: Sequence[str]) -> np.ndarray:
    """Standard Gumbel noise per action, a pure function of ``key`` and each action's text.

    Example:
        >>> a = action_noise(3, ["look", "inventory"])
        >>> b = action_noise(3, ["inventory", "look"])
        >>> bool(a[0] == b[1] and a[1] == b[0]), bool(action_noise(4, ["look"])[0] != a[0])
        (True, True)
    """
    with np.errstate(over="ignore"):
        h = _mix64(_mix64(np.array([int(key) & _MASK64], dtype=np.uint64)) ^ _text_hashes(actions))
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)
    return -np.log(-np.log(u))


def _text_hashes(actions: Sequence[str]) -> np.ndarray:
    """The mixed crc32 of each action's text (:func:`action_noise`'s per-action half), memoised
    per action list (a decision's list recurs in every sibling and update)."""
    key = tuple(actions)
    hit = _TEXT_HASHES.get(key)
    if hit is None:
        texts = np.array([zlib.crc32(a.encode("utf-8")) for a in actions], dtype=np.uint64)
        with np.errstate(over="ignore"):
            hit = _mix64(texts)
        hit.setflags(write=False)
        _put(_TEXT_HASHES, key, hit, 100_000)
    return hit


_TEXT_HASHES: dict[tuple[str, ...], np.ndarray] = {}


class LinearSoftmaxPolicy:
    """π(a | decision) = softmax over admissible actions of ``θ·φ(a) / temperature``.

    Args:
        dim: Number of weights (must match the :class:`Featurizer`).
        weights: Optional initial weights (copied); zeros otherwise (a uniform policy).
    """

    def __init__(self, dim: int, weights: np.ndarray | None = None) -> None:
        self.dim = int(dim)
        if weights is None:
            self.weights = np.zeros(self.dim, dtype=np.float64)
        else:
            weights = np.asarray(weights, dtype=np.float64)
            if weights.shape != (self.dim,):
                raise ValueError(f"weights must have shape ({self.dim},), got {weights.shape}")
            self.weights = weights.copy()

    def copy(self) -> LinearSoftmaxPolicy:
        """An independent copy (e.g. the frozen reference or the rollout policy)."""
        return LinearSoftmaxPolicy(self.dim, self.weights)

    def scores(self, decision: DecisionFeatures) -> np.ndarray:
        """θ·φ(a) for every admissible action."""
        contrib = self.weights[decision.indices] * decision.values
        return np.bincount(decision.owner, weights=contrib, minlength=decision.n_actions)

    def log_probabilities(self, decision: DecisionFeatures, temperature: float = 1.0) -> np.ndarray:
        """log π(a) for every admissible action at ``temperature``."""
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        s = self.scores(decision) / temperature
        s = s - s.max()
        return s - np.log(np.exp(s).sum())

    def probabilities(self, decision: DecisionFeatures, temperature: float = 1.0) -> np.ndarray:
        """π(a) for every admissible action at ``temperature``."""
        return np.exp(self.log_probabilities(decision, temperature))

    def sample(
        self, decision: DecisionFeatures, rng: np.random.Generator, temperature: float = 1.0
    ) -> tuple[int, float]:
        """Sample an action; returns ``(index, log π(index))`` at ``temperature``.

        Sampling uses one uniform draw and the cumulative distribution, so the same
        generator state always picks the same action.
        """
        logp = self.log_probabilities(decision, temperature)
        cdf = np.cumsum(np.exp(logp))
        k = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        k = min(k, decision.n_actions - 1)
        return k, float(logp[k])

    def sample_coupled(
        self, decision: DecisionFeatures, key: int, temperature: float = 1.0
    ) -> tuple[int, float]:
        """Sample by the Gumbel-max trick with noise tied to each action's *text*.

        Returns ``(index, log π(index))`` at ``temperature``.  Action a gets the Gumbel noise
        ``g(key, a)`` (:func:`action_noise`), and the choice is ``argmax_a s_a / T + g(key, a)``
        — an exact draw from ``softmax(s / T)``.  Two policies that face the same decision
        with the same ``key`` see the same noise on the same actions, whatever order the
        actions come in, so their choices differ only where their scores disagree enough:
        common random numbers that survive a divergence elsewhere in the episode.

        Example:
            >>> d = Featurizer(2**10).decision(goal="g", task_type="t", observation="o",
            ...                                actions=["look", "inventory", "go to desk 1"])
            >>> pol = LinearSoftmaxPolicy(2**10)
            >>> pol.sample_coupled(d, key=7) == pol.sample_coupled(d, key=7)
            True
        """
        logp = self.log_probabilities(decision, temperature)
        k = int(np.argmax(logp + action_noise(key, decision.actions)))
        return k, float(logp[k])

    def evaluate(self, decisions: Sequence[DecisionFeatures], chosen: Sequence[int]) -> BatchEval:
        """log π(chosen), entropy and a gradient closure for a batch (temperature 1).

        With s the logits, π = softmax(s) and φ_j the features of action j:
        ∇ log π(a) = φ_a − Σ_j π_j φ_j and ∇H = Σ_j (−π_j (log π_j + H)) φ_j.
        """
        if len(decisions) != len(chosen):
            raise ValueError("decisions and chosen must have the same length")
        n_act = np.array([d.n_actions for d in decisions], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(n_act)[:-1]]).astype(np.int64)
        seg = np.repeat(np.arange(len(decisions)), n_act)
        idx = np.concatenate([d.indices for d in decisions])
        val = np.concatenate([d.values for d in decisions])
        counts = np.array([len(d.indices) for d in decisions], dtype=np.int64)
        own = np.concatenate([d.owner for d in decisions]) + np.repeat(starts, counts)
        total = int(n_act.sum())
        s = np.bincount(own, weights=self.weights[idx] * val, minlength=total)
        logp_all, p_all = segment_softmax(s, starts, seg)
        chosen_arr = np.asarray(chosen, dtype=np.int64)
        if np.any(chosen_arr < 0) or np.any(chosen_arr >= n_act):
            raise ValueError("a chosen action index is out of range for its decision")
        chosen_global = starts + chosen_arr
        logp = logp_all[chosen_global]
        entropy = -np.add.reduceat(p_all * logp_all, starts)
        dim = self.dim

        def grad(coef_logp: np.ndarray, coef_entropy: np.ndarray | None = None) -> np.ndarray:
            # d/ds_j of Σ_r c_r log π_r(a_r) = c_r (1[j = a_r] − π_j)
            coef_logp = np.asarray(coef_logp, dtype=np.float64)
            ds = -p_all * coef_logp[seg]
            np.add.at(ds, chosen_global, coef_logp)
            if coef_entropy is not None:
                coef_entropy = np.asarray(coef_entropy, dtype=np.float64)
                ds += coef_entropy[seg] * (-p_all * (logp_all + entropy[seg]))
            return np.bincount(idx, weights=val * ds[own], minlength=dim)

        return BatchEval(logp=logp, entropy=entropy, grad=grad, logp_all=logp_all, starts=starts)
