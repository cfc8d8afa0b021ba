"""The trained language-model policy of one run: what the update rule moves.

:class:`TrainablePolicy` holds the model being trained (wrapped by Accelerate), its
optimizer and tokenizer, the frozen KL reference (a copy, or the LoRA base with adapters
disabled), and the optional bf16 copy that plays the rollouts; it computes the
log-probabilities the objective needs.  The :class:`~trainers.trainer.Trainer` builds one
and hands it to the update rule's operations (:class:`~trainers.trust_region.TrainerOps`),
so the update reads policy → rows → optimizer step without going back through the trainer.

Two loss units (``loss_unit``): ``"token"`` (the response tokens' log-probabilities) and
``"choice"`` (the log-probability of the chosen action among the decision's scored
candidates, one "token" per decision).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from trainers.batching import TrainRow
from trainers.generation import choice_logprobs
from trainers.objective import PackedBatch, pack_rows, sequence_logprobs

__all__ = ["TrainablePolicy"]


@dataclass
class TrainablePolicy:
    """The policy one run trains, with its reference and rollout copies.

    Attributes:
        accelerator: The run's ``accelerate.Accelerator`` (device, autocast, DDP).
        model: The trained model as ``accelerator.prepare`` returned it (DDP-wrapped when
            distributed: gradients flow through this one).
        optimizer: Its optimizer (prepared).
        tokenizer: The model's tokenizer.
        loss_unit: ``"token"`` or ``"choice"`` (see the module doc).
        temperature: The rollout temperature (choice log-probabilities are taken at it).
        logprob_batch_rows: Rows per forward pass when no gradient is needed.
        lora: The model carries LoRA adapters (the reference is then the base model).
        ref_model: The frozen KL reference copy (``None`` with LoRA, or without a KL term).
        rollout_model: The bf16 copy that plays rollouts (``None``: the trained model plays).
    """

    accelerator: Any
    model: Any
    optimizer: Any
    tokenizer: Any
    loss_unit: str
    temperature: float
    logprob_batch_rows: int
    lora: bool = False
    ref_model: Any | None = None
    rollout_model: Any | None = None

    @property
    def unwrapped(self) -> Any:
        """The trained model without its DDP wrapper."""
        return self.accelerator.unwrap_model(self.model)

    @property
    def acting(self) -> Any:
        """The model that plays rollouts (the bf16 copy when there is one)."""
        return self.rollout_model if self.rollout_model is not None else self.unwrapped

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    def sync_rollout_model(self, everything: bool = False) -> None:
        """Copy the trained weights into the bf16 rollout copy (trainable ones, or all)."""
        if self.rollout_model is None:
            return
        with torch.no_grad():
            for dst, src in zip(self.rollout_model.parameters(), self.unwrapped.parameters()):
                if everything or src.requires_grad:
                    dst.copy_(src)

    @torch.no_grad()
    def logprobs(self, rows: list[TrainRow], *, reference: bool) -> list[torch.Tensor]:
        """Per row, without gradients: the response tokens' log-probabilities (or the chosen
        action's, ``loss_unit="choice"``) under the trained model or the KL reference."""
        out: list[torch.Tensor] = []
        model = self.unwrapped
        ctx: Any = contextlib.nullcontext()
        if reference:
            if self.lora:
                ctx = model.disable_adapter()
            else:
                model = self.ref_model
        with ctx, self.accelerator.autocast():
            for s in range(0, len(rows), self.logprob_batch_rows):
                chunk = rows[s:s + self.logprob_batch_rows]
                if self.loss_unit == "choice":
                    logp, _ = self.choice_logprobs(model, chunk, with_entropy=False)
                    out += [v.float().cpu() for v in logp]
                    continue
                batch = pack_rows([r.prompt_ids for r in chunk], [r.response_ids for r in chunk],
                                  self.pad_id).to(self.accelerator.device)
                logp, _ = sequence_logprobs(model, batch)
                for k, r in enumerate(chunk):
                    out.append(logp[k, logp.shape[1] - len(r.response_ids):].float().cpu())
        return out

    def choice_logprobs(self, model: Any, rows: list[TrainRow], *,
                        with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The choose policy's log-probability of each row's chosen action at the rollout
        temperature, and that choice's entropy, as ``[B, 1]`` (one "token" per decision)."""
        logp, entropy = choice_logprobs(model, [r.prompt_ids for r in rows], [r.candidates for r in rows],
                                        [r.chosen for r in rows], pad_id=self.pad_id,
                                        temperature=self.temperature, with_entropy=with_entropy)
        return logp[:, None], None if entropy is None else entropy[:, None]

    def policy_terms(self, rows: list[TrainRow], idx: list[int], old: list[torch.Tensor] | None,
                     ref: list[torch.Tensor] | None):
        """One micro-batch's ``(logp, entropy, mask, old_logp, ref_logp, advantages)`` under
        the trained model (with gradients): per response token, or per decision with
        ``loss_unit="choice"`` (then every row has one "token")."""
        dev = self.accelerator.device
        sel = [rows[i] for i in idx]
        with self.accelerator.autocast():
            if self.loss_unit == "choice":
                logp, ent = self.choice_logprobs(self.model, sel, with_entropy=True)
                mask = torch.ones_like(logp, dtype=torch.long)
            else:
                batch = pack_rows([r.prompt_ids for r in sel], [r.response_ids for r in sel], self.pad_id).to(dev)
                logp, ent = sequence_logprobs(self.model, batch, with_entropy=True)
                mask = batch.response_mask
        width = mask.shape[1]

        def right_align(vals: list[torch.Tensor] | None) -> torch.Tensor | None:
            """Per-row values (old / reference log-probs) laid out like the response window."""
            if vals is None:
                return None
            t = torch.zeros((len(idx), width))
            for k, i in enumerate(idx):
                if len(vals[i]):
                    t[k, width - len(vals[i]):] = vals[i]
            return t.to(dev)

        adv = torch.tensor([r.advantage for r in sel], dtype=torch.float32, device=dev)
        return logp, ent, mask, right_align(old), right_align(ref), adv

    def dummy_batch(self) -> PackedBatch:
        """A one-token batch with an all-zero response mask (a zero-weight micro-batch that
        keeps DDP's processes in step)."""
        b = pack_rows([[self.pad_id]], [[self.pad_id]], self.pad_id)
        b.response_mask.zero_()
        return b.to(self.accelerator.device)
