"""ALFWorld rubric channels and matching keys from the engine's PDDL facts (SPEC §3.1, §3.4).

The engine reports its full fact state after every transition (``state["_facts"]``, textworld
propositions over mangled ids).  :class:`FactIndex` reads the static part of a game once
(object and receptacle types, display names); :func:`snapshot` extracts the few dynamic facts
the channels need; :class:`RubricTracker` keeps the per-episode sets and turns snapshots into
the channel status of MCGPO Table 15:

==================  ===  =====================================================================
channel             sym  value after the transition
==================  ===  =====================================================================
target_acquired     A    min(r, |A|), A = target instances ever held (persists after placement)
target_in_hand      H    the held object is of the target type
target_processed    P    1[P ≠ ∅], P = handled target instances ever cleaned/heated/cooled
                         as the family requires (``isclean``/``ishot``/``iscool``); persists
target_placed       L    min(r, |L|), L = handled target instances in a destination-type
                         receptacle now
light_on            B    a lamp of the goal's lamp type is on (``istoggled``) — look tasks
goal_progress       G    look: H + B; clean/heat/cool: 1[P] + 1[L] + 1[P ∩ L]; pick: min(r, |L|)
solved              S    the engine's won flag
invalid_actions     X    diagnostic: invalid actions so far (never in the active set)
==================  ===  =====================================================================

Like the papers' extractor, which updates the sets from successful take/process/place
feedback, an instance enters P or L only once the agent has handled it (it is in A): a target
that lies in a destination-type receptacle when the episode starts is not "placed", and one
that starts cold in a fridge is not "processed", until the agent picks it up.  Placement is
current (taking an instance back out removes it from L); acquisition and processing are
history.

Channels outside a family's task are held at 0/false (no processing for pick/look, no
placement for look, no light outside look), so rubric shaping never rewards irrelevant events.
Instance sets hold display names (``"alarmclock 2"``): instance numbers are preserved, and
pick_two needs two *distinct* instances.

Two facts about alfworld 0.4.2's domain matter for ``light_on``: the ``use`` action (ToggleObject)
sets ``isToggled`` and never clears it, while ``isOn`` flips on every use, and the goal tests
``isToggled``.  So once a lamp has been used the engine considers it on for the rest of the
episode (using it again prints "You turn on the desklamp 1." again); ``light_on`` follows the
engine.  An "off" feedback ("You turn off the ...") would clear it; the shipped grammar can
only print that for a lamp that is not toggled after the action, which this domain never
produces.

Example:
    >>> from agent_envs.alfworld.game import TaskSpec
    >>> spec = TaskSpec("pick_two_obj_and_place", "pick", "alarmclock", "dresser", None, 2)
    >>> t = RubricTracker(spec)
    >>> t.update(Snapshot(held="alarmclock 2", held_is_target=True), won=False, valid=True)
    >>> (t.status["target_acquired"], t.status["target_in_hand"], t.status["goal_progress"])
    (1, True, 0)
    >>> t.update(Snapshot(in_destination=frozenset({"alarmclock 2", "alarmclock 3"})), won=False, valid=True)
    >>> (t.status["target_acquired"], t.status["target_placed"], t.status["goal_progress"])
    (1, 1, 1)
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_envs.alfworld.game import PROCESS_PREDICATE, TaskSpec

__all__ = [
    "BUDGET_CUTS",
    "CHANNELS",
    "FactIndex",
    "RubricTracker",
    "Snapshot",
    "budget_bin",
    "coarse_key",
    "empty_status",
    "exact_key",
    "snapshot",
]

#: Channel names in schema order (``rubrics.channel_schema("alfworld")``).
CHANNELS: tuple[str, ...] = (
    "target_acquired",
    "target_in_hand",
    "target_processed",
    "target_placed",
    "light_on",
    "goal_progress",
    "solved",
    "invalid_actions",
)
_BOOL = frozenset({"target_in_hand", "target_processed", "light_on", "solved"})

#: Remaining-budget cut points (fractions of the horizon) of the coarse key [MCGPO Table 5].
BUDGET_CUTS: tuple[float, ...] = (0.25, 0.5, 0.75)


def empty_status() -> dict[str, Any]:
    """The status of the first decision: every channel false / zero [MCGPO D.1]."""
    return {name: (False if name in _BOOL else 0) for name in CHANNELS}


def budget_bin(remaining: int, horizon: int) -> int:
    """Bin of ``remaining / horizon`` cut at 1/4, 1/2, 3/4: 0 = [0, 1/4), ..., 3 = [3/4, 1].

    Example:
        >>> [budget_bin(r, 50) for r in (50, 38, 37, 25, 24, 12, 0)]
        [3, 3, 2, 2, 1, 0, 0]
    """
    if horizon <= 0:
        raise ValueError(f"horizon must be positive, got {horizon}")
    return bisect.bisect_right(BUDGET_CUTS, remaining / horizon)


def _strip(name: str) -> str:
    return name.strip()


@dataclass(frozen=True)
class FactIndex:
    """The static facts of one game that the channels need.

    Attributes:
        names: mangled id -> display name (``"AlarmClock_bar_..."`` -> ``"alarmclock 2"``).
        targets: ids of objects of the target type.
        destinations: ids of receptacles of the destination type.
        lamps: ids of objects of the lamp type (look tasks).
        agent: id of the agent.
    """

    names: Mapping[str, str]
    targets: frozenset[str]
    destinations: frozenset[str]
    lamps: frozenset[str]
    agent: str | None = None

    @classmethod
    def build(cls, facts: Iterable[Any], entity_names: Mapping[str, str], spec: TaskSpec) -> FactIndex:
        """Index a game from its initial facts and the demangled entity names."""
        target_t, dest_t, lamp_t = spec.target + "type", (spec.destination or "") + "type", (spec.lamp or "") + "type"
        targets, dests, lamps = set(), set(), set()
        agent = None
        for f in facts:
            name = f.name
            if name == "objecttype":
                obj, typ = f.arguments[0].name, f.arguments[1].name.strip().lower()
                if typ == target_t:
                    targets.add(obj)
                if spec.lamp is not None and typ == lamp_t:
                    lamps.add(obj)
            elif name == "receptacletype" and spec.destination is not None:
                if f.arguments[1].name.strip().lower() == dest_t:
                    dests.add(f.arguments[0].name)
            elif name == "atlocation" and agent is None:
                agent = f.arguments[0].name
        names = {k: _strip(v) for k, v in entity_names.items()}
        return cls(names, frozenset(targets), frozenset(dests), frozenset(lamps), agent)


@dataclass(frozen=True)
class Snapshot:
    """The dynamic facts the channels read, in display names.

    Attributes:
        held: The object the agent holds, or ``None``.
        held_is_target: The held object is of the target type.
        in_destination: Target instances inside a destination-type receptacle.
        processed: Target instances with the family's processing predicate true.
        lamp_on: A lamp of the goal's lamp type has been switched on (``istoggled``).
        location: The loc id the agent stands at (``"loc 12"``) — the canonical position.
    """

    held: str | None = None
    held_is_target: bool = False
    in_destination: frozenset[str] = frozenset()
    processed: frozenset[str] = frozenset()
    lamp_on: bool = False
    location: str | None = None


def snapshot(facts: Iterable[Any], index: FactIndex, spec: TaskSpec) -> Snapshot:
    """Read a :class:`Snapshot` from the engine's current facts (negated atoms are ignored)."""
    proc_pred = PROCESS_PREDICATE.get(spec.family)
    names = index.names
    held = None
    held_is_target = False
    in_dest: list[str] = []
    processed: list[str] = []
    lamp_on = False
    location = None
    for f in facts:
        name = f.name
        if name == "holds":
            obj = f.arguments[1].name
            held = names.get(obj, obj)
            held_is_target = obj in index.targets
        elif name == "inreceptacle":
            obj = f.arguments[0].name
            if obj in index.targets and f.arguments[1].name in index.destinations:
                in_dest.append(names.get(obj, obj))
        elif name == proc_pred:
            obj = f.arguments[0].name
            if obj in index.targets:
                processed.append(names.get(obj, obj))
        elif name == "istoggled":
            if f.arguments[0].name in index.lamps:
                lamp_on = True
        elif name == "atlocation":
            location = names.get(f.arguments[1].name, f.arguments[1].name)
    return Snapshot(held, held_is_target, frozenset(in_dest), frozenset(processed), lamp_on, location)


@dataclass
class RubricTracker:
    """Per-episode channel bookkeeping for one game (MCGPO Table 15).

    Call :meth:`reset` at the start of an episode, then :meth:`update` after every
    transition; :attr:`status` is the post-transition status, i.e. the pre-action status of
    the next decision.

    Args:
        spec: The game's task.
    """

    spec: TaskSpec
    acquired: set[str] = field(default_factory=set)
    processed: set[str] = field(default_factory=set)
    placed: frozenset[str] = frozenset()
    held: str | None = None
    light: bool = False
    won: bool = False
    invalid: int = 0
    status: dict[str, Any] = field(default_factory=empty_status)

    def reset(self) -> None:
        """Start an episode: empty sets, empty status."""
        self.acquired = set()
        self.processed = set()
        self.placed = frozenset()
        self.held = None
        self.light = False
        self.won = False
        self.invalid = 0
        self.status = empty_status()

    @property
    def _processes(self) -> bool:
        return self.spec.family in PROCESS_PREDICATE

    def update(self, snap: Snapshot, *, won: bool, valid: bool, feedback: str = "") -> None:
        """Fold the facts after one transition into the episode's sets and recompute the status."""
        spec = self.spec
        if not valid:
            self.invalid += 1
        self.held = snap.held
        in_hand = bool(snap.held_is_target and snap.held is not None)
        if in_hand:
            self.acquired.add(snap.held)  # type: ignore[arg-type]
        if self._processes:
            self.processed |= snap.processed & self.acquired
        if spec.family != "look":
            self.placed = snap.in_destination & self.acquired
        if spec.family == "look":
            self.light = bool(snap.lamp_on)
            if feedback.startswith("You turn off the "):
                self.light = False
        self.won = bool(won)
        r = spec.required
        n_acq = min(r, len(self.acquired))
        n_placed = min(r, len(self.placed))
        has_p = bool(self.processed)
        if spec.family == "look":
            progress = int(in_hand) + int(self.light)
        elif self._processes:
            progress = int(has_p) + int(bool(self.placed)) + int(bool(self.processed & self.placed))
        else:
            progress = n_placed
        self.status = {
            "target_acquired": n_acq,
            "target_in_hand": in_hand,
            "target_processed": has_p,
            "target_placed": n_placed,
            "light_on": self.light,
            "goal_progress": progress,
            "solved": self.won,
            "invalid_actions": self.invalid,
        }


def exact_key(spec: TaskSpec, tracker: RubricTracker, location: str | None) -> tuple[Hashable, ...]:
    """Exact state summary [MCGPO Table 5].

    ``(task type, location, held object, A, P, L, light)`` with A/P/L frozensets of
    instance names.  The environment reports it beside the rubric signature (C, F) as
    ``{"exact": ..., "coarse": ..., "signature": (C, F)}``, the layout
    :mod:`wrappers.credit.mcgpo` reads (the context key is g = (h, C, F)).
    """
    return (
        spec.task_type,
        location,
        tracker.held,
        frozenset(tracker.acquired),
        frozenset(tracker.processed),
        frozenset(tracker.placed),
        tracker.light,
    )


def coarse_key(
    spec: TaskSpec,
    tracker: RubricTracker,
    location: str | None,
    remaining: int,
    horizon: int,
) -> tuple[Hashable, ...]:
    """Coarse state summary [MCGPO Table 5] (reported beside the signature, see
    :func:`exact_key`).

    ``(task type, location, holding?, processed?, placement count min(r,|L|), light,
    remaining-budget bin)``.
    """
    return (
        spec.task_type,
        location,
        tracker.held is not None,
        bool(tracker.processed),
        min(spec.required, len(tracker.placed)),
        tracker.light,
        budget_bin(remaining, horizon),
    )
