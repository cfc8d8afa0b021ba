"""Rubric channels, dependency templates, frontiers and signatures (SPEC §3).

This package imports neither torch nor any game engine.

Example:
    >>> import rubrics
    >>> t = rubrics.load_template("webshop", "webshop")
    >>> sorted(t.frontier({"search_issued"}, {"search_issued"}))
    ['product_opened']
    >>> sorted(rubrics.active_set({"search_issued": True, "type_match": 0.0, "scorer_error": True}))
    ['search_issued']
"""

from rubrics.channels import ALFWORLD_CHANNELS, WEBSHOP_CHANNELS, Channel, channel_schema
from rubrics.signature import Signature, SignatureTracker, active_set, signatures
from rubrics.templates import (
    ALFWORLD_TASK_TYPES,
    RELATIONS,
    Edge,
    Template,
    TemplateError,
    available_templates,
    load_template,
    parse_template,
)

__all__ = [
    "ALFWORLD_CHANNELS",
    "ALFWORLD_TASK_TYPES",
    "RELATIONS",
    "WEBSHOP_CHANNELS",
    "Channel",
    "Edge",
    "Signature",
    "SignatureTracker",
    "Template",
    "TemplateError",
    "active_set",
    "available_templates",
    "channel_schema",
    "load_template",
    "parse_template",
    "signatures",
]
