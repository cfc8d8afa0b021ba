"""Truncated checkpoint files are named (issue 14): trainers/checkpoint.py with a real
Accelerator (CPU) and a tiny model; each file of a checkpoint is cut in half in turn."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("accelerate")

from trainers.checkpoint import (
    CheckpointError,
    check_checkpoint_files,
    load_checkpoint,
    save_checkpoint,
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from accelerate import Accelerator

    torch.set_num_threads(1)
    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    model, opt, sched = acc.prepare(model, opt, sched)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    path = save_checkpoint(acc, tmp_path_factory.mktemp("ckpt"), 1, {"update": 1})
    return acc, model, path


def test_an_intact_checkpoint_loads(run):
    acc, model, path = run
    check_checkpoint_files(path)
    saved = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    assert load_checkpoint(acc, path) == {"update": 1}
    assert torch.equal(model.weight.detach(), saved)


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl"])
def test_a_truncated_file_is_named(run, name):
    acc, _, path = run
    f = path / name
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    try:
        # was: SafetensorError "invalid header length" / RuntimeError "PytorchStreamReader failed
        # reading zip archive" without the path, and for random_states_0.pkl no error at all
        # (Accelerate skips RNG states it cannot read, with a warning)
        with pytest.raises(CheckpointError, match=re.escape(str(f)) + ".*truncated.*delete that checkpoint folder"):
            load_checkpoint(acc, path)
    finally:
        f.write_bytes(data)
    check_checkpoint_files(path)  # restored: fine again


def test_tied_weights_save_without_the_alarm_and_load_tied(tmp_path, caplog) -> None:
    """accelerate warned "Removed shared tensor {'lm_head.weight'}" on every checkpoint of a model
    with tied embeddings (the demo's SmolLM2); the save is fine and loading ties them again, so
    that one message is dropped while saving — and only while saving."""
    import logging

    from accelerate import Accelerator

    from trainers.checkpoint import save_checkpoint
    from trainers.models import build_tiny_model

    torch.set_num_threads(1)
    model = build_tiny_model("tiny-llama", vocab_size=512)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    acc = Accelerator(cpu=True)
    model, _opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    with caplog.at_level(logging.WARNING):
        path = save_checkpoint(acc, tmp_path / "checkpoints", 1, {"update": 1})
    assert not [r for r in caplog.records if "shared tensor" in r.getMessage()]
    assert not logging.getLogger("accelerate.utils.other").filters  # the filter went away
    saved = model.lm_head.weight.detach().clone()
    with torch.no_grad():
        model.model.embed_tokens.weight.add_(1.0)  # then load the saved state back
    acc.load_state(str(path))
    assert model.lm_head.weight is model.model.embed_tokens.weight and torch.equal(model.lm_head.weight, saved)
