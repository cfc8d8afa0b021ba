"""The Sokoban family: ``Sokoban-Rubric-v0`` declared once (:mod:`agent_envs.family`).

Everything rubricgym knows about Sokoban is here: the id, the rubric schema and template, the
keys, the tool kinds, the panel, the expert, the arena preset and the estimator settings.

Example:
    >>> FAMILY.name, FAMILY.tool_names
    ('sokoban', ('up', 'down', 'left', 'right'))
"""

from __future__ import annotations

from typing import Any

from agent_envs.family import ArenaPreset, Family
from agent_envs.panels import PanelSpec
from agent_envs.sokoban.rubric import CHANNELS, TEMPLATES

__all__ = ["FAMILY", "panel_tasks"]

ENV_ID = "Sokoban-Rubric-v0"

TOOL_KINDS: tuple[tuple[str, str, str], ...] = (
    ("up", "up", "Move up (pushing a box in the way)."),
    ("down", "down", "Move down (pushing a box in the way)."),
    ("left", "left", "Move left (pushing a box in the way)."),
    ("right", "right", "Move right (pushing a box in the way)."),
)

PANELS = (
    PanelSpec("sokoban-6x6-v1", ENV_ID, {}, {"split": "test"},
              "200 generated 6x6 one-box Sokoban levels of the test split (reverse play, depth 30; no download)",
              limit=200),
)

ARENA = {
    # GraphGPO's Sokoban setting: 8 rollouts per group, at most 15 steps; every estimator with
    # the step-shuffle control.  Trust region 0.2 (GRPO still climbs at 0.05 after 30 updates)
    # and raw advantages: with the running RMS, the first batches (no level solved) scale the
    # step estimators' time-of-visit differences of -0.1-per-step returns to full-size steps
    # and GiGPO collapses.  Raw advantages make an estimator's step size its advantages' size
    # (GiGPO x 0.25 gains 21 points): docs/results/arena-sokoban.md
    "sokoban": ArenaPreset(ENV_ID, "sokoban", {}, "train", "eval", max_steps=15, seeds=24,
                           settings={"group_size": 8, "groups_per_update": 4, "train_tasks": 64,
                                     "val_tasks": 64, "updates": 30, "eval_every": 5, "target_kl": 0.2,
                                     "adv_norm": "none"},
                           methods=("grpo,rloo,gigpo,graphgpo,mcgpo,hgpo,milegpo,scpo", "gigpo:step_shuffle")),
}

#: GraphGPO's Sokoban setting: γ = 0.8 (and MCGPO's GraphGPO task branch with it).  MileGPO and
#: SCPO report no Sokoban recipe: MileGPO takes its ``alfworld`` recipe (binary success), SCPO
#: α = 0.5 with τ_succ = 5.0 (a solved level returns at least +9.5, an unsolved one at most
#: ``num_boxes − 1`` boxes' +1 each).
ESTIMATORS: dict[str, dict[str, Any]] = {
    "gigpo": {"gamma": 0.95, "norm": "mean"},
    "hgpo": {"norm": "mean"},
    "graphgpo": {"gamma": 0.8},
    "milegpo": {"preset": "alfworld"},
    "scpo": {"alpha": 0.5, "success_threshold": 5.0},
    "mcgpo": {"gamma": 0.8},
}


def panel_tasks(env: Any, spec: PanelSpec) -> tuple[list[int], list[str], list[bytes], bytes]:
    """A panel's levels: indices of the split, each level's start grid."""
    u = env.unwrapped
    indices = list(u.split_range(spec.reset_options.get("split")))
    indices = indices[: spec.limit] if spec.limit is not None else indices
    from agent_envs.sokoban.room import render_text

    grids = [render_text(u.level(i).room, u.level(i).start).encode() for i in indices]
    return indices, [f"sokoban/{u.tag}/{i}" for i in indices], grids, b""


FAMILY = Family(
    name="sokoban",
    envs={ENV_ID: "agent_envs.sokoban.env:SokobanRubricEnv"},
    channels=CHANNELS,
    templates=TEMPLATES,
    keys={"exact": "(player, boxes): the whole state",
          "coarse": "(boxes on target, pushable, dead-locked, summed push distance, player touches a box)"},
    tool_kinds=TOOL_KINDS,
    panels=PANELS,
    panel_tasks="agent_envs.sokoban.family:panel_tasks",
    expert="agent_envs.sokoban.expert:plan",
    arena=ARENA,
    estimators=ESTIMATORS,
    observation_features="agent_envs.sokoban.features:grid_features",
)
