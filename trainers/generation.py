"""Generation backends and action scoring for rollouts.

* :class:`TransformersBackend` — batched ``model.generate`` on left-padded prompts (CPU and
  GPU; the default).
* :class:`VLLMBackend` — vLLM on a GPU when installed; weights are pushed to it after every
  update.  Same interface.
* :func:`score_candidates` — ``choose`` mode: the log-probability of every admissible action's
  response under the policy, computed with one prompt forward per batch of environments and
  the candidates read off a shared KV cache.

Example:
    >>> import torch
    >>> from trainers.models import load_policy
    >>> model, tok = load_policy("tiny-llama")
    >>> scores = score_candidates(model, [[1, 5, 9]], [[[7, 2], [3]]], pad_id=tok.pad_token_id)
    >>> [len(s) for s in scores]
    [2]
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from trainers.objective import pack_rows, sequence_logprobs

__all__ = ["GenerationBackend", "TransformersBackend", "VLLMBackend", "make_backend", "score_candidates"]

log = logging.getLogger(__name__)


class GenerationBackend(Protocol):
    """What the rollout loop needs from a generator."""

    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float, top_p: float, max_new_tokens: int) -> list[list[int]]:
        """Sample one response per prompt; return the response token ids (eos kept, pads dropped)."""
        ...

    def sync_weights(self, model: Any) -> None:
        """Make the generator use ``model``'s current weights."""
        ...


class TransformersBackend:
    """Batched sampling with ``transformers``' ``generate`` on the training model itself.

    Args:
        model: The (unwrapped) causal LM.
        tokenizer: Its tokenizer (pad and eos ids are taken from it).
        batch_size: Most prompts per ``generate`` call.
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 64) -> None:
        self.model = model
        self.pad_id = tokenizer.pad_token_id
        self.eos_ids = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
        self.batch_size = batch_size

    def sync_weights(self, model: Any) -> None:
        """Nothing to copy: generation runs on the training model."""
        self.model = model

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float, top_p: float, max_new_tokens: int) -> list[list[int]]:
        """Sample responses; prompts are left-padded, batches of ``batch_size``."""
        out: list[list[int]] = []
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompts), self.batch_size):
                chunk = prompts[start:start + self.batch_size]
                width = max(len(p) for p in chunk)
                ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
                att = torch.zeros_like(ids)
                for i, p in enumerate(chunk):
                    ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
                    att[i, width - len(p):] = 1
                gen = self.model.generate(
                    input_ids=ids.to(device),
                    attention_mask=att.to(device),
                    do_sample=True,
                    temperature=temperature,
                    top_p=top_p,
                    top_k=0,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=self.pad_id,
                    eos_token_id=sorted(self.eos_ids),
                )
                for row in gen[:, width:].tolist():
                    resp: list[int] = []
                    for t in row:
                        resp.append(t)
                        if t in self.eos_ids:
                            break
                    out.append(resp)
        finally:
            self.model.train(was_training)
        return out


class VLLMBackend:
    """Generation with vLLM (GPU).  Weights are loaded into the engine after each update.

    Args:
        model_path: Folder or hub id vLLM starts from (same architecture as the policy).
        gpu_memory_utilization: vLLM's share of GPU memory (the trainer needs the rest).
    """

    def __init__(self, model_path: str, *, gpu_memory_utilization: float = 0.3, max_model_len: int = 8192, seed: int = 0) -> None:
        try:
            from vllm import LLM  # noqa: PLC0415
        except ImportError as exc:  # pragma: no cover - depends on the machine
            raise ImportError("backend='vllm' needs the vllm package (GPU machines): pip install vllm") from exc
        self.llm = LLM(model=str(model_path), gpu_memory_utilization=gpu_memory_utilization,
                       max_model_len=max_model_len, seed=seed, enable_prefix_caching=True)

    def sync_weights(self, model: Any) -> None:  # pragma: no cover - GPU only
        """Copy the policy's current (merged) weights into the vLLM engine."""
        m = model.merge_and_unload() if hasattr(model, "merge_and_unload") else model
        state = {k: v.detach() for k, v in m.state_dict().items()}
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
        runner.model.load_weights(state.items())

    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float, top_p: float, max_new_tokens: int) -> list[list[int]]:  # pragma: no cover
        """Sample with vLLM from token-id prompts."""
        from vllm import SamplingParams  # noqa: PLC0415
        from vllm.inputs import TokensPrompt  # noqa: PLC0415

        params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=max_new_tokens)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]


def make_backend(name: str, model: Any, tokenizer: Any, *, batch_size: int, model_path: str | None = None, seed: int = 0) -> GenerationBackend:
    """Build the backend named in the configuration (``"transformers"`` or ``"vllm"``)."""
    if name == "transformers":
        return TransformersBackend(model, tokenizer, batch_size=batch_size)
    if name == "vllm":
        if model_path is None:
            raise ValueError("backend='vllm' needs a model folder or hub id")
        return VLLMBackend(model_path, seed=seed)
    raise ValueError(f"backend must be one of 'transformers', 'vllm'; got {name!r}")


@torch.no_grad()
def score_candidates(
    model: Any,
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
    max_rows: int = 64,
    use_cache: bool = True,
) -> list[torch.Tensor]:
    """Sum of log-probabilities of each candidate response given its prompt.

    Args:
        model: Causal LM.
        prompts: One prompt (token ids) per environment.
        candidates: Per environment, the token ids of each candidate response.
        pad_id: Padding id.
        max_rows: Most candidate rows per forward.
        use_cache: Run each prompt once and score its candidates on a shared KV cache
            (``False``: score every ``prompt + candidate`` row from scratch; same numbers up
            to float rounding, used by the tests as the reference).

    Returns:
        Per environment a float32 tensor of candidate scores (CPU).
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        if not use_cache:
            rows_p, rows_r, owner = [], [], []
            for e, (p, cands) in enumerate(zip(prompts, candidates)):
                for c in cands:
                    rows_p.append(p)
                    rows_r.append(c)
                    owner.append(e)
            flat: list[float] = []
            for s in range(0, len(rows_p), max_rows):
                batch = pack_rows(rows_p[s:s + max_rows], rows_r[s:s + max_rows], pad_id).to(device)
                logp, _ = sequence_logprobs(model, batch)
                flat.extend(torch.where(batch.response_mask.bool(), logp, 0.0).sum(1).float().cpu().tolist())
            return _split(flat, candidates)
        # group environments so that each forward holds at most ~max_rows candidate rows
        flat = []
        env_chunk: list[int] = []
        count = 0
        for e, cands in enumerate(candidates):
            if env_chunk and count + len(cands) > max_rows:
                flat.extend(_score_chunk(model, [prompts[i] for i in env_chunk], [candidates[i] for i in env_chunk], pad_id, device))
                env_chunk, count = [], 0
            env_chunk.append(e)
            count += len(cands)
        if env_chunk:
            flat.extend(_score_chunk(model, [prompts[i] for i in env_chunk], [candidates[i] for i in env_chunk], pad_id, device))
        return _split(flat, candidates)
    finally:
        model.train(was_training)


def _cache_kwarg(model: Any) -> str:
    """``cache`` on transformers versions that renamed ``past_key_values``."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _split(flat: list[float], candidates: Sequence[Sequence[Any]]) -> list[torch.Tensor]:
    out, k = [], 0
    for cands in candidates:
        out.append(torch.tensor(flat[k:k + len(cands)], dtype=torch.float32))
        k += len(cands)
    return out


def _score_chunk(model: Any, prompts: Sequence[Sequence[int]], candidates: Sequence[Sequence[Sequence[int]]], pad_id: int, device: Any) -> list[float]:
    n = len(prompts)
    width = max(len(p) for p in prompts)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(list(p), dtype=torch.long)
        att[i, width - len(p):] = 1
    pos = (att.cumsum(1) - 1).clamp(min=0)
    ids, att, pos = ids.to(device), att.to(device), pos.to(device)
    out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
    first = torch.log_softmax(out.logits[:, -1, :].float(), dim=-1)  # [n, V]
    cache = getattr(out, "cache", None) or out.past_key_values
    owner = [e for e, cands in enumerate(candidates) for _ in cands]
    if not owner:
        return []
    cand_rows = [c for cands in candidates for c in cands]
    lc = max(1, max(len(c) for c in cand_rows))
    index = torch.tensor(owner, device=device)
    cache.reorder_cache(index)
    m = len(cand_rows)
    cid = torch.full((m, lc), pad_id, dtype=torch.long)
    cmask = torch.zeros_like(cid)
    for j, c in enumerate(cand_rows):
        if c:
            cid[j, :len(c)] = torch.tensor(list(c), dtype=torch.long)
            cmask[j, :len(c)] = 1
    cid, cmask = cid.to(device), cmask.to(device)
    full_att = torch.cat([att[index], cmask], dim=1)
    start = att.sum(1)[index]  # next position after each prompt
    cpos = start[:, None] + torch.arange(lc, device=device)[None, :]
    out2 = model(input_ids=cid, attention_mask=full_att, position_ids=cpos, use_cache=True, **{_cache_kwarg(model): cache})
    logsm = torch.log_softmax(out2.logits.float(), dim=-1)  # [m, lc, V]
    # token 0 comes from the prompt's last logits; token j>0 from candidate position j-1
    lp0 = first[index].gather(1, cid[:, :1]).squeeze(1)
    if lc > 1:
        rest = logsm[:, :-1, :].gather(2, cid[:, 1:].unsqueeze(-1)).squeeze(-1)
        rest = torch.where(cmask[:, 1:].bool(), rest, torch.zeros_like(rest))
        total = lp0 + rest.sum(1)
    else:
        total = lp0
    total = torch.where(cmask[:, 0].bool(), total, torch.zeros_like(total))
    return total.cpu().tolist()
