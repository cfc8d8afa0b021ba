"""The ALFWorld family: ``ALFWorld-Rubric-v0`` declared once (:mod:`agent_envs.family`).

Importing this module imports no engine: entry points are strings, resolved when used.

Example:
    >>> FAMILY.name, FAMILY.envs["ALFWorld-Rubric-v0"]
    ('alfworld', 'agent_envs.alfworld.env:ALFWorldRubricEnv')
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from agent_envs.family import ArenaPreset, Family
from agent_envs.panels import PanelSpec, interleave_types
from rubrics.channels import ALFWORLD_CHANNELS
from rubrics.templates import ALFWORLD_TASK_TYPES

__all__ = ["FAMILY", "panel_tasks"]

ENV_ID = "ALFWorld-Rubric-v0"

#: ALFWorld's actions as tools: (name, template, description).
TOOL_KINDS: tuple[tuple[str, str, str], ...] = (
    ("go_to", "go to {target}", "Walk to a receptacle or place."),
    ("take", "take {object} from {receptacle}", "Pick up an object from a receptacle."),
    ("move", "move {object} to {receptacle}", "Put the object you hold into or onto a receptacle."),
    ("open", "open {target}", "Open a receptacle."),
    ("close", "close {target}", "Close a receptacle."),
    ("toggle", "toggle {target}", "Switch an object or appliance on or off."),
    ("use", "use {target}", "Use an object (e.g. a lamp)."),
    ("clean", "clean {object} with {receptacle}", "Clean an object with a receptacle (a sink)."),
    ("heat", "heat {object} with {receptacle}", "Heat an object with a receptacle (a microwave)."),
    ("cool", "cool {object} with {receptacle}", "Cool an object with a receptacle (a fridge)."),
    ("examine", "examine {target}", "Look closely at an object or receptacle."),
    ("look", "look", "Look around."),
    ("inventory", "inventory", "List what you hold."),
)

PANELS = (
    PanelSpec("alfworld-generated-v1", ENV_ID, {"split": "generated", "generated_n": 60, "generated_seed": 0}, {},
              "60 seeded, engine-verified generated ALFWorld games (all six task types; no download)"),
    PanelSpec("alfworld-valid-seen-v1", ENV_ID, {"split": "valid_seen"}, {},
              "ALFWorld's 140 valid_seen games (rubricgym data alfworld)"),
    PanelSpec("alfworld-valid-unseen-v1", ENV_ID, {"split": "valid_unseen"}, {},
              "ALFWorld's 134 valid_unseen games (rubricgym data alfworld)"),
)

#: The arena's ALFWorld setting: the uniform policy practically never wins ALFWorld within a short
#: horizon, so every method starts from the same behaviour-cloned policy (docs/arena.md, "ALFWorld").
#: Validation at T = 0.4 (SPEC §6), one episode per task: more episodes leave the paired SD
#: unchanged and greedy validation does not see GRPO's learning (docs/arena.md, "Choosing the
#: validation"; bench/arena_eval_noise.py).  The real splits use the same sizes (not yet measured there).
_SETTING: dict[str, Any] = {
    "max_steps": 30, "warm_start_tasks": 36, "train_tasks": 36, "val_tasks": 24, "updates": 12,
    "groups_per_update": 4, "group_size": 6, "eval_every": 4,
}
_ENV_SETTINGS = {"task_types": "task_types", "fast_grammar": "fast_grammar"}

ARENA = {
    # the powered comparison's five estimators with the finest calibration control beside them
    # (GiGPO with its step credit destroyed: it needs every seed to be resolved); the coarse
    # controls, MileGPO and SCPO are further commands into the same folder (docs/arena.md)
    "alfworld-generated": ArenaPreset(ENV_ID, "alfworld", {"split": "generated"}, "generated", "generated",
                                      generated_n=60, max_steps=20, settings=_SETTING, seeds=64,
                                      methods=("grpo,rloo,gigpo,graphgpo,mcgpo", "gigpo:step_shuffle"),
                                      env_settings=_ENV_SETTINGS),
    "alfworld": ArenaPreset(ENV_ID, "alfworld", {"split": "train"}, "train", "valid_seen", max_steps=30,
                            settings=_SETTING, seeds=3, env_settings=_ENV_SETTINGS),
    "alfworld-unseen": ArenaPreset(ENV_ID, "alfworld", {"split": "train"}, "train", "valid_unseen", max_steps=30,
                                   settings=_SETTING, seeds=3, env_settings=_ENV_SETTINGS),
}

#: The papers' settings on ALFWorld (SPEC §4): GraphGPO and MCGPO's task branch γ = 0.1,
#: MileGPO's ``alfworld`` recipe (Table 5), SCPO α = 0.5 and τ_succ = 0.
ESTIMATORS: dict[str, dict[str, Any]] = {
    "gigpo": {"gamma": 0.95},
    "graphgpo": {"gamma": 0.1},
    "milegpo": {"preset": "alfworld"},
    "scpo": {"alpha": 0.5, "success_threshold": 0.0},
    "mcgpo": {"gamma": 0.1},
}


def panel_tasks(env: Any, spec: PanelSpec) -> tuple[list[str], list[str], list[bytes], bytes]:
    """A panel's games: ids round-robin over the task types, each game file's bytes."""
    ids, paths = env.unwrapped._catalogue(spec.env_kwargs["split"])
    ids = interleave_types(list(ids))
    ids = ids[: spec.limit] if spec.limit is not None else ids
    return list(ids), [str(t) for t in ids], [Path(paths[t]).read_bytes() for t in ids], b""


FAMILY = Family(
    name="alfworld",
    envs={ENV_ID: "agent_envs.alfworld.env:ALFWorldRubricEnv"},
    channels=ALFWORLD_CHANNELS,
    templates=Path(str(resources.files("rubrics") / "templates" / "alfworld")),
    task_types=ALFWORLD_TASK_TYPES,
    keys={"exact": "(task type, location, held object, acquired, processed and placed targets, light) "
                   "[MCGPO Table 5]",
          "coarse": "(task type, location, holding?, processed?, placements, light, remaining-budget bin)"},
    tool_kinds=TOOL_KINDS,
    panels=PANELS,
    panel_tasks="agent_envs.alfworld.family:panel_tasks",
    versions=("alfworld", "textworld", "fast_downward_textworld"),
    data_root_kwarg="data_root",
    expert="agent_envs.alfworld.data:task_walkthrough",
    arena=ARENA,
    estimators=ESTIMATORS,
)
