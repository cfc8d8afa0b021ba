"""Arena methods: estimators with per-environment defaults, and the papers' ablations.

A *method* is written ``estimator`` or ``estimator:variant[+variant...]``, e.g. ``grpo``,
``mcgpo:uniform_weights`` or ``mcgpo:same_fold+uniform_weights`` (the 2x2 factorial of
[MCGPO Table 2b]).  :func:`resolve_method` turns it into the estimator's keyword parameters
plus overrides of the arena objective (MCGPO's "no pairwise loss" sets λ_pair = 0 and
keeps the preference diagnostics).

Per-environment defaults are the papers' settings each environment family declares
(:attr:`agent_envs.family.Family.estimators`, SPEC §4): e.g. GraphGPO (and MCGPO's GraphGPO
task branch) γ = 0.1 on ALFWorld and 0.2 on WebShop; MileGPO's ``alfworld``/``webshop``
presets; SCPO α = 0.5 / 1.0 and τ_succ = 0 / 9.0.  SCPO's scorer in the arena is the
dependency-free lexical one (fast, no model load); ``scpo_scorer="auto"`` selects the
bi-encoder.

Ablations [MCGPO §4.3, Table 2; SCPO §4.4; MileGPO Table 5]:

============================  =========================================================
``mcgpo:same_fold``           labels from the candidates' own fold (``evidence="same"``)
``mcgpo:uniform_weights``     every pair weighs 1 (``weighting="uniform"``)
``mcgpo:state_only``          context = state summary only (``keys="state"``)
``mcgpo:rubric_only``         context = rubric signature only (``keys="rubric"``)
``mcgpo:shuffled_rubric``     (C, F) permuted among a task's rows (``shuffle_rubric=True``)
``mcgpo:no_pair_loss``        λ_pair = 0 (objective), preferences still built
``scpo:chronological``        failed steps processed in time order (``order="chronological"``)
``scpo:no_monotonicity``      matcher without the monotone frontier (``monotonic=False``)
``scpo:shortest_reference``   the shortest success as reference (``reference="shortest"``)
``milegpo:no_pcc``            without path-contrast calibration (``pcc=False``)
``milegpo:no_pcc_rcs``        without PCC and reward-contrast shaping (``pcc=False, rcs=False``)
``<any>:x<k>``                every advantage multiplied by k (e.g. ``grpo:x0.5``,
                              ``grpo:x2``): the update rule's rescaling control
============================  =========================================================

Calibration controls (:data:`CONTROLS`; any estimator takes them): credit made worse on
purpose, so that a comparison shows the smallest credit loss its setting resolves.

============================  =========================================================
``<any>:shuffle<k>``          k % of the update's rows (drawn at random) have their
                              advantages permuted among themselves, across the batch:
                              that share of the credit becomes noise of the same size
``<any>:step_shuffle``        each trajectory's advantages permuted among its own steps:
                              step-level credit destroyed, episode-level credit kept
``<any>:no_rl``               the policy is never updated (rollouts, credit and
                              validation still run): the same run as ``--no-rl``
============================  =========================================================

Example:
    >>> m = resolve_method("mcgpo:uniform_weights", "alfworld")
    >>> m.estimator, m.params["weighting"], m.params["gamma"]
    ('mcgpo', 'uniform', 0.1)
    >>> resolve_method("mcgpo:no_pair_loss", "webshop").objective
    {'pair_coef': 0.0}
    >>> resolve_method("grpo:x0.5", "webshop").adv_scale
    0.5
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainers.sources import CONTROL_VARIANT  # the report finds the controls by it too

__all__ = [
    "CONTROLS",
    "CONTROL_VARIANT",
    "VARIANTS",
    "MethodSpec",
    "arena_estimators",
    "available_methods",
    "degrade_advantages",
    "env_families",
    "estimator_defaults",
    "resolve_method",
]


def arena_estimators() -> tuple[str, ...]:
    """Every registered estimator (:func:`wrappers.credit.available_estimators`), in the order
    the arena compares them: GRPO first (the default baseline of the paired differences), then
    the others by name.  ``ESTIMATORS`` is this tuple, read when accessed."""
    from wrappers.credit import available_estimators

    names = available_estimators()
    return tuple(["grpo"] * ("grpo" in names) + [n for n in names if n != "grpo"])


def __getattr__(name: str) -> Any:
    if name == "ESTIMATORS":
        return arena_estimators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def env_families() -> tuple[str, ...]:
    """The registered environment families (:func:`agent_envs.family.families`), each with its
    own estimator defaults."""
    from agent_envs.family import families

    return tuple(f.name for f in families())


#: variant name -> (estimator, estimator parameter overrides, objective overrides, description)
VARIANTS: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any], str]]] = {
    "mcgpo": {
        "same_fold": ({"evidence": "same"}, {}, "evidence from the candidates' own fold"),
        "uniform_weights": ({"weighting": "uniform"}, {}, "every preference weighs 1"),
        "state_only": ({"keys": "state"}, {}, "contexts from state summaries only"),
        "rubric_only": ({"keys": "rubric"}, {}, "contexts from the rubric signature only"),
        "shuffled_rubric": ({"shuffle_rubric": True}, {}, "(C, F) permuted among a task's rows"),
        "no_pair_loss": ({}, {"pair_coef": 0.0}, "λ_pair = 0 (preferences still built)"),
    },
    "scpo": {
        "chronological": ({"order": "chronological"}, {}, "failed steps in time order"),
        "no_monotonicity": ({"monotonic": False}, {}, "no monotone frontier in the matcher"),
        "shortest_reference": ({"reference": "shortest"}, {}, "shortest success as reference"),
    },
    "milegpo": {
        "no_pcc": ({"pcc": False}, {}, "without path-contrast calibration"),
        "no_pcc_rcs": ({"pcc": False, "rcs": False}, {}, "without PCC and reward-contrast shaping"),
    },
}


#: The built-in calibration controls: method -> (the method it degrades, what it does).
CONTROLS: dict[str, tuple[str, str]] = {
    "grpo:shuffle15": ("grpo", "15% of GRPO's rows' advantages permuted within the batch"),
    "grpo:shuffle50": ("grpo", "50% of GRPO's rows' advantages permuted within the batch"),
    "gigpo:step_shuffle": ("gigpo", "GiGPO's advantages permuted among the steps of each trajectory"),
    "grpo:no_rl": ("grpo", "never updated (the --no-rl control)"),
}


def estimator_defaults(estimator: str, family: str, scpo_scorer: str = "lexical") -> dict[str, Any]:
    """SPEC §4 per-environment parameters of ``estimator`` for the arena.

    ``scpo_scorer`` is SCPO's scorer spec (:func:`wrappers.credit.scorers.make_scorer`).
    """
    from agent_envs.family import get_family

    params = get_family(family).estimator_params(estimator)
    return params | {"scorer": scpo_scorer} if estimator == "scpo" else params


@dataclass(frozen=True)
class MethodSpec:
    """A resolved arena method.

    Attributes:
        label: The method string as given (used for folder names and tables).
        estimator: Registered estimator name.
        variants: Variant names applied, in order.
        params: Keyword parameters for :func:`wrappers.credit.get_estimator`.
        objective: Overrides of :class:`~trainers.arena.objective.ObjectiveConfig` fields.
        adv_scale: Factor applied to every advantage (``:x<k>`` variants).
        degrade: Calibration transforms of the advantages, in order: ``("shuffle", share)``
            or ``("step_shuffle", 0.0)`` (:func:`degrade_advantages`).
        rl: ``False`` for ``:no_rl`` (the policy is never updated).
    """

    label: str
    estimator: str
    variants: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    objective: dict[str, Any] = field(default_factory=dict)
    adv_scale: float = 1.0
    degrade: tuple[tuple[str, float], ...] = ()
    rl: bool = True

    def build(self) -> Any:
        """The estimator object (:func:`wrappers.credit.get_estimator`).

        Raises:
            ValueError: the installed estimator does not accept a variant's switch (names
                the variant and the parameters it accepts).
        """
        from wrappers.credit import get_estimator

        try:
            return get_estimator(self.estimator, **self.params)
        except TypeError as exc:
            raise ValueError(f"method {self.label!r}: {exc}") from None


def resolve_method(
    method: str, family: str, extra_params: Mapping[str, Any] | None = None, *, scpo_scorer: str = "lexical"
) -> MethodSpec:
    """Parse ``estimator[:variant[+variant...]]`` into a :class:`MethodSpec`.

    Args:
        method: The method string.
        family: A registered environment family (``"alfworld"``, ``"webshop"``...; its
            estimator defaults).
        extra_params: Estimator parameters that override defaults and variants.
        scpo_scorer: SCPO's scorer spec (the arena default is the fast lexical scorer).

    Raises:
        ValueError: an empty method, an unknown estimator or variant (lists the known ones),
            or a variant switch the installed estimator does not accept.
    """
    from wrappers.credit import available_estimators

    if not isinstance(method, str) or not method.strip():
        raise ValueError("a method must be a non-empty string like 'grpo' or 'mcgpo:uniform_weights'")
    name, _, rest = method.strip().partition(":")
    known = available_estimators()
    if name not in known:
        raise ValueError(f"unknown estimator {name!r} in method {method!r}; available: {', '.join(known)}")
    params = estimator_defaults(name, family, scpo_scorer)
    objective: dict[str, Any] = {}
    variants: list[str] = []
    scale = 1.0
    degrade: list[tuple[str, float]] = []
    rl = True
    if rest:
        table = VARIANTS.get(name, {})
        for v in rest.split("+"):
            v = v.strip()
            factor = _scale_variant(v)
            control = _control_variant(v)
            if factor is not None:
                scale *= factor
            elif v == "no_rl":
                rl = False
            elif control is not None:
                degrade.append(control)
            if factor is not None or control is not None or v == "no_rl":
                variants.append(v)
                continue
            if v not in table:
                options = ", ".join(f"{name}:{k}" for k in table) or "none"
                raise ValueError(f"unknown variant {v!r} of {name}; variants: {options}")
            est_over, obj_over, _ = table[v]
            params.update(est_over)
            objective.update(obj_over)
            variants.append(v)
    if extra_params:
        params.update(extra_params)
    spec = MethodSpec(method.strip(), name, tuple(variants), params, objective, scale, tuple(degrade), rl)
    _check_params(spec)
    return spec


_SCALE = re.compile(r"^x(\d+(?:\.\d+)?)$")


def _scale_variant(variant: str) -> float | None:
    """``x<k>`` (k > 0) -> k, anything else -> None."""
    m = _SCALE.match(variant)
    if m is None:
        return None
    k = float(m.group(1))
    if k <= 0:
        raise ValueError(f"advantage scale variant {variant!r} needs k > 0")
    return k


def _control_variant(variant: str) -> tuple[str, float] | None:
    """``shuffle<k>`` -> ("shuffle", k/100); ``step_shuffle`` -> ("step_shuffle", 0); else None
    (``no_rl`` is a control too, but not an advantage transform)."""
    m = CONTROL_VARIANT.match(variant)
    if m is None or variant == "no_rl":
        return None
    if variant == "step_shuffle":
        return ("step_shuffle", 0.0)
    k = int(m.group("k"))
    if not 0 < k <= 100:
        raise ValueError(f"control variant {variant!r} needs 0 < k <= 100 (a percentage of rows)")
    return ("shuffle", k / 100.0)


def degrade_advantages(
    parts: list[np.ndarray], degrade: tuple[tuple[str, float], ...], rng: np.random.Generator
) -> list[np.ndarray]:
    """Apply a method's calibration controls to one update's per-trajectory advantages.

    ``("shuffle", s)``: round(s·n) of the n rows, drawn at random, swap advantages by a random
    permutation among themselves; ``("step_shuffle", _)``: every trajectory's advantages are
    permuted among its own steps.  Inputs are not modified.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> parts = [np.array([1.0, 2.0, 3.0]), np.array([-1.0, -1.0])]
        >>> out = degrade_advantages(parts, (("step_shuffle", 0.0),), rng)
        >>> [sorted(p.tolist()) for p in out]          # each trajectory keeps its values
        [[1.0, 2.0, 3.0], [-1.0, -1.0]]
        >>> flat = np.concatenate(degrade_advantages(parts, (("shuffle", 1.0),), rng))
        >>> sorted(flat.tolist()) == sorted(np.concatenate(parts).tolist())   # the batch keeps its values
        True
    """
    out = [np.array(p, dtype=np.float64, copy=True) for p in parts]
    for kind, share in degrade:
        if kind == "step_shuffle":
            out = [rng.permutation(p) for p in out]
            continue
        flat = np.concatenate(out) if out else np.zeros(0)
        m = round(share * flat.size)
        if m >= 2:
            rows = rng.choice(flat.size, size=m, replace=False)
            flat[rows] = flat[rng.permutation(rows)]
        bounds = np.cumsum([len(p) for p in out])[:-1]
        out = list(np.split(flat, bounds))
    return out


def _check_params(spec: MethodSpec) -> None:
    """Fail early, naming the variant, when the estimator lacks a parameter."""
    from wrappers.credit.base import _REGISTRY

    cls = _REGISTRY[spec.estimator]
    accepted = [k for k in inspect.signature(cls.__init__).parameters if k != "self"]
    missing = [k for k in spec.params if k not in accepted]
    if missing:
        raise ValueError(
            f"method {spec.label!r}: estimator {spec.estimator!r} does not accept "
            f"{', '.join(missing)} (this variant needs a newer {spec.estimator}); "
            f"accepted parameters: {', '.join(accepted)}"
        )


def available_methods() -> list[str]:
    """Every estimator and every ``estimator:variant`` string."""
    out = list(arena_estimators())
    for est, table in VARIANTS.items():
        out += [f"{est}:{v}" for v in table]
    return out + list(CONTROLS)
