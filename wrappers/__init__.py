"""Reward-shaping wrappers and framework-neutral credit estimators.

Neither this package nor :mod:`wrappers.credit` imports torch or a game engine, and
:mod:`wrappers.credit` not even Gymnasium: :class:`RubricShaping` (a ``gymnasium.Wrapper``)
is imported on first use.

* :class:`RubricShaping` — rubric event shaping as a ``gymnasium.Wrapper`` (SPEC §3.3).
* :mod:`wrappers.credit` — GRPO, RLOO, GiGPO, GraphGPO, MileGPO, SCPO, MCGPO (SPEC §4).
"""

from __future__ import annotations

from typing import Any

__all__ = ["RubricShaping", "shaping_term"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from wrappers import shaping

        return getattr(shaping, name)
    raise AttributeError(f"module 'wrappers' has no attribute {name!r}")
