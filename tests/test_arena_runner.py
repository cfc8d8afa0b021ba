"""Arena runner: configuration, methods, micro-batching, key layout, and real WebShop runs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trainers.arena.agent import expand_actions, search_queries
from trainers.arena.config import ArenaConfig
from trainers.arena.pool import run_arena
from trainers.arena.run import run_one
from trainers.arena.update import minibatches
from trainers.arena.variants import VARIANTS, available_methods, resolve_method
from trainers.metrics import upgrade_record
from trainers.settings import flatten


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="unknown arena env 'nope'"):
        ArenaConfig.of(env="nope")
    with pytest.raises(ValueError, match="group_size"):
        ArenaConfig.of(group_size=1)
    with pytest.raises(ValueError, match=r"groups_per_update \(9\) exceeds train_tasks \(4\)"):
        ArenaConfig.of(tasks_per_update=9, train_tasks=4)
    with pytest.raises(ValueError, match="learning_rate must be a number > 0; got 0.0"):
        ArenaConfig.of(lr=0.0)
    with pytest.raises(ValueError, match="ArenaConfig: unknown field 'updatez'"):
        ArenaConfig.from_dict({"updatez": 3})
    cfg = ArenaConfig.for_env("webshop", updates=3)
    assert ArenaConfig.from_dict(cfg.to_dict()) == cfg


def test_flat_settings_and_the_names_before_the_sections_mean_the_same_setting() -> None:
    old = {"env": "webshop", "updates": 5, "tasks_per_update": 2, "eval_temperature": 0.0, "lr": 3.0,
           "epochs": 2, "rl": False, "warm_start": 0, "clip_low": 0.1}
    cfg = ArenaConfig.from_dict(old)
    assert (cfg.schedule.updates, cfg.rollout.groups_per_update, cfg.rollout.val_temperature) == (5, 2, 0.0)
    assert (cfg.update.learning_rate, cfg.update.ppo_epochs, cfg.update.rl_update) == (3.0, 2, False)
    assert (cfg.objective.clip_low, cfg.objective.clip_high) == (0.1, 0.2)
    assert cfg == ArenaConfig.of(env="webshop", updates=5, groups_per_update=2, val_temperature=0.0,
                                 learning_rate=3.0, ppo_epochs=2, rl_update=False, clip_low=0.1)
    assert ArenaConfig.from_dict(cfg.to_dict()) == cfg  # nested, as records now hold it
    # a record written before the sections also lacks later settings: it ran with their old values
    assert ArenaConfig.recorded(old).sampling == "sequential" and ArenaConfig.from_dict(old).sampling == "coupled"


def test_methods_and_variants_resolve_to_estimator_parameters() -> None:
    m = resolve_method("mcgpo:same_fold+uniform_weights", "webshop")
    assert (m.estimator, m.params["evidence"], m.params["weighting"], m.params["gamma"]) == ("mcgpo", "same", "uniform", 0.2)
    assert resolve_method("mcgpo:no_pair_loss", "alfworld").objective == {"pair_coef": 0.0}
    assert resolve_method("milegpo:no_pcc_rcs", "alfworld").params == {"preset": "alfworld", "pcc": False, "rcs": False}
    assert resolve_method("scpo", "webshop").params["success_threshold"] == 9.0
    assert resolve_method("scpo", "alfworld").params["scorer"] == "lexical"
    with pytest.raises(ValueError, match="unknown estimator 'ppo'"):
        resolve_method("ppo", "alfworld")
    with pytest.raises(ValueError, match="variants: mcgpo:same_fold"):
        resolve_method("mcgpo:nope", "alfworld")
    # every MCGPO and MileGPO ablation is accepted by the installed estimators
    for name in [m for m in available_methods() if m.split(":")[0] in ("mcgpo", "milegpo")]:
        resolve_method(name, "alfworld").build()
    assert set(VARIANTS["mcgpo"]) == {"same_fold", "uniform_weights", "state_only", "rubric_only",
                                      "shuffled_rubric", "no_pair_loss"}


def test_minibatches_keep_pairs_together_and_cover_every_row_once() -> None:
    pairs = [(0, 5, 0.5), (7, 2, 1.0), (3, 9, 0.2)]
    batches = minibatches(12, pairs, 4, np.random.default_rng(0))
    seen = [r for rows, _ in batches for r in rows]
    assert sorted(seen) == list(range(12))
    found = 0
    for rows, bpairs in batches:
        assert len(rows) <= 4
        for p, q, w in bpairs:
            found += 1
            assert (rows[p], rows[q], w) in pairs
    assert found == 3


def test_search_queries_and_action_expansion() -> None:
    goal = "i need a gluten free trail mix that is dried fruit, and price lower than 40.00 dollars"
    assert search_queries(goal) == [
        "a gluten free trail mix that is dried fruit",
        "gluten free trail mix that is",
        "gluten free trail",
    ]
    assert expand_actions(["search[<your query>]", "click[buy now]"], goal)[-1] == "click[buy now]"
    assert len(expand_actions(["search[<your query>]"], goal)) == 3


# ------------------------------------------------------------------ real WebShop runs

TINY = dict(updates=3, tasks_per_update=2, group_size=4, train_tasks=6, val_tasks=4, eval_every=2,
            epochs=1, minibatch=16)


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        for key in [k for k in rec if k in ("time", "seconds", "cpu_seconds") or k.endswith("_s")]:
            rec.pop(key)  # wall-clock times
        out.append(rec)
    return out


@pytest.mark.slow
def test_same_inputs_give_the_same_numbers(tmp_path: Path) -> None:
    cfg = ArenaConfig.for_env("webshop", **TINY)
    run_one(cfg, "mcgpo", 3, tmp_path / "a")
    run_one(cfg, "mcgpo", 3, tmp_path / "b")
    a = _records(tmp_path / "a" / "runs" / "mcgpo__seed3" / "metrics.jsonl")
    b = _records(tmp_path / "b" / "runs" / "mcgpo__seed3" / "metrics.jsonl")
    assert a == b
    phases = [r["phase"] for r in a]
    # the run's identity, eval@0, train 1, train 2, eval@2, train 3, eval@3, end (trainers.metrics)
    assert phases == ["run", "eval", "train", "train", "eval", "train", "eval", "end"]
    assert [r["update"] for r in a] == [0, 0, 1, 2, 2, 3, 3, 3]
    run_one(cfg, "mcgpo", 4, tmp_path / "c")
    c = _records(tmp_path / "c" / "runs" / "mcgpo__seed4" / "metrics.jsonl")
    assert [r.get("tasks") for r in c] != [r.get("tasks") for r in a]  # another seed, other draws


@pytest.mark.slow
def test_arena_report_table_agrees_with_its_run_files(tmp_path: Path) -> None:
    cfg = ArenaConfig.for_env("webshop", **TINY)
    summary = run_arena(cfg, ["grpo", "mcgpo:no_pair_loss"], [0, 1], tmp_path, workers=1)
    md = (tmp_path / "results.md").read_text()
    for method in ("grpo", "mcgpo:no_pair_loss"):
        l5s = []
        for seed in (0, 1):
            recs = _records(tmp_path / "runs" / f"{method}__seed{seed}" / "metrics.jsonl")
            ev = [r["success"] for r in recs if r["phase"] == "eval"]
            assert len(ev) == 3  # updates 0, 2, 3
            l5s.append(np.mean(ev[1:][-5:]))  # L5 never counts the update-0 evaluation
        row = next(line for line in md.splitlines() if line.startswith(f"| {method} |"))
        cell = row.split("|")[2].strip()
        assert cell == f"{100 * np.mean(l5s):.1f} ± {100 * np.std(l5s, ddof=1):.1f}"
        assert summary["methods"][method]["L5"]["per_seed"] == pytest.approx(l5s)
    assert (tmp_path / "curves.png").stat().st_size > 1000
    # the no-pair-loss variant still builds preferences but never trains on them
    recs = _records(tmp_path / "runs" / "mcgpo:no_pair_loss__seed0" / "metrics.jsonl")
    assert all(r["opt/pair_loss"] >= 0 for r in recs if r["phase"] == "train")
    config = next(r for r in recs if r["phase"] == "run")
    assert config["objective"]["pair_coef"] == 0.0


def test_a_finished_run_is_not_run_again_and_another_setting_is(tmp_path: Path) -> None:
    from trainers.arena.run import completed_run

    cfg = ArenaConfig.for_env("webshop", **TINY)
    assert completed_run(cfg, "grpo", 0, tmp_path) is None
    run_arena(cfg, ["grpo"], [0], tmp_path, workers=1)
    path = tmp_path / "runs" / "grpo__seed0" / "metrics.jsonl"
    end = completed_run(cfg, "grpo", 0, tmp_path)
    assert end is not None and end["phase"] == "end"
    stamp = path.stat().st_mtime_ns
    run_arena(cfg, ["grpo"], [0], tmp_path, workers=1)  # found finished: not run again
    assert path.stat().st_mtime_ns == stamp
    other = ArenaConfig.for_env("webshop", **{**TINY, "updates": 2})
    assert completed_run(other, "grpo", 0, tmp_path) is None  # another setting runs again
    lines = path.read_text().splitlines()
    written = [json.loads(line) for line in lines]  # built in the one schema, not translated on reading
    assert all(list(r)[:2] == ["update", "phase"] and "kind" not in r and upgrade_record(r) is r for r in written)
    assert [r["phase"] for r in written] == ["run", "eval", "train", "train", "eval", "train", "eval", "end"]
    path.write_text("\n".join(lines[:2] + ["{torn"] + lines[2:]) + "\n")  # damaged in the middle
    assert completed_run(cfg, "grpo", 0, tmp_path) is None
    path.write_text("\n".join(lines[:-1]) + "\n")  # an interrupted file (no end record)
    assert completed_run(cfg, "grpo", 0, tmp_path) is None
    # a run recorded before the sections (a flat config, old names) and before val_episodes,
    # sampling and kl_clip existed ran with one episode, sequentially, kl_clip 10: the same setting
    first = json.loads(lines[0])
    flat = flatten(cfg)
    for name in ("val_episodes", "sampling", "kl_clip"):
        del flat[name]
    flat["tasks_per_update"], flat["lr"] = flat.pop("groups_per_update"), flat.pop("learning_rate")
    first["config"] = flat
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert cfg.sampling == "sequential" and completed_run(cfg, "grpo", 0, tmp_path) is not None
    assert completed_run(replace(cfg, sampling="coupled"), "grpo", 0, tmp_path) is None
    assert completed_run(replace(cfg, val_episodes=2), "grpo", 0, tmp_path) is None


@pytest.mark.slow
def test_two_workers_give_the_numbers_of_one_and_run_each_seed_in_one_process(tmp_path: Path) -> None:
    cfg = ArenaConfig.for_env("webshop", **TINY)
    methods, seeds = ["grpo", "rloo"], [0, 1, 2]
    run_arena(cfg, methods, seeds, tmp_path / "one", workers=1)
    run_arena(cfg, methods, seeds, tmp_path / "two", workers=2)
    process: dict[int, set[int]] = {}
    for method in methods:
        for seed in seeds:
            name = f"{method}__seed{seed}"
            one, two = (tmp_path / f / "runs" / name / "metrics.jsonl" for f in ("one", "two"))
            assert _records(one) == _records(two)
            end = json.loads(two.read_text().splitlines()[-1])
            process.setdefault(seed, set()).add(end["time"]["process"])
    assert all(len(p) == 1 for p in process.values())  # every method of a seed: one process
    assert len(set().union(*process.values())) == 2  # and both workers ran seeds


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_killing_a_comparison_leaves_no_worker_running(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "from trainers.arena.config import ArenaConfig\nfrom trainers.arena.pool import run_arena\n"
        f"cfg = ArenaConfig.for_env('webshop', **{dict(TINY, updates=40)!r})\n"
        f"run_arena(cfg, ['grpo', 'rloo'], [0, 1], {str(tmp_path)!r}, workers=2)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.time() + 120
        workers: list[int] = []
        while time.time() < deadline and len(workers) < 2:
            time.sleep(0.5)
            workers = [p for p in _children(proc.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) == 2, "the pool's workers did not start"
        time.sleep(3)  # inside their first runs
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 30
        while time.time() < deadline and any(Path(f"/proc/{p}").exists() for p in workers):
            time.sleep(0.5)
        alive = [p for p in workers if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
        assert not alive, f"workers {alive} outlived the killed comparison"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
