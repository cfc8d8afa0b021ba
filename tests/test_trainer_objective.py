"""The trainer objective against hand computations (SPEC §5; MCGPO Eqs. 5-7, 11)."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
torch.set_num_threads(1)

from trainers.batching import pairs_in, plan_batches
from trainers.objective import (
    masked_mean,
    pack_rows,
    pair_loss,
    response_deltas,
    sequence_logprobs,
    task_loss,
)


def _hand_batch():
    # Two rows, three token slots; the third slot of each row is masked and holds garbage
    # (NaN) that must not leak into the loss or the gradient.
    # Row 0: A = +1, ratios ρ = 1.5 and 0.5.  Row 1: A = -1, ratios ρ = 5 and 0.5.
    old = torch.zeros(2, 3)
    logp = torch.tensor([[math.log(1.5), math.log(0.5), float("nan")],
                         [math.log(5.0), math.log(0.5), float("nan")]], requires_grad=True)
    # v = log π_ref − log π_θ chosen as 0, ln 2, 5, −1 on the valid tokens
    v = torch.tensor([[0.0, math.log(2.0), 0.0], [5.0, -1.0, 0.0]])
    ref = logp.detach() + v
    ent = torch.tensor([[1.0, 2.0, float("nan")], [3.0, 4.0, float("nan")]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    return logp, old, ref, ent, adv, mask


def test_task_loss_matches_hand_computation():
    logp, old, ref, ent, adv, mask = _hand_batch()
    loss, stats = task_loss(logp, old, ref, ent, adv, mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0,
                            kl_coef=0.01, kl_clip=10.0, entropy_coef=0.001)
    # policy term, ℓ_clip = max(−ρA, −clip(ρ, 0.8, 1.2)A), dual clip min(ℓ_clip, −3A) for A<0:
    #   row 0 (A=+1): ρ=1.5 → max(−1.5, −1.2) = −1.2 ; ρ=0.5 → max(−0.5, −0.8) = −0.5
    #   row 1 (A=−1): ρ=5   → max(5, 1.2) = 5 → min(5, 3) = 3 (dual clip)
    #                 ρ=0.5 → max(0.5, 0.8) = 0.8 → min(0.8, 3) = 0.8
    pg = (-1.2 - 0.5 + 3.0 + 0.8) / 4  # = 0.525
    # k3 = clip(e^v − v − 1, −10, 10): v=0 → 0; v=ln2 → 2 − ln2 − 1; v=5 → e^5−6 = 142.4 → 10;
    #   v=−1 → e^−1 + 1 − 1
    k3 = (0.0 + (1 - math.log(2.0)) + 10.0 + math.exp(-1.0)) / 4
    entropy = (1 + 2 + 3 + 4) / 4
    expected = pg + 0.01 * k3 - 0.001 * entropy  # 0.525 + 0.0266868 − 0.0025 = 0.5491868
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    assert float(loss.detach()) == pytest.approx(0.5491868, abs=1e-6)
    assert float(stats["pg_loss"]) == pytest.approx(0.525, abs=1e-6)
    assert float(stats["kl"]) == pytest.approx(k3, abs=1e-6)
    assert float(stats["dual_clip_frac"]) == pytest.approx(0.25)
    loss.backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad[:, 2].abs().sum() == 0  # masked tokens get no gradient
    # d loss / d logp for row 0 token 0 (ρ=1.5 clipped, A>0): only KL term; v = 0 there
    # d/dlogp of 0.01·(e^v − v − 1)/4 with dv/dlogp = −1: 0.01·(−e^0 + 1)/4 = 0
    assert float(logp.grad[0, 0]) == pytest.approx(0.0, abs=1e-9)
    # row 0 token 1 (ρ=0.5, unclipped, A=+1): d(−ρ)/dlogp = −ρ = −0.5; KL: 0.01·(1 − e^{ln2})·... :
    #   d/dlogp (e^v − v − 1) = −e^v + 1 = −1 → 0.01·(−1); entropy is a constant here.
    assert float(logp.grad[0, 1]) == pytest.approx((-0.5 - 0.01) / 4, abs=1e-7)


def test_task_loss_without_reference_or_entropy_is_the_clipped_objective():
    logp, old, _, _, adv, mask = _hand_batch()
    loss, stats = task_loss(logp, old, None, None, adv, mask, kl_coef=0.01, entropy_coef=0.001)
    assert float(loss.detach()) == pytest.approx(0.525, abs=1e-6)
    assert "kl" not in stats


def test_ratio_one_gives_minus_mean_advantage_per_token():
    # ρ = 1 everywhere: loss = −(Σ_rows A·n_tokens)/N = −(2·1 + 1·(−3))/3 = 1/3
    logp = torch.zeros(2, 2)
    mask = torch.tensor([[1, 1], [0, 1]])
    loss, _ = task_loss(logp, logp, None, None, torch.tensor([1.0, -3.0]), mask, kl_coef=0, entropy_coef=0)
    assert float(loss) == pytest.approx(1 / 3)


def test_masked_mean_ignores_nan_and_handles_empty_mask():
    x = torch.tensor([[1.0, float("nan")], [3.0, 5.0]])
    assert float(masked_mean(x, torch.tensor([[1, 0], [1, 1]]))) == pytest.approx(3.0)
    assert float(masked_mean(x, torch.zeros(2, 2))) == 0.0


def test_response_deltas_and_pair_loss_by_hand():
    # d_θ = masked mean of log π_θ − log π_old [Eq. 5]
    logp = torch.tensor([[0.3, 0.1, 9.0], [-0.2, 0.0, 0.0], [0.5, 0.5, 0.5]])
    old = torch.zeros(3, 3)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    d = response_deltas(logp, old, mask)
    assert d.tolist() == pytest.approx([0.2, -0.2, 0.0])
    # L_pair = Σ c·softplus(−(d+ − d−)) / max(1, ⌊|B|/2⌋) [Eq. 6] with |B| = 5 → divide by 2
    pairs = [(0, 1, 0.5), (2, 0, 0.25)]
    sp = lambda x: math.log1p(math.exp(x))
    expected = (0.5 * sp(-(0.2 - (-0.2))) + 0.25 * sp(-(0.0 - 0.2))) / 2
    assert float(pair_loss(d, pairs, batch_rows=5)) == pytest.approx(expected, abs=1e-7)
    assert float(pair_loss(d, [], batch_rows=5)) == 0.0
    assert float(pair_loss(d, pairs[:1], batch_rows=1)) == pytest.approx(0.5 * sp(-0.4), abs=1e-7)


def test_pair_loss_gradient_matches_eq11():
    """∇ℓ_p = −c·σ(−δ)(∇d(+) − ∇d(−)) [MCGPO App. A.2, Eq. 11] on a real tiny model."""
    from trainers.models import load_policy

    model, tok = load_policy("tiny-llama", seed=3)
    pad = tok.pad_token_id
    batch = pack_rows([[5, 6, 7, 8], [9, 10]], [[11, 12, 13], [14, 15]], pad)
    with torch.no_grad():
        old, _ = sequence_logprobs(model, batch)
    old = old + torch.tensor([[0.0, 0.1, -0.2], [0.3, 0.0, 0.05]])  # π_old ≠ π_θ so δ ≠ 0
    c = 0.7
    params = [p for p in model.parameters() if p.requires_grad]

    def deltas():
        logp, _ = sequence_logprobs(model, batch)
        return response_deltas(logp, old, batch.response_mask)

    d = deltas()
    loss = pair_loss(d, [(0, 1, c)], batch_rows=2)  # ⌊2/2⌋ = 1: no extra scaling
    g_loss = torch.autograd.grad(loss, params)
    delta = float((d[0] - d[1]).detach())
    g_pos = torch.autograd.grad(deltas()[0], params)
    g_neg = torch.autograd.grad(deltas()[1], params)
    sigma = 1.0 / (1.0 + math.exp(delta))  # σ(−δ)
    assert abs(delta) > 1e-3
    for gl, gp, gn in zip(g_loss, g_pos, g_neg):
        torch.testing.assert_close(gl, -c * sigma * (gp - gn), rtol=1e-4, atol=1e-6)


def test_logprobs_do_not_depend_on_padding_or_batch_mates():
    from trainers.models import load_policy

    model, tok = load_policy("tiny-qwen2", seed=1)
    pad = tok.pad_token_id
    alone = pack_rows([[5, 6, 7]], [[8, 9]], pad)
    mixed = pack_rows([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [5, 6, 7]], [[11], [8, 9]], pad)
    with torch.no_grad():
        a, _ = sequence_logprobs(model, alone)
        b, _ = sequence_logprobs(model, mixed)
    torch.testing.assert_close(a[0], b[1], rtol=1e-5, atol=1e-5)


def test_plan_batches_colocates_pairs_and_covers_every_row_once():
    rng = np.random.default_rng(0)
    for trial in range(50):
        n = int(rng.integers(1, 40))
        rows = rng.permutation(n)
        pairs = [(int(rows[2 * k]), int(rows[2 * k + 1]), 1.0) for k in range(int(rng.integers(0, n // 2 + 1)))]
        micro = int(rng.integers(2, 9))
        minis = int(rng.integers(1, 4))
        plan = plan_batches(n, pairs, micro_rows=micro, mini_batches=minis, rng=np.random.default_rng(trial))
        assert len(plan) == minis
        seen = [r for mini in plan for mb in mini for r in mb]
        assert sorted(seen) == list(range(n))
        assert all(1 <= len(mb) <= micro for mini in plan for mb in mini)
        found = sum(len(pairs_in(mb, pairs)) for mini in plan for mb in mini)
        assert found == len(pairs)  # every pair lands in one micro-batch


def test_pairs_in_reindexes_to_micro_batch_positions():
    assert pairs_in([7, 3, 9], [(3, 9, 0.5), (7, 1, 1.0)]) == [(1, 2, 0.5)]


def test_subsample_rows_keeps_pairs_together_and_is_deterministic():
    from trainers.batching import TrainRow, subsample_rows

    rows = [TrainRow([1], [2], float(k + 1), 0, 0, k) for k in range(10)]
    pairs = [(0, 1, 1.0), (1, 2, 0.5), (7, 9, 2.0)]  # units {0,1,2}, {7,9} and five singletons
    for seed in range(20):
        kept, kp = subsample_rows(rows, pairs, 4, np.random.default_rng(seed))
        idx = [r.step for r in kept]
        assert idx == sorted(idx) and len(kept) <= 4
        for unit in ({0, 1, 2}, {7, 9}):
            assert unit <= set(idx) or not unit & set(idx)  # a unit is all in or all out
        # re-indexed pairs point at the same rows as before
        assert sorted((kept[a].step, kept[b].step, c) for a, b, c in kp) == sorted(
            p for p in pairs if p[0] in idx and p[1] in idx)
        again, _ = subsample_rows(rows, pairs, 4, np.random.default_rng(seed))
        assert [r.step for r in again] == idx
    assert subsample_rows(rows, pairs, 0, np.random.default_rng(0)) == (rows, pairs)  # 0 = all
    assert subsample_rows(rows, pairs, 10, np.random.default_rng(0)) == (rows, pairs)
    big, _ = subsample_rows(rows, [(0, k, 1.0) for k in range(1, 10)], 2, np.random.default_rng(0))
    assert len(big) == 10  # one unit larger than the budget is still taken whole
