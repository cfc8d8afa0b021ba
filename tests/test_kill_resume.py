"""A real SIGKILL of `rubricgym train` while it writes a checkpoint, then `--resume`.

tests/test_trainer_e2e.py simulates the leftovers of an interrupted checkpoint in-process; here
the CLI runs as a subprocess (tiny random model, WebShop's generated 120-product catalogue, two
updates, a checkpoint after each) and is killed with SIGKILL in the middle of the checkpoint of
update 2: its files are in ``.tmp-update_000002`` but neither ``COMPLETE`` nor the rename has
happened.  The kill point is exact at any load: the run is launched with Accelerate's
``save_state`` wrapped to stop the process (SIGSTOP) once it has written update 2's files, and the
test waits for that stop and kills it from outside.  ``--resume`` must then continue from update 1
and end with exactly the uninterrupted run's weights and update-2 rollouts.  More kill
points (every checkpoint, random times): ``python bench/kill_resume.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trainers.checkpoint import MARKER, complete_checkpoints

REPO = Path(__file__).resolve().parents[1]
TINY = ["--model", "tiny-llama", "--groups-per-update", "2", "--group-size", "2", "--val-tasks", "2",
        "--eval-every", "1", "--save-every", "1", "--learning-rate", "1e-3", "--no-progress",
        "--no-tensorboard", "--max-response-tokens", "12", "--micro-batch-rows", "4", "--estimator-params",
        "{}", "--no-skip-zero-advantage-rows", "--env-workers", "0", "--mixed-precision", "no",
        "--rubric-shaping", "0.0", "--max-train-rows", "0", "--torch-threads", "1", "--warm-start-tasks", "0",
        "--action-mode", "generate", "--prompt-style", "action_only", "--estimator", "grpo", "--kl-coef",
        "0.01", "--mini-batches", "2", "--updates", "2", "--env-id", "WebShop-Rubric-v0", "--env-kwargs",
        "{catalogue: generated, num_products: 120, tagger: lexicon}", "--train-split", "train", "--val-split",
        "eval", "--max-steps", "4", "--trainable-layers", "0", "--no-eval-train-games"]


# `rubricgym train` with Accelerator.save_state wrapped: once the files of update 2's checkpoint
# are written into its temporary folder (before COMPLETE and the rename), the process stops itself.
_STOP_IN_CHECKPOINT_2 = """
import os, signal, sys
import accelerate
from trainers.cli import main
save_state = accelerate.Accelerator.save_state
def save_then_stop(self, output_dir=None, **kwargs):
    out = save_state(self, output_dir, **kwargs)
    if str(output_dir).endswith(".tmp-update_000002"):
        os.kill(os.getpid(), signal.SIGSTOP)
    return out
accelerate.Accelerator.save_state = save_then_stop
sys.argv[0] = "rubricgym"
main()
"""


def _train(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainers.cli", "train", *args]


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as fh:
        rc = subprocess.run(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, timeout=900, check=False).returncode
    assert rc == 0, log.read_text()[-3000:]


@pytest.mark.slow
def test_sigkill_mid_checkpoint_then_resume_matches_the_uninterrupted_run(tmp_path):
    log = tmp_path / "runs.log"
    _run(_train("demo", *TINY, "--output-dir", str(tmp_path), "--run-name", "full"), log)
    cut = tmp_path / "cut"
    tmp = cut / "checkpoints" / ".tmp-update_000002"
    with open(log, "a") as fh:
        proc = subprocess.Popen([sys.executable, "-c", _STOP_IN_CHECKPOINT_2, "train", "demo", *TINY, "--output-dir",
                                 str(tmp_path), "--run-name", "cut"], cwd=REPO, stdout=fh, stderr=subprocess.STDOUT)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)  # returns when it stops (or, on a failure, exits)
    assert os.WIFSTOPPED(status), f"the run ended before its second checkpoint:\n{log.read_text()[-3000:]}"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    # killed mid-write: update 2's checkpoint is half-written, update 1's is the newest complete one
    assert tmp.is_dir() and any(tmp.iterdir()) and not (tmp / MARKER).exists()
    assert not (cut / "checkpoints" / "update_000002").exists()
    assert [p.name for p in complete_checkpoints(cut / "checkpoints")] == ["update_000001"]

    _run(_train("--resume", str(cut)), log)
    full_summary = json.loads((tmp_path / "full" / "summary.json").read_text())
    cut_summary = json.loads((cut / "summary.json").read_text())
    assert cut_summary["resumed_from"].endswith("update_000001")
    assert cut_summary["weights_digest"] == full_summary["weights_digest"]
    for u in (1, 2):
        name = f"rollouts/update_{u:05d}.jsonl"
        assert (cut / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name
    assert [p.name for p in complete_checkpoints(cut / "checkpoints")][-1] == "update_000002"
