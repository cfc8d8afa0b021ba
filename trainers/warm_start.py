"""Warm start: behaviour cloning on stored expert walkthroughs before reinforcement learning.

With sparse terminal rewards a policy that never wins gets no task signal, and a small model
on a short budget rarely wins ALFWorld by chance. The usual remedy (an "SFT" stage before RL,
as in the papers' pipelines) is to clone a few expert demonstrations first. ALFWorld games
store a walkthrough; :func:`expert_rows` replays the walkthroughs of some training tasks in
the environments, turning every decision into a row whose prompt is exactly the one the
rollouts would build (:func:`trainers.lm_policy.decision_prompt`) and whose response is the
expert action in the response format ``choose`` mode scores (``<action>a</action><eos>``).
:func:`behaviour_clone` then minimises the rows' mean token negative log-likelihood.

Example (the walkthrough of a generated game; the demo preset enables this with
``warm_start_tasks``):

    >>> rows = expert_rows(pool, tokenizer, [TaskRef(0, "generated", 0)], settings)  # doctest: +SKIP
    >>> tokenizer.decode(rows[0].response_ids)                                      # doctest: +SKIP
    '<action>go to desk 1</action><|im_end|>'
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agent_envs.agent.prompts import info_goal
from agent_envs.agent.walkthrough import replay_walkthroughs
from agent_envs.rollout import EnvPool
from trainers.generation import choice_logprobs
from trainers.lm_policy import RolloutSettings, RowTokens, TaskRef, candidate_ids, decision_prompt
from trainers.objective import pack_rows, sequence_logprobs

__all__ = ["ExpertRow", "behaviour_clone", "expert_rows"]

log = logging.getLogger(__name__)


@dataclass
class ExpertRow(RowTokens):
    """An expert decision: the prompt, the expert's response, every admissible action's
    response (``candidates``, as ``choose`` mode scores them) and the expert's index there."""


def expert_rows(pool: EnvPool, tokenizer: Any, tasks: Sequence[TaskRef], settings: RolloutSettings) -> list[ExpertRow]:
    """Replay the stored walkthrough of each task; one row per expert decision, in task order.

    A walkthrough is followed while its actions are admissible and the episode runs (at most
    ``settings.max_steps`` decisions), through the one episode loop
    (:class:`~agent_envs.rollout.GroupRunner` with :class:`~agent_envs.agent.walkthrough.WalkthroughReplay`);
    tasks without one (e.g. WebShop goals) add no rows.

    Raises:
        ValueError: none of ``tasks`` has a walkthrough.
    """
    keyed: list[tuple[int, int, ExpertRow]] = []
    for split in dict.fromkeys(ref.split for ref in tasks):  # one replay per split (in practice one)
        picked = [k for k, ref in enumerate(tasks) if ref.split == split]
        for k, d in replay_walkthroughs(pool, [tasks[i].task for i in picked], [tasks[i].seed for i in picked],
                                        split=split, chunk=pool.n, max_steps=settings.max_steps):
            goal = info_goal(d.first_info)
            history = [(str(o), a) for o, a in d.turn.history]
            prompt = decision_prompt(tokenizer, goal, str(d.turn.observation), d.turn.info, history, settings)
            cands = candidate_ids(tokenizer, d.actions, goal)
            keyed.append((picked[k], d.turn.t, ExpertRow(prompt, cands[d.index], cands, d.index)))
    rows = [row for _task, _t, row in sorted(keyed, key=lambda x: x[:2])]
    if not rows:
        raise ValueError(f"warm start: none of the {len(tasks)} training tasks has a stored walkthrough "
                         "(ALFWorld games have one; set warm_start_tasks = 0 for other environments)")
    return rows


def behaviour_clone(model: Any, accelerator: Any, rows: Sequence[ExpertRow], *, pad_id: int, lr: float,
                    epochs: int, batch_rows: int, micro_rows: int, seed: int, rank: int = 0, world: int = 1,
                    max_grad_norm: float = 1.0, loss: str = "tokens") -> dict[str, float]:
    """Minimise the mean over rows of the expert decision's negative log-likelihood with AdamW.

    ``loss="tokens"``: the token-mean NLL of the expert's response (teaches the response
    format; right for ``generate`` mode). ``loss="choice"``: the NLL of the expert's choice
    under the ``choose``-mode policy, ``-log softmax_a(log π(a | prompt))[expert]`` over the
    admissible actions' responses (scored with gradients in one prefix-tree forward per
    prompt, :func:`trainers.generation.choice_logprobs`), which trains the preference
    between actions directly.

    Every process holds all ``rows`` and takes every ``world``-th row of each mini-batch of
    ``batch_rows``, so all processes make the same optimizer steps (DDP averages gradients,
    hence the ``world`` factor). The optimizer is local to the warm start.

    Returns:
        ``rows``, ``steps``, ``nll_first`` (mean NLL of the first mini-batch, before its
        step), ``nll_last`` (of the last epoch's mini-batches) and ``seconds``.
    """
    if loss not in ("tokens", "choice"):
        raise ValueError(f"loss must be 'tokens' or 'choice'; got {loss!r}")
    if loss == "choice" and any(r.chosen < 0 or not r.candidates for r in rows):
        raise ValueError("loss='choice' needs rows with candidates and the expert's index (expert_rows makes them)")
    t0 = time.perf_counter()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rng = np.random.default_rng([seed, 17])
    n = len(rows)
    first: float | None = None
    last_epoch: list[float] = []
    steps = 0
    model.train()
    for epoch in range(epochs):
        order = rng.permutation(n)
        for start in range(0, n, batch_rows):
            mini = [int(i) for i in order[start:start + batch_rows]][rank::world]
            size = len(order[start:start + batch_rows])
            micros = [mini[k:k + micro_rows] for k in range(0, len(mini), micro_rows)] or [[]]
            losses = []
            for m, idx in enumerate(micros):
                sync = contextlib.nullcontext() if m == len(micros) - 1 else accelerator.no_sync(model)
                with sync:
                    per_row = _row_losses(model, accelerator, [rows[i] for i in idx], pad_id, loss)
                    accelerator.backward(per_row.sum() * (world / size))
                    losses += [float(v) for v in per_row.detach()[: len(idx)]]
            if max_grad_norm > 0:
                accelerator.clip_grad_norm_(params, max_grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            steps += 1
            if first is None and losses:
                first = float(np.mean(losses))
            if epoch == epochs - 1:
                last_epoch += losses
    return {"rows": float(n), "steps": float(steps), "nll_first": float(first or 0.0),
            "nll_last": float(np.mean(last_epoch)) if last_epoch else 0.0, "seconds": time.perf_counter() - t0}


def _row_losses(model: Any, accelerator: Any, rows: Sequence[ExpertRow], pad_id: int, loss: str) -> torch.Tensor:
    """Per-row NLL (a tensor with gradients); ``loss`` as in :func:`behaviour_clone`; an empty micro-batch gives a zero-weight dummy
    row so that every process runs a forward and backward (DDP)."""
    if not rows:
        batch = pack_rows([[pad_id]], [[pad_id]], pad_id).to(accelerator.device)
        with accelerator.autocast():
            logp, _ = sequence_logprobs(model, batch)
        return logp.sum(1) * 0.0
    if loss == "choice":
        with accelerator.autocast():
            logp, _ = choice_logprobs(model, [r.prompt_ids for r in rows], [r.candidates for r in rows],
                                      [r.chosen for r in rows], pad_id=pad_id)
        return -logp
    batch = pack_rows([r.prompt_ids for r in rows], [r.response_ids for r in rows], pad_id).to(accelerator.device)
    with accelerator.autocast():
        logp, _ = sequence_logprobs(model, batch)
    mask = batch.response_mask.bool()
    nll = torch.where(mask, -logp.float(), torch.zeros((), device=logp.device))
    return nll.sum(1) / mask.sum(1).clamp(min=1)
