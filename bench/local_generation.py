"""Benchmark: a local model's prompt reading and decoding speed on this machine, per precision
and batch size, side by side in one run (what ``rubricgym eval --model hf:NAME --dtype ...
--batch-size ...`` pays per request).

Per setting: prompt tokens/s (one forward over ``--batch`` rows of ``--prompt-tokens`` random
tokens) and ms per decoded token (a one-token forward with no cache, a lower bound on a cached
decode step: both read every weight once).  Prints the precision, torch's threads and whether the
CPU has AMX, on which bf16 matrix products run much faster than fp32.

Usage::

    python bench/local_generation.py                       # smollm2, fp32 and bf16, batch 1 and 8, 1 thread
    python bench/local_generation.py --threads 2 --batch 1 16
"""

from __future__ import annotations

import argparse
import time


def _best(model, x, repeats: int) -> float:
    """The fastest of ``repeats`` forwards of ``x`` (after one warm-up), in seconds."""
    model(x)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        model(x)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    import torch

    from trainers.models import load_policy

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-tokens", type=int, default=500)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        amx = "amx_bf16" in fh.read()
    print(f"{args.model}, torch {torch.__version__}, {args.threads} thread(s), AMX {'yes' if amx else 'no'}, "
          f"prompts of {args.prompt_tokens} tokens")
    print(f"{'dtype':>9} {'batch':>5} {'prompt tok/s':>12} {'decode ms/token':>15}")
    for dtype in args.dtype:
        model, _tok = load_policy(args.model, dtype=dtype)
        model.eval()
        for batch in args.batch:
            x = torch.randint(100, 1000, (batch, args.prompt_tokens))
            one = torch.randint(100, 1000, (batch, 1))
            with torch.no_grad():
                prompt_s = _best(model, x, args.repeats)
                decode_s = _best(model, one, args.repeats)
            print(f"{dtype:>9} {batch:>5} {batch * args.prompt_tokens / prompt_s:>12.0f} {1000 * decode_s:>15.1f}")


if __name__ == "__main__":
    main()
