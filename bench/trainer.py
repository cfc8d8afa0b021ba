"""Trainer benchmark: rollout decisions/s, generated tokens/s, update time per phase and
peak memory, for the tiny random model and SmolLM2-135M, in both action modes.

Each configuration runs one short training update in a fresh subprocess (so peak RSS is
per configuration) on the embedded environment: generated ALFWorld games when that
environment is installed, else the generated WebShop catalogue.  Prints one table.

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
    args = ap.parse_args()
    env_name, env_ov = env_overrides()
    root = Path(tempfile.mkdtemp(prefix="rubricgym-bench-"))
    rows = []
    for model in args.models:
        for mode in args.modes:
            for mp in args.precision:
                name = f"{model}-{mode}-{mp}"
                ov = [f"model={model}", f"action_mode={mode}", f"mixed_precision={mp}", "prompt_style=action_only",
                      f"groups_per_update={args.groups}", f"group_size={args.group_size}", f"max_steps={args.steps}",
                      "updates=1", "val_tasks=0", "eval_at_start=false", "eval_every=1", "save_every=1",
                      "max_response_tokens=24", "estimator=grpo", "estimator_params={}", "kl_coef=0.01", "tensorboard=false", "progress=false",
                      "save_rollouts=false", f"output_dir={root}", f"run_name={name}", *env_ov]
                env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
                t0 = time.perf_counter()
                proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(ov)], capture_output=True, text=True, env=env)
                wall = time.perf_counter() - t0
                line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
                if line is None:
                    print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
                    continue
                r = json.loads(line[7:])
                rows.append((name, r, wall))
    print(f"\nenvironment: {env_name}; {args.groups} groups x {args.group_size} siblings, <= {args.steps} steps; 1 update; torch threads 1\n")
    head = f"{'config':28} {'decisions':>9} {'dec/s':>7} {'gen tok/s':>9} {'rollout s':>9} {'credit s':>8} {'logprob s':>9} {'optim s':>8} {'update s':>8} {'peak MB':>8}"
    print(head)
    print("-" * len(head))
    for name, r, _wall in rows:
        gen_tps = r.get("rollout/gen_tokens_per_s", 0.0)
        print(f"{name:28} {r['rollout/decisions']:9.0f} {r['rollout/decisions_per_s']:7.2f} {gen_tps:9.1f} "
              f"{r['rollout/rollout_s']:9.2f} {r['credit/credit_s']:8.3f} {r['opt/logprob_s']:9.2f} "
              f"{r['opt/optimize_s'] - r['opt/logprob_s']:8.2f} {r['time/update_s']:8.2f} {r['peak_rss_mb']:8.0f}")
    if len(rows) >= 2:
        base = rows[0][1]["time/update_s"]
        print("\nupdate time relative to the first row: " + ", ".join(f"{n} {r['time/update_s'] / base:.1f}x" for n, r, _ in rows))


if __name__ == "__main__":
    main()
