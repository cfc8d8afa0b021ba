"""The trainer's side of the shared update rule: :class:`~trainers.update_rule.PolicyOps` in torch.

:func:`trainers.update_rule.trust_region_update` runs up to ``ppo_epochs`` epochs of plain
SGD mini-batch steps and measures KL(π_old ‖ π_new) after each; above ``target_kl`` it halves
θ − θ_old until the KL is within and stops (the arena's linear policy uses the same function).
:class:`TrainerOps` supplies, for one update of a :class:`~trainers.trainable.TrainablePolicy`:

* ``snapshot``: detached copies of the trainable parameters (LoRA or ``trainable_layers``
  keeps them small);
* ``epoch``: the pair-aware micro/mini-batch loop (both rows of an MCGPO pair share a
  micro-batch; every process runs the same number of micro-batches, padding with zero-weight
  dummies, so DDP stays in step), one ``torch.optim.SGD`` step per mini-batch;
* ``kl``: the mean KL(π_old ‖ π_new) over the update's rows, all-reduced over processes so
  that every process takes the same backtracking decision.  With ``rl_loss = "choice"`` it is
  exact over each decision's scored candidates (π_old's log-softmax over *all* candidates was
  computed once before the first step); with response tokens it is the k3 estimate
  E_old[r − 1 − log r], r = π_new/π_old, over the rows' response tokens;
* ``interpolate`` / ``distance``: θ_old + β(θ − θ_old) and ‖θ − θ_old‖₂ on the trainable
  parameters (identical on every process: DDP averages the gradients).

π_old is the rollout policy for every epoch: its log-probabilities are computed before the
first step (:meth:`TrainerOps.old_terms`) and held fixed.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

from trainers.batching import TrainRow, pairs_in, plan_batches
from trainers.generation import candidate_logprobs
from trainers.objective import pair_loss, response_deltas, sequence_logprobs, task_loss
from trainers.trainable import TrainablePolicy

__all__ = ["TrainerOps", "choice_distributions", "exact_choice_kl", "k3_token_kl"]


@torch.no_grad()
def choice_distributions(model: Any, rows: list[TrainRow], *, pad_id: int, temperature: float,
                         batch_rows: int) -> list[torch.Tensor]:
    """Per row, the ``choose`` policy's log-softmax over all its candidates at ``temperature``
    (float32, CPU), scored without gradients in chunks of ``batch_rows``."""
    out: list[torch.Tensor] = []
    for s in range(0, len(rows), batch_rows):
        chunk = rows[s:s + batch_rows]
        scores = candidate_logprobs(model, [r.prompt_ids for r in chunk], [r.candidates for r in chunk], pad_id=pad_id)
        out += [torch.log_softmax(sc / temperature, dim=0).float().cpu() for sc in scores]
    return out


def exact_choice_kl(old: list[torch.Tensor], new: list[torch.Tensor]) -> tuple[float, int]:
    """``(Σ_rows KL(old_r ‖ new_r), rows)`` for log-probability vectors over the same candidates.

    Example:
        >>> import math
        >>> old = [torch.log(torch.tensor([0.5, 0.5]))]
        >>> new = [torch.log(torch.tensor([0.25, 0.75]))]
        >>> total, n = exact_choice_kl(old, new)
        >>> round(total, 6) == round(0.5 * math.log(2) + 0.5 * math.log(2 / 3), 6), n
        (True, 1)
    """
    # each row's KL is >= 0; float32 log-probabilities can put a KL of ~0 at -1e-9
    total = sum(max(0.0, float((o.double().exp() * (o.double() - w.double())).sum())) for o, w in zip(old, new, strict=True))
    return total, len(old)


def k3_token_kl(old: list[torch.Tensor], new: list[torch.Tensor]) -> tuple[float, int]:
    """``(Σ_tokens (r − 1 − log r), tokens)`` with log r = log π_new − log π_old per sampled token:
    the k3 estimate of KL(π_old ‖ π_new) from tokens sampled by π_old (unbiased, ≥ 0).

    Example:
        >>> total, n = k3_token_kl([torch.zeros(2)], [torch.tensor([0.0, -1.0])])
        >>> round(total, 6), n   # e^-1 − 1 + 1
        (0.367879, 2)
    """
    total, count = 0.0, 0
    for o, w in zip(old, new, strict=True):
        log_r = w.double() - o.double()
        total += float((log_r.exp() - 1.0 - log_r).sum())
        count += int(log_r.numel())
    return total, count


class TrainerOps:
    """:class:`~trainers.update_rule.PolicyOps` of a :class:`~trainers.trainable.TrainablePolicy`
    on one update's rows (advantages already scaled by the trainer's
    :class:`~trainers.update_rule.AdvantageScaler`).

    Args:
        policy: The trained policy (model, optimizer, accelerator, log-probabilities).
        cfg: The run's :class:`~trainers.config.TrainConfig` (batching, clipping, loss
            coefficients).
        rows, pairs: This process's rows and row-index pairs.
        ref: Reference log-probabilities per row (``None`` without a KL term).
        rng: Shuffles the micro-batch plan of every epoch.
    """

    def __init__(self, policy: TrainablePolicy, cfg: Any, rows: list[TrainRow], pairs: list[tuple[int, int, float]],
                 ref: list[torch.Tensor] | None, rng: np.random.Generator) -> None:
        self.policy, self.cfg, self.rows, self.pairs, self.ref, self.rng = policy, cfg, rows, pairs, ref, rng
        self.params = [p for p in policy.unwrapped.parameters() if p.requires_grad]
        self.colocated = 0
        self.old_all, self.old = self.old_terms()

    # ------------------------------------------------------------------ π_old
    def _current(self) -> list[torch.Tensor]:
        """Per row: the choice log-softmax over all candidates (choice loss) or the response
        tokens' log-probabilities (token loss), under the current weights, no gradients."""
        pol = self.policy
        if pol.loss_unit == "choice":
            with pol.accelerator.autocast():
                return choice_distributions(pol.unwrapped, self.rows, pad_id=pol.pad_id,
                                            temperature=pol.temperature, batch_rows=pol.logprob_batch_rows)
        return pol.logprobs(self.rows, reference=False)

    def old_terms(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """π_old before the first step: ``(per-row distributions or token log-probs, per-row
        log-probs of what was played)`` (the second is what the ratio uses)."""
        cur = self._current()
        if self.policy.loss_unit == "choice":
            return cur, [d[r.chosen:r.chosen + 1].clone() for d, r in zip(cur, self.rows)]
        return cur, cur

    # ------------------------------------------------------------------ PolicyOps
    def snapshot(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.params]

    def epoch(self, index: int) -> dict[str, float]:
        pol, cfg, acc = self.policy, self.cfg, self.policy.accelerator
        plan = plan_batches(len(self.rows), self.pairs, micro_rows=cfg.update.micro_batch_rows,
                            mini_batches=cfg.update.mini_batches, rng=self.rng)
        counts = _all_max(acc, torch.tensor([len(m) for m in plan], device=acc.device))
        stats: dict[str, list[float]] = {}
        pol.model.train()
        for m, micros in enumerate(plan):
            n_micro = int(counts[m])
            mini_rows = max(1, sum(len(mb) for mb in micros))
            for k in range(n_micro):
                sync = contextlib.nullcontext() if k == n_micro - 1 else acc.no_sync(pol.model)
                with sync:
                    self._micro_step(micros[k] if k < len(micros) else None, mini_rows, stats)
            if cfg.update.max_grad_norm > 0:
                stats.setdefault("grad_norm", []).append(float(acc.clip_grad_norm_(pol.model.parameters(), cfg.update.max_grad_norm)))
            pol.optimizer.step()
            pol.optimizer.zero_grad(set_to_none=True)
        return {k: float(np.mean(v)) for k, v in stats.items() if v}

    def _micro_step(self, idx: list[int] | None, mini_rows: int, stats: dict[str, list[float]]) -> None:
        """Forward and backward of one micro-batch (``None``: a zero-weight dummy for DDP)."""
        pol, cfg = self.policy, self.cfg
        if idx is None:
            batch = pol.dummy_batch()
            with pol.accelerator.autocast():
                logp, ent = sequence_logprobs(pol.model, batch, with_entropy=True)
            mask, old_lp, ref_lp = batch.response_mask, torch.zeros_like(batch.response_mask, dtype=torch.float32), None
            adv, weight, local_pairs = torch.zeros(1, device=pol.accelerator.device), 0.0, []
        else:
            logp, ent, mask, old_lp, ref_lp, adv = pol.policy_terms(self.rows, idx, self.old, self.ref)
            weight = len(idx) / mini_rows
            local_pairs = pairs_in(idx, self.pairs) if cfg.objective.pair_coef > 0 else []
        loss, st = task_loss(logp, old_lp, ref_lp, ent, adv, mask, clip_low=cfg.objective.clip_low, clip_high=cfg.objective.clip_high, dual_clip=cfg.objective.dual_clip,
                             kl_coef=cfg.objective.kl_coef, kl_clip=cfg.objective.kl_clip, entropy_coef=cfg.objective.entropy_coef)
        if local_pairs:
            self.colocated += len(local_pairs)
            lp = pair_loss(response_deltas(logp, old_lp, mask), local_pairs, len(idx))
            loss = loss + cfg.objective.pair_coef * lp
            stats.setdefault("pair_loss", []).append(float(lp.detach()))
        pol.accelerator.backward(loss * weight)
        if weight > 0:
            stats.setdefault("loss", []).append(float(loss.detach()))
            for key, v in st.items():
                stats.setdefault(_RENAMED.get(key, key), []).append(float(v))

    def kl(self, snapshot: Any) -> float:
        new = self._current()
        total, count = (exact_choice_kl if self.policy.loss_unit == "choice" else k3_token_kl)(self.old_all, new)
        total, count = _all_sum(self.policy.accelerator, [total, float(count)])
        return total / count if count else 0.0

    @torch.no_grad()
    def interpolate(self, snapshot: list[torch.Tensor], beta: float) -> None:
        for p, s in zip(self.params, snapshot, strict=True):
            if beta == 0.0:
                p.copy_(s)
            else:
                p.copy_(s + beta * (p - s))

    @torch.no_grad()
    def distance(self, snapshot: list[torch.Tensor]) -> float:
        total = sum(float(((p.double() - s.double()) ** 2).sum()) for p, s in zip(self.params, snapshot, strict=True))
        return float(np.sqrt(total))


#: task_loss's statistics under the names the update rule reports (``kl`` is KL(old → new) there)
_RENAMED = {"clip_frac": "clip_fraction", "dual_clip_frac": "dual_clip_fraction", "kl": "kl_ref"}


def _all_max(acc: Any, t: torch.Tensor) -> torch.Tensor:
    if acc.num_processes == 1:
        return t
    return acc.gather(t[None]).reshape(acc.num_processes, -1).max(dim=0).values


def _all_sum(acc: Any, values: list[float]) -> list[float]:
    """Element-wise sum of ``values`` over processes (float64)."""
    if acc.num_processes == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=acc.device)
    return [float(v) for v in acc.gather(t[None]).reshape(acc.num_processes, -1).sum(dim=0)]
