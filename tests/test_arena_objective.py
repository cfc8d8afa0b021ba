"""The arena policy (hashed linear softmax) and its per-decision objective (SPEC §5)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from trainers.arena.objective import Adam, ObjectiveConfig, decision_loss
from trainers.arena.policy import STOPWORDS, DecisionFeatures, Featurizer, LinearSoftmaxPolicy


def _decision(rows: list[list[tuple[int, float]]]) -> DecisionFeatures:
    """A decision from explicit (index, value) features per action."""
    idx, val, own = [], [], []
    for k, feats in enumerate(rows):
        for i, v in feats:
            idx.append(i)
            val.append(v)
            own.append(k)
    return DecisionFeatures(
        actions=tuple(f"a{k}" for k in range(len(rows))),
        indices=np.array(idx, dtype=np.int64),
        values=np.array(val, dtype=np.float64),
        owner=np.array(own, dtype=np.int64),
    )


# ----------------------------------------------------------------------------- policy


def test_scores_probabilities_and_log_prob_gradient_by_hand() -> None:
    # Three actions over a 4-weight space: a0 = {0: 1}, a1 = {1: 2, 2: 1}, a2 = {} (bias-free).
    d = _decision([[(0, 1.0)], [(1, 2.0), (2, 1.0)], []])
    pol = LinearSoftmaxPolicy(4, np.array([1.0, 0.5, -1.0, 7.0]))
    # scores: a0 = 1; a1 = 2*0.5 + 1*(-1) = 0; a2 = 0
    assert pol.scores(d).tolist() == [1.0, 0.0, 0.0]
    z = math.e + 2.0
    p = np.array([math.e / z, 1 / z, 1 / z])
    np.testing.assert_allclose(pol.probabilities(d), p, rtol=1e-12)
    # temperature 0.5 doubles the logits: softmax([2, 0, 0])
    z2 = math.e**2 + 2
    np.testing.assert_allclose(pol.probabilities(d, 0.5), [math.e**2 / z2, 1 / z2, 1 / z2], rtol=1e-12)
    ev = pol.evaluate([d], [1])
    assert ev.logp[0] == pytest.approx(math.log(1 / z))
    # ∇ log π(a1) = φ(a1) − Σ π_j φ_j = [0,2,1,0] − p0·[1,0,0,0] − p1·[0,2,1,0]
    expected = np.array([-p[0], 2 * (1 - p[1]), 1 - p[1], 0.0])
    np.testing.assert_allclose(ev.grad(np.array([1.0])), expected, rtol=1e-12)
    # H = −Σ p log p
    assert ev.entropy[0] == pytest.approx(-(p * np.log(p)).sum())


def test_batch_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(3)
    dim = 12
    decisions, chosen = [], []
    for n in (2, 5, 3):
        rows = [[(int(rng.integers(dim)), float(rng.normal())) for _ in range(3)] for _ in range(n)]
        decisions.append(_decision(rows))
        chosen.append(int(rng.integers(n)))
    pol = LinearSoftmaxPolicy(dim, rng.normal(size=dim))
    c_logp = rng.normal(size=3)
    c_ent = rng.normal(size=3)

    def f(w: np.ndarray) -> float:
        ev = LinearSoftmaxPolicy(dim, w).evaluate(decisions, chosen)
        return float(c_logp @ ev.logp + c_ent @ ev.entropy)

    grad = pol.evaluate(decisions, chosen).grad(c_logp, c_ent)
    eps = 1e-6
    numeric = np.array([(f(pol.weights + eps * e) - f(pol.weights - eps * e)) / (2 * eps) for e in np.eye(dim)])
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-8)


def test_sampling_is_deterministic_and_follows_probabilities() -> None:
    d = _decision([[(0, 1.0)], [], []])
    pol = LinearSoftmaxPolicy(2, np.array([math.log(2.0), 0.0]))  # probabilities 1/2, 1/4, 1/4
    a = [pol.sample(d, np.random.default_rng(7))[0] for _ in range(3)]
    assert a[0] == a[1] == a[2]
    rng = np.random.default_rng(0)
    counts = np.bincount([pol.sample(d, rng)[0] for _ in range(4000)], minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.5, 0.25, 0.25], atol=0.03)


def test_featurizer_is_stable_across_instances_and_marks_goal_hits() -> None:
    kwargs = dict(goal="put a hot apple in fridge", task_type="heat", observation="You see a apple 1.",
                  actions=["take apple 1 from countertop 1", "go to toaster 1"],
                  rubric={"target_acquired": 0, "light_on": False}, history=["go to toaster 1"])
    a, b = Featurizer(2**14).decision(**kwargs), Featurizer(2**14).decision(**kwargs)
    assert a.indices.tolist() == b.indices.tolist() and a.values.tolist() == b.values.tolist()
    f = Featurizer(2**14)
    feats = f.action_features("take apple 1 from countertop 1", goal_words=frozenset({"hot", "apple", "fridge", "put"}),
                              task_type="heat", signature="-", channels=[], observation_lower="", history=[])
    # content words: take, apple, countertop -> one of three is in the goal
    assert feats["goal|heat|take"] == pytest.approx(1 / 3)
    assert feats["hit|heat|take|1"] == 1.0
    seen = f.action_features("go to toaster 1", goal_words=frozenset({"apple"}), task_type="heat",
                             signature="-", channels=[], observation_lower="", history=["go to toaster 1"])
    assert seen["seen|go"] == 1.0 and seen["last|go"] == 1.0
    with pytest.raises(ValueError, match="admissible"):
        f.decision(goal="g", task_type="t", observation="o", actions=[])



def _reference_decision(f: Featurizer, *, goal: str, task_type: str, observation: str, actions: list[str],
                        rubric: dict, history: list[str], task: dict) -> tuple[list[int], list[float]]:
    """A decision's hashed features from :meth:`Featurizer.action_features` (no memo)."""
    visited = frozenset(a.split(" to ", 1)[1].replace(" 1", "").replace(" ", "") for a in history if a.startswith("go "))
    roles = {"target": task["target"], "destination": task["destination"], "lamp": "", "type": task_type,
             "hand": bool(rubric.get("target_in_hand")), "visited": visited}
    channels = sorted(k for k, v in rubric.items() if v is True)
    idx: list[int] = []
    val: list[float] = []
    for action in actions:
        feats = f.action_features(action, goal_words=frozenset(goal.split()) - {"a", "in"}, task_type=task_type,
                                  signature="+".join(channels) or "-", channels=channels,
                                  observation_lower=observation.lower(), history=history, roles=roles)
        for name, value in feats.items():
            if value:
                idx.append(f.index(name))
                val.append(value)
    return idx, val


def test_memoised_decision_features_equal_the_named_features_in_every_context() -> None:
    """The hashed head and tail memos answer by everything the features read: the same
    action under another history (repeat flags, receptacles visited) or another rubric
    status (target in hand) gets the features computed afresh, in the same order."""
    f = Featurizer(2**14)
    actions = ["go to fridge 1", "take apple 1 from countertop 1", "go to toaster 1"]
    task = {"target": "apple", "destination": "fridge"}
    base = dict(goal="put a hot apple in fridge", task_type="heat", observation="You see a apple 1.",
                actions=actions, task=task)
    contexts = [([], {}), (["go to fridge 1"], {}), (["go to toaster 1", "go to fridge 1"], {}),
                (["go to fridge 1"], {"target_in_hand": True}), ([], {}), (["go to fridge 1"], {})]
    for history, rubric in contexts * 2:  # the second pass answers from the memos
        got = f.decision(**base, rubric=rubric, history=history)
        idx, val = _reference_decision(Featurizer(2**14), **base, rubric=rubric, history=history)
        assert got.indices.tolist() == idx and got.values.tolist() == val, (history, rubric)
    assert 0 < len(f._tail_cache) < 3 * 5  # shared where a context changes nothing an action reads


# ----------------------------------------------------------------------------- objective

NO_REG = ObjectiveConfig(kl_coef=0.0, entropy_coef=0.0, pair_coef=0.0)


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "grad"),
    [
        # A = +1, ρ = 2: max(−2, −1.2) = −1.2 (clipped branch, no gradient)
        (2.0, 1.0, -1.2, 0.0),
        # A = +1, ρ = 0.5: max(−0.5, −0.8) = −0.5 (unclipped), ∂/∂logp = −Aρ = −0.5
        (0.5, 1.0, -0.5, -0.5),
        # A = +1, ρ = 1.1 (inside): −1.1, gradient −1.1
        (1.1, 1.0, -1.1, -1.1),
        # A = −1, ρ = 2: max(2, 1.2) = 2 < 3·1 → 2, gradient −Aρ = 2
        (2.0, -1.0, 2.0, 2.0),
        # A = −1, ρ = 5: max(5, 1.2) = 5 > 3 → dual clip caps at 3, no gradient
        (5.0, -1.0, 3.0, 0.0),
        # A = −1, ρ = 0.5: max(0.5, 0.8) = 0.8 (clipped), gradient 0
        (0.5, -1.0, 0.8, 0.0),
    ],
)
def test_clipped_policy_loss_by_hand(ratio: float, adv: float, loss: float, grad: float) -> None:
    out = decision_loss(logp=np.array([math.log(ratio)]), old_logp=np.zeros(1), ref_logp=np.zeros(1),
                        advantages=np.array([adv]), entropy=np.zeros(1), config=NO_REG)
    assert out.policy_loss == pytest.approx(loss)
    assert out.loss == pytest.approx(loss)
    assert out.d_logp[0] == pytest.approx(grad)


def test_kl_entropy_and_batch_mean_by_hand() -> None:
    cfg = ObjectiveConfig(pair_coef=0.0)
    # two rows; row 0: π=0.5, π_old=0.5, π_ref=0.25, A=0; row 1: ratio 1, A=2, π_ref = π.
    logp = np.log([0.5, 0.2])
    out = decision_loss(logp=logp, old_logp=logp.copy(), ref_logp=np.log([0.25, 0.2]),
                        advantages=np.array([0.0, 2.0]), entropy=np.array([0.7, 1.1]), config=cfg)
    # row 0: v = log 0.5 → K̂ = 0.5 − log 0.5 − 1 = 0.5 + 0.693147 − 1 = 0.193147; row 1: K̂ = 0
    k0 = 0.5 - math.log(0.5) - 1
    # ℓ: row 0 = 0, row 1 = −2; mean = −1; entropy mean = 0.9
    assert out.policy_loss == pytest.approx(-1.0)
    assert out.kl == pytest.approx(k0 / 2)
    assert out.loss == pytest.approx(-1.0 + 0.01 * k0 / 2 - 0.001 * 0.9)
    # ∂/∂logp: row 0: 0.01·(1 − e^v)/2 = 0.01·0.5/2; row 1: (−2·1 + 0)/2
    np.testing.assert_allclose(out.d_logp, [0.01 * 0.5 / 2, -1.0])
    np.testing.assert_allclose(out.d_entropy, [-0.0005, -0.0005])


def test_kl_clip_stops_its_gradient() -> None:
    cfg = ObjectiveConfig(entropy_coef=0.0, pair_coef=0.0)
    # v = 3: e^3 − 3 − 1 = 16.09 > 10 → K̂ = 10 and no gradient
    out = decision_loss(logp=np.array([-3.0]), old_logp=np.array([-3.0]), ref_logp=np.zeros(1),
                        advantages=np.zeros(1), entropy=np.zeros(1), config=cfg)
    assert out.kl == pytest.approx(10.0)
    assert out.d_logp[0] == 0.0


def test_pairwise_loss_value_and_eq11_gradient() -> None:
    cfg = ObjectiveConfig(kl_coef=0.0, entropy_coef=0.0, pair_coef=0.05)
    old = np.log([0.3, 0.3, 0.4, 0.5])
    logp = old + np.array([0.1, -0.2, 0.0, 0.0])  # d = [0.1, −0.2, 0, 0]
    out = decision_loss(logp=logp, old_logp=old, ref_logp=old, advantages=np.zeros(4),
                        entropy=np.zeros(4), pairs=[(0, 1, 0.8)], config=cfg)
    # δ = 0.3; L_pair = 0.8·softplus(−0.3)/⌊4/2⌋ = 0.8·0.554355/2 = 0.221742
    assert out.pair_loss == pytest.approx(0.8 * math.log1p(math.exp(-0.3)) / 2)
    assert out.loss == pytest.approx(0.05 * out.pair_loss)
    # Eq. 11: ∂/∂d(+) = −c·σ(−δ)/2 = −0.8·0.425557/2 = −0.170223 (times λ_pair), ∂/∂d(−) = +0.170223·λ
    g = 0.8 / (1 + math.exp(0.3)) / 2
    np.testing.assert_allclose(out.d_logp, [-0.05 * g, 0.05 * g, 0.0, 0.0], rtol=1e-12)
    assert out.pair_accuracy == 1.0 and out.n_pairs == 1
    with pytest.raises(ValueError, match="outside this batch"):
        decision_loss(logp=logp, old_logp=old, ref_logp=old, advantages=np.zeros(4),
                      entropy=np.zeros(4), pairs=[(0, 4, 1.0)], config=cfg)


def test_full_chain_gradient_matches_finite_differences() -> None:
    # loss(θ) through the policy, with every term active and ratios away from the clip kinks.
    rng = np.random.default_rng(11)
    dim = 10
    decisions = [_decision([[(int(rng.integers(dim)), float(rng.normal()))] for _ in range(n)]) for n in (3, 4, 2, 3)]
    chosen = [0, 2, 1, 1]
    w0 = rng.normal(size=dim) * 0.3
    pol = LinearSoftmaxPolicy(dim, w0 + rng.normal(size=dim) * 0.02)
    old = LinearSoftmaxPolicy(dim, w0).evaluate(decisions, chosen).logp
    ref = LinearSoftmaxPolicy(dim, np.zeros(dim)).evaluate(decisions, chosen).logp
    adv = np.array([1.0, -0.5, 0.3, -1.2])
    pairs = [(0, 2, 0.7)]
    cfg = ObjectiveConfig()

    def loss(w: np.ndarray) -> float:
        ev = LinearSoftmaxPolicy(dim, w).evaluate(decisions, chosen)
        return decision_loss(logp=ev.logp, old_logp=old, ref_logp=ref, advantages=adv,
                             entropy=ev.entropy, pairs=pairs, config=cfg).loss

    ev = pol.evaluate(decisions, chosen)
    out = decision_loss(logp=ev.logp, old_logp=old, ref_logp=ref, advantages=adv, entropy=ev.entropy,
                        pairs=pairs, config=cfg)
    assert np.all(np.abs(np.exp(ev.logp - old) - 1) < 0.2)  # no clipping active
    grad = ev.grad(out.d_logp, out.d_entropy)
    eps = 1e-6
    numeric = np.array([(loss(pol.weights + eps * e) - loss(pol.weights - eps * e)) / (2 * eps) for e in np.eye(dim)])
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-9)


def test_bad_inputs_name_the_problem() -> None:
    with pytest.raises(ValueError, match="advantages"):
        decision_loss(logp=np.zeros(2), old_logp=np.zeros(2), ref_logp=np.zeros(2),
                      advantages=np.zeros(3), entropy=np.zeros(2))
    with pytest.raises(ValueError, match="dual_clip"):
        ObjectiveConfig(dual_clip=1.0)
    with pytest.raises(ValueError, match="kl_coef"):
        ObjectiveConfig(kl_coef=-1.0)


def test_adam_first_steps_by_hand() -> None:
    opt = Adam(1, lr=0.1)
    w = np.zeros(1)
    opt.step(w, np.array([2.0]))
    # m̂ = g, v̂ = g² → step = lr·g/|g| = 0.1
    assert w[0] == pytest.approx(-0.1)
    opt.step(w, np.array([-2.0]))
    # m = 0.9·0.2 + 0.1·(−2) = −0.02, m̂ = −0.02/0.19; v = 0.999·0.004 + 0.001·4 = 0.007996, v̂ = 0.007996/0.001999 = 4
    assert w[0] == pytest.approx(-0.1 + 0.1 * (0.02 / 0.19) / 2.0, rel=1e-6)


def test_memoised_decisions_equal_the_named_features_hashed_one_by_one() -> None:
    """The featurizer's page/cross memos change speed only: a decision equals hashing
    ``action_features`` of every action in order, on a cold and on a warm featurizer."""
    kwargs = dict(goal="i want a red cotton shirt, and price lower than 30.00 dollars", task_type="webshop",
                  observation="back to search [SEP] b0001 [SEP] red cotton shirt [SEP] $12.00 [SEP] b0002 [SEP] blue hat",
                  actions=["click[b0001]", "click[b0002]", "click[back to search]"],
                  rubric={"search_issued": True, "type_match": 0.5}, history=["search[red cotton shirt]"])
    f = Featurizer(2**14)
    goal_words = frozenset(t for t in re.findall(r"[a-z]+|\d+", kwargs["goal"].lower())
                           if len(t) > 1 and not t.isdigit() and t not in STOPWORDS)
    idx, val, own = [], [], []
    for k, action in enumerate(kwargs["actions"]):
        feats = f.action_features(action, goal_words=goal_words, task_type="webshop",
                                  signature="search_issued+type_match", channels=["search_issued", "type_match"],
                                  observation_lower=kwargs["observation"].lower(), history=kwargs["history"],
                                  graded=["type_match~2"])
        for name, value in feats.items():
            if value:
                idx.append(f.index(name))
                val.append(value)
                own.append(k)
    for _ in range(2):  # cold, then every memo warm
        d = f.decision(**kwargs)
        assert d.indices.tolist() == idx and d.values.tolist() == val and d.owner.tolist() == own
