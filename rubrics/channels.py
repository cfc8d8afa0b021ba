"""Channel schemas: the per-step task-progress signals of each environment (SPEC §3.1).

A channel has a name (used in ``info["rubric"]`` and in templates), a one-letter symbol
(as in MCGPO Tables 15-17), a kind (``bool``, ``count`` or ``graded``) and a flag saying
whether it is a *diagnostic*: diagnostics are reported for inspection but never enter the
active set C.

The schemas form a small registry of this package: the papers' two environments (ALFWorld,
WebShop) are its built-in entries, so ``import rubrics`` alone knows them; an environment
family of :mod:`agent_envs` registers any further schema with :func:`register_schema` when
``agent_envs`` registers its environments (``agent_envs.family``).  This package never imports
``agent_envs``: the environments fill the registry, the rubric layer only holds it.

Example:
    >>> schema = channel_schema("alfworld")
    >>> schema["target_acquired"].symbol
    'A'
    >>> [c.name for c in schema.values() if c.diagnostic]
    ['invalid_actions']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["ALFWORLD_CHANNELS", "WEBSHOP_CHANNELS", "Channel", "channel_schema", "environments", "register_schema"]

ChannelKind = Literal["bool", "count", "graded"]


@dataclass(frozen=True)
class Channel:
    """One rubric channel.

    Attributes:
        name: Channel name, the key in a rubric status dict.
        symbol: One-letter symbol from the papers' tables (unique within an environment).
        kind: ``bool`` (true/false), ``count`` (non-negative integer) or ``graded`` ([0, 1]).
        diagnostic: Diagnostics are never part of the active set C.
        description: What the value means, after the observed transition.
    """

    name: str
    symbol: str
    kind: ChannelKind
    diagnostic: bool
    description: str


ALFWORLD_CHANNELS: tuple[Channel, ...] = (
    Channel("target_acquired", "A", "count", False,
            "min(r, |A|) with A the target instances ever held; persists after placement"),
    Channel("target_in_hand", "H", "bool", False, "the held object is of the target type"),
    Channel("target_processed", "P", "bool", False,
            "1[P non-empty]: a target instance was cleaned/heated/cooled as the task requires"),
    Channel("target_placed", "L", "count", False,
            "min(r, |L|) with L the target instances in a destination receptacle now"),
    Channel("light_on", "B", "bool", False, "the lamp is switched on (look tasks)"),
    Channel("goal_progress", "G", "count", False,
            "look: H+B; clean/heat/cool: 1[P]+1[L]+1[P∩L]; pick/pick2: min(r, |L|)"),
    Channel("solved", "S", "bool", False, "the engine's won flag"),
    Channel("invalid_actions", "X", "count", True, "number of invalid actions so far"),
)

WEBSHOP_CHANNELS: tuple[Channel, ...] = (
    Channel("search_issued", "Q", "bool", False, "a search has been issued"),
    Channel("product_opened", "O", "bool", False, "a product page is open / was selected"),
    Channel("type_match", "T", "graded", False, "scorer r_type of the current product"),
    Channel("attribute_match", "A", "graded", False, "fraction of requested attributes matched"),
    Channel("option_match", "U", "graded", False,
            "fraction of requested options matched (0 when the goal has none)"),
    Channel("price_ok", "P", "bool", False, "the scorer's price predicate"),
    Channel("purchase_readiness", "R", "graded", False,
            "u·(M_a + M_o + p)/(N_a + N_o + 1) before purchase [MCGPO Eq. 19]"),
    Channel("purchased", "B", "bool", False, "the episode ended by a purchase"),
    Channel("task_score", "K", "graded", False, "raw score clipped to [0, 1]"),
    Channel("solved", "S", "bool", False, "purchase with raw score 1 (score >= 0.999)"),
    Channel("scorer_error", "E", "bool", True, "the goal scorer raised; components left at 0"),
)

_SCHEMAS: dict[str, tuple[Channel, ...]] = {"alfworld": ALFWORLD_CHANNELS, "webshop": WEBSHOP_CHANNELS}


def register_schema(env: str, channels: tuple[Channel, ...]) -> None:
    """Register the channel schema of environment ``env`` (lower-case name).

    Registering the same schema again is a no-op.

    Raises:
        ValueError: ``env`` already has a different schema, or two channels share a name or a
            symbol.
        TypeError: a channel is not a :class:`Channel`.
    """
    if not isinstance(env, str) or not env or env != env.lower():
        raise ValueError(f"an environment name is a non-empty lower-case str, got {env!r}")
    channels = tuple(channels)
    if not all(isinstance(c, Channel) for c in channels):
        raise TypeError(f"the channels of {env!r} must be Channel records")
    for attr in ("name", "symbol"):
        values = [getattr(c, attr) for c in channels]
        if len(set(values)) != len(values):
            raise ValueError(f"the channels of {env!r} repeat a {attr}: {values}")
    if _SCHEMAS.get(env, channels) != channels:
        raise ValueError(f"environment {env!r} already has a different channel schema")
    _SCHEMAS[env] = channels


def environments() -> tuple[str, ...]:
    """The environments with a registered schema, in registration order."""
    return tuple(_SCHEMAS)


def channel_schema(env: str) -> dict[str, Channel]:
    """The channels of ``env`` (``"alfworld"``, ``"webshop"`` or a registered one) by name, in table order."""
    if not isinstance(env, str):
        raise TypeError(f"env must be a str, got {type(env).__name__}")
    try:
        return {c.name: c for c in _SCHEMAS[env.lower()]}
    except KeyError:
        raise ValueError(f"unknown environment {env!r}; known: {', '.join(_SCHEMAS)}") from None


def diagnostic_channels() -> frozenset[str]:
    """Names of every diagnostic channel of every known environment."""
    return frozenset(c.name for chans in _SCHEMAS.values() for c in chans if c.diagnostic)
