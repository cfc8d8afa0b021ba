"""The trainer's objective (SPEC §5) applied per decision, with MCGPO's pairwise loss.

In the arena every decision is one training row and the chosen action is its single
"token", so the token-level formulas of SPEC §5 apply unchanged with one token per row:

* policy loss (dual clip): ρ = π_θ(a)/π_old(a),
  ℓ_clip = max(−ρA, −clip(ρ, 1−ε_low, 1+ε_high)A), and for A < 0 ℓ = min(ℓ_clip, −c·A)
  (c = 3);
* KL to the frozen reference (k3): v = log π_ref(a) − log π_θ(a),
  K̂ = clip(e^v − v − 1, −10, 10), weight 0.01;
* entropy bonus −0.001·H(π_θ(·|s)) over the admissible actions;
* the three averaged over the rows of the micro-batch B (the masked token mean);
* MCGPO [Eqs. 5–7]: d(r) = log π_θ(a_r) − log π_old(a_r) (Eq. 5 with one token),
  L_pair = Σ_{(+,−)∈B} c·softplus(−(d(+) − d(−))) / max(1, ⌊|B|/2⌋) (Eq. 6),
  L = L_task + λ_pair·L_pair (Eq. 7), λ_pair = 0.05.

:func:`decision_loss` returns the loss and its derivatives with respect to each row's
log π_θ(a) and entropy; the policy turns those into a weight gradient
(:meth:`~trainers.arena.policy.LinearSoftmaxPolicy.evaluate`).  The pair gradient is
Eq. 11: ∂ℓ_p/∂d(+) = −c·σ(−δ), ∂ℓ_p/∂d(−) = +c·σ(−δ), δ = d(+) − d(−).

Example:
    >>> import numpy as np
    >>> out = decision_loss(logp=np.log([0.5]), old_logp=np.log([0.25]), ref_logp=np.log([0.25]),
    ...                     advantages=np.array([1.0]), entropy=np.zeros(1))
    >>> round(out.policy_loss, 4)   # ρ = 2 is clipped to 1.2: ℓ = max(−2, −1.2) = −1.2
    -1.2
    >>> float(out.d_logp[0]) - 0.01 * (1 - 0.5) == 0.0   # clipped: only the KL term moves it
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trainers.settings import (
    ObjectiveConfig,  # the objective's coefficients, shared with the trainer
)

__all__ = ["Adam", "LossTerms", "ObjectiveConfig", "decision_loss"]


@dataclass
class LossTerms:
    """The loss of one micro-batch and its derivatives.

    Attributes:
        loss: L = mean(ℓ + kl_coef·K̂ − entropy_coef·H) + λ_pair·L_pair.
        policy_loss: mean of the clipped policy loss ℓ.
        kl: mean of K̂.
        entropy: mean entropy.
        pair_loss: L_pair (before λ_pair).
        d_logp: ∂L/∂ log π_θ(a_r) per row.
        d_entropy: ∂L/∂H_r per row.
        clip_fraction: share of rows whose gradient the ratio clip removed.
        dual_clip_fraction: share of rows capped by the dual clip.
        n_pairs: number of pairs in the micro-batch.
        pair_accuracy: share of pairs with d(+) > d(−) (NaN without pairs).
    """

    loss: float
    policy_loss: float
    kl: float
    entropy: float
    pair_loss: float
    d_logp: np.ndarray
    d_entropy: np.ndarray
    clip_fraction: float
    dual_clip_fraction: float
    n_pairs: int = 0
    pair_accuracy: float = float("nan")
    extra: dict[str, float] = field(default_factory=dict)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-_softplus(-x))


def decision_loss(
    *,
    logp: np.ndarray,
    old_logp: np.ndarray,
    ref_logp: np.ndarray,
    advantages: np.ndarray,
    entropy: np.ndarray,
    pairs: Sequence[tuple[int, int, float]] = (),
    config: ObjectiveConfig | None = None,
) -> LossTerms:
    """The SPEC §5 loss of one micro-batch of decision rows, and its row derivatives.

    Args:
        logp: log π_θ(a_r) of each row's chosen action under the current weights.
        old_logp: log π_old(a_r), the rollout policy's value (fixed during the update).
        ref_logp: log π_ref(a_r) under the frozen reference policy.
        advantages: A_r from the credit estimator.
        entropy: H_r, entropy of π_θ over row r's admissible actions.
        pairs: MCGPO preferences inside this micro-batch as ``(preferred_row,
            rejected_row, weight)`` with row positions in this batch.
        config: Coefficients (default: SPEC §5's, :class:`~trainers.settings.ObjectiveConfig`).

    Returns:
        :class:`LossTerms`; ``d_logp``/``d_entropy`` are exact partial derivatives of
        ``loss`` (at a ratio exactly on a clip boundary the unclipped branch is used).

    Raises:
        ValueError: arrays of different lengths, an empty batch, or a pair row out of range.
    """
    logp = np.asarray(logp, dtype=np.float64)
    n = logp.shape[0]
    old, ref, adv, ent = _rows(n, old_logp=old_logp, ref_logp=ref_logp, advantages=advantages, entropy=entropy)
    cfg = config if config is not None else ObjectiveConfig()
    pol, g_pol, clipped, dual = _clipped_policy_loss(logp - old, adv, cfg)
    k3, g_kl = _k3_kl(ref - logp, cfg)

    loss_rows = pol + cfg.kl_coef * k3 - cfg.entropy_coef * ent
    d_logp = (g_pol + cfg.kl_coef * g_kl) / n
    d_entropy = np.full(n, -cfg.entropy_coef / n)
    loss = float(loss_rows.mean())
    pair_loss = 0.0
    accuracy = float("nan")
    if len(pairs):
        pair_loss, accuracy = _pair_loss(pairs, logp - old, d_logp, cfg.pair_coef)
        loss += cfg.pair_coef * pair_loss

    return LossTerms(
        loss=loss,
        policy_loss=float(pol.mean()),
        kl=float(k3.mean()),
        entropy=float(ent.mean()),
        pair_loss=pair_loss,
        d_logp=d_logp,
        d_entropy=d_entropy,
        clip_fraction=float(np.mean(clipped)),
        dual_clip_fraction=float(np.mean(dual)),
        n_pairs=len(pairs),
        pair_accuracy=accuracy,
    )


def _rows(n: int, **arrays: np.ndarray) -> list[np.ndarray]:
    """The per-row arrays as float64, each checked to have ``n`` rows (and ``n`` > 0)."""
    conv = []
    for name, arr in arrays.items():
        arr = np.asarray(arr, dtype=np.float64)
        if arr.shape != (n,):
            raise ValueError(f"{name} has shape {arr.shape}, expected ({n},) like logp")
        conv.append(arr)
    if n == 0:
        raise ValueError("decision_loss needs at least one row")
    return conv


def _clipped_policy_loss(log_ratio: np.ndarray, adv: np.ndarray, cfg: ObjectiveConfig) -> tuple[np.ndarray, ...]:
    """Dual-clip PPO loss per row: (loss, d loss / d logp, clipped to zero gradient, dual-clipped)."""
    ratio = np.exp(log_ratio)
    lo, hi = 1.0 - cfg.clip_low, 1.0 + cfg.clip_high
    unclipped = -ratio * adv
    clipped = -np.clip(ratio, lo, hi) * adv
    use_unclipped = unclipped >= clipped
    l_clip = np.where(use_unclipped, unclipped, clipped)
    # d l_clip / d logp: unclipped branch −A·ρ; clipped branch 0 outside [lo, hi], −A·ρ inside.
    inside = (ratio >= lo) & (ratio <= hi)
    g_clip = np.where(use_unclipped | inside, -adv * ratio, 0.0)
    cap = -cfg.dual_clip * adv
    dual = (adv < 0) & (cap < l_clip)
    pol = np.where(dual, cap, l_clip)
    g_pol = np.where(dual, 0.0, g_clip)
    return pol, g_pol, ~(use_unclipped | inside), dual


def _k3_kl(v: np.ndarray, cfg: ObjectiveConfig) -> tuple[np.ndarray, np.ndarray]:
    """k3 KL to the reference per row, v = log π_ref − log π_θ: (clipped K̂, d K̂ / d logp)."""
    with np.errstate(over="ignore"):  # e^v overflows only where K̂ is clipped anyway
        k3_raw = np.expm1(v) - v
        g_kl = np.where(np.abs(k3_raw) <= cfg.kl_clip, -np.expm1(v), 0.0)  # d/dlogp of e^v − v − 1
    return np.clip(k3_raw, -cfg.kl_clip, cfg.kl_clip), g_kl


def _pair_loss(pairs: Sequence[tuple[int, int, float]], d: np.ndarray, d_logp: np.ndarray,
               pair_coef: float) -> tuple[float, float]:
    """MCGPO pairwise loss [Eqs. 5-7, 11] with d = log π_θ − log π_old per row: (loss, accuracy);
    adds λ_pair times its gradient to ``d_logp`` in place."""
    n = d.shape[0]
    arr = np.asarray(pairs, dtype=np.float64).reshape(-1, 3)
    pos = arr[:, 0].astype(np.int64)
    neg = arr[:, 1].astype(np.int64)
    if pos.min() < 0 or neg.min() < 0 or pos.max() >= n or neg.max() >= n:
        raise ValueError(f"a pair refers to a row outside this batch of {n} rows")
    w = arr[:, 2]
    delta = d[pos] - d[neg]  # Eq. 5 with one response token
    denom = max(1, n // 2)
    pair_loss = float((w * _softplus(-delta)).sum() / denom)
    g = -w * _sigmoid(-delta) / denom  # Eq. 11 (before λ_pair)
    np.add.at(d_logp, pos, pair_coef * g)
    np.add.at(d_logp, neg, -pair_coef * g)
    return pair_loss, float(np.mean(delta > 0))


class Adam:
    """Adam (Kingma & Ba) with decoupled weight decay, on a dense numpy weight vector.

    Args:
        dim: Number of weights.
        lr: Step size.
        betas: Exponential decay rates of the moment estimates.
        eps: Numerical floor of the denominator.
        weight_decay: Decoupled (AdamW) weight decay per step, multiplied by ``lr``.

    Example:
        >>> import numpy as np
        >>> opt = Adam(2, lr=0.1)
        >>> w = np.zeros(2)
        >>> opt.step(w, np.array([1.0, -2.0]))   # first step moves each weight by lr·sign
        >>> w.round(6).tolist()
        [-0.1, 0.1]
    """

    def __init__(
        self, dim: int, lr: float = 0.05, betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8, weight_decay: float = 0.0,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), betas, float(eps), float(weight_decay)
        self.m = np.zeros(dim)
        self.v = np.zeros(dim)
        self.t = 0

    def step(self, weights: np.ndarray, grad: np.ndarray) -> None:
        """Update ``weights`` in place from the gradient of the loss (minimisation)."""
        b1, b2 = self.betas
        self.t += 1
        self.m *= b1
        self.m += (1 - b1) * grad
        self.v *= b2
        self.v += (1 - b2) * grad * grad
        m_hat = self.m / (1 - b1**self.t)
        v_hat = self.v / (1 - b2**self.t)
        if self.weight_decay:
            weights *= 1 - self.lr * self.weight_decay
        weights -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
