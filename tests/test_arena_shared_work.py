"""Work the methods of a comparison share is done once per process, and changes nothing.

The arena's warm start is deterministic (every method and seed starts from one policy), and
the validation before the first update sees the same policy and draws for every method of a
seed, so ``trainers.arena.run`` keeps both per process.  A run that takes them from the
process must write exactly the records of a run that computes them itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("textworld", reason="needs the ALFWorld engine: pip install -e '.[alfworld]'")

from trainers.arena import run
from trainers.arena.config import ArenaConfig
from trainers.arena.run import run_one

CFG = dict(max_steps=10, updates=2, tasks_per_update=2, group_size=2, train_tasks=4, val_tasks=4,
           eval_every=1, warm_start=4, warm_start_epochs=1)
TIMING = ("time", "seconds", "cpu_seconds", "eval_s")


def _records(folder: Path, method: str) -> list[dict]:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING and not k.startswith("time/")
                    and not k.endswith("_s")}
        return value

    lines = (folder / "runs" / f"{method}__seed0" / "metrics.jsonl").read_text().splitlines()
    return [strip(json.loads(line)) for line in lines]


def _forget() -> None:
    run._warm_starts.clear()
    run._first_validations.clear()


@pytest.mark.slow
def test_shared_warm_start_and_first_validation_change_no_record(tmp_path: Path) -> None:
    cfg = ArenaConfig.of(env="alfworld-generated", **CFG)
    _forget()
    try:
        run_one(cfg, "grpo", 0, tmp_path / "shared")
        run_one(cfg, "gigpo", 0, tmp_path / "shared")  # takes both from the process
        assert len(run._warm_starts) == 1 and len(run._first_validations) == 1
        _forget()
        run_one(cfg, "gigpo", 0, tmp_path / "own")  # computes both itself
    finally:
        _forget()
    shared, own = _records(tmp_path / "shared", "gigpo"), _records(tmp_path / "own", "gigpo")
    assert [r["phase"] for r in own].count("eval") == 3
    assert shared == own
