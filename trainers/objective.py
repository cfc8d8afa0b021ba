"""The training objective (SPEC §5; MCGPO Eqs. 5-7 and 13).

Task loss per response token, with ρ = π_θ/π_old and the row's advantage A broadcast to
its response tokens:

    ℓ_clip = max(−ρA, −clip(ρ, 1−ε_low, 1+ε_high)A)
    ℓ      = min(ℓ_clip, −c·A)  if A < 0  else ℓ_clip          (dual clip, c = 3)
    K̂      = clip(e^v − v − 1, −10, 10),  v = log π_ref − log π_θ   (k3 KL estimate)
    L_task = ⟨ℓ + β·K̂ − η·H(π_θ)⟩  (masked token mean; β = 0.01, η = 0.001)

MCGPO's auxiliary pairwise loss on a micro-batch B [MCGPO Eqs. 5-6]:

    d_θ(i,t) = Σ_k m (log π_θ − log π_old) / max(1, Σ_k m)
    L_pair   = Σ_{(+,−)∈B} c·softplus(−(d_θ(+) − d_θ(−))) / max(1, ⌊|B|/2⌋)

and L = L_task + λ_pair·L_pair [Eq. 7].  Its gradient per pair is
−c·σ(−δ)(∇d(+) − ∇d(−)) [Eq. 11] (checked in the tests).

All functions here are pure tensor functions except :func:`sequence_logprobs`, which runs
a causal LM on a left-padded batch.

Example:
    >>> import torch
    >>> logp = torch.log(torch.tensor([[0.5, 0.25]]))
    >>> loss, stats = task_loss(logp, logp.clone(), None, None, torch.tensor([1.0]),
    ...                         torch.tensor([[1.0, 1.0]]), kl_coef=0.0, entropy_coef=0.0)
    >>> float(loss)  # ρ = 1 everywhere: −A
    -1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

__all__ = [
    "PackedBatch",
    "masked_mean",
    "pack_rows",
    "pair_loss",
    "response_deltas",
    "sequence_logprobs",
    "task_loss",
]


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (0 when the mask is empty).

    Masked-out positions are removed with ``where`` (not multiplied), so NaN/inf there
    cannot leak into the result or its gradient.
    """
    mask = mask.to(torch.bool)
    total = torch.where(mask, x, torch.zeros_like(x)).sum()
    return total / mask.sum().clamp(min=1)


def task_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float = 3.0,
    kl_coef: float = 0.01,
    kl_clip: float = 10.0,
    entropy_coef: float = 0.001,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The dual-clip PPO task loss with k3 KL and entropy (SPEC §5), a masked token mean.

    Args:
        logp: ``[B, T]`` log π_θ of the response tokens.
        old_logp: ``[B, T]`` log π_old (rollout policy), no gradient.
        ref_logp: ``[B, T]`` log π_ref or ``None`` (no KL term).
        entropy: ``[B, T]`` entropy of π_θ at each response position or ``None``.
        advantages: ``[B]`` row advantages (broadcast to the row's tokens) or ``[B, T]``.
        mask: ``[B, T]`` 1 on valid response tokens.

    Returns:
        ``(loss, stats)``; stats hold detached diagnostics (clip fractions, KL, entropy).
    """
    adv = advantages if advantages.dim() == 2 else advantages[:, None].expand_as(logp)
    adv = adv.to(logp.dtype)
    log_ratio = torch.where(mask.bool(), logp - old_logp, torch.zeros_like(logp))
    ratio = torch.exp(log_ratio)
    l_unclipped = -adv * ratio
    l_clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    l_clip = torch.maximum(l_unclipped, l_clipped)
    l_dual = torch.minimum(l_clip, -dual_clip * adv)
    per_token = torch.where(adv < 0, l_dual, l_clip)
    stats: dict[str, torch.Tensor] = {}
    stats["pg_loss"] = masked_mean(per_token, mask).detach()
    stats["clip_frac"] = masked_mean((l_clipped > l_unclipped).to(logp.dtype), mask).detach()
    stats["dual_clip_frac"] = masked_mean(((adv < 0) & (l_dual < l_clip)).to(logp.dtype), mask).detach()
    stats["ratio_mean"] = masked_mean(ratio, mask).detach()
    if ref_logp is not None and kl_coef > 0:
        v = torch.where(mask.bool(), ref_logp - logp, torch.zeros_like(logp))
        k3 = torch.clamp(torch.exp(v) - v - 1.0, -kl_clip, kl_clip)
        per_token = per_token + kl_coef * k3
        stats["kl"] = masked_mean(k3, mask).detach()
    if entropy is not None and entropy_coef > 0:
        per_token = per_token - entropy_coef * entropy
    if entropy is not None:
        stats["entropy"] = masked_mean(entropy, mask).detach()
    return masked_mean(per_token, mask), stats


def response_deltas(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """d_θ per row: length-normalised log-probability change [MCGPO Eq. 5], shape ``[B]``."""
    m = mask.bool()
    diff = torch.where(m, logp - old_logp, torch.zeros_like(logp))
    return diff.sum(dim=1) / m.sum(dim=1).clamp(min=1).to(logp.dtype)


def pair_loss(
    deltas: torch.Tensor,
    pairs: Sequence[tuple[int, int, float]],
    batch_rows: int,
) -> torch.Tensor:
    """MCGPO's evidence-weighted pairwise loss on one micro-batch [MCGPO Eq. 6].

    Args:
        deltas: ``[B]`` d_θ of the micro-batch rows (:func:`response_deltas`).
        pairs: ``(preferred_row, rejected_row, weight c)`` with row indices into ``deltas``;
            both rows of every pair must be in this micro-batch.
        batch_rows: |B|, the micro-batch's row count (normaliser ⌊|B|/2⌋).
    """
    if not pairs:
        return deltas.sum() * 0.0
    pos = torch.tensor([p[0] for p in pairs], device=deltas.device)
    neg = torch.tensor([p[1] for p in pairs], device=deltas.device)
    c = torch.tensor([p[2] for p in pairs], device=deltas.device, dtype=deltas.dtype)
    terms = c * F.softplus(-(deltas[pos] - deltas[neg]))
    return terms.sum() / max(1, batch_rows // 2)


@dataclass
class PackedBatch:
    """Rows (prompt + response token ids) packed into left-padded tensors.

    Attributes:
        input_ids: ``[B, L]`` left-padded prompt+response ids.
        attention_mask: ``[B, L]``.
        position_ids: ``[B, L]`` positions counted from each row's first real token, so
            results do not depend on how much padding a batch needs.
        response_mask: ``[B, R]`` 1 on response tokens; responses are right-aligned in
            the last ``R`` positions of every row, so ``R`` = longest response.
        response_ids: ``[B, R]`` the response token ids (0 where masked).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_mask: torch.Tensor
    response_ids: torch.Tensor

    def to(self, device: Any) -> PackedBatch:
        """Move every tensor to ``device``."""
        return PackedBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def pack_rows(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int) -> PackedBatch:
    """Left-pad ``prompt + response`` rows into a :class:`PackedBatch`.

    Each response is right-aligned; within the response window a shorter response is
    preceded by the end of its prompt, which the response mask excludes.
    """
    if len(prompts) != len(responses) or not prompts:
        raise ValueError("pack_rows needs the same positive number of prompts and responses")
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(s) for s in seqs)
    r_width = max(1, max(len(r) for r in responses))
    n = len(seqs)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    att = torch.zeros((n, width), dtype=torch.long)
    rmask = torch.zeros((n, r_width), dtype=torch.long)
    rids = torch.zeros((n, r_width), dtype=torch.long)
    for i, (s, r) in enumerate(zip(seqs, responses)):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        att[i, width - len(s):] = 1
        if len(r):
            rmask[i, r_width - len(r):] = 1
            rids[i, r_width - len(r):] = torch.tensor(list(r), dtype=torch.long)
    pos = (att.cumsum(dim=1) - 1).clamp(min=0)
    return PackedBatch(ids, att, pos, rmask, rids)


def sequence_logprobs(
    model: Any, batch: PackedBatch, *, with_entropy: bool = False, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probabilities (and entropies) of the response tokens under ``model``.

    Only the logits of the response window are computed (``logits_to_keep``), which keeps
    memory at ``B × R × vocab``.

    Returns:
        ``(logp [B, R], entropy [B, R] or None)``; values at masked positions are undefined
        (use the response mask).
    """
    r = batch.response_ids.shape[1]
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=r + 1,
        use_cache=False,
    )
    logits = out.logits[:, -(r + 1):-1, :].float()
    if temperature != 1.0:
        logits = logits / temperature
    logsm = torch.log_softmax(logits, dim=-1)
    logp = torch.gather(logsm, -1, batch.response_ids.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = -(logsm.exp() * logsm).sum(dim=-1)
    return logp, entropy
