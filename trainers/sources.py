"""What the report must know of the runs' sources (the trainer, the arena), kept below all three.

The report (:mod:`trainers.report`) reads every source's runs but imports none of them: a source
declares here how its recorded configuration reads (:func:`register_config_reader`; the arena's
configuration module registers the arena's on import, the trainer's is built in), and the
calibration controls' variant names live here, where both the report and the arena's variants
(:mod:`trainers.arena.variants`) read them.

Example:
    >>> flat_config("trainer", {"rollout": {"group_size": 4}})["group_size"]
    4
    >>> bool(CONTROL_VARIANT.match("shuffle25")), bool(CONTROL_VARIANT.match("same_fold"))
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["CONTROL_VARIANT", "ConfigReader", "flat_config", "register_config_reader"]

#: The calibration controls' variant names (the report finds a setting's controls by it).
CONTROL_VARIANT = re.compile(r"^(shuffle(?P<k>\d+)|step_shuffle|no_rl)$")

#: Reads a source's recorded configuration (by section, or flat as written before the
#: sections) as ``{setting: value}`` under today's names; raises ``ValueError`` or
#: ``TypeError`` for one it cannot read.
ConfigReader = Callable[[Mapping[str, Any]], dict[str, Any]]


def _trainer_config(config: Mapping[str, Any]) -> dict[str, Any]:
    from trainers.config import flat_settings

    return flat_settings(dict(config))


_READERS: dict[str, ConfigReader] = {"trainer": _trainer_config}


def register_config_reader(source: str, reader: ConfigReader) -> None:
    """Read the recorded configurations of runs whose ``source`` is ``source`` with ``reader``
    (the last registration of a source wins)."""
    _READERS[source] = reader


def flat_config(source: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A run's recorded configuration as ``{setting: value}`` under today's names, by its
    source's reader (the trainer's: :func:`trainers.config.flat_settings`; the arena's,
    registered by :mod:`trainers.arena.config`: :meth:`ArenaConfig.recorded`, which also
    supplies the values older runs used for settings added since).  A source without a
    reader, or a configuration its reader cannot read (written by another version), is
    returned as recorded."""
    reader = _READERS.get(source)
    if reader is not None:
        try:
            return reader(config)
        except (ValueError, TypeError):
            pass  # written by another version: compared as recorded
    return dict(config)
