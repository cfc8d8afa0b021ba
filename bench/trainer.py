"""Trainer benchmark: rollout decisions/s, generated tokens/s, update time per phase and
peak memory, for the tiny random model and SmolLM2-135M, in both action modes; and the
``choose``-mode scorer (prefix tree in one forward) against scoring every candidate row on
its own, as a ratio measured in the same run.

Each configuration runs one short training update in a fresh subprocess (so peak RSS is
per configuration) on the embedded environment: generated ALFWorld games when that
environment is installed, else the generated WebShop catalogue.  Torch uses one thread.
Prints Markdown tables.

    python bench/trainer.py                  # all configurations
    python bench/trainer.py --models tiny-llama --modes choose
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
import torch
from trainers.config import load_config
from trainers.metrics import read_metrics
from trainers.trainer import Trainer
if __name__ == "__main__":
    ov = json.loads(sys.argv[1])
    t0 = time.perf_counter()
    tr = Trainer(load_config("demo", ov))
    setup = time.perf_counter() - t0
    tr.train()
    rec = [r for r in read_metrics(tr.run_dir) if r["phase"] == "train"][0]
    rec["setup_s"] = setup
    rec["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps(rec))
"""


SCORER = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
import gymnasium as gym
import agent_envs
from trainers.config import load_config
from trainers.generation import score_candidates
from trainers.models import load_policy
from agent_envs.agent.prompts import build_prompt, format_action
from trainers.lm_policy import _encode_prompt
if __name__ == "__main__":
    model_name, n = sys.argv[1], int(sys.argv[2])
    cfg = load_config("demo", [f"model={model_name}"])
    model, tok = load_policy(cfg.policy.model)
    model.eval()
    env = gym.make(cfg.env.env_id, **cfg.env.env_kwargs)
    ids = env.unwrapped.task_ids(cfg.env.train_split)
    prompts, cands = [], []
    for k in range(n):
        obs, info = env.reset(seed=k, options={"task": ids[(k * 7) % len(ids)], "split": cfg.env.train_split})
        adm = info["admissible_actions"]
        text = build_prompt(info["task"]["goal"], obs, adm, [], style=cfg.prompt.prompt_style, list_actions=cfg.prompt.list_actions,
                            compact=cfg.prompt.compact_prompt)
        prompts.append(_encode_prompt(tok, text, cfg.prompt.max_prompt_tokens, cfg.prompt.system_prompt))
        cands.append([tok.encode(format_action(a), add_special_tokens=False) + [tok.eos_token_id] for a in adm])
    out = {"prompts": n, "prompt_tokens": sum(map(len, prompts)) / n, "candidates": sum(map(len, cands)) / n}
    for name, kw, ctx in (("rows fp32", {"use_cache": False, "max_rows": 16}, None), ("tree fp32", {}, None),
                          ("tree bf16 autocast", {}, "bf16"), ("tree bf16 weights", {}, "bf16w")):
        m = model.to(torch.bfloat16) if ctx == "bf16w" else model
        def run():
            if ctx == "bf16":
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return score_candidates(m, prompts, cands, pad_id=tok.pad_token_id, **kw)
            return score_candidates(m, prompts, cands, pad_id=tok.pad_token_id, **kw)
        c0 = time.process_time()
        scores = run()
        out[name] = (time.process_time() - c0) / n
        if name == "rows fp32":
            ref = scores
        else:
            tv = [float((torch.softmax(a.double(), 0) - torch.softmax(b.double(), 0)).abs().sum() / 2) for a, b in zip(ref, scores)]
            out[name + " tv"] = max(tv)
    print("RESULT " + json.dumps(out))
"""


def env_overrides() -> tuple[str, list[str]]:
    """Generated ALFWorld if its environment is installed, else generated WebShop."""
    try:
        import agent_envs.alfworld.env  # noqa: F401

        return "ALFWorld (generated)", ["env_id=ALFWorld-Rubric-v0", "train_split=generated", "val_split=generated"]
    except ImportError:
        return "WebShop (generated)", ["env_id=WebShop-Rubric-v0", "env_kwargs={catalogue: generated, num_products: 200, tagger: lexicon}",
                                       "train_split=train", "val_split=eval"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny-llama", "smollm2"])
    ap.add_argument("--modes", nargs="+", default=["choose", "generate"])
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--precision", nargs="+", default=["no", "bf16"])
    ap.add_argument("--scorer-prompts", type=int, default=4, help="prompts for the scorer comparison (0 = skip it)")
    args = ap.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RUBRICGYM_TORCH_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    scorer_rows = []
    if args.scorer_prompts > 0:
        for model in args.models:
            proc = subprocess.run([sys.executable, "-c", SCORER, model, str(args.scorer_prompts)], capture_output=True, text=True, env=env,
                                  check=False)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"scorer {model}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                continue
            scorer_rows.append((model, json.loads(line[7:])))
    env_name, env_ov = env_overrides()
    root = Path(tempfile.mkdtemp(prefix="rubricgym-bench-"))
    rows = []
    for model in args.models:
        for mode in args.modes:
            for mp in args.precision:
                name = f"{model}-{mode}-{mp}"
                ov = [f"model={model}", f"action_mode={mode}", f"mixed_precision={mp}", "prompt_style=action_only",
                      f"groups_per_update={args.groups}", f"group_size={args.group_size}", f"max_steps={args.steps}",
                      "updates=1", "val_tasks=0", "eval_at_start=false", "eval_every=1", "save_every=1", "max_train_rows=0",
                      "warm_start_tasks=0",
                      "max_response_tokens=24", "estimator=grpo", "estimator_params={}", "kl_coef=0.01", "tensorboard=false", "progress=false",
                      "save_rollouts=false", f"output_dir={root}", f"run_name={name}", *env_ov]
                t0 = time.perf_counter()
                proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(ov)], capture_output=True, text=True, env=env,
                                      check=False)
                wall = time.perf_counter() - t0
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                r = json.loads(line[7:])
                rows.append((name, r, wall))
    if scorer_rows:
        print(f"\nchoose-mode scoring, CPU seconds per prompt (demo prompts, {args.scorer_prompts} per model, all admissible actions)\n")
        print("| model | prompt tokens | candidates | rows fp32 (reference) | tree fp32 | tree bf16 autocast | tree bf16 weights | speed-up (rows fp32 / tree bf16 weights) | max TV of choice probabilities vs reference (tree fp32 / autocast / bf16 weights) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for model, r in scorer_rows:
            print(f"| {model} | {r['prompt_tokens']:.0f} | {r['candidates']:.1f} | {r['rows fp32']:.3f} | {r['tree fp32']:.3f} | "
                  f"{r['tree bf16 autocast']:.3f} | {r['tree bf16 weights']:.3f} | {r['rows fp32'] / r['tree bf16 weights']:.1f}x | "
                  f"{r['tree fp32 tv']:.4f} / {r['tree bf16 autocast tv']:.4f} / {r['tree bf16 weights tv']:.4f} |")
    print(f"\none update: environment {env_name}; {args.groups} groups x {args.group_size} siblings, <= {args.steps} steps; "
          "demo preset otherwise (every row trained); torch threads 1; wall seconds\n")
    print("| config | decisions | dec/s | gen tok/s | rollout s | credit s | rows | logprob s | optim s | update s | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r, _wall in rows:
        gen_tps = r.get("rollout/gen_tokens_per_s", 0.0)
        print(f"| {name} | {r['rollout/decisions']:.0f} | {r['rollout/decisions_per_s']:.2f} | {gen_tps:.1f} | "
              f"{r['rollout/rollout_s']:.2f} | {r['credit/credit_s']:.3f} | {r['opt/rows']:.0f} | {r['opt/logprob_s']:.2f} | "
              f"{r['opt/optimize_s'] - r['opt/logprob_s']:.2f} | {r['time/update_s']:.2f} | {r['peak_rss_mb']:.0f} |")
    if len(rows) >= 2:
        base = rows[0][1]["time/update_s"]
        print("\nupdate time relative to the first row: " + ", ".join(f"{n} {r['time/update_s'] / base:.1f}x" for n, r, _ in rows))


if __name__ == "__main__":
    main()
