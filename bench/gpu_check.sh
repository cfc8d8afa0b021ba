#!/usr/bin/env bash
# GPU check for the trainer (< 8 minutes on one GPU): one real update of SmolLM2-135M-Instruct
# (packaged GGUF, converted once) in generate mode with the papers' 512-token responses, then
# tokens/s and peak GPU memory.  Run from the repository root on a CUDA machine:
#     bash bench/gpu_check.sh
# Where the packaged model cannot travel (a GPU machine without network), point
# RUBRICGYM_GPU_MODEL at a folder holding SmolLM2's config.json and tokenizer files only: the
# script then builds randomly initialised weights of exactly that architecture (speed and
# memory are the real model's; generate mode then always writes the full 512 tokens, the
# worst case).
set -euo pipefail
export TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/rubricgym-gpu-check}
mkdir -p "$OUT"
# GPU_CHECK_DRY=1: a tiny-sized run on the CPU, to check the script before spending GPU time
${PYTHON:-python3} - <<'PY' 2>&1 | tee "$OUT/gpu_check.log"
import json, os, tempfile, time, torch
dry = os.environ.get("GPU_CHECK_DRY") == "1"
assert dry or torch.cuda.is_available(), "no CUDA device"
from trainers.config import load_config
from trainers.trainer import Trainer
from trainers.metrics import read_metrics
try:
    if os.environ.get("GPU_CHECK_ENV") == "webshop":
        raise ImportError("WebShop asked for")
    import agent_envs.alfworld.env  # noqa: F401
    env = ["env_id=ALFWorld-Rubric-v0", "train_split=generated", "val_split=generated"]
except ImportError:
    env = ["env_id=WebShop-Rubric-v0", "env_kwargs={catalogue: generated, num_products: 500, tagger: lexicon}",
           "train_split=train", "val_split=eval"]
out = os.environ.get("OUT", "/tmp/rubricgym-gpu-check")
model = os.environ.get("RUBRICGYM_GPU_MODEL", "smollm2")
if os.path.isdir(model) and not any(f.endswith(".safetensors") for f in os.listdir(model)):
    import shutil
    from transformers import AutoConfig, AutoModelForCausalLM
    torch.manual_seed(0)
    built = os.path.join("/tmp", "rubricgym-random-" + os.path.basename(os.path.abspath(model)))
    shutil.copytree(model, built, dirs_exist_ok=True)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model)).save_pretrained(built)
    print(f"random weights with the architecture of {model} -> {built}")
    model = built
rows = []
size = ["groups_per_update=1", "group_size=2", "max_steps=1"] if dry else ["groups_per_update=8", "group_size=8", "max_steps=8"]
runs = tempfile.mkdtemp(prefix="rubricgym-gpu-runs-")  # checkpoints stay out of $OUT
for mode, extra in (("generate", [f"max_response_tokens={8 if dry else 512}", "prompt_style=think"]), ("choose", ["prompt_style=action_only"])):
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    ov = [f"model={model}", f"action_mode={mode}", *size,
          "updates=1", "val_tasks=0", "eval_at_start=false", "warm_start_tasks=0", "save_every=1", "estimator=grpo", "estimator_params={}", "kl_coef=0.01",
          "mixed_precision=bf16", "gradient_checkpointing=true", "micro_batch_rows=16", "rollout_batch_size=128",
          "progress=false", "env_workers=0", f"output_dir={runs}", f"run_name=gpu-{mode}-{int(time.time())}", *env, *extra]
    t = Trainer(load_config("demo", ov))
    t.train()
    r = [x for x in read_metrics(t.run_dir) if x["phase"] == "train"][0]
    r["peak_gpu_gb"] = torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0
    rows.append((mode, r))
print(f"model {model}; {torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU (dry run)'}; torch {torch.__version__}")
print(f"{'mode':10} {'decisions':>9} {'dec/s':>7} {'gen tok/s':>10} {'rollout s':>9} {'optim s':>8} {'peak GPU GB':>11}")
for mode, r in rows:
    print(f"{mode:10} {r['rollout/decisions']:9.0f} {r['rollout/decisions_per_s']:7.2f} {r.get('rollout/gen_tokens_per_s', 0):10.1f} "
          f"{r['rollout/rollout_s']:9.2f} {r['opt/optimize_s']:8.2f} {r['peak_gpu_gb']:11.2f}")
json.dump([dict(mode=m, **r) for m, r in rows], open(os.path.join(out, "gpu_check.json"), "w"), indent=1)
PY
