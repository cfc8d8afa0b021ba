"""verl integration cases, run with verl's own code in verl's own venv (CPU).

Not collected by the main suite (the name does not start with ``test_``):
``tests/test_integration_verl.py`` runs this file with ``$RUBRICGYM_VERL_PYTHON -m pytest``.
By hand: ``/work/venvs/verl/bin/python -m pytest tests/integrations/verl_cases.py -q``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("verl", reason="verl is not installed in this interpreter (see tests/test_integration_verl.py)")

import torch
from omegaconf import OmegaConf

from rubrics.trajectory import Step, Trajectory
from wrappers.credit import available_estimators, get_estimator
from wrappers.credit.flat import flat_advantages

CHECK_REGISTRY = r"""
import json, sys
import verl
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
print(json.dumps({
    "plugin_imported": "wrappers.integrations.verl" in sys.modules,
    "estimators": sorted(k for k in core_algos.ADV_ESTIMATOR_REGISTRY if k.startswith("rubricgym_")),
    "trainer": TRAINER_REGISTRY["rubricgym_sync"].__qualname__ if "rubricgym_sync" in TRAINER_REGISTRY else None,
    "agent_loop": _agent_loop_registry.get("rubricgym_env"),
}))
"""


def _registry_after_import(**env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHECK_REGISTRY], capture_output=True, text=True, timeout=300, check=False,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- the plugin ---------------------------------------------------------------------------------
def test_bare_import_verl_registers_everything():
    """A fresh ``import verl`` loads the entry point; plugin failures are only logged at debug
    level by verl, so the registries themselves are checked."""
    got = _registry_after_import()
    assert got["plugin_imported"]
    assert got["estimators"] == sorted(f"rubricgym_{n}" for n in available_estimators())
    assert len(got["estimators"]) >= 7
    assert got["trainer"] == "RubricgymSyncTrainer"
    assert got["agent_loop"] == {"_target_": "wrappers.integrations.verl.RubricgymEnvLoop"}


def test_plugins_disabled_registers_nothing():
    """The control: with verl's plugin discovery off, nothing of ours is there (so the entry
    point, not a later import, did the registering above)."""
    got = _registry_after_import(VERL_USE_EXTERNAL_PLUGINS="none")
    assert got == {"plugin_imported": False, "estimators": [], "trainer": None, "agent_loop": None}


def test_register_estimators_is_idempotent_and_refuses_foreign_names():
    from verl.trainer.ppo import core_algos

    from wrappers.integrations import verl as rv

    before = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert rv.register_estimators() == [f"rubricgym_{n}" for n in available_estimators()]
    assert core_algos.ADV_ESTIMATOR_REGISTRY == before
    assert rv.estimator_name("rubricgym_gigpo") == "gigpo" and rv.estimator_name("grpo") is None
    with pytest.raises(ValueError, match="unknown rubricgym estimator 'rubricgym_nope'"):
        rv.estimator_name("rubricgym_nope")


# --- outcome level: verl's compute_advantage ------------------------------------------------------
def _outcome_batch(scores, lengths, uids):
    from verl import DataProto

    n, width = len(scores), max(lengths)
    mask = torch.zeros(n, width)
    rewards = torch.zeros(n, width)
    for i, (s, L) in enumerate(zip(scores, lengths)):
        mask[i, :L] = 1
        rewards[i, L - 1] = s  # verl puts the score on the last response token
    return DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})


def test_compute_advantage_rubricgym_rloo_equals_verl_rloo():
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rng = np.random.default_rng(0)
    uids = [f"p{g}" for g in range(4) for _ in range(4)]
    scores = rng.choice([0.0, 1.0, 10.0], size=len(uids)).tolist()
    lengths = rng.integers(1, 7, size=len(uids)).tolist()
    ours = compute_advantage(_outcome_batch(scores, lengths, uids), adv_estimator="rubricgym_rloo", config=AlgoConfig())
    theirs = compute_advantage(_outcome_batch(scores, lengths, uids), adv_estimator="rloo", config=AlgoConfig())
    torch.testing.assert_close(ours.batch["advantages"], theirs.batch["advantages"], rtol=0, atol=1e-5)
    torch.testing.assert_close(ours.batch["returns"], theirs.batch["returns"], rtol=0, atol=1e-5)
    # by hand: group scores (1, 0, 0, 1) -> 1 - 1/3, 0 - 2/3, 0 - 2/3, 1 - 1/3 on every response token
    adv = compute_advantage(_outcome_batch([1.0, 0.0, 0.0, 1.0], [2, 1, 3, 2], ["a"] * 4),
                            adv_estimator="rubricgym_rloo", config=AlgoConfig()).batch["advantages"]
    expected = torch.tensor([[2 / 3, 2 / 3, 0], [-2 / 3, 0, 0], [-2 / 3, -2 / 3, -2 / 3], [2 / 3, 2 / 3, 0]])
    torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6)


def test_compute_advantage_passes_algorithm_rubricgym_params():
    from verl.trainer.ppo.ray_trainer import compute_advantage

    batch = _outcome_batch([10.0, 0.0, 0.0, 0.0], [1, 1, 1, 1], ["a"] * 4)
    cfg = OmegaConf.create({"rubricgym": {"episode_weight": 0.5}})
    adv = compute_advantage(batch, adv_estimator="rubricgym_rloo", config=cfg).batch["advantages"][:, 0]
    torch.testing.assert_close(adv, torch.tensor([5.0, -5 / 3, -5 / 3, -5 / 3]), rtol=0, atol=1e-6)
    with pytest.raises(TypeError, match="unknown parameter"):
        compute_advantage(batch, adv_estimator="rubricgym_rloo", config=OmegaConf.create({"rubricgym": {"gama": 1}}))


# --- step level: the rubricgym_sync trainer's advantage stage on TransferQueue -------------------------
@pytest.fixture(scope="module")
def transfer_queue():
    import ray
    import transfer_queue as tq

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # one storage unit: the controller and each unit hold a CPU each
    tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
    yield tq
    tq.close()
    ray.shutdown()


def _put_rows(tq, uid_trajs: dict[str, list[Trajectory]], order_seed: int = 0, partition: str = "train"):
    """Write one row per step as verl's v1 agent-loop worker does: key {uid}_{session}_{index},
    the AgentLoopOutput fields, the prompt's kwargs and extra_fields (shuffled row order)."""
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    from wrappers.integrations.verl import encode_row

    rows, keys = [], []
    for uid, trajs in uid_trajs.items():
        for session, traj in enumerate(trajs):
            for i, step in enumerate(traj.steps):
                n = 2 + (i + session) % 3
                mask = torch.ones(n, dtype=torch.int64)
                mask[-1] = 0 if n > 2 else 1  # a masked (environment) token inside the response
                keys.append(f"{uid}_{session}_{i}")
                rows.append({
                    "prompts": torch.arange(5), "responses": torch.arange(n), "response_mask": mask,
                    "uid": uid, "session_id": session,
                    "extra_fields": {"rubricgym": encode_row(step, task_id=traj.task_id, score=traj.score,
                                                             success=traj.success, truncated=traj.truncated),
                                     "turn_scores": []},
                })
    perm = np.random.default_rng(order_seed).permutation(len(rows))
    keys, rows = [keys[k] for k in perm], [rows[k] for k in perm]
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=list_of_dict_to_tensordict(rows),
                    tags=[{"status": "success"}] * len(keys))
    return KVBatchMeta(keys=keys, tags=[{}] * len(keys), partition_id=partition), [r["response_mask"] for r in rows]


def _sync_trainer(estimator: str, params: dict | None = None):
    from verl.trainer.ppo.v1 import get_trainer_cls

    cls = get_trainer_cls("rubricgym_sync")
    trainer = cls.__new__(cls)  # the advantage stage reads only the config (no workers needed)
    trainer.config = OmegaConf.create({
        "algorithm": {"adv_estimator": estimator, "use_kl_in_reward": False, "gamma": 1.0, "lam": 1.0,
                      "rollout_correction": {"rollout_is": None, "rollout_rs": None, "bypass_mode": False},
                      **({"rubricgym": params} if params else {})},
        "actor_rollout_ref": {"rollout": {"n": 3}},
    })
    return trainer


def _alfworld_like_groups() -> dict[str, list[Trajectory]]:
    """Two tasks x three siblings with shared states (tuples and frozensets), invalid actions,
    a success, matching keys and rubric signatures."""
    C0, C1 = frozenset(), frozenset({"target_acquired"})
    F0, F1 = frozenset({"target_acquired"}), frozenset({"target_placed"})

    def st(room, obj, sig, action, reward=0.0, valid=True, nxt=None):
        return Step(state_key=(room, frozenset(obj)), action=action, reward=reward, valid=valid,
                    penalty=0.0 if valid else -0.1, next_state_key=nxt,
                    keys={"exact": (room, tuple(sorted(obj))), "coarse": room, "signature": sig},
                    rubric={"target_acquired": int(sig[0] == C1)})

    g0 = [
        Trajectory("t0", 0, [st("hall", [], (C0, F0), "go to desk 1", nxt=("desk", frozenset())),
                             st("desk", [], (C0, F0), "take mug 1", nxt=("desk", frozenset({"mug"}))),
                             st("desk", ["mug"], (C1, F1), "put mug 1 in sink 1", reward=10.0)], score=1.0, success=True),
        Trajectory("t0", 1, [st("hall", [], (C0, F0), "fly", valid=False, nxt=("hall", frozenset())),
                             st("hall", [], (C0, F0), "go to desk 1", nxt=("desk", frozenset())),
                             st("desk", [], (C0, F0), "look")], score=0.0, truncated=True),
        Trajectory("t0", 2, [st("hall", [], (C0, F0), "go to shelf 1", nxt=("shelf", frozenset())),
                             st("shelf", [], (C0, F0), "look")], score=0.0, truncated=True),
    ]
    g1 = [
        Trajectory("t1", 0, [st("bath", [], (C0, F0), "open cabinet 1", nxt=("bath", frozenset({"soap"}))),
                             st("bath", ["soap"], (C0, F0), "take soap 1", reward=10.0)], score=1.0, success=True),
        Trajectory("t1", 1, [st("bath", [], (C0, F0), "look")], score=0.0, truncated=True),
        Trajectory("t1", 2, [st("bath", [], (C0, F0), "open cabinet 1", nxt=("bath", frozenset({"soap"}))),
                             st("bath", ["soap"], (C0, F0), "drop soap", valid=False)], score=0.0, truncated=True),
    ]
    return {"p0": g0, "p1": g1}


def _reference(estimator: str, uid_trajs, keys, params=None) -> np.ndarray:
    """The estimator run directly on the Trajectory objects, laid out in row-key order."""
    results = get_estimator(estimator, **(params or {}))(list(uid_trajs.values()))
    by_key = {}
    for uid, res in zip(uid_trajs, results):
        for session, adv in enumerate(res.advantages):
            for i, a in enumerate(adv):
                by_key[f"{uid}_{session}_{i}"] = a
    return np.array([by_key[k] for k in keys])


def _flat_reference(estimator: str, uid_trajs, keys, params=None) -> np.ndarray:
    """flat_advantages over the same rows (columns built straight from the steps)."""
    index = {}
    for uid, trajs in uid_trajs.items():
        for s, traj in enumerate(trajs):
            for i, step in enumerate(traj.steps):
                index[f"{uid}_{s}_{i}"] = (uid, s, i, step, traj)
    rows = [index[k] for k in keys]
    names = ("exact", "coarse", "signature")
    return flat_advantages(
        estimator, params=params, group_id=[r[0] for r in rows], traj_id=[(r[0], r[1]) for r in rows],
        step_index=[r[2] for r in rows], slot=[r[1] for r in rows], state_key=[r[3].state_key for r in rows],
        next_state_key=[r[3].next_state_key for r in rows], reward=[r[3].reward for r in rows],
        penalty=[r[3].penalty for r in rows], valid=[r[3].valid for r in rows], action=[r[3].action for r in rows],
        rubric=[r[3].rubric for r in rows], keys={k: [r[3].keys[k] for r in rows] for k in names},
        score=[r[4].score for r in rows], success=[r[4].success for r in rows],
        truncated=[r[4].truncated for r in rows], task_id=[r[4].task_id for r in rows])


@pytest.mark.parametrize(("estimator", "params"), [
    ("gigpo", {"gamma": 0.95}), ("graphgpo", None), ("mcgpo", None), ("rloo", None), ("milegpo", None),
    ("hgpo", {"base_group": True}),
])
def test_sync_trainer_advantage_stage_equals_flat_advantages(transfer_queue, estimator, params):
    tq = transfer_queue
    groups = _alfworld_like_groups()
    meta, masks = _put_rows(tq, groups, order_seed=len(estimator), partition=f"train-{estimator}")
    metrics: dict = {}
    out = _sync_trainer(f"rubricgym_{estimator}", params)._compute_advantage(meta, metrics)
    assert list(out.keys) == list(meta.keys)
    got = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages", "returns"])
    flat = _flat_reference(estimator, groups, meta.keys, params)
    direct = _reference(estimator, groups, meta.keys, params)
    np.testing.assert_allclose(flat, direct, rtol=0, atol=1e-12)  # the flat rows are the trajectories
    assert np.abs(flat).max() > 0
    for r, (adv, ret, mask) in enumerate(zip(got["advantages"].unbind(), got["returns"].unbind(), masks)):
        expected = (mask.double() * flat[r]).float()
        torch.testing.assert_close(adv, expected, rtol=0, atol=1e-6, msg=f"row {meta.keys[r]}")
        torch.testing.assert_close(ret, expected, rtol=0, atol=1e-6)
    assert metrics["rubricgym/rows"] == len(meta.keys) == 13 and metrics["rubricgym/groups"] == 2


@pytest.mark.parametrize(("estimator", "params"), [
    ("gigpo", {"similarity": 0.95}), ("graphgpo", {"similarity": 0.95, "normalize_distance": True}),
])
def test_sync_trainer_passes_verl_agent_switches(transfer_queue, estimator, params):
    """verl-agent's enable_similarity / normalize_distance as algorithm.rubricgym parameters: text
    states one character apart ("hall, door 1" / "hall, door 2", difflib ratio 22/24) merge."""
    tq = transfer_queue

    def text(key):
        return None if key is None else f"{key[0]}: {', '.join(sorted(key[1])) or 'nothing'}"

    groups = {uid: [Trajectory(t.task_id, t.slot, [Step(text(s.state_key), s.action, reward=s.reward,
                                                         penalty=s.penalty, valid=s.valid,
                                                         next_state_key=text(s.next_state_key)) for s in t.steps],
                               score=t.score, success=t.success, truncated=t.truncated) for t in trajs]
              for uid, trajs in _alfworld_like_groups().items()}
    groups["p0"][2].steps[0].state_key = "hall: nothin"  # one character short of "hall: nothing"
    meta, masks = _put_rows(tq, groups, order_seed=7, partition=f"similarity-{estimator}")
    _sync_trainer(f"rubricgym_{estimator}", params)._compute_advantage(meta, {})
    got = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages"])
    want = _reference(estimator, groups, meta.keys, params)
    for r, (adv, mask) in enumerate(zip(got["advantages"].unbind(), masks)):
        torch.testing.assert_close(adv, (mask.double() * want[r]).float(), rtol=0, atol=1e-6, msg=f"row {meta.keys[r]}")
    assert not np.allclose(want, _reference(estimator, groups, meta.keys, None))


def test_sync_trainer_leaves_verls_padding_rows_out(transfer_queue):
    """verl pads a batch to a multiple of its data-parallel size with synthetic rows (its own
    upsample_batch_to_divisible_size: tag is_padding, row 0's fields copied, response mask 0,
    uid pad<hex>): they get 0 and stay out of the credit and the rubricgym/* metrics, and the
    real rows get the credit of the batch without them."""
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size

    tq = transfer_queue
    groups = _alfworld_like_groups()
    meta, masks = _put_rows(tq, groups, order_seed=3, partition="padding")
    padded = upsample_batch_to_divisible_size(meta, 8, 0)  # 13 rows -> 16
    assert len(padded.keys) == 16 and sum(bool(t.get("is_padding")) for t in padded.tags) == 3
    metrics: dict = {}
    _sync_trainer("rubricgym_gigpo", {"gamma": 0.95})._compute_advantage(padded, metrics)
    got = tq.kv_batch_get(keys=padded.keys, partition_id="padding", select_fields=["advantages"])["advantages"]
    advs = got.unbind()
    want = _reference("gigpo", groups, meta.keys, {"gamma": 0.95})
    for r, mask in enumerate(masks):
        torch.testing.assert_close(advs[r], (mask.double() * want[r]).float(), rtol=0, atol=1e-6)
    assert all(float(a.abs().max()) == 0.0 for a in advs[13:])
    assert metrics["rubricgym/rows"] == 13 and metrics["rubricgym/groups"] == 2
    assert metrics["rubricgym/advantage_abs_mean"] == pytest.approx(float(np.mean(np.abs(want))), abs=1e-9)


def test_step_credit_by_hand_and_row_errors():
    """RLOO over two one-step sessions (rewards 10 and 0, rows in session order 1, 0): +10 / -10
    follow the rows, not the sessions."""
    from wrappers.integrations.verl import encode_row, step_credit

    rows = [{"rubricgym": encode_row(Step("s", "a", reward=r), task_id="t", score=r / 10, success=r > 0)}
            for r in (10.0, 0.0)]
    credit = step_credit("rloo", ["u_1_0", "u_0_0"], rows)
    assert credit.advantages.tolist() == [10.0, -10.0]
    assert [t.slot for t in credit.batch.groups[0]] == [0, 1]
    with pytest.raises(ValueError, match=r"row 1 \(u_1_0\): extra_fields\['rubricgym'\] is missing"):
        step_credit("rloo", ["u_0_0", "u_1_0"], [rows[0], {"turn_scores": []}])
    with pytest.raises(ValueError, match="not verl's"):
        step_credit("rloo", ["u0"], rows[:1])


def test_sync_trainer_refuses_kl_in_reward(transfer_queue):
    meta, _ = _put_rows(transfer_queue, _alfworld_like_groups(), partition="train-kl")
    trainer = _sync_trainer("rubricgym_gigpo")
    trainer.config.algorithm.use_kl_in_reward = True
    with pytest.raises(ValueError, match="use_kl_in_reward is not supported"):
        trainer._compute_advantage(meta, {})


# --- the rubricgym_env agent loop ---------------------------------------------------------------------
_ACTIONS = re.compile(r"Possible actions: (.*)")
_TURN = re.compile(r"Now \(turn (\d+)\)")


class StandInServer:
    """Stands in for verl's LLM server manager (vLLM/SGLang cannot run here): reads the prompt it
    is sent, checks the chosen action is one of the admissible actions listed there and answers
    ``<action>…</action>`` + EOS as token ids with log-probs."""

    def __init__(self, tokenizer, choose) -> None:
        self.tok, self.choose, self.calls = tokenizer, choose, []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_kw):
        from verl.workers.rollout.replica import TokenOutput

        text = self.tok.decode(prompt_ids)
        admissible = [a.strip() for a in _ACTIONS.findall(text)[-1].split(" | ")]
        turn = int(_TURN.findall(text)[-1])
        action = self.choose(turn, admissible)
        assert action in admissible or (action.startswith("search[") and "search[<your query>]" in admissible), (
            action, admissible)
        self.calls.append((request_id, turn, action))
        ids = self.tok.encode(f"<action>{action}</action>", add_special_tokens=False) + [self.tok.eos_token_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids))


def _agent_loop(server, tokenizer, **settings):
    """The agent loop built the way verl's worker builds it: hydra from the registry entry."""
    import hydra
    from verl.experimental.agent_loop.agent_loop import (
        DictConfigWrap,
        ToolListWrap,
        _agent_loop_registry,
    )
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 64}},
                            "data": {}})
    return hydra.utils.instantiate(
        {**_agent_loop_registry["rubricgym_env"], **settings}, trainer_config=DictConfigWrap(cfg),
        server_manager=server, tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data), tools=ToolListWrap([]))


def _play(server, tokenizer, spec: dict, sessions: int, **settings):
    async def main():
        loop = _agent_loop(server, tokenizer, **settings)
        out = []
        for s in range(sessions):  # one loop instance per session, as verl's worker does
            if s:
                loop = _agent_loop(server, tokenizer, **settings)
            out.append(await loop.run({"temperature": 1.0}, uid="u0", session_id=s, raw_prompt=[],
                                      extra_info={"index": 0, "rubricgym": json.dumps(spec)}))
        return out

    return asyncio.run(main())


@pytest.fixture(scope="module")
def tokenizer():
    from trainers.models import build_tiny_tokenizer

    return build_tiny_tokenizer()


def _check_outputs(outputs, tokenizer, actions, won: bool):
    from wrappers.integrations.verl import decode_row, encode_row

    assert len(outputs) == len(actions)
    steps = []
    for out, action in zip(outputs, actions):
        assert tokenizer.decode(out.response_ids, skip_special_tokens=True) == f"<action>{action}</action>"
        assert out.response_mask == [1] * len(out.response_ids)
        assert out.response_logprobs == [-0.25] * len(out.response_ids)
        step, traj = decode_row(out.extra_fields["rubricgym"])
        assert out.extra_fields["rubricgym"] == encode_row(step, **traj)  # written step by step, the same text
        assert traj["success"] is won
        assert set(step.keys) >= {"exact", "coarse", "signature"} and step.state_key is not None
        steps.append(step)
    assert [s.valid for s in steps] == [True] * len(steps)
    assert outputs[-1].reward_score == (10.0 if won else 0.0)
    assert sum(s.reward for s in steps) == (10.0 if won else 0.0)
    assert outputs[-1].extra_fields["reward_extra_info"]["success"] == float(won)
    return steps


def test_agent_loop_plays_webshop(tokenizer, tmp_path):
    import gymnasium as gym

    import agent_envs  # noqa: F401
    from agent_envs.webshop.oracle import oracle_action
    from agent_envs.webshop.testing import write_mini_catalogue

    env_kwargs = {"catalogue": str(write_mini_catalogue(tmp_path)), "verify": False, "tagger": "lexicon"}
    mirror = gym.make("WebShop-Rubric-v0", **env_kwargs)  # the oracle's copy, stepped in lockstep
    mirror.reset(seed=0, options={"task": 0})

    def oracle(turn, admissible):
        action = oracle_action(mirror.unwrapped)
        mirror.step(action)
        return action

    server = StandInServer(tokenizer, oracle)
    spec = {"env_id": "WebShop-Rubric-v0", "env_kwargs": env_kwargs, "task": 0, "seed": 0}
    [outputs] = _play(server, tokenizer, spec, 1, style="action_only")
    actions = [a for _, _, a in server.calls]
    assert actions[0].startswith("search[") and actions[-1] == "click[buy now]"
    steps = _check_outputs(outputs, tokenizer, actions, won=True)
    assert [s.action for s in steps] == actions
    assert len({rid for rid, _, _ in server.calls}) == 1  # one sticky request id per session
    assert "Goal:" in tokenizer.decode(outputs[0].prompt_ids)


def test_agent_loop_plays_generated_alfworld_and_feeds_the_trainer_stage(tokenizer, transfer_queue):
    """Two sessions of one generated game (the walkthrough, and 'first admissible action' for 4
    steps), written to TransferQueue as verl's worker does; the rubricgym_sync stage then gives
    the advantages GiGPO computes on the episodes themselves."""
    import gymnasium as gym

    import agent_envs  # noqa: F401
    from agent_envs.alfworld.data import task_walkthrough
    from wrappers.integrations.verl import decode_row

    env_kwargs = {"split": "generated"}
    probe = gym.make("ALFWorld-Rubric-v0", **env_kwargs)
    _, info = probe.reset(seed=0, options={"task": 0})
    walkthrough = task_walkthrough(info)
    probe.close()
    assert walkthrough
    choose = {0: lambda turn, adm: walkthrough[turn - 1], 1: lambda turn, adm: adm[0]}
    session = {"s": 0}
    server = StandInServer(tokenizer, lambda turn, adm: choose[session["s"]](turn, adm))
    spec = {"env_id": "ALFWorld-Rubric-v0", "env_kwargs": env_kwargs, "task": 0, "seed": 0}
    outputs = []
    for s, max_steps in ((0, None), (1, 4)):
        session["s"] = s
        outputs += _play(server, tokenizer, {**spec, "max_steps": max_steps}, 1)
    won = _check_outputs(outputs[0], tokenizer, walkthrough, won=True)
    assert len(outputs[1]) == 4 and outputs[1][-1].reward_score == 0.0
    assert decode_row(outputs[1][-1].extra_fields["rubricgym"])[1]["truncated"] is True
    # the same uid and session layout as verl's AgentLoopWorkerTQ: {uid}_{session}_{index}
    trajs = []
    for s, outs in enumerate(outputs):
        steps = [decode_row(o.extra_fields["rubricgym"])[0] for o in outs]
        t = decode_row(outs[-1].extra_fields["rubricgym"])[1]
        trajs.append(Trajectory(t["task_id"], s, steps, score=t["score"], success=t["success"],
                                truncated=t["truncated"]))
    assert [s.action for s in trajs[0].steps] == [s.action for s in won]
    meta, masks = _put_rows(transfer_queue, {"u0": trajs}, partition="train-alfworld")
    _sync_trainer("rubricgym_gigpo")._compute_advantage(meta, {})
    got = transfer_queue.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=["advantages"])
    ref = _reference("gigpo", {"u0": trajs}, meta.keys)
    for r, (adv, mask) in enumerate(zip(got["advantages"].unbind(), masks)):
        torch.testing.assert_close(adv, (mask.double() * ref[r]).float(), rtol=0, atol=1e-6)
    assert ref[[k.startswith("u0_0_") for k in meta.keys]].min() > 0  # the won episode's steps are credited


def test_agent_loop_plays_sokoban_to_the_experts_win(tokenizer):
    """A Sokoban level through the same loop, found through the registry (the integration has no
    Sokoban code): the family's expert plan is played and wins; the grid reaches the prompt row
    for row; one box, so the return is +10 + 1 for the last push and -0.1 per move."""
    import gymnasium as gym

    import agent_envs  # noqa: F401
    from agent_envs.family import family_of
    from wrappers.integrations.verl import decode_row

    env_id = "Sokoban-Rubric-v0"
    probe = gym.make(env_id)
    grid, info = probe.reset(seed=0, options={"task": 0})
    probe.close()
    plan = family_of(env_id).expert_plan(info)
    assert plan and len(grid.splitlines()) == 6
    server = StandInServer(tokenizer, lambda turn, adm: plan[turn - 1])
    spec = {"env_id": env_id, "env_kwargs": {}, "task": 0, "seed": 0}
    [outputs] = _play(server, tokenizer, spec, 1, style="action_only")
    assert [a for _, _, a in server.calls] == plan
    steps = [decode_row(o.extra_fields["rubricgym"])[0] for o in outputs]
    traj = decode_row(outputs[-1].extra_fields["rubricgym"])[1]
    assert [s.action for s in steps] == plan and all(s.valid for s in steps)
    assert traj["success"] is True and traj["truncated"] is False
    assert outputs[-1].reward_score == pytest.approx(11.0 - 0.1 * len(plan), abs=1e-9)
    assert outputs[-1].extra_fields["reward_extra_info"]["success"] == 1.0
    assert set(steps[0].keys) >= {"exact", "coarse", "signature"} and steps[0].state_key is not None
    assert "Now (turn 1) you see:\n" + grid + "\n" in tokenizer.decode(outputs[0].prompt_ids)


def _verl_config(model_dir, *overrides: str):
    """verl 0.9.1's own ppo_trainer config, composed by hydra as ``main_ppo`` composes it, for the
    rubricgym_env loop (rollout.n = 2) and the rubricgym_sync trainer, plus ``overrides``."""
    from pathlib import Path

    import verl.trainer
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.trainer.__file__).parent / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.name=vllm",
            "actor_rollout_ref.rollout.agent.default_agent_loop=rubricgym_env", "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.prompt_length=4096", "actor_rollout_ref.rollout.response_length=256",
            "trainer.use_v1=true", "trainer.v1.trainer_mode=rubricgym_sync", *overrides])


def _tiny_model_dir(tokenizer, path):
    """The tiny random tiny-qwen2 and its tokenizer saved to ``path`` (verl reads both from a path)."""
    from trainers.models import build_tiny_model

    build_tiny_model("tiny-qwen2", vocab_size=len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _worker_rollout(cfg, tokenizer, tq, uid: str) -> tuple[list[str], list[Trajectory]]:
    """verl's own AgentLoopWorkerTQ (the class, in this process: its Ray actor wrapper adds only
    transport) plays rollout.n = 2 sessions of generated ALFWorld game 0 through rubricgym_env
    (the first session the walkthrough, the other 'first admissible action', 8 steps at most) and
    writes the rows to TransferQueue's "train" partition itself.  Returns the row keys (sorted)
    and the episodes the rows decode to, in session order."""
    import gymnasium as gym
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    import agent_envs  # noqa: F401
    from agent_envs.alfworld.data import task_walkthrough
    from wrappers.integrations.verl import decode_row

    env_kwargs = {"split": "generated"}
    probe = gym.make("ALFWorld-Rubric-v0", **env_kwargs)
    _, info = probe.reset(seed=0, options={"task": 0})
    walkthrough = task_walkthrough(info)
    probe.close()
    sessions: dict[str, int] = {}  # sticky request id per session: the first one seen plays the walkthrough

    class PerSession(StandInServer):
        async def generate(self, request_id, **kw):
            sessions.setdefault(request_id, len(sessions))
            self.choose = (lambda turn, adm: walkthrough[turn - 1]) if sessions[request_id] == 0 else \
                (lambda turn, adm: adm[0])
            return await super().generate(request_id, **kw)

    worker = AgentLoopWorkerTQ.__ray_metadata__.modified_class(cfg, PerSession(tokenizer, None))
    spec = {"env_id": "ALFWorld-Rubric-v0", "env_kwargs": env_kwargs, "task": 0, "seed": 0, "max_steps": 8}
    batch = list_of_dict_to_tensordict([{"uid": uid, "index": 0, "global_steps": 1, "raw_prompt": [],
                                         "extra_info": {"index": 0, "rubricgym": json.dumps(spec)}}])

    async def play():
        await worker.generate_sequences(batch)
        while worker.background_tasks:
            await asyncio.sleep(0.05)

    asyncio.run(play())
    assert tq.kv_list(partition_id="train")["train"][uid]["status"] == "finished"
    keys = sorted(k for k in tq.kv_list(partition_id="train")["train"] if k.startswith(f"{uid}_"))
    rows = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])
    by_session: dict[int, list] = {}
    for key, extra in zip(keys, rows["extra_fields"]):
        _uid, session, index = key.split("_")
        by_session.setdefault(int(session), []).append((int(index), decode_row(extra["rubricgym"])))
    trajs = []
    for s in sorted(by_session):
        decoded = [d for _, d in sorted(by_session[s])]
        t = decoded[-1][1]
        trajs.append(Trajectory(t["task_id"], s, [step for step, _ in decoded], score=t["score"],
                                success=t["success"], truncated=t["truncated"]))
    return keys, trajs


def test_verls_own_worker_writes_the_rows_the_trainer_stage_credits(tokenizer, transfer_queue, tmp_path):
    """verl's own AgentLoopWorkerTQ, built from verl's composed ppo_trainer config, plays rollout.n
    = 2 sessions of a generated ALFWorld game through rubricgym_env and writes the rows to
    TransferQueue itself (:func:`_worker_rollout`); the rubricgym_sync stage's advantages on those
    rows equal GiGPO on the episodes they decode to."""
    from transfer_queue import KVBatchMeta

    cfg = _verl_config(_tiny_model_dir(tokenizer, tmp_path / "model"))
    keys, trajs = _worker_rollout(cfg, tokenizer, transfer_queue, "w0")
    assert sorted(t.success for t in trajs) == [False, True]  # the walkthrough won, the other did not
    meta = KVBatchMeta(keys=keys, tags=[{}] * len(keys), partition_id="train")
    _sync_trainer("rubricgym_gigpo")._compute_advantage(meta, {})
    got = transfer_queue.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages", "response_mask"])
    ref = _reference("gigpo", {"w0": trajs}, keys)
    assert np.abs(ref).max() > 0
    for r, (adv, mask) in enumerate(zip(got["advantages"].unbind(), got["response_mask"].unbind())):
        torch.testing.assert_close(adv, (mask.double() * ref[r]).float(), rtol=0, atol=1e-6)


# --- verl's actor update, on CPU -------------------------------------------------------------------
class _CPUDevice:
    """The device module of :func:`_cpu_platform`: ``torch.cpu``, plus the memory statistics
    verl asks of its device module (0 on CPU, as verl itself reports for ``torch.cpu``) and
    no-op cache calls."""

    def __getattr__(self, name):
        return getattr(torch.cpu, name)

    @staticmethod
    def get_device_name(*_args) -> str:
        return "CPU"  # the key of verl's device-FLOPS table

    @staticmethod
    def memory_allocated(*_args, **_kw) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def mem_get_info(*_args) -> tuple[int, int]:
        return (0, 0)

    @staticmethod
    def empty_cache() -> None:
        return None

    ipc_collect = empty_cache


def _cpu_platform():
    """A CPU platform for verl 0.9.1, which ships CUDA, NPU and ROCm ones only (and falls back to
    CUDA without a GPU): a subclass of verl's own ``PlatformBase``, its documented extension point
    for a device ("Every concrete platform (CUDA, NPU, CPU, XPU, ...) must implement ..."),
    installed with ``set_platform``.  Collectives: gloo; the device index is ``"cpu"`` (what
    ``torch.cpu.current_device()`` returns), so verl's ``.to(get_device_id())`` stays on CPU."""
    from contextlib import nullcontext

    from verl.plugin.platform import PlatformBase

    class PlatformCPU(PlatformBase):
        device_name = "cpu"
        vendor_name = "cpu"
        device_module = _CPUDevice()

        def is_available(self):
            return True

        def current_device(self):
            return "cpu"

        def device_count(self):
            return 1

        def set_device(self, device_index):
            return None

        def synchronize(self, device_index=None):
            return None

        def manual_seed(self, seed):
            torch.manual_seed(seed)

        manual_seed_all = manual_seed

        def set_allocator_settings(self, settings):
            return None

        def empty_cache(self):
            return None

        def get_device_capability(self, device_index=0):
            return (None, None)

        def communication_backend_name(self):
            return "gloo"

        def visible_devices_envvar(self):
            return "CUDA_VISIBLE_DEVICES"

        def nvtx_range(self, msg):
            return nullcontext()

        def profiler_start(self):
            return None

        profiler_stop = profiler_start

        def ray_resource_name(self):
            return "CPU"

        def ray_noset_envvars(self):
            return []

        def is_ipc_supported(self):
            return False

        def cudart(self):
            return None

    return PlatformCPU()


def _weights(module) -> dict[str, torch.Tensor]:
    from torch.distributed.tensor import DTensor

    return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone() for n, p in module.named_parameters()}


def _response_rows(nested) -> list[torch.Tensor]:
    return [t.double() for t in (nested.unbind() if nested.is_nested else list(nested))]


def test_verls_actor_update_consumes_the_trainer_stages_advantages(tokenizer, transfer_queue, tmp_path, monkeypatch):
    """verl 0.9.1's own actor update, on CPU, consumes the advantages the rubricgym_sync stage
    writes.  The rows are verl's own AgentLoopWorkerTQ's (:func:`_worker_rollout`: a won and a
    lost ALFWorld episode of rollout.n = 2 sessions), padded by verl's
    ``upsample_batch_to_divisible_size`` to one PPO mini-batch as ``_balance_batch`` pads them;
    the actor is verl's ``ActorRolloutRefWorker`` (role ``actor``: its FSDP2 engine with a
    world of one, verl's ``ppo_loss``, AdamW) on the tiny random tiny-qwen2, built from the
    composed ppo_trainer config and driven by the trainer's own stages in the trainer's order:
    ``_compute_old_log_prob`` (verl), ``_compute_advantage`` (ours, GiGPO), ``_update_actor``
    (verl), all through TransferQueue.  CPU needs only a platform (:func:`_cpu_platform`), a
    one-process gloo group and ``VERL_ENGINE_DEVICE=cuda`` (verl's engine-selection override: its
    FSDP engine is registered for cuda/npu); verl's loss and update are untouched.

    Control first, on the same batch and optimizer: every advantage 0 (entropy and KL
    coefficients 0, weight decay 0) gives verl's update a zero gradient and leaves every weight
    bit for bit as it was, at the configured learning rate.  Then GiGPO's advantages, written
    again by our stage: every weight moves and, by verl's log-probabilities recomputed after the
    step, the advantage-weighted sum of the changes of the response tokens' log-probabilities is
    positive (at ratio 1 the token-mean PPO loss is minus that sum over the token count, to first
    order, and the step lowers it); row by row, each response of the won episode (advantage > 0)
    became more likely and each of the lost one (< 0) less.  verl's metrics are finite."""
    import torch.distributed as dist
    from tensordict import TensorDict
    from transfer_queue import KVBatchMeta
    from verl.plugin.platform import get_platform, set_platform
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.workers.engine_workers import ActorRolloutRefWorker

    torch.set_num_threads(1)
    tq = transfer_queue
    lr = 1e-3
    cfg = _verl_config(
        _tiny_model_dir(tokenizer, tmp_path / "model"),
        "algorithm.adv_estimator=rubricgym_gigpo",
        "actor_rollout_ref.model.use_remove_padding=false", "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "+actor_rollout_ref.model.override_config.attn_implementation=sdpa",  # verl's default: flash_attention_2
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.actor.use_torch_compile=false",
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile=false",
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",  # x rollout.n = 16 rows: one mini-batch, one optimizer step
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        f"actor_rollout_ref.actor.optim.lr={lr}", "actor_rollout_ref.actor.optim.weight_decay=0.0",
        "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.actor.use_kl_loss=false")
    keys, trajs = _worker_rollout(cfg, tokenizer, tq, "a0")
    assert sorted(t.success for t in trajs) == [False, True]
    tags = tq.kv_list(partition_id="train")["train"]
    batch = upsample_batch_to_divisible_size(KVBatchMeta(keys=keys, tags=[tags[k] for k in keys], partition_id="train"),
                                             16, tokenizer.eos_token_id)
    assert len(keys) < 16 == len(batch.keys)

    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "REDIS_STORE_SERVER_HOST"):  # verl's Worker writes these into os.environ
        monkeypatch.setenv(key, {"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": "0"}.get(key, "0"))
    monkeypatch.setenv("VERL_ENGINE_DEVICE", "cuda")
    previous = get_platform()
    set_platform(_cpu_platform())
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor", distillation_config=cfg.get("distillation"))
        worker.init_model()
        engine = worker.actor.engine
        assert type(engine).__name__ == "FSDPEngineWithLMHead" and not engine.use_remove_padding
        cls = get_trainer_cls("rubricgym_sync")
        trainer = cls.__new__(cls)  # the stages below read only the config and the actor worker
        trainer.config, trainer.actor_rollout_wg = cfg, worker
        module, optimizer = engine.module, engine.optimizer
        metrics: dict = {}
        trainer._compute_old_log_prob(batch, metrics)
        trainer._compute_advantage(batch, metrics)
        got = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                              select_fields=["advantages", "old_log_probs", "response_mask"])
        adv = [float(a[m.bool()][0]) if m.any() else 0.0  # the row's advantage, on each response token
               for a, m in zip(got["advantages"].unbind(), got["response_mask"].unbind())]
        ref = _reference("gigpo", {"a0": trajs}, keys)
        np.testing.assert_allclose(adv[:len(keys)], ref, rtol=0, atol=1e-6)
        assert min(ref) < 0 < max(ref) and 0.0 not in ref and adv[len(keys):] == [0.0] * (16 - len(keys))
        old = _response_rows(got["old_log_probs"])
        masks = _response_rows(got["response_mask"])

        # control: the same batch with every advantage 0
        zeros = torch.nested.as_nested_tensor([torch.zeros_like(m, dtype=torch.float32) for m in masks],
                                              layout=torch.jagged)
        tq.kv_batch_put(keys=batch.keys, partition_id="train",
                        fields=TensorDict({"advantages": zeros}, batch_size=len(batch.keys)))
        before = _weights(module)
        assert optimizer.param_groups[0]["lr"] == pytest.approx(lr)
        control: dict = {}
        trainer._update_actor(batch, control)
        after_control = _weights(module)
        assert all(torch.equal(before[n], after_control[n]) for n in before)
        assert control["actor/grad_norm"] == 0.0 and control["actor/pg_loss"] == 0.0

        # GiGPO's advantages, written again by our stage
        trainer._compute_advantage(batch, metrics)
        update: dict = {}
        trainer._update_actor(batch, update)
        after = _weights(module)
        moved = [n for n in before if not torch.equal(before[n], after[n])]
        assert len(moved) == len(before)
        assert update["actor/grad_norm"] > 0
        for name in ("actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"):
            assert np.isfinite(update[name]), (name, update)
        trainer._compute_old_log_prob(batch, {})  # verl's log-probabilities after the step
        new = _response_rows(tq.kv_batch_get(keys=batch.keys, partition_id="train",
                                             select_fields=["old_log_probs"])["old_log_probs"])
    finally:
        dist.destroy_process_group()
        set_platform(previous)
    # each row's change of log-probability, summed over its response tokens
    change = [float(((n - o) * m).sum()) for n, o, m in zip(new, old, masks)]
    assert sum(a * c for a, c in zip(adv, change)) > 0, (adv, change)
    # row by row: the responses GiGPO credits (the won episode's) became more likely, the ones it
    # debits (the lost episode's) less; verl's padding rows have no response tokens
    assert all(c > 0 if a > 0 else c < 0 for a, c in zip(adv[:len(keys)], change)), (adv, change)
    assert change[len(keys):] == [0.0] * (16 - len(keys))


@pytest.mark.parametrize("workers", [1, 0])
def test_agent_loop_steps_off_the_event_loop(tokenizer, tmp_path, monkeypatch, workers):
    """A session's step waits for a gate file that another coroutine of verl's event loop opens
    once the step has been sent: the session wins only if the loop kept running while its
    environment stepped (in a worker process, or on the in-process engine thread)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # rubricgym_gated_env, in the workers too
    from rubricgym_gated_env import open_gate_when

    gate = tmp_path / "gate"
    server = StandInServer(tokenizer, lambda turn, adm: "wait")
    spec = {"env_id": "rubricgym_gated_env:Gated-v0", "env_kwargs": {"gate": str(gate), "wait": 20.0},
            "task": 0, "seed": 0}

    async def main():
        loop = _agent_loop(server, tokenizer, style="action_only", env_workers=workers)
        session = loop.run({"temperature": 1.0}, uid="u0", session_id=0, raw_prompt=[],
                           extra_info={"index": 0, "rubricgym": json.dumps(spec)})
        outputs, _ = await asyncio.gather(session, open_gate_when(lambda: server.calls, gate))
        return outputs

    outputs = asyncio.run(main())
    assert outputs[-1].reward_score == 10.0
    assert outputs[-1].extra_fields["reward_extra_info"]["success"] == 1.0


def _first_sessions(server, tokenizer, spec: dict, sessions: int):
    """``sessions`` concurrent first episodes, each loop object built as verl's worker builds it."""
    runs = [_agent_loop(server, tokenizer, style="action_only", env_workers=1).run(
        {"temperature": 1.0}, uid="u0", session_id=s, raw_prompt=[],
        extra_info={"index": 0, "rubricgym": json.dumps(spec)}) for s in range(sessions)]
    return asyncio.gather(*runs, return_exceptions=True)


def test_agent_loop_builds_its_pool_off_the_event_loop(tokenizer, tmp_path, monkeypatch):
    """Concurrent first sessions share one build of the environment pool, and it runs in a
    thread of its own: each build waits for an event that a coroutine of the event loop sets
    once every session waits for the pool, so the sessions get their pool only if the loop kept
    running meanwhile.  A build that fails fails every session waiting on it; the next sessions
    build the pool again, and eight of them play their episodes on it."""
    import threading
    from pathlib import Path

    import wrappers.integrations.verl as verl_module
    from agent_envs import pool as pool_module
    from wrappers.integrations.episode import episode_pool

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # rubricgym_gated_env, in the worker too
    gate = tmp_path / "gate"
    gate.touch()  # every step wins at once
    spec = {"env_id": "rubricgym_gated_env:Gated-v0", "env_kwargs": {"gate": str(gate), "wait": 20.0},
            "task": 0, "seed": 0}
    builds, entered, go = [], [], [threading.Event(), threading.Event()]
    real_init, real_pool = pool_module.EnvPool.__init__, verl_module.aepisode_pool

    def gated_init(self, *args, **kwargs):
        n = len(builds)
        builds.append(threading.get_ident())
        if not go[n].wait(30):
            raise RuntimeError("the event loop did not run while the pool was built")
        if n == 0:
            raise OSError("cannot start a worker process")
        real_init(self, *args, **kwargs)

    async def counted_pool(*args, **kwargs):  # a session waits for its pool from this call on
        entered.append(1)
        return await real_pool(*args, **kwargs)

    monkeypatch.setattr(pool_module.EnvPool, "__init__", gated_init)
    monkeypatch.setattr(verl_module, "aepisode_pool", counted_pool)
    server = StandInServer(tokenizer, lambda turn, adm: "wait")

    async def open_when_waiting(event, sessions: int):
        while len(entered) < sessions:
            await asyncio.sleep(0.005)
        event.set()

    async def main():
        failed, _ = await asyncio.gather(_first_sessions(server, tokenizer, spec, 3), open_when_waiting(go[0], 3))
        won, _ = await asyncio.gather(_first_sessions(server, tokenizer, spec, 8), open_when_waiting(go[1], 11))
        return threading.get_ident(), failed, won

    loop_thread, failed, outputs = asyncio.run(main())
    assert [type(f).__name__ for f in failed] == ["OSError"] * 3 and "cannot start" in str(failed[0])
    assert len(builds) == 2 and loop_thread not in builds  # one failed build, one for the eight sessions
    assert [out[-1].reward_score for out in outputs] == [10.0] * 8
    episode_pool(spec["env_id"], spec["env_kwargs"], workers=1).pool.close()


#: Two generated ALFWorld games: the Ray and pool-option cases play their walkthroughs.
GENERATED = {"split": "generated", "generated_n": 2, "generated_seed": 3}


def _walkthrough(task: int) -> list[str]:
    """The walkthrough of generated game ``task`` (of :data:`GENERATED`)."""
    import gymnasium as gym

    import agent_envs  # noqa: F401
    from agent_envs.alfworld.data import task_walkthrough

    probe = gym.make("ALFWorld-Rubric-v0", **GENERATED)
    _, info = probe.reset(seed=0, options={"task": task})
    probe.close()
    return task_walkthrough(info)


def test_agent_loop_env_workers_as_ray_actors(tokenizer, transfer_queue):
    """``env_backend="ray"``: the environments are Ray actors on verl's Ray cluster (here the
    local one TransferQueue runs on); the walkthrough of a generated game wins through them."""
    import ray

    from wrappers.integrations.episode import episode_pool

    env_kwargs, walkthrough = GENERATED, _walkthrough(1)
    server = StandInServer(tokenizer, lambda turn, adm: walkthrough[turn - 1])
    spec = {"env_id": "ALFWorld-Rubric-v0", "env_kwargs": env_kwargs, "task": 1, "seed": 0}
    settings = {"env_backend": "ray", "env_workers": 2, "env_ray_options": {"num_cpus": 0}}
    [outputs] = _play(server, tokenizer, spec, 1, **settings)
    _check_outputs(outputs, tokenizer, walkthrough, won=True)
    pool = episode_pool("ALFWorld-Rubric-v0", env_kwargs, workers=2, backend="ray", ray_options={"num_cpus": 0}).pool
    assert [type(h).__name__ for h in pool.hosts] == ["_RayHost", "_RayHost"] and pool.procs == []
    assert ray.get(pool.hosts[1].actor.serve.remote([("reset", (1, 0, {"task": 0}))]))[0][0] == "ok"  # an actor's own call
    assert pool.worker_cpu_seconds() > 0
    pool.close()


def test_agent_loop_passes_pool_options_to_its_environments(tokenizer):
    """``env_pool_options``: the walkthrough wins through workers that run under SCHED_IDLE with
    the pool's timeout, as configured; an unknown option is refused with the known names."""
    import os

    from wrappers.integrations.episode import episode_pool
    from wrappers.integrations.verl import RubricgymEnvLoop, _episode_spec

    env_kwargs, walkthrough = GENERATED, _walkthrough(0)
    server = StandInServer(tokenizer, lambda turn, adm: walkthrough[turn - 1])
    spec = {"env_id": "ALFWorld-Rubric-v0", "env_kwargs": env_kwargs, "task": 0, "seed": 0}
    options = {"worker_idle": True, "timeout": 120}
    [outputs] = _play(server, tokenizer, spec, 1, env_pool_options=options)
    _check_outputs(outputs, tokenizer, walkthrough, won=True)
    pool = episode_pool("ALFWorld-Rubric-v0", env_kwargs, workers=1, pool_options=options).pool
    assert [os.sched_getscheduler(p.pid) for p in pool.procs] == [os.SCHED_IDLE] and pool.timeout == 120
    pool.close()
    bad = {"extra_info": {"rubricgym": {"env_id": "ALFWorld-Rubric-v0", "env_pool_options": {"nice": 5}}}}
    with pytest.raises(ValueError, match=r"unknown pool options \['nice'\]; known: \['timeout'"):
        _episode_spec(bad, RubricgymEnvLoop.DEFAULTS)


def test_write_dataset_rows_feed_the_agent_loop(tmp_path):
    import pandas as pd

    from wrappers.integrations.verl import RubricgymEnvLoop, _episode_spec, write_dataset

    path = tmp_path / "train.parquet"
    assert write_dataset(str(path), "ALFWorld-Rubric-v0", [0, 1, 2], env_kwargs={"split": "generated"},
                         max_steps=50) == 3
    df = pd.read_parquet(path)
    assert df["agent_name"].tolist() == ["rubricgym_env"] * 3
    row = df.iloc[2].to_dict()
    spec = _episode_spec({"extra_info": row["extra_info"]}, RubricgymEnvLoop.DEFAULTS)
    assert (spec["env_id"], spec["env_kwargs"], spec["task"], spec["seed"], spec["max_steps"]) == (
        "ALFWorld-Rubric-v0", {"split": "generated"}, 2, 0, 50)
    assert row["extra_info"]["index"] == 2
    with pytest.raises(ValueError, match="unknown agent-loop settings"):
        write_dataset(str(path), "ALFWorld-Rubric-v0", [0], max_step=5)
    with pytest.raises(ValueError, match="max_steps must be a positive int"):
        _episode_spec({"extra_info": {"rubricgym": '{"max_steps": 0}'}}, {**RubricgymEnvLoop.DEFAULTS, "env_id": "x"})
    with pytest.raises(ValueError, match="needs an env_id"):
        _episode_spec({}, RubricgymEnvLoop.DEFAULTS)


def _doc_overrides() -> list[str]:
    """The ``key=value`` overrides of the GiGPO launch command in docs/integrations/verl.md."""
    import shlex
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "integrations" / "verl.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", text, re.DOTALL) if "verl.trainer.main_ppo" in b]
    assert len(blocks) == 1, "docs/integrations/verl.md has one verl launch command"
    words = shlex.split(blocks[0].replace("\\\n", " "))
    return words[words.index("verl.trainer.main_ppo") + 1:]


def test_doc_launch_command_composes_against_verls_config():
    """The GPU command of docs/integrations/verl.md cannot run here; its overrides must at least
    compose against verl 0.9.1's own ppo_trainer config (a misspelt key fails) and select ours."""
    from pathlib import Path

    import verl.trainer
    from hydra import compose, initialize_config_dir

    from wrappers.integrations.verl import _check_supported, _params, estimator_name

    overrides = _doc_overrides()
    config_dir = str(Path(verl.trainer.__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
        mcgpo = compose(config_name="ppo_trainer", overrides=[
            o for o in overrides if not o.startswith(("algorithm.adv_estimator=", "+algorithm.rubricgym.gamma="))
        ] + ["algorithm.adv_estimator=rubricgym_mcgpo"])
    assert cfg.trainer.use_v1 and cfg.trainer.v1.trainer_mode == "rubricgym_sync"
    assert estimator_name(cfg.algorithm.adv_estimator) == "gigpo" and _params(cfg.algorithm) == {"gamma": 0.95}
    assert estimator_name(mcgpo.algorithm.adv_estimator) == "mcgpo" and _params(mcgpo.algorithm) == {}
    _check_supported(cfg.algorithm)
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "rubricgym_env"
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg.actor_rollout_ref.rollout.n == 8 and cfg.data.train_batch_size == 16
    with (pytest.raises(Exception, match="misspelt_key"),
          initialize_config_dir(config_dir=config_dir, version_base=None)):
        compose(config_name="ppo_trainer", overrides=[*overrides, "algorithm.misspelt_key=1"])
