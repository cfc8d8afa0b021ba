"""Generation backends and action scoring for rollouts.

* :class:`TransformersBackend` — batched ``model.generate`` on left-padded prompts (CPU and
  GPU; the only backend).  For vLLM-speed generation on GPUs, feed rubricgym's environments
  and estimators to TRL or verl instead (``docs/integrations/``).
* :func:`score_candidates` — ``choose`` mode: the log-probability of every admissible action's
  response under the policy; each prompt and the prefix tree of all its candidates go
  through the model as one sequence with a tree attention mask, several prompts per forward.

Example:
    >>> import torch
    >>> from trainers.models import load_policy
    >>> model, tok = load_policy("tiny-llama")
    >>> scores = score_candidates(model, [[1, 5, 9]], [[[7, 2], [3]]], pad_id=tok.pad_token_id)
    >>> [len(s) for s in scores]
    [2]
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from trainers.config import VLLM_REMOVED
from trainers.objective import pack_rows, sequence_logprobs

__all__ = ["GenerationBackend", "TransformersBackend", "candidate_logprobs", "choice_logprobs", "make_backend",
           "score_candidates"]

log = logging.getLogger(__name__)


class GenerationBackend(Protocol):
    """What the rollout loop needs from a generator."""

    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float, top_p: float, max_new_tokens: int) -> list[list[int]]:
        """Sample one response per prompt (greedy at ``temperature`` 0); return the response token
        ids (eos kept, pads dropped)."""
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

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], *, temperature: float, top_p: float, max_new_tokens: int) -> list[list[int]]:
        """Sample responses (greedy at ``temperature`` 0); prompts are left-padded, batches of
        ``batch_size``."""
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
                sample = temperature > 0
                gen = self.model.generate(
                    input_ids=ids.to(device),
                    attention_mask=att.to(device),
                    do_sample=sample,
                    temperature=temperature if sample else None,
                    top_p=top_p if sample else None,
                    top_k=0 if sample else None,
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


def make_backend(name: str, model: Any, tokenizer: Any, *, batch_size: int) -> GenerationBackend:
    """Build the backend named in the configuration (only ``"transformers"``).

    Raises:
        ValueError: any other name; ``"vllm"`` is told where vLLM generation lives now.
    """
    if name == "transformers":
        return TransformersBackend(model, tokenizer, batch_size=batch_size)
    if name == "vllm":
        raise ValueError(VLLM_REMOVED)
    raise ValueError(f"backend must be 'transformers'; got {name!r}")


@torch.no_grad()
def score_candidates(
    model: Any,
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
    max_rows: int = 64,
    max_tokens: int = 4096,
    use_cache: bool = True,
) -> list[torch.Tensor]:
    """Sum of log-probabilities of each candidate response given its prompt.

    The default (``use_cache=True``) scores every prompt and **all** its candidates in one
    sequence: the candidates are merged into a prefix tree (candidates sharing their first
    tokens — ``<action>go to`` … — share those tree nodes) that is laid out after the prompt,
    and a 4-D attention mask lets each tree node see the prompt and its own ancestors only,
    with position ids continuing the prompt's.  Each token's context is therefore exactly the
    one it has in ``prompt + candidate``, so the scores are those of scoring every candidate
    on its own, for about the cost of one forward over the prompt.  Identical
    ``(prompt, candidates)`` items (siblings in the same state) are scored once, and several
    prompts share a forward (at most ``max_rows`` rows and ``max_tokens`` padded tokens).
    The logits of the tree nodes are computed in the weights' dtype (float32 for a float32
    model, even under bf16 autocast).

    Args:
        model: Causal LM (a transformers model, optionally peft-wrapped).
        prompts: One prompt (token ids) per environment.
        candidates: Per environment, the token ids of each candidate response.
        pad_id: Padding id.
        max_rows: Most sequences per forward.
        max_tokens: Most padded tokens (rows × width) per forward (a row that is longer on
            its own still runs, alone).
        use_cache: ``False`` scores every ``prompt + candidate`` row from scratch with
            :func:`~trainers.objective.sequence_logprobs` (the tests' reference).

    Returns:
        Per environment a float32 tensor of candidate scores (CPU).
    """
    if len(prompts) != len(candidates):
        raise ValueError(f"score_candidates needs one candidate list per prompt; got {len(prompts)} prompts and {len(candidates)} lists")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        if not use_cache:
            rows_p, rows_r = [], []
            for p, cands in zip(prompts, candidates):
                for c in cands:
                    rows_p.append(p)
                    rows_r.append(c)
            flat: list[float] = []
            for s in range(0, len(rows_p), max_rows):
                batch = pack_rows(rows_p[s:s + max_rows], rows_r[s:s + max_rows], pad_id).to(device)
                logp, _ = sequence_logprobs(model, batch)
                flat.extend(torch.where(batch.response_mask.bool(), logp, 0.0).sum(1).float().cpu().tolist())
            return _split(flat, candidates)
        # one tree per distinct (prompt, candidates) item
        unique: dict[tuple, int] = {}
        items: list[_Tree] = []
        owner: list[int] = []
        for p, cands in zip(prompts, candidates):
            if not len(p):
                raise ValueError("score_candidates: an empty prompt cannot be scored")
            key = (tuple(p), tuple(tuple(c) for c in cands))
            if key not in unique:
                unique[key] = len(items)
                items.append(_Tree(list(p), [list(c) for c in cands]))
            owner.append(unique[key])
        scores: list[torch.Tensor | None] = [None] * len(items)
        for k, t in enumerate(items):
            if not t.tokens:  # no candidates, or only empty ones: nothing to run
                scores[k] = torch.zeros(len(t.paths), dtype=torch.float32)
        order = sorted((k for k in range(len(items)) if scores[k] is None), key=lambda k: -items[k].width)
        chunk: list[int] = []
        p_max = n_max = 0
        for k in order:
            t = items[k]
            p_new, n_new = max(p_max, len(t.prompt)), max(n_max, len(t.tokens))
            if chunk and ((len(chunk) + 1) * (p_new + n_new) > max_tokens or len(chunk) >= max_rows):
                _score_trees(model, [items[j] for j in chunk], pad_id, device, out=[scores, chunk])
                chunk, p_new, n_new = [], len(t.prompt), len(t.tokens)
            chunk.append(k)
            p_max, n_max = p_new, n_new
        if chunk:
            _score_trees(model, [items[j] for j in chunk], pad_id, device, out=[scores, chunk])
        return [scores[o].clone() for o in owner]  # type: ignore[union-attr]
    finally:
        model.train(was_training)


def candidate_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
) -> list[torch.Tensor]:
    """:func:`score_candidates` with gradients: per prompt, the summed log-probability of
    each candidate (a float32 tensor on the model's device, part of the autograd graph), from
    one prefix-tree forward over all of them. ``log_softmax`` over it is the ``choose``-mode
    policy's log-probability of each choice at temperature 1 (what the warm start trains).
    The model's train/eval mode is left as it is.
    """
    if len(prompts) != len(candidates):
        raise ValueError(f"candidate_logprobs needs one candidate list per prompt; got {len(prompts)} and {len(candidates)}")
    device = next(model.parameters()).device
    trees = [_Tree(list(p), [list(c) for c in cands]) for p, cands in zip(prompts, candidates)]
    if any(not t.prompt for t in trees) or any(not t.tokens for t in trees):
        raise ValueError("candidate_logprobs: every prompt needs a non-empty prompt and candidates")
    scores: list[Any] = [None] * len(trees)
    _score_trees(model, trees, pad_id, device, out=[scores, list(range(len(trees)))], differentiable=True)
    return [s.float() for s in scores]


def choice_logprobs(
    model: Any,
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    chosen: Sequence[int],
    *,
    pad_id: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The ``choose`` policy's log-probability of each chosen action, with gradients:
    ``log softmax(scores / temperature)[chosen]`` over the candidates' summed log-probabilities
    (:func:`candidate_logprobs`), shape ``[B]``; with ``with_entropy`` also the entropy of each
    choice distribution (``[B]``). The warm start's choice NLL is ``-logp`` at temperature 1;
    the trainer's ``rl_loss = "choice"`` uses the rollout temperature.

    Raises:
        ValueError: a ``chosen`` index is not one of its candidates (e.g. a generated decision).
    """
    if any(not 0 <= j < len(c) for j, c in zip(chosen, candidates, strict=True)):
        raise ValueError("choice_logprobs needs every row's scored candidates and the chosen index; a decision "
                         "without admissible actions was generated instead (use rl_loss='tokens' for such environments)")
    scores = candidate_logprobs(model, prompts, candidates, pad_id=pad_id)
    logsm = [torch.log_softmax(s / temperature, dim=0) for s in scores]
    logp = torch.stack([ls[j] for ls, j in zip(logsm, chosen)])
    entropy = torch.stack([-(ls.exp() * ls).sum() for ls in logsm]) if with_entropy else None
    return logp, entropy


class _Tree:
    """A prompt and the prefix tree of its candidates (nodes in creation order)."""

    def __init__(self, prompt: list[int], cands: list[list[int]]) -> None:
        self.prompt = prompt
        self.tokens: list[int] = []
        self.parent: list[int] = []  # -1: the prompt's last token
        self.depth: list[int] = []
        self.paths: list[list[int]] = []
        children: dict[tuple[int, int], int] = {}
        for c in cands:
            node, path = -1, []
            for tok in c:
                nxt = children.get((node, tok))
                if nxt is None:
                    nxt = len(self.tokens)
                    children[(node, tok)] = nxt
                    self.tokens.append(int(tok))
                    self.parent.append(node)
                    self.depth.append(0 if node < 0 else self.depth[node] + 1)
                node = nxt
                path.append(nxt)
            self.paths.append(path)

    @property
    def width(self) -> int:
        return len(self.prompt) + len(self.tokens)


def _decoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """(decoder body, output projection) of a plain causal LM, or ``None`` when the model
    post-processes its logits (soft-capping, scaling) and must be called whole."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = getattr(base, "config", None)
    if cfg is None or getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    body = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    if head is None or body is None or body is base or not callable(body):
        return None
    return body, head


def _score_trees(model: Any, trees: Sequence[_Tree], pad_id: int, device: Any, *, out: list,
                 differentiable: bool = False) -> None:
    """One forward over ``trees`` (rows: left-padded prompt, then the tree nodes, then padding)."""
    scores, slots = out
    b = len(trees)
    p_max = max(len(t.prompt) for t in trees)
    n_max = max(1, max(len(t.tokens) for t in trees))
    width = p_max + n_max
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    pos = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width, width), dtype=torch.bool)
    for r, t in enumerate(trees):
        lp, n = len(t.prompt), len(t.tokens)
        p0 = p_max - lp
        ids[r, p0:p_max] = torch.tensor(t.prompt, dtype=torch.long)
        pos[r, p0:p_max] = torch.arange(lp)
        mask[r, p0:p_max, p0:p_max] = torch.ones(lp, lp, dtype=torch.bool).tril_()
        if n:
            ids[r, p_max:p_max + n] = torch.tensor(t.tokens, dtype=torch.long)
            pos[r, p_max:p_max + n] = lp + torch.tensor(t.depth, dtype=torch.long)
            anc = torch.zeros((n, n), dtype=torch.bool)
            for k, par in enumerate(t.parent):
                if par >= 0:
                    anc[k] = anc[par]
                anc[k, k] = True
            mask[r, p_max:p_max + n, p0:p_max] = True
            mask[r, p_max:p_max + n, p_max:p_max + n] = anc
    mask |= torch.eye(width, dtype=torch.bool)  # padding attends to itself (no empty rows)
    # the positions whose next-token distribution is needed: the prompt's last token and
    # every node with children (column p_max - 1 + 1 + node)
    sel_r: list[int] = []
    sel_c: list[int] = []
    where: list[dict[int, int]] = []
    for r, t in enumerate(trees):
        need = sorted(set(t.parent))
        where.append({node: len(sel_r) + k for k, node in enumerate(need)})
        sel_r.extend([r] * len(need))
        sel_c.extend(p_max + node for node in need)  # node -1 -> column p_max - 1
    ids, pos, mask4 = ids.to(device), pos.to(device), mask[:, None].to(device)
    parts = _decoder_and_head(model)
    if parts is not None:
        body, head = parts
        hidden = body(input_ids=ids, attention_mask=mask4, position_ids=pos, use_cache=False).last_hidden_state
        h = hidden[torch.tensor(sel_r, dtype=torch.long, device=device), torch.tensor(sel_c, dtype=torch.long, device=device)]
        with torch.autocast(device_type=torch.device(device).type, enabled=False):
            logits = torch.nn.functional.linear(h.to(head.weight.dtype), head.weight, head.bias).float()
    else:
        keep = n_max + 1
        full = model(input_ids=ids, attention_mask=mask4, position_ids=pos, use_cache=False, logits_to_keep=keep).logits
        cols = torch.tensor(sel_c, dtype=torch.long, device=device) - (width - keep)
        logits = full[torch.tensor(sel_r, dtype=torch.long, device=device), cols].float()
    logz = torch.logsumexp(logits, dim=-1)
    for r, t in enumerate(trees):
        rows = torch.tensor([where[r][par] for par in t.parent], device=device)
        toks = torch.tensor(t.tokens, device=device)
        node_lp = logits[rows, toks] - logz[rows]
        if differentiable:  # summed on the device, keeping the graph (behaviour cloning)
            zero = node_lp.new_zeros(())
            scores[slots[r]] = torch.stack([node_lp[torch.tensor(path, device=device)].sum() if path else zero
                                            for path in t.paths])
            continue
        node_lp = node_lp.double().cpu()
        scores[slots[r]] = torch.tensor([float(node_lp[path].sum()) if path else 0.0 for path in t.paths], dtype=torch.float32)


def _split(flat: list[float], candidates: Sequence[Sequence[Any]]) -> list[torch.Tensor]:
    out, k = [], 0
    for cands in candidates:
        out.append(torch.tensor(flat[k:k + len(cands)], dtype=torch.float32))
        k += len(cands)
    return out
