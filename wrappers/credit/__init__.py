"""Framework-neutral credit estimators (SPEC §4).

Example:
    >>> from rubrics.trajectory import Step, Trajectory
    >>> from wrappers.credit import get_estimator
    >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], score=1, success=True)
    >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")], score=0)
    >>> [r.advantages[0].round(3).tolist() for r in get_estimator("rloo")([[win, loss]])]
    [[10.0, 10.0]]

Names: see :func:`available_estimators`.  Add your own with :func:`register_estimator`.
"""

from __future__ import annotations

import importlib

from wrappers.credit.base import (
    CreditInputError,
    CreditResult,
    Estimator,
    Preference,
    available_estimators,
    get_estimator,
    register_estimator,
    unregister_estimator,
    validate_groups,
)

__all__ = [
    "CreditInputError",
    "CreditResult",
    "Estimator",
    "Preference",
    "available_estimators",
    "get_estimator",
    "register_estimator",
    "unregister_estimator",
    "validate_groups",
]

#: Modules that register the built-in estimators when first needed.
BUILTIN_MODULES = (
    "wrappers.credit.grpo",
    "wrappers.credit.rloo",
    "wrappers.credit.gigpo",
    "wrappers.credit.graphgpo",
    "wrappers.credit.milegpo",
    "wrappers.credit.scpo",
    "wrappers.credit.mcgpo",
)
_loaded = False


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    for mod in BUILTIN_MODULES:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # a real missing dependency inside the module
                raise
    _loaded = True
