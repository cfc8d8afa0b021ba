"""Actions as function-calling tools: one tool per action kind, JSON-schema arguments.

The text interface names an action inside ``<action>…</action>``; the tool interface offers
the same actions as OpenAI-style function tools built from the turn's admissible actions —
one tool per kind that the environment's family declares (``go_to(target)``, ``take(object, receptacle)``, ``search(query)``,
``click(button)``, ...), each slot an ``enum`` of the values admissible now (free text for a
search query).  :func:`call_to_action` turns a call back into the action string; a call that
names no tool, has unparsable arguments or misses a slot becomes an action the environment
rejects (an invalid action, as a malformed text reply is).

Example:
    >>> tools = tools_for(["go to desk 1", "take mug 1 from desk 1", "look"])
    >>> [t["function"]["name"] for t in tools]
    ['go_to', 'take', 'look']
    >>> tools[1]["function"]["parameters"]["properties"]["object"]["enum"]
    ['mug 1']
    >>> call_to_action("take", '{"object": "mug 1", "receptacle": "desk 1"}')
    'take mug 1 from desk 1'
    >>> call_to_action("take", "{not json")
    'take({not json)'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ACTION_KINDS", "TOOL_INSTRUCTION", "action_to_call", "call_to_action",  # noqa: F822 (module __getattr__)
           "kinds_of", "tool_result", "tools_for"]

#: What the model is told when its actions are tools (the text format's ``<action>`` instruction).
TOOL_INSTRUCTION = "Act by calling exactly one of the tools; its arguments name the action."

_SLOT = re.compile(r"\{(\w+)\}")


def _pattern(template: str) -> re.Pattern[str]:
    parts = _SLOT.split(template)
    out = ""
    for i, part in enumerate(parts):
        out += f"(?P<{part}>.+?)" if i % 2 else re.escape(part)
    return re.compile(f"^{out}$")


_COMPILED: dict[tuple[tuple[str, str, str], ...], list[tuple[Any, ...]]] = {}


def _all_kinds() -> tuple[tuple[str, str, str], ...]:
    """Every registered family's tool kinds (:class:`agent_envs.family.Family`), in registration
    order, each name once."""
    from agent_envs.family import families

    seen: dict[str, tuple[str, str, str]] = {}
    for fam in families():
        for kind in fam.tool_kinds:
            seen.setdefault(kind[0], kind)
    return tuple(seen.values())


def _kinds() -> list[tuple[Any, ...]]:
    kinds = _all_kinds()
    if kinds not in _COMPILED:
        _COMPILED[kinds] = [(name, template, doc, _pattern(template), _SLOT.findall(template))
                            for name, template, doc in kinds]
    return _COMPILED[kinds]


def __getattr__(name: str) -> Any:
    if name == "ACTION_KINDS":  # (tool name, template, description) of every registered family
        return _all_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def tools_for(admissible: Sequence[str]) -> list[dict[str, Any]]:
    """The tools of the admissible actions (kinds in :data:`ACTION_KINDS` order; a query slot
    is free text, every other slot an enum of its admissible values)."""
    tools = []
    for name, template, doc, pattern, slots in _kinds():
        values: dict[str, list[str]] = {s: [] for s in slots}
        matched = False
        for action in admissible:
            m = pattern.match(str(action))
            if m is None:
                continue
            matched = True
            for s in slots:
                v = m.group(s)
                if v not in values[s] and v != "<your query>":
                    values[s].append(v)
        if not matched:
            continue
        props = {s: ({"type": "string"} if s == "query" or not values[s] else {"type": "string", "enum": values[s]})
                 for s in slots}
        tools.append({"type": "function", "function": {
            "name": name, "description": f"{doc} ({template})",
            "parameters": {"type": "object", "properties": props, "required": list(slots)}}})
    return tools


def call_to_action(name: str, arguments: str | Mapping[str, Any] | None, info: Mapping[str, Any] | None = None) -> str:
    """The action string a tool call names (``info`` is unused today: the call alone decides)."""
    kind = next((k for k in _kinds() if k[0] == name), None)
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
    except json.JSONDecodeError:
        return f"{name}({arguments})"
    if kind is None or not isinstance(args, Mapping) or any(s not in args for s in kind[4]):
        return f"{name}({json.dumps(args, sort_keys=True) if isinstance(args, Mapping) else arguments})"
    return kind[1].format(**{s: " ".join(str(args[s]).split()) for s in kind[4]})


def action_to_call(action: str) -> tuple[str, dict[str, str]] | None:
    """The tool call that names ``action`` (the inverse of :func:`call_to_action`; e.g. an
    expert's plan as tool calls), or ``None`` for an action of no kind.

    >>> action_to_call("heat egg 1 with microwave 1")
    ('heat', {'object': 'egg 1', 'receptacle': 'microwave 1'})
    >>> action_to_call("click[buy now]")
    ('click', {'button': 'buy now'})
    """
    for name, _template, _doc, pattern, slots in _kinds():
        m = pattern.match(str(action))
        if m is not None:
            return name, {s: m.group(s) for s in slots}
    return None


def kinds_of(env_id: str) -> tuple[str, ...]:
    """The tool names of an environment's family (:attr:`agent_envs.family.Family.tool_kinds`).

    Raises:
        ValueError: ``env_id`` belongs to no registered family.
    """
    from agent_envs.family import family_of

    fam = family_of(env_id)
    if fam is None:
        raise ValueError(f"{env_id!r} belongs to no registered environment family: its tool kinds are unknown")
    return fam.tool_names


def tool_result(observation: str, admissible: Sequence[str], *, done: bool, won: bool = False) -> str:
    """The tool message after an action: what the agent sees now and what it may do next, or
    that the episode is over.

    >>> tool_result("You open the fridge 1.", ["close fridge 1", "look"], done=False)
    'You open the fridge 1.\\nPossible actions: close fridge 1 | look'
    >>> tool_result("You won!", [], done=True, won=True)
    'You won!\\nThe episode is over (task completed). Do not call any more tools.'
    """
    text = str(observation).strip()
    if done:
        return f"{text}\nThe episode is over (task {'completed' if won else 'not completed'}). Do not call any more tools."
    return f"{text}\nPossible actions: " + " | ".join(str(a).strip() for a in admissible)
