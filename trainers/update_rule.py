"""One update rule for every policy we train: scale-free advantages and a KL trust region.

The arena's numpy policy and the trainer's transformer share this module, so that what the
arena measures about credit assignment is what the trainer does.  The loss stays SPEC §5
(dual-clip PPO ratio loss, k3 KL to the reference, entropy bonus, MCGPO's pairwise term);
this module decides *how far one update may move the policy*:

1. **Advantages in units of their own running RMS.**  The raw advantages are divided by a
   bias-corrected exponential moving average of their root mean square over the updates so
   far (the advantage analogue of PPO's running reward scaling; Engstrom et al. 2020,
   "Implementation Matters in Deep RL", and PopArt, van Hasselt et al. 2016).  Multiplying
   every advantage of a run by a constant therefore changes nothing (tested: the same
   weights to rounding), and estimators whose advantages live on different scales (RLOO's
   are ~4× GRPO's) take comparable steps.  Values with ``|A| <= zero_tol`` are float noise
   and become exactly 0, so a batch without signal stays without signal.
2. **Plain SGD steps**, never a per-coordinate normalising optimiser: the displacement is
   proportional to the gradient, so all-zero advantages move the policy only by the KL and
   entropy terms' own (small) gradients.  Adam turns float noise of 1e-19 into full steps.
3. **A KL trust region per update** (TRPO's backtracking line search on the sampled KL,
   Schulman et al. 2015; PPO's ``target_kl`` early stop as in OpenAI Spinning Up): after
   every epoch of mini-batch steps the mean KL(π_old ‖ π_new) over the update's decisions
   is measured; when it exceeds ``target_kl`` the displacement θ − θ_old is halved until it
   does not (at most ``max_backtracks`` times, then θ_old is restored) and the update stops.

The rule is framework-neutral: the caller hands :func:`trust_region_update` a
:class:`PolicyOps` (snapshot, one epoch of SGD steps, KL to the snapshot, interpolation,
displacement norm) implemented with numpy (``trainers.arena``) or torch (``trainers.trainer``).

Example (a two-weight toy policy whose KL to the snapshot is 5·‖θ − θ_old‖²):
    >>> import numpy as np
    >>> class Toy:
    ...     def __init__(self): self.w = np.zeros(2)
    ...     def snapshot(self): return self.w.copy()
    ...     def epoch(self, k): self.w += np.array([0.3, 0.4]); return {"clip_fraction": 0.0}
    ...     def kl(self, snap): return float(5 * np.sum((self.w - snap) ** 2))
    ...     def interpolate(self, snap, beta): self.w = snap + beta * (self.w - snap)
    ...     def distance(self, snap): return float(np.linalg.norm(self.w - snap))
    >>> toy = Toy()
    >>> stats = trust_region_update(toy, UpdateRuleConfig(epochs=4, target_kl=0.5))
    >>> stats["epochs_run"], stats["backtracks"], round(stats["kl"], 4), round(stats["delta_norm"], 4)
    (1.0, 1.0, 0.3125, 0.25)
    >>> scaler = AdvantageScaler()
    >>> scaler.normalize(np.array([2.0, -2.0, 0.0, 1e-12])).tolist()   # RMS of the signal rows: 2
    [1.0, -1.0, 0.0, 0.0]
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["AdvantageScaler", "PolicyOps", "UpdateRuleConfig", "trust_region_update"]


@dataclass(frozen=True)
class UpdateRuleConfig:
    """How far one update may move the policy (shared by the arena and the trainer).

    Attributes:
        epochs: Maximum passes of SGD mini-batch steps over the update's rows.
        target_kl: Trust region: the mean KL(π_old ‖ π_new) over the update's decisions
            (nats) that one update may not exceed.  ``0`` disables the check.
        max_backtracks: Halvings of the displacement before θ_old is restored.
        adv_norm: ``"running_rms"`` divides advantages by their running RMS;
            ``"none"`` uses them as the estimator returned them.
        rms_decay: Decay of the RMS moving average (bias-corrected, like Adam's moments).
        zero_tol: Advantages with ``|A| <= zero_tol`` are float noise and set to exactly 0.
    """

    epochs: int = 4
    target_kl: float = 0.05
    max_backtracks: int = 12
    adv_norm: str = "running_rms"
    rms_decay: float = 0.9
    zero_tol: float = 1e-9

    def __post_init__(self) -> None:
        if isinstance(self.epochs, bool) or not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"UpdateRuleConfig.epochs must be a positive integer, got {self.epochs!r}")
        if not (math.isfinite(self.target_kl) and self.target_kl >= 0):
            raise ValueError(f"UpdateRuleConfig.target_kl must be a finite number >= 0, got {self.target_kl!r}")
        if not isinstance(self.max_backtracks, int) or self.max_backtracks < 0:
            raise ValueError(f"UpdateRuleConfig.max_backtracks must be an integer >= 0, got {self.max_backtracks!r}")
        if self.adv_norm not in ("running_rms", "none"):
            raise ValueError(f"UpdateRuleConfig.adv_norm must be 'running_rms' or 'none', got {self.adv_norm!r}")
        if not 0.0 <= self.rms_decay < 1.0:
            raise ValueError(f"UpdateRuleConfig.rms_decay must be in [0, 1), got {self.rms_decay!r}")
        if not (math.isfinite(self.zero_tol) and self.zero_tol >= 0):
            raise ValueError(f"UpdateRuleConfig.zero_tol must be a finite number >= 0, got {self.zero_tol!r}")


class AdvantageScaler:
    """Divides advantages by the bias-corrected running RMS of the signal rows seen so far.

    Only rows with ``|A| > zero_tol`` enter the statistic (zero rows carry no scale), and a
    batch without such rows leaves it unchanged.  The state is two floats and a count, so
    checkpoints carry it (:meth:`state_dict`).

    Args:
        decay: EMA decay of the mean square.
        zero_tol: Float-noise threshold.
        enabled: ``False`` returns the advantages unchanged (except the noise zeroing).
    """

    def __init__(self, decay: float = 0.9, zero_tol: float = 1e-9, enabled: bool = True) -> None:
        self.decay, self.zero_tol, self.enabled = float(decay), float(zero_tol), bool(enabled)
        self.mean_square = 0.0
        self.updates = 0

    @classmethod
    def from_config(cls, cfg: UpdateRuleConfig) -> AdvantageScaler:
        """The scaler a :class:`UpdateRuleConfig` asks for."""
        return cls(cfg.rms_decay, cfg.zero_tol, enabled=cfg.adv_norm == "running_rms")

    @property
    def scale(self) -> float:
        """The current RMS estimate (1 before any signal)."""
        if self.updates == 0:
            return 1.0
        return math.sqrt(self.mean_square / (1.0 - self.decay**self.updates))

    def normalize(self, advantages: np.ndarray) -> np.ndarray:
        """Zero the float noise, update the running RMS with this batch, return A / RMS."""
        adv = np.asarray(advantages, dtype=np.float64).copy()
        adv[np.abs(adv) <= self.zero_tol] = 0.0
        if not self.enabled:
            return adv
        signal = adv[adv != 0.0]
        if signal.size:
            self.mean_square = self.decay * self.mean_square + (1.0 - self.decay) * float(np.mean(signal**2))
            self.updates += 1
        return adv / self.scale

    def state_dict(self) -> dict[str, float]:
        """JSON-encodable state."""
        return {"mean_square": self.mean_square, "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.mean_square = float(state["mean_square"])
        self.updates = int(state["updates"])


class PolicyOps(Protocol):
    """What :func:`trust_region_update` needs from a policy and its update's rows."""

    def snapshot(self) -> Any:
        """A copy of the trainable weights (θ_old)."""

    def epoch(self, index: int) -> dict[str, float]:
        """One pass of SGD mini-batch steps over the update's rows; returns loss diagnostics
        (averaged over its steps), ``clip_fraction`` among them."""

    def kl(self, snapshot: Any) -> float:
        """Mean KL(π_snapshot ‖ π_current) over the update's decisions (all processes agree)."""

    def interpolate(self, snapshot: Any, beta: float) -> None:
        """θ ← θ_old + β·(θ − θ_old)."""

    def distance(self, snapshot: Any) -> float:
        """‖θ − θ_old‖₂ over the trainable weights."""


def trust_region_update(ops: PolicyOps, cfg: UpdateRuleConfig) -> dict[str, float]:
    """Run up to ``cfg.epochs`` epochs of SGD steps inside a KL trust region.

    After each epoch the KL to θ_old is measured; above ``cfg.target_kl`` the displacement is
    halved until it is within (TRPO's backtracking line search) and the update ends.

    Returns:
        Per-update diagnostics: ``kl`` (KL(old → new) after the update), ``delta_norm``
        (‖Δθ‖₂), ``epochs_run``, ``backtracks``, ``kl_stopped`` (1 when the trust region
        ended the update), ``restored`` (1 when even the smallest step exceeded it) and the
        mean of every diagnostic the epochs returned (``clip_fraction``, loss terms).
    """
    snap = ops.snapshot()
    acc: dict[str, list[float]] = {}
    kl, backtracks, stopped, restored, epochs_run = 0.0, 0, 0.0, 0.0, 0
    for k in range(cfg.epochs):
        for key, value in ops.epoch(k).items():
            acc.setdefault(key, []).append(float(value))
        epochs_run += 1
        kl = ops.kl(snap)
        if cfg.target_kl <= 0 or kl <= cfg.target_kl:
            continue
        stopped = 1.0
        while kl > cfg.target_kl and backtracks < cfg.max_backtracks:
            ops.interpolate(snap, 0.5)
            backtracks += 1
            kl = ops.kl(snap)
        if kl > cfg.target_kl:
            ops.interpolate(snap, 0.0)
            kl, restored = 0.0, 1.0
        break
    out = {key: float(np.mean(v)) for key, v in acc.items()}
    out.update(kl=float(kl), delta_norm=float(ops.distance(snap)), epochs_run=float(epochs_run),
               backtracks=float(backtracks), kl_stopped=stopped, restored=restored)
    return out


def config_dict(cfg: UpdateRuleConfig) -> dict[str, Any]:
    """``cfg`` as a plain dict (for metric files)."""
    return asdict(cfg)
