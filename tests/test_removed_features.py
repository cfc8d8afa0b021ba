"""Removed features fail with a message that says what to use instead (issue 13)."""

from __future__ import annotations

import pytest

from trainers.config import ConfigError, TrainConfig, load_config


def test_backend_vllm_is_refused_and_points_to_trl_and_verl():
    with pytest.raises(ConfigError) as err:
        load_config("demo", overrides=["backend=vllm"])
    message = str(err.value)
    assert "backend='vllm' was removed" in message
    assert "generates with transformers" in message
    assert "TRL" in message and "verl" in message and "docs/integrations/" in message
    assert not hasattr(TrainConfig(), "backend")  # the one-choice setting is gone


def test_old_files_naming_the_backend_read_as_before():
    with pytest.raises(ConfigError, match=r"backend was removed; only 'transformers' was ever accepted; got 'sglang'"):
        load_config("demo", overrides=["backend=sglang"])
    assert load_config("demo", overrides=["backend=transformers"]) == load_config("demo")


def test_make_backend_refuses_vllm_too():
    pytest.importorskip("torch")
    from trainers.generation import TransformersBackend, make_backend

    class Tok:
        pad_token_id, eos_token_id = 0, 2

    with pytest.raises(ValueError, match="TRL or verl"):
        make_backend("vllm", object(), Tok(), batch_size=4)
    with pytest.raises(ValueError, match="backend must be 'transformers'; got 'x'"):
        make_backend("x", object(), Tok(), batch_size=4)
    backend = make_backend("transformers", object(), Tok(), batch_size=4)
    assert isinstance(backend, TransformersBackend) and backend.eos_ids == {0, 2}


@pytest.mark.parametrize("kind", ["FSDP", "DEEPSPEED"])
def test_the_trainer_refuses_sharded_accelerate_configs(monkeypatch, kind):
    # accelerate refuses FSDP on a CPU ("no available devices"), so the guard is reached
    # through a stand-in Accelerator that reports the distributed type a GPU config would give
    accelerate = pytest.importorskip("accelerate")
    pytest.importorskip("trainers.trainer")
    from accelerate.utils import DistributedType

    from trainers.trainer import Trainer

    class Sharded:
        def __init__(self, **kwargs):
            self.distributed_type = DistributedType[kind]

    monkeypatch.setattr(accelerate, "Accelerator", Sharded)
    with pytest.raises(ValueError, match=f"one process or DDP, not {kind}"):
        Trainer(load_config("demo", overrides=["model=tiny-llama"]))
