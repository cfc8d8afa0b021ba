"""Framework-neutral credit estimators (SPEC §4).

Example:
    >>> from rubrics.trajectory import Step, Trajectory
    >>> from wrappers.credit import get_estimator
    >>> win = Trajectory("t", 0, [Step("s0", "a"), Step("s1", "b", reward=10.0)], score=1, success=True)
    >>> loss = Trajectory("t", 1, [Step("s0", "c"), Step("s2", "d")], score=0)
    >>> [r.advantages[0].round(3).tolist() for r in get_estimator("rloo")([[win, loss]])]
    [[10.0, 10.0]]

Names: see :func:`available_estimators`.  Add your own with :func:`register_estimator`; a
built-in estimator is one module of this package with that decorator (:func:`builtin_modules`
finds it).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re

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
    "builtin_modules",
    "get_estimator",
    "register_estimator",
    "unregister_estimator",
    "validate_groups",
]

_loaded = False
#: A line that registers an estimator: ``@register_estimator("name")`` at the top level.
_REGISTERS = re.compile(r"^@register_estimator\(", re.MULTILINE)


def builtin_modules() -> list[str]:
    """The modules of this package that register built-in estimators, by module name.

    Found by reading each module's source for a top-level ``@register_estimator(`` line
    (cheap: nothing is imported to find them); a module whose source cannot be read is
    listed too, so an installation without sources still registers everything.  Adding an
    estimator to rubricgym is one new module here with that decorator.
    """
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        name = f"{__name__}.{info.name}"
        spec = importlib.util.find_spec(name)
        try:
            source = spec.loader.get_source(name) if spec and spec.loader else None
        except (ImportError, OSError):
            source = None
        if source is None or _REGISTERS.search(source):
            out.append(name)
    return out


def _load_builtin() -> None:
    global _loaded
    if _loaded:
        return
    for mod in builtin_modules():
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:  # a real missing dependency inside the module
                raise
    _loaded = True
