"""Warm-start probe: how well does behaviour cloning on walkthroughs carry over to held-out games?

Clones the stored walkthroughs of the demo's training games (choice loss, as the demo's warm
start) and, after every epoch, scores the walkthroughs of the validation games teacher-forced:
how often the expert's action is the policy's top choice among the admissible actions (top-1)
and its mean choice NLL. Cheaper than whole runs, and it separates "the clone picks the expert
action" from "the clone wins episodes" (the demo's warm start does the first far better). With
``--time-blocks`` it also times one forward and backward of 8 choice rows per number of
trainable top blocks (``trainable_layers``).

Each epoch is one :func:`trainers.warm_start.behaviour_clone` call with its own AdamW (the
trainer keeps one optimizer across epochs). Prints one line per epoch.

    python bench/warm_start_probe.py --threads 2 \\
        --variants '[{"top": 10, "epochs": 3, "lr": 2e-4}, {"top": 0, "epochs": 2, "lr": 1e-4}]'
    python bench/warm_start_probe.py --threads 1 --time-blocks 30 10 4 --variants '[]'
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import gymnasium as gym
import torch
from accelerate import Accelerator

import agent_envs  # noqa: F401  (registers the environments)
from agent_envs.rollout import EnvPool
from agent_envs.tasks import train_val_tasks
from trainers.config import load_config
from trainers.generation import choice_logprobs, score_candidates
from trainers.lm_policy import RolloutSettings, TaskRef
from trainers.models import load_policy, train_top_layers
from trainers.warm_start import behaviour_clone, expert_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--val-tasks", type=int, default=12)
    ap.add_argument("--games", type=int, default=36, help="generated games (validation ones held out)")
    ap.add_argument("--train-tasks", type=int, default=24, help="training walkthroughs to clone")
    ap.add_argument("--variants", default='[{"top": 10, "epochs": 3, "lr": 2e-4}]',
                    help='JSON list of {"top": trainable blocks (0 = all), "epochs": N, "lr": x}')
    ap.add_argument("--time-blocks", type=int, nargs="*", default=[], help="trainable block counts to time (0 = all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config("demo", [f"val_tasks={args.val_tasks}", f"env_kwargs.generated_n={args.games}"])
    env = gym.make(cfg.env.env_id, **cfg.env.env_kwargs)
    train, val = train_val_tasks(env, cfg.env.train_split, cfg.env.val_split, train_n=0, val_n=args.val_tasks)  # the trainer's rule
    env.close()
    train = train[: args.train_tasks]
    base, tok = load_policy(cfg.policy.model, seed=0, dtype="float32")
    settings = RolloutSettings.from_config(cfg)
    with EnvPool(cfg.env.env_id, cfg.env.env_kwargs, 6, workers=0) as pool:
        tr_rows = expert_rows(pool, tok, [TaskRef(t, cfg.env.train_split, k) for k, t in enumerate(train)], settings)
        va_rows = expert_rows(pool, tok, [TaskRef(t, cfg.env.val_split, 100 + k) for k, t in enumerate(val)], settings)
    pad = tok.pad_token_id

    def heldout(model) -> tuple[float, float]:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            s = score_candidates(model, [r.prompt_ids for r in va_rows], [r.candidates for r in va_rows], pad_id=pad)
        top1 = sum(int(x.argmax()) == r.chosen for x, r in zip(s, va_rows)) / len(va_rows)
        nll = sum(float(-torch.log_softmax(x.double(), 0)[r.chosen]) for x, r in zip(s, va_rows)) / len(va_rows)
        return top1, nll

    print(f"walkthrough decisions: {len(tr_rows)} to clone, {len(va_rows)} held out; "
          "before cloning: held-out top-1 %.3f, NLL %.3f" % heldout(base), flush=True)
    for top in args.time_blocks:
        model = copy.deepcopy(base)
        if top:
            train_top_layers(model, top)
        acc = Accelerator(cpu=True, mixed_precision="bf16")
        m = acc.prepare(model)
        m.train()
        for rep in range(2):  # the first pass warms up kernels and allocator
            t0 = time.perf_counter()
            batch = tr_rows[:8]
            with acc.autocast():
                logp, _ = choice_logprobs(m, [r.prompt_ids for r in batch], [r.candidates for r in batch],
                                          [r.chosen for r in batch], pad_id=pad)
            loss = -logp.sum()
            t1 = time.perf_counter()
            acc.backward(loss)
            t2 = time.perf_counter()
            m.zero_grad(set_to_none=True)
        print(f"trainable top blocks {top or 'all'}: forward {t1 - t0:.2f} s, backward {t2 - t1:.2f} s per 8 choice rows", flush=True)
    for v in json.loads(args.variants):
        model = copy.deepcopy(base)
        if v.get("top"):
            train_top_layers(model, v["top"])
        acc = Accelerator(cpu=True, mixed_precision="bf16")
        m = acc.prepare(model)
        t0 = time.perf_counter()
        for ep in range(v["epochs"]):
            st = behaviour_clone(m, acc, tr_rows, pad_id=pad, lr=v["lr"], epochs=1, batch_rows=v.get("batch", 8),
                                 micro_rows=8, seed=ep, loss="choice")
            top1, nll = heldout(acc.unwrap_model(m))
            print(f"{json.dumps(v)} epoch {ep + 1}: training NLL {st['nll_last']:.3f}, held-out top-1 {top1:.3f}, "
                  f"NLL {nll:.3f}, {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
