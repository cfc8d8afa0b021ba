"""The trainer's update rule (trainers/update_rule.py through trainers/trust_region.py).

Plain SGD epochs inside a KL trust region on advantages in units of their running RMS:
all-zero advantages leave the weights bit-identical (no KL/entropy terms), the KL(old → new)
after an update stays within ``target_kl`` (and is the exact KL of the choice distributions),
rescaling every advantage changes nothing, and the arena's numpy objective equals the
trainer's torch objective (loss and gradient) on the same one-token-per-row batch.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainers.arena.objective import ObjectiveConfig, decision_loss
from trainers.batching import TrainRow
from trainers.config import load_config
from trainers.generation import score_candidates
from trainers.objective import pair_loss, response_deltas, task_loss
from trainers.trainer import Trainer, weights_digest
from trainers.trust_region import exact_choice_kl, k3_token_kl

BASE = [
    "model=tiny-llama", "groups_per_update=2", "group_size=2", "val_tasks=2", "updates=3", "progress=false",
    "tensorboard=false", "env_workers=0", "torch_threads=1", "mixed_precision=no", "warm_start_tasks=0",
    "env_id=WebShop-Rubric-v0", "env_kwargs={catalogue: generated, num_products: 60, tagger: lexicon}",
    "train_split=train", "val_split=eval", "max_steps=3", "rubric_shaping=0.0", "max_train_rows=0",
    "action_mode=choose", "temperature=1.0", "estimator=grpo", "estimator_params={}", "micro_batch_rows=2",
    "trainable_layers=0", "eval_train_games=false", "ppo_epochs=2",  # the rescaling control needs a second epoch (one clipped SGD step is scale-free)
]

PROMPTS = [[5, 17, 23, 9, 41], [7, 7, 30, 12], [44, 3, 19]]
CANDS = [[3, 7, 2], [3, 7, 11, 2], [3, 8, 2], [30, 2], [21, 22, 2]]


def _trainer(tmp_path, name: str, *extra: str) -> Trainer:
    return Trainer(load_config("demo", [*BASE, f"output_dir={tmp_path}", f"run_name={name}", *extra]))


def _rows(advantages, loss: str = "choice") -> list[TrainRow]:
    rows = []
    for k, a in enumerate(advantages):
        j = (2 * k + 1) % len(CANDS)
        rows.append(TrainRow(PROMPTS[k % len(PROMPTS)], CANDS[j], float(a), 0, k, 0, CANDS if loss == "choice" else [], j))
    return rows


ADV = [1.5, -0.7, 0.3, -2.0, 0.9, 0.0]


def _choice_logsm(t: Trainer, rows: list[TrainRow]) -> list[torch.Tensor]:
    with torch.no_grad():
        scores = score_candidates(t.policy.unwrapped, [r.prompt_ids for r in rows], [r.candidates for r in rows],
                                  pad_id=t.policy.tokenizer.pad_token_id)
    return [torch.log_softmax(s.double() / t.cfg.rollout.temperature, dim=0) for s in scores]


@pytest.mark.parametrize("mode", ["choose", "generate"])
def test_all_zero_advantages_leave_the_weights_bit_identical(tmp_path, mode):
    extra = ["kl_coef=0.0", "entropy_coef=0.0", "learning_rate=5.0", f"action_mode={mode}", "prompt_style=action_only"]
    t = _trainer(tmp_path, f"zero-{mode}", *extra)
    try:
        loss = "choice" if mode == "choose" else "tokens"
        before = weights_digest(t.policy.unwrapped)
        # float noise of 1e-19 counts as 0 too (Adam would turn it into full steps)
        stats = t.optimize(_rows([0.0, 1e-19, -1e-12, 0.0], loss), [], update=0)
        assert weights_digest(t.policy.unwrapped) == before
        assert stats["delta_norm"] == 0.0 and stats["kl"] == 0.0 and stats["adv_rms_scaled"] == 0.0
        assert stats["epochs_run"] == t.cfg.update.ppo_epochs  # nothing stopped it: it just had nothing to do
        # the control: the same rows with a signal do move the weights
        t.optimize(_rows([1.0, -1.0, 0.5, 0.0], loss), [], update=1)
        assert weights_digest(t.policy.unwrapped) != before
    finally:
        t.pool.close()


def test_kl_after_an_update_stays_within_the_trust_region_and_is_the_exact_choice_kl(tmp_path):
    t = _trainer(tmp_path, "kl", "learning_rate=50.0", "max_grad_norm=0", "target_kl=0.02", "kl_coef=0.0")
    try:
        rows = _rows(ADV)
        old = _choice_logsm(t, rows)
        stats = t.optimize(rows, [], update=0)
        new = _choice_logsm(t, rows)
        total, n = exact_choice_kl(old, new)
        # a step this large overshoots: the line search halved it until the KL was within
        assert stats["kl_stopped"] == 1.0 and stats["backtracks"] >= 1 and stats["restored"] == 0.0
        assert stats["epochs_run"] == 1.0
        assert 0.0 < total / n <= 0.02
        assert stats["kl"] == pytest.approx(total / n, rel=1e-3)
        assert stats["delta_norm"] > 0.0
    finally:
        t.pool.close()


def test_kl_of_token_updates_stays_within_the_trust_region(tmp_path):
    t = _trainer(tmp_path, "kl-tok", "action_mode=generate", "prompt_style=action_only", "learning_rate=50.0",
                 "max_grad_norm=0", "target_kl=0.02", "kl_coef=0.0")
    try:
        rows = _rows(ADV, "tokens")
        old = t.policy.logprobs(rows, reference=False)
        stats = t.optimize(rows, [], update=0)
        total, n = k3_token_kl(old, t.policy.logprobs(rows, reference=False))
        assert stats["backtracks"] >= 1 and 0.0 < total / n <= 0.02
        assert stats["kl"] == pytest.approx(total / n, rel=1e-3)
    finally:
        t.pool.close()


def _weights_after(tmp_path, name: str, scale: float, *extra: str) -> dict[str, torch.Tensor]:
    t = _trainer(tmp_path, name, "learning_rate=0.5", "kl_coef=0.0", "target_kl=0.05", *extra)
    try:
        for u, advs in enumerate((ADV, [-a for a in ADV[::-1]])):
            t.optimize(_rows([scale * a for a in advs]), [], update=u)
        return {k: v.detach().clone() for k, v in t.policy.unwrapped.named_parameters()}
    finally:
        t.pool.close()


def test_rescaling_every_advantage_changes_nothing_with_running_rms(tmp_path):
    ref = _weights_after(tmp_path, "x1", 1.0)
    start = _trainer(tmp_path, "x0", "learning_rate=0.5")
    w0 = {k: v.detach().clone() for k, v in start.policy.unwrapped.named_parameters()}
    start.pool.close()
    moved = max(float((ref[k] - w0[k]).abs().max()) for k in ref)
    assert moved > 1e-3
    for scale in (2.0, 0.5):
        w = _weights_after(tmp_path, f"x{scale}", scale)
        assert max(float((w[k] - ref[k]).abs().max()) for k in ref) < 1e-5 * max(1.0, moved)
    # the control: without the normalisation a ×2 run takes other steps
    raw1 = _weights_after(tmp_path, "raw1", 1.0, "adv_norm=none")
    raw2 = _weights_after(tmp_path, "raw2", 2.0, "adv_norm=none")
    assert max(float((raw1[k] - raw2[k]).abs().max()) for k in raw1) > 1e-3


# --- the arena's numpy objective is the trainer's torch objective -------------------------

def _torch_loss(logp, old, ref, ent, adv, pairs, cfg: ObjectiveConfig):
    lp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    en = torch.tensor(ent, dtype=torch.float64, requires_grad=True)

    def col(x):  # one token per row
        return torch.tensor(x, dtype=torch.float64)[:, None]

    mask = torch.ones((len(logp), 1))
    loss, _ = task_loss(lp[:, None], col(old), col(ref), en[:, None], torch.tensor(adv, dtype=torch.float64), mask,
                        clip_low=cfg.clip_low, clip_high=cfg.clip_high, dual_clip=cfg.dual_clip, kl_coef=cfg.kl_coef, kl_clip=cfg.kl_clip,
                        entropy_coef=cfg.entropy_coef)
    if pairs:
        loss = loss + cfg.pair_coef * pair_loss(response_deltas(lp[:, None], col(old), mask), pairs, len(logp))
    loss.backward()
    g_ent = en.grad.numpy() if en.grad is not None else np.zeros(len(ent))  # entropy_coef = 0: not in the graph
    return float(loss.detach()), lp.grad.numpy(), g_ent


@pytest.mark.parametrize("seed", range(5))
def test_arena_and_trainer_objectives_agree_on_loss_and_gradient(seed):
    rng = np.random.default_rng(seed)
    n = 10
    cfg = ObjectiveConfig(clip_low=0.2, clip_high=0.2, kl_coef=0.05, entropy_coef=0.01, pair_coef=0.3)
    old = np.log(rng.uniform(0.05, 0.9, n))
    # ratios spread over both clips (0.3 .. 3): clipped rows, dual-clipped rows (A < 0, ρ large) and plain ones
    logp = old + rng.uniform(np.log(0.3), np.log(3.0), n)
    ref = old + rng.normal(0.0, 0.5, n)
    adv = rng.normal(0.0, 1.0, n)
    adv[:3] = [-2.0, -1.5, 1.2]
    # row 0: A = −2, ρ = 3.5 → ℓ_clip = 7 > 6 = −c·A (dual clip); row 1: A < 0, ρ = 0.5 (low clip);
    # row 2: A > 0, ρ = 1.6 (high clip)
    logp[:3] = old[:3] + np.log([3.5, 0.5, 1.6])
    ent = rng.uniform(0.1, 2.0, n)
    pairs = [(0, 4, 0.8), (5, 2, 1.3), (7, 9, 0.4)]
    arena = decision_loss(logp=logp, old_logp=old, ref_logp=ref, advantages=adv, entropy=ent, pairs=pairs, config=cfg)
    assert 0.0 < arena.clip_fraction < 1.0 and arena.dual_clip_fraction > 0.0  # the batch exercises the clips
    loss, g_logp, g_ent = _torch_loss(logp, old, ref, ent, adv, pairs, cfg)
    assert loss == pytest.approx(arena.loss, abs=1e-12)
    np.testing.assert_allclose(g_logp, arena.d_logp, atol=1e-12)
    np.testing.assert_allclose(g_ent, arena.d_entropy, atol=1e-12)


def test_the_pin_batch_hits_the_dual_clip():
    # ρ = 4 on a row with A = −1: ℓ_clip = max(4, 0.8) = 4 > 3 = −c·A, so the dual clip caps it
    cfg = ObjectiveConfig(kl_coef=0.0, entropy_coef=0.0, pair_coef=0.0)
    out = decision_loss(logp=np.log([0.8]), old_logp=np.log([0.2]), ref_logp=np.log([0.2]), advantages=np.array([-1.0]),
                        entropy=np.zeros(1), config=cfg)
    loss, g, _ = _torch_loss(np.log([0.8]), np.log([0.2]), np.log([0.2]), np.zeros(1), np.array([-1.0]), [], cfg)
    assert out.dual_clip_fraction == 1.0 and out.loss == pytest.approx(3.0) and loss == pytest.approx(3.0)
    assert g[0] == 0.0 == out.d_logp[0]
