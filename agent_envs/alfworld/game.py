"""What a game asks for: task family, target/destination/lamp types, required count.

Everything is read from the game itself (the ``(:goal ...)`` of its PDDL problem), so real
and generated games are treated alike; the folder name is not trusted.

Example:
    >>> problem = '''(define (problem p) (:domain alfred)
    ...   (:goal (and (exists (?r - receptacle) (exists (?o - object) (and
    ...     (objectType ?o AppleType) (receptacleType ?r FridgeType) (isCool ?o)
    ...     (inReceptacle ?o ?r)))))))'''
    >>> spec = parse_goal(problem)
    >>> spec.task_type, spec.target, spec.destination, spec.required
    ('pick_cool_then_place_in_recep', 'apple', 'fridge', 1)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "FAMILY_MAX_PROGRESS",
    "PROCESS_PREDICATE",
    "TASK_FAMILIES",
    "TASK_TYPES",
    "GoalParseError",
    "TaskSpec",
    "parse_goal",
    "task_sentence",
]

#: The six ALFWorld task types -> their rubric family (as in ``rubrics.ALFWORLD_TASK_TYPES``).
TASK_FAMILIES: dict[str, str] = {
    "pick_and_place_simple": "pick",
    "pick_two_obj_and_place": "pick",
    "pick_clean_then_place_in_recep": "clean",
    "pick_heat_then_place_in_recep": "heat",
    "pick_cool_then_place_in_recep": "cool",
    "look_at_obj_in_light": "look",
}
TASK_TYPES: tuple[str, ...] = tuple(TASK_FAMILIES)

#: The PDDL predicate (lower case) that marks a processed object, per processing family.
PROCESS_PREDICATE: dict[str, str] = {"clean": "isclean", "heat": "ishot", "cool": "iscool"}


class GoalParseError(ValueError):
    """The problem's goal is not one of the six ALFWorld task shapes."""


@dataclass(frozen=True)
class TaskSpec:
    """The task of one game, parsed from its goal.

    Attributes:
        task_type: One of :data:`TASK_TYPES`.
        family: ``pick``, ``clean``, ``heat``, ``cool`` or ``look``.
        target: Target object type in engine spelling (``"alarmclock"``).
        destination: Destination receptacle type (``"dresser"``), ``None`` for look tasks.
        lamp: Lamp object type for look tasks (``"desklamp"`` / ``"floorlamp"``), else ``None``.
        required: r, the number of distinct target instances the task needs (2 for
            pick_two_obj_and_place, else 1).
    """

    task_type: str
    family: str
    target: str
    destination: str | None
    lamp: str | None
    required: int

    @property
    def max_progress(self) -> int:
        """The family maximum of ``goal_progress`` (reached exactly when the goal holds)."""
        return FAMILY_MAX_PROGRESS[self.family] if self.family != "pick" else self.required


#: goal_progress maximum per family (pick: r).  look: H + B; clean/heat/cool: 1[P]+1[L]+1[P∩L].
FAMILY_MAX_PROGRESS: dict[str, int] = {"look": 2, "clean": 3, "heat": 3, "cool": 3, "pick": 1}

_OBJ_TYPE = re.compile(r"\(\s*objectType\s+(\?[\w-]+)\s+([\w-]+)\s*\)", re.IGNORECASE)
_RECEP_TYPE = re.compile(r"\(\s*receptacleType\s+(\?[\w-]+)\s+([\w-]+)\s*\)", re.IGNORECASE)
_HOLDS = re.compile(r"\(\s*holds\s+\?[\w-]+\s+(\?[\w-]+)\s*\)", re.IGNORECASE)
_TOGGLED = re.compile(r"\(\s*isToggled\s+(\?[\w-]+)\s*\)", re.IGNORECASE)
_DISTINCT = re.compile(r"\(\s*not\s*\(\s*=\s*\?[\w-]+\s+\?[\w-]+\s*\)\s*\)", re.IGNORECASE)
_TASK_SENTENCE = re.compile(r"Your task is to:\s*([^\n\"]*)")


def _type_name(pddl_type: str) -> str:
    """``AlarmClockType`` -> ``alarmclock`` (the engine lower-cases names)."""
    name = pddl_type.lower()
    return name.removesuffix("type")


def parse_goal(pddl_problem: str) -> TaskSpec:
    """Parse the task of a game from the ``(:goal ...)`` of its PDDL problem.

    Raises:
        GoalParseError: no goal, or a goal that matches none of the six task shapes.
    """
    if not isinstance(pddl_problem, str):
        raise TypeError(f"pddl_problem must be a str, got {type(pddl_problem).__name__}")
    start = pddl_problem.lower().find("(:goal")
    if start < 0:
        raise GoalParseError("the PDDL problem has no (:goal ...) section")
    goal = pddl_problem[start:]
    obj_types = {var.lower(): _type_name(t) for var, t in _OBJ_TYPE.findall(goal)}
    recep_types = sorted({_type_name(t) for _, t in _RECEP_TYPE.findall(goal)})
    if not obj_types:
        raise GoalParseError("the goal names no objectType; not an ALFWorld task")
    low = goal.lower()

    toggled = [v.lower() for v in _TOGGLED.findall(goal)]
    if toggled:
        held = [v.lower() for v in _HOLDS.findall(goal)]
        targets = [obj_types[v] for v in held if v in obj_types]
        lamps = [obj_types[v] for v in toggled if v in obj_types]
        if len(targets) != 1 or len(lamps) != 1:
            raise GoalParseError("look goal must name one held object type and one lamp type")
        return TaskSpec("look_at_obj_in_light", "look", targets[0], None, lamps[0], 1)

    if len(recep_types) != 1:
        raise GoalParseError(f"expected one destination receptacleType in the goal, got {recep_types}")
    destination = recep_types[0]
    targets = sorted(set(obj_types.values()))
    if len(targets) != 1:
        raise GoalParseError(f"expected one target objectType in the goal, got {targets}")
    target = targets[0]
    for family, pred in PROCESS_PREDICATE.items():
        if f"({pred} " in low.replace("( ", "("):
            task_type = f"pick_{family}_then_place_in_recep"
            return TaskSpec(task_type, family, target, destination, None, 1)
    if _DISTINCT.search(goal) and len(obj_types) >= 2:
        return TaskSpec("pick_two_obj_and_place", "pick", target, destination, None, 2)
    return TaskSpec("pick_and_place_simple", "pick", target, destination, None, 1)


def task_sentence(intro: str) -> str:
    """The task sentence of the reset observation (``"put two pillow in sofa."``), or ``""``."""
    match = _TASK_SENTENCE.search(intro)
    return match.group(1).strip() if match else ""
