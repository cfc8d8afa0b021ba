"""``trainable_layers``: only the top blocks (and the final norm) train; the rest stays fixed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainers.batching import TrainRow
from trainers.config import ConfigError, load_config
from trainers.models import load_policy, train_top_layers
from trainers.trainer import Trainer

BASE = [
    "model=tiny-llama", "groups_per_update=1", "group_size=2", "val_tasks=1", "updates=1", "progress=false",
    "tensorboard=false", "env_workers=0", "torch_threads=1", "mixed_precision=no", "warm_start_tasks=0",
    "env_id=WebShop-Rubric-v0", "env_kwargs={catalogue: generated, num_products: 60, tagger: lexicon}",
    "train_split=train", "val_split=eval", "max_steps=3", "rubric_shaping=0.0", "max_train_rows=0",
    "action_mode=choose", "rl_loss=choice", "estimator=grpo", "estimator_params={}", "learning_rate=1e-2",
]


def test_an_update_changes_only_the_top_block_and_the_final_norm(tmp_path):
    t = Trainer(load_config("demo", [*BASE, f"output_dir={tmp_path}", "run_name=top1", "trainable_layers=1", "kl_coef=0.1"]))
    try:
        before = {k: v.detach().clone() for k, v in t.unwrapped.named_parameters()}
        cands = [[3, 7, 2], [3, 8, 2], [30, 2]]
        rows = [TrainRow([5, 17, 23], cands[j], a, 0, 0, 0, cands, j) for j, a in ((0, 1.0), (2, -1.0))]
        t.optimize(rows, [], update=0)
        changed = {k for k, v in t.unwrapped.named_parameters() if not torch.equal(v, before[k])}
        # tiny-llama has 2 blocks: block 1 and the final norm train; embeddings (tied head) and block 0 do not
        assert changed and all(k.startswith(("model.layers.1.", "model.norm.")) for k in changed), sorted(changed)
        assert any(k.startswith("model.layers.1.") for k in changed)
        # only trainable weights are optimised, and the KL reference is a full frozen copy
        n_opt = sum(p.numel() for g in t.optimizer.param_groups for p in g["params"])
        assert n_opt == sum(p.numel() for p in t.unwrapped.parameters() if p.requires_grad)
        assert not any(p.requires_grad for p in t.ref_model.parameters())
    finally:
        t.pool.close()


def test_train_top_layers_counts_and_rejects_bad_values():
    model, _ = load_policy("tiny-llama", seed=0)
    total = sum(p.numel() for p in model.parameters())
    one, two = train_top_layers(model, 1), train_top_layers(model, 2)
    assert 0 < one < two < total  # two blocks still leave the embeddings frozen
    assert two == total - model.get_input_embeddings().weight.numel()
    # a preset sized for a deeper model still runs: more blocks than the model has = all blocks
    assert train_top_layers(model, 30) == two
    with pytest.raises(ValueError, match="≥ 1"):
        train_top_layers(model, 0)
    with pytest.raises(ConfigError, match="trainable_layers must be 0 when lora=true"):
        load_config("demo", ["trainable_layers=4", "lora=true"])
    with pytest.raises(ConfigError, match="trainable_layers must be an integer ≥ 0"):
        load_config("demo", ["trainable_layers=-1"])
