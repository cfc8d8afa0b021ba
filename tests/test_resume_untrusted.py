"""``rubricgym train --resume DIR`` unpickles nothing the user did not create, and refuses a
``metrics.jsonl`` that ``rubricgym report`` would refuse.

The learning-rate schedule is kept as JSON (``lr_scheduler.json``); a planted pickle whose
``__reduce__`` runs a shell command (``touch MARKER``) is refused before anything is read, so
the marker never appears.  Unit tests use a real Accelerator (CPU) and a tiny model; the
trainer test resumes a real one-update run of the tiny random model.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")
torch.set_num_threads(1)

from trainers.checkpoint import (
    SCHEDULER_FILE,
    CheckpointError,
    load_checkpoint,
    restore_scheduler,
    save_checkpoint,
)


class _Shell:
    """Unpickling this runs ``touch <marker>`` (what a crafted checkpoint file can do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def _schedule(opt):
    from transformers import get_scheduler

    return get_scheduler("linear", opt, num_warmup_steps=1, num_training_steps=10)


@pytest.fixture
def run(tmp_path):
    from accelerate import Accelerator

    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = _schedule(opt)
    model, opt = acc.prepare(model, opt)
    for _ in range(3):
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
        sched.step()
    path = save_checkpoint(acc, tmp_path / "checkpoints", 3, {"update": 3}, scheduler=sched)
    return acc, opt, sched, path


def test_the_schedule_is_saved_as_json_and_restored_from_it(run):
    acc, opt, sched, path = run
    saved = json.loads((path / SCHEDULER_FILE).read_text())
    assert saved["last_epoch"] == 3 and saved["_step_count"] == 4 and saved["base_lrs"] == [0.1]
    assert saved["_last_lr"] == pytest.approx([0.1 * 7 / 9])  # linear decay: (10 - 3) / (10 - 1)
    assert not list(path.glob("*custom_checkpoint*"))  # nothing pickled for it
    fresh = _schedule(opt)
    assert load_checkpoint(acc, path) == {"update": 3}
    assert restore_scheduler(fresh, path) is True
    assert fresh.state_dict() == sched.state_dict()
    (path / SCHEDULER_FILE).unlink()
    assert restore_scheduler(_schedule(opt), path) is False  # an older checkpoint: the caller recomputes


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"),
    ('{"last_epoch": 3}', "not the state of this run's LambdaLR"),
    (('{"base_lrs": "os.system", "last_epoch": 3, "_step_count": 4, "_is_initial": false, '
      '"_get_lr_called_within_step": false, "_last_lr": [0.1], "lr_lambdas": [{}]}'), "not the state"),
])
def test_a_bad_schedule_file_is_named(run, text, why):
    _, opt, _, path = run
    (path / SCHEDULER_FILE).write_text(text)
    with pytest.raises(CheckpointError, match=re.escape(str(path / SCHEDULER_FILE)) + ".*" + why):
        restore_scheduler(_schedule(opt), path)


def test_a_planted_custom_checkpoint_pickle_is_refused_unread(run, tmp_path):
    acc, _, _, path = run
    marker = tmp_path / "PWNED"
    torch.save(_Shell(marker), path / "custom_checkpoint_0.pkl")  # a real torch.save zip
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0\.pkl: a pickle, which rubricgym does not load"):
        load_checkpoint(acc, path)
    assert not marker.exists()


def test_a_bare_pickle_in_place_of_a_torch_file_is_refused_unread(run, tmp_path):
    """Accelerate reads its RNG file with torch's restricted loader and, when that fails,
    skips the restore with an info line; a file that is not even a torch.save zip is refused
    by name first."""
    acc, _, _, path = run
    marker = tmp_path / "PWNED"
    (path / "random_states_0.pkl").write_bytes(pickle.dumps(_Shell(marker)))
    with pytest.raises(CheckpointError, match=r"random_states_0\.pkl: not a torch\.save zip file"):
        load_checkpoint(acc, path)
    assert not marker.exists()


# --- the trainer's --resume -----------------------------------------------------------------------


@pytest.mark.slow
def test_resume_refuses_planted_pickles_and_garbage_metrics_and_restores_the_schedule(tmp_path):
    from test_trainer_e2e import _overrides

    from trainers.checkpoint import latest_checkpoint
    from trainers.config import load_config
    from trainers.metrics import MetricFileError
    from trainers.trainer import Trainer

    extra = ["action_mode=generate", "prompt_style=action_only", "estimator=grpo", "updates=4",
             "lr_schedule=linear", "eval_every=4"]
    Trainer(load_config("demo", _overrides(tmp_path, "cut", extra)), stop_after=1).train()
    run = tmp_path / "cut"
    ckpt = latest_checkpoint(run / "checkpoints")
    assert (ckpt / SCHEDULER_FILE).is_file() and not list(ckpt.glob("custom_checkpoint_*"))

    def resumed() -> dict:
        t = Trainer(load_config(run / "config.yaml"), run, resume=True)
        t.pool.close()
        return t.scheduler.state_dict()

    state = resumed()
    assert state["last_epoch"] == 1 and state == json.loads((ckpt / SCHEDULER_FILE).read_text())
    # a checkpoint from before lr_scheduler.json: the schedule is recomputed from the update counter
    kept = (ckpt / SCHEDULER_FILE).read_text()
    (ckpt / SCHEDULER_FILE).unlink()
    assert resumed() == state
    (ckpt / SCHEDULER_FILE).write_text(kept)

    marker = tmp_path / "PWNED"
    torch.save(_Shell(marker), ckpt / "custom_checkpoint_0.pkl")
    with pytest.raises(CheckpointError, match="custom_checkpoint_0.pkl: a pickle"):
        resumed()
    assert not marker.exists()  # was: the scheduler's file was unpickled in full and ran `touch`
    (ckpt / "custom_checkpoint_0.pkl").unlink()

    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0] + "garbage\n" + "".join(lines[1:]))
    with pytest.raises(MetricFileError, match=r"cannot resume .*metrics\.jsonl:2: not JSON"):
        resumed()  # was: resumed, and `rubricgym report` then refused the run
