"""Actions as function-calling tools: one tool per action kind, JSON-schema arguments.

The text interface names an action inside ``<action>…</action>``; the tool interface offers
the same actions as OpenAI-style function tools built from the turn's admissible actions —
one tool per kind (``go_to(target)``, ``take(object, receptacle)``, ``search(query)``,
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

__all__ = ["ACTION_KINDS", "TOOL_INSTRUCTION", "action_to_call", "call_to_action", "kinds_of", "tool_result",
           "tools_for"]

#: What the model is told when its actions are tools (the text format's ``<action>`` instruction).
TOOL_INSTRUCTION = "Act by calling exactly one of the tools; its arguments name the action."

#: (tool name, template, description); ``{slot}`` are the arguments.  ALFWorld's and WebShop's kinds.
ACTION_KINDS: tuple[tuple[str, str, str], ...] = (
    ("go_to", "go to {target}", "Walk to a receptacle or place."),
    ("take", "take {object} from {receptacle}", "Pick up an object from a receptacle."),
    ("move", "move {object} to {receptacle}", "Put the object you hold into or onto a receptacle."),
    ("open", "open {target}", "Open a receptacle."),
    ("close", "close {target}", "Close a receptacle."),
    ("toggle", "toggle {target}", "Switch an object or appliance on or off."),
    ("use", "use {target}", "Use an object (e.g. a lamp)."),
    ("clean", "clean {object} with {receptacle}", "Clean an object with a receptacle (a sink)."),
    ("heat", "heat {object} with {receptacle}", "Heat an object with a receptacle (a microwave)."),
    ("cool", "cool {object} with {receptacle}", "Cool an object with a receptacle (a fridge)."),
    ("examine", "examine {target}", "Look closely at an object or receptacle."),
    ("look", "look", "Look around."),
    ("inventory", "inventory", "List what you hold."),
    ("search", "search[{query}]", "Search the shop for products."),
    ("click", "click[{button}]", "Click a button or link on the page."),
)

_SLOT = re.compile(r"\{(\w+)\}")


def _pattern(template: str) -> re.Pattern[str]:
    parts = _SLOT.split(template)
    out = ""
    for i, part in enumerate(parts):
        out += f"(?P<{part}>.+?)" if i % 2 else re.escape(part)
    return re.compile(f"^{out}$")


_KINDS = [(name, template, doc, _pattern(template), _SLOT.findall(template)) for name, template, doc in ACTION_KINDS]


def tools_for(admissible: Sequence[str]) -> list[dict[str, Any]]:
    """The tools of the admissible actions (kinds in :data:`ACTION_KINDS` order; a query slot
    is free text, every other slot an enum of its admissible values)."""
    tools = []
    for name, template, doc, pattern, slots in _KINDS:
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
    kind = next((k for k in _KINDS if k[0] == name), None)
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
    for name, _template, _doc, pattern, slots in _KINDS:
        m = pattern.match(str(action))
        if m is not None:
            return name, {s: m.group(s) for s in slots}
    return None


def kinds_of(env_id: str) -> tuple[str, ...]:
    """The tool names of an environment family: WebShop's ``search``/``click``, else ALFWorld's."""
    web = ("search", "click")
    return web if env_id.lower().startswith("webshop") else tuple(k[0] for k in ACTION_KINDS if k[0] not in web)


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
