"""SIGKILL a `rubricgym train` run, then `--resume` it: is the result the uninterrupted run's?

Runs the tiny random model (``model=tiny-llama``) on WebShop's generated 120-product
catalogue for ``--updates`` updates with a checkpoint after every update, as
``python -m trainers.cli train ...`` subprocesses (what a user runs):

1. the uninterrupted reference run;
2. for each kill point, a fresh run killed with SIGKILL there, then ``--resume`` on its folder:
   * ``ckpt:U`` - while the checkpoint of update U is being written (the moment its
     ``checkpoints/.tmp-update_00000U`` folder appears);
   * ``time:F`` - after the run's first checkpoint, at fraction F of the time the reference
     run took from its first checkpoint to its end (anywhere in updates 2..N: rollouts, the
     optimizer step, evaluation, metrics appends, checkpoints).

Per kill it prints where the kill landed (newest complete checkpoint, a half-written one left
behind), and whether the resumed run matches the reference: the final weights digest
(``summary.json``), every update's rollouts file byte for byte, and the train metrics of the
first update after the resumed checkpoint (all fields except timings).  Exit status 1 on any
mismatch.

Usage::

    python bench/kill_resume.py                          # ckpt:1 ckpt:2 ckpt:3 time:0.2 time:0.5 time:0.8
    python bench/kill_resume.py --kills ckpt:2 --updates 3
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TINY = ["--model", "tiny-llama", "--groups-per-update", "2", "--group-size", "2", "--val-tasks", "2",
        "--eval-every", "1", "--save-every", "1", "--learning-rate", "1e-3", "--no-progress",
        "--no-tensorboard", "--max-response-tokens", "12", "--micro-batch-rows", "4", "--estimator-params",
        "{}", "--no-skip-zero-advantage-rows", "--env-workers", "0", "--mixed-precision", "no",
        "--rubric-shaping", "0.0", "--max-train-rows", "0", "--torch-threads", "1", "--warm-start-tasks", "0",
        "--action-mode", "generate", "--prompt-style", "action_only", "--estimator", "grpo", "--kl-coef",
        "0.01", "--mini-batches", "2", "--env-id", "WebShop-Rubric-v0", "--env-kwargs",
        "{catalogue: generated, num_products: 120, tagger: lexicon}", "--train-split", "train", "--val-split", "eval", "--max-steps",
        "4", "--trainable-layers", "0", "--no-eval-train-games"]


def train_cmd(out: Path, name: str, updates: int) -> list[str]:
    return [sys.executable, "-m", "trainers.cli", "train", "demo", *TINY, "--updates", str(updates),
            "--output-dir", str(out), "--run-name", name]


def resume_cmd(run: Path) -> list[str]:
    return [sys.executable, "-m", "trainers.cli", "train", "--resume", str(run)]


def run_to_end(cmd: list[str], log: Path, timeout: float = 900) -> None:
    with open(log, "a") as fh:
        rc = subprocess.run(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False).returncode
    if rc != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {rc}); log: {log}")


def reference_run(cmd: list[str], run: Path, log: Path) -> tuple[float, float]:
    """Run ``cmd`` to the end; returns (seconds to its first complete checkpoint, total seconds)."""
    first = run / "checkpoints" / "update_000001"
    t0 = time.monotonic()
    with open(log, "a") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    t_first = None
    while proc.poll() is None:
        if t_first is None and first.is_dir():
            t_first = time.monotonic() - t0
        time.sleep(0.01)
    if proc.returncode != 0:
        raise SystemExit(f"the reference run failed (exit {proc.returncode}); log: {log}")
    total = time.monotonic() - t0
    return (t_first if t_first is not None else total), total


def kill_at(cmd: list[str], run: Path, point: str, span: float, log: Path) -> str:
    """Start ``cmd`` and SIGKILL it at ``point`` (``span``: the reference's seconds from its
    first checkpoint to its end); returns where the kill landed."""
    kind, _, arg = point.partition(":")
    with open(log, "a") as fh:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    wait_for = run / "checkpoints" / (f".tmp-update_{int(arg):06d}" if kind == "ckpt" else "update_000001")
    deadline = time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline and not wait_for.exists():
        time.sleep(0 if kind == "ckpt" else 0.01)  # a tight poll: a checkpoint write takes milliseconds
    if kind == "time":
        time.sleep(float(arg) * span)
    if proc.poll() is not None:
        raise SystemExit(f"{point}: the run ended before the kill point (log: {log})")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    if kind == "ckpt":
        return "mid-checkpoint" if wait_for.exists() else "after checkpoint"
    return f"t+{float(arg) * span:.1f} s"


def state_after_kill(run: Path) -> tuple[int, bool]:
    """Newest complete checkpoint (0: none) and whether a half-written one is left."""
    from trainers.checkpoint import complete_checkpoints

    done = complete_checkpoints(run / "checkpoints")
    half = any(p.name.startswith(".tmp-") for p in (run / "checkpoints").iterdir()) if (
        run / "checkpoints").is_dir() else False
    return (int(done[-1].name.split("_")[1]) if done else 0), half


def train_record(run: Path, update: int) -> dict:
    """The last train record of ``update`` in metrics.jsonl, timings removed."""
    from trainers.metrics import read_metrics

    recs = [r for r in read_metrics(run) if r.get("phase") == "train" and r.get("update") == update]
    return {k: v for k, v in recs[-1].items() if not k.startswith("time/") and "seconds" not in k
            and not k.endswith("_s")} if recs else {}


def compare(ref: Path, run: Path, updates: int, first: int) -> dict[str, bool]:
    digest = json.loads((run / "summary.json").read_text())["weights_digest"]
    same_rollouts = all((ref / "rollouts" / f"update_{u:05d}.jsonl").read_bytes()
                        == (run / "rollouts" / f"update_{u:05d}.jsonl").read_bytes() for u in range(1, updates + 1))
    return {"digest": digest == json.loads((ref / "summary.json").read_text())["weights_digest"],
            "rollouts": same_rollouts,
            "next_update": first > updates or train_record(ref, first) == train_record(run, first)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", default="ckpt:1,ckpt:2,ckpt:3,time:0.2,time:0.5,time:0.8",
                    help="comma-separated kill points ckpt:U / time:F (default: 3 checkpoints, 3 times)")
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = ap.parse_args()
    points = [p.strip() for p in args.kills.split(",") if p.strip()]
    for p in points:
        kind, _, arg = p.partition(":")
        ok = (kind == "ckpt" and arg.isdigit() and 1 <= int(arg) <= args.updates) or (
            kind == "time" and arg.replace(".", "", 1).isdigit() and 0 < float(arg) < 1)
        if not ok:
            raise SystemExit(f"bad kill point {p!r}: ckpt:1..{args.updates} or time:0<F<1")
    out = Path(args.out or tempfile.mkdtemp(prefix="kill-resume-"))
    out.mkdir(parents=True, exist_ok=True)
    log = out / "runs.log"
    ref = out / "reference"
    t_first, wall = reference_run(train_cmd(out, ref.name, args.updates), ref, log)
    span = wall - t_first
    print(f"reference: {args.updates} updates in {wall:.1f} s, first checkpoint at {t_first:.1f} s ({out})")
    head = f"{'kill at':<10} {'landed':<15} {'ckpt':>4} {'half-written':>12} {'digest':>6} {'rollouts':>8} {'next update':>11}"
    print(head)
    print("-" * len(head))
    bad = 0
    for i, point in enumerate(points):
        run = out / f"killed-{i}"
        landed = kill_at(train_cmd(out, run.name, args.updates), run, point, span, log)
        ckpt, half = state_after_kill(run)
        # --resume (fresh start when no checkpoint is complete); before config.yaml exists: rerun
        run_to_end(resume_cmd(run) if (run / "config.yaml").is_file() else train_cmd(out, run.name, args.updates), log)
        res = compare(ref, run, args.updates, ckpt + 1)
        bad += not all(res.values())
        print(f"{point:<10} {landed:<15} {ckpt:>4} {half!s:>12} {res['digest']!s:>6} "
              f"{res['rollouts']!s:>8} {res['next_update']!s:>11}")
    print(f"{len(points)} SIGKILLs, {len(points) - bad} resumed runs identical to the uninterrupted one")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
