"""The options of ``rubricgym arena`` as one dataclass: the command's own options plus the
nested :class:`~trainers.arena.config.ArenaConfig` setting, whose fields become flags without a
prefix (``--lr``, ``--target-kl``...).  tyro generates the command line from it
(:mod:`trainers.typed_cli`); :func:`trainers.arena_cli.parse_arena_args` parses it.

Example:
    >>> from trainers.arena_cli import parse_arena_args
    >>> cmd = parse_arena_args(["--env", "webshop", "--estimators", "grpo,rloo", "-P", "2", "--no-rl"])
    >>> cmd.setting.env, cmd.setting.rollout.groups_per_update, cmd.setting.update.rl_update, cmd.setting.schedule.updates, cmd.estimators
    ('webshop', 2, False, 60, 'grpo,rloo')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

from trainers.arena.config import ArenaConfig

__all__ = ["ALL_ESTIMATORS", "ArenaCommand"]

#: Every registered estimator (:func:`trainers.arena.variants.arena_estimators`), the default
#: of ``--estimators``.
ALL_ESTIMATORS = "all"


@dataclass
class ArenaCommand:
    """Train a small linear policy with each estimator's advantages and compare learning curves.

    Writes per-run JSONL metrics under OUTPUT_DIR/runs, then results.md (the table with paired
    Student-t intervals and the minimum detectable difference), results.json, curves.png and
    diagnostics.png.  --env also sets the other settings' defaults (docs/arena.md).

    Attributes:
        setting: The arena setting.
        estimators: Comma-separated estimators ('all' for every registered one, --list names
            them); default: the env's (alfworld-generated: grpo,rloo,gigpo,graphgpo,mcgpo;
            others: all).
        variants: Comma-separated ablations and calibration controls as estimator:variant, e.g.
            mcgpo:same_fold,grpo:shuffle15 ('all' for every one; --list shows them); default: the
            env's (alfworld-generated: gigpo:step_shuffle; others: none).
        seeds: Seeds: a count (3 -> 0,1,2), a list (0,1,2) or a range (0-2); default: the
            setting's (enough seeds for its documented minimum detectable difference).
        baseline: Method for paired differences (default: the first).
        workers: Parallel processes (results do not depend on it); default: the CPU count, at most 2.
        output_dir: Output folder.
        report_only: Only redraw the report from OUTPUT_DIR's finished runs (works while a
            comparison runs).
        list_methods: List estimators, variants and environments, then exit.
    """

    setting: Annotated[ArenaConfig, tyro.conf.OmitArgPrefixes, tyro.conf.arg(name="")]
    estimators: str = ALL_ESTIMATORS
    variants: str = ""
    seeds: str | None = None
    baseline: str | None = None
    workers: Annotated[int | None, tyro.conf.arg(aliases=("-j",))] = None
    output_dir: Annotated[Path, tyro.conf.arg(aliases=("-o",))] = Path("arena_runs")
    report_only: Annotated[bool, tyro.conf.FlagCreatePairsOff] = False
    list_methods: Annotated[bool, tyro.conf.arg(name="list"), tyro.conf.FlagCreatePairsOff] = False
