"""Reward-shaping wrappers and framework-neutral credit estimators.

Neither this package nor :mod:`wrappers.credit` imports torch or a game engine.

* :class:`RubricShaping` — rubric event shaping as a ``gymnasium.Wrapper`` (SPEC §3.3).
* :mod:`wrappers.credit` — GRPO, RLOO, GiGPO, GraphGPO, MileGPO, SCPO, MCGPO (SPEC §4).
"""

from wrappers.shaping import RubricShaping, shaping_term

__all__ = ["RubricShaping", "shaping_term"]
