"""Training configuration: one dataclass of sections, presets, YAML/TOML files and overrides.

:class:`TrainConfig` nests one dataclass per concern (environment, policy, prompt, rollouts,
credit, objective, update, warm start, schedule, output); the rollout, objective, update,
warm-start and schedule sections are the arena's (:mod:`trainers.settings`), extended where a
language model needs more.  Every setting carries its type (``Literal`` for a choice), its
help text and its bounds where it is declared (TRL style); ``rubricgym train``'s flags are
generated from them by tyro, flat (``--group-size``) and grouped by section in ``--help``
(:mod:`trainers.typed_cli`).  Setting names are unique across sections, so files and presets
may be nested (``[rollout]`` tables, as :meth:`TrainConfig.save` writes them) or flat
``setting = value`` mappings (every ``config.yaml`` written before the sections, old names
included, so ``--resume`` of an old run folder works); :func:`load_config` also takes
``setting=value`` override strings (the Python API; the command line uses the flags).  A
configuration is validated before any work starts; a bad value raises :class:`ConfigError`
naming the setting and what is allowed.

Example:
    >>> cfg = load_config("demo", overrides=["group_size=4", "estimator=grpo", "estimator_params={}"])
    >>> cfg.rollout.group_size, cfg.credit.estimator
    (4, 'grpo')
    >>> load_config("demo", overrides=["action_mode=shout"])
    Traceback (most recent call last):
    ...
    trainers.config.ConfigError: action_mode must be one of 'generate', 'choose'; got 'shout'
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

from trainers.settings import (
    RENAMED,
    ObjectiveConfig,
    Rollouts,
    Schedule,
    Section,
    Updates,
    WarmStart,
    check,
    flatten,
    leaf_paths,
    nest,
    setting,
)
from trainers.typed_cli import YamlDict
from trainers.update_rule import UpdateRuleConfig

__all__ = [
    "PRESETS_DIR",
    "VLLM_REMOVED",
    "ConfigError",
    "TrainConfig",
    "apply_overrides",
    "available_presets",
    "config_help",
    "field_choices",
    "flat_settings",
    "load_config",
]

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


class ConfigError(ValueError):
    """An invalid configuration; the message names the field and what is allowed."""


#: Why ``backend = "vllm"`` (in a file written before the setting was dropped) is refused, and what to use instead.
VLLM_REMOVED = ("backend='vllm' was removed (its weight sync was never run and was not LoRA-safe), and with it "
                "the backend setting: rubricgym train generates with transformers on the policy itself; generate "
                "with vLLM on GPUs through the TRL or verl integrations, which take rubricgym's environments and "
                "credit estimators (docs/integrations/)")





@dataclass
class EnvSettings:
    """The environment and its tasks."""

    env_id: str = setting("ALFWorld-Rubric-v0", "Gymnasium id of the environment (a registered rubricgym id or any id whose env follows SPEC §2).")
    env_kwargs: YamlDict = setting({}, "Keyword arguments for gym.make, a mapping (in a TOML file {generated_n = 12}; as a flag '{generated_n: 12}'); the horizon is max_steps, not a key here.")
    train_split: str = setting("train", "Task split the training tasks come from (passed as options['split'] to reset).")
    val_split: str = setting("valid_seen", "Task split of the fixed validation set.")
    max_steps: int = setting(50, "Episode horizon in decisions (ALFWorld 50, WebShop 15); a rubricgym environment is made with it (its truncation and budget-binned keys), the one horizon of the run.", ge=1)
    env_workers: int = setting(0, "Worker processes that step the environments (0 = step them in the trainer process).", ge=0)
    env_timeout: float = setting(600.0, "With env_workers > 0: seconds a worker may take to answer one batched reset or step before the run stops with an error naming it (0 = wait forever).", ge=0)


@dataclass
class PolicySettings:
    """The language model that acts and trains, its precision and what of it trains."""

    model: str = setting("smollm2", "Policy: 'tiny-llama', 'tiny-qwen2' (random, for tests), 'smollm2' (packaged SmolLM2-135M-Instruct), a local folder or a hub id.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting("auto", "Parameter dtype; 'auto' = bfloat16 on a bf16-capable GPU, float32 otherwise.")
    rollout_dtype: Literal["auto", "float32", "bfloat16"] = setting("auto", "Weights the rollout policy runs on: 'float32' (the training model itself), 'bfloat16' (a bf16 copy refreshed after every update: faster on CPU, probabilities within a few percent), 'auto' = bfloat16 on CPU when mixed_precision is bf16, else float32.")
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = setting("auto", "Accelerate mixed precision; 'auto' = bf16 on a bf16-capable GPU or a CPU with AMX bf16, else none.")
    torch_threads: int = setting(0, "CPU threads for torch (0 = auto: the cores not busy at the start, measured over 0.25 s, at least 1; $RUBRICGYM_TORCH_THREADS overrides). Results are bit-reproducible (e.g. across --resume) only with a fixed count. Ignored on GPU.", ge=0)
    lora: bool = setting(False, "Train peft LoRA adapters instead of all weights (the reference policy is then the base model with adapters disabled).")
    lora_r: int = setting(16, "LoRA rank r of the adapter matrices.", ge=1)
    lora_alpha: int = setting(32, "LoRA scaling alpha (the update is scaled by alpha / r).", ge=1)
    lora_dropout: float = setting(0.0, "LoRA dropout (0 keeps the rollout and training policies identical).", ge=0, lt=1)
    lora_target_modules: list = setting(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "Module names that get LoRA adapters.")
    trainable_layers: int = setting(0, "Train only the top N transformer blocks and the final norm; the embeddings (and a tied LM head) and the lower blocks stay frozen (0 = train everything). A CPU speed option: the backward pass stops at the lowest trainable block. Not with lora.", ge=0)
    gradient_checkpointing: bool = setting(True, "Recompute activations in the backward pass to save memory.")


@dataclass
class PromptSettings:
    """What the policy reads and how it answers."""

    action_mode: Literal["generate", "choose"] = setting("generate", "'generate': the policy writes free text that is parsed into an action (the papers' setting); 'choose': the policy scores every admissible action by its log-probability and samples among them (always valid).")
    prompt_style: Literal["think", "action_only"] = setting("think", "'think': reason in <think>...</think> then answer <action>...</action>; 'action_only': answer only <action>...</action>.")
    history_length: int = setting(2, "How many recent (observation, action) pairs the prompt shows.", ge=0)
    list_actions: bool = setting(True, "Show the admissible actions in the prompt.")
    compact_prompt: bool = setting(False, "Shorter prompts with the same fields: no opening sentence, observations without banners, blank lines or a repeated goal line (a CPU speed option).")
    system_prompt: str = setting("", "System message sent with every prompt ('' = none; some chat templates then insert their own default).")
    max_prompt_tokens: int = setting(2048, "Prompts longer than this are cut from the left (the history goes first).", ge=1)
    max_response_tokens: int = setting(512, "Longest generated response.", ge=1)


@dataclass
class TrainRollouts(Rollouts):
    """How rollouts are sampled: P groups of G siblings per update, generated by the policy itself."""

    top_p: float = setting(1.0, "Rollout nucleus sampling (1 = off).", gt=0, le=1)
    rollout_batch_size: int = setting(64, "Most sequences generated or scored in one forward batch.", ge=1)
    save_rollouts: bool = setting(True, "Write each update's trajectories to rollouts/update_XXXXX.jsonl.")


@dataclass
class CreditSettings:
    """Credit assignment: the estimator and what the PPO ratio is computed on."""

    estimator: str = setting("graphgpo", "Credit estimator by name (wrappers.credit.available_estimators()).")
    estimator_params: YamlDict = setting({}, "Keyword parameters of the estimator, a mapping (e.g. '{gamma: 0.1}'), on top of the papers' setting the environment's family declares (agent_envs.family.Family.estimators, e.g. GraphGPO's gamma 0.8 on Sokoban).")
    rubric_shaping: float = setting(0.0, "Rubric event shaping coefficient [MCGPO Eq. 18]: each step's penalty gets coef·(channels that rose − channels that fell), which estimators add to the step's return (0 = off; needs info['rubric']).", ge=0)
    rl_loss: Literal["auto", "tokens", "choice"] = setting("auto", "What the PPO ratio, KL and entropy are computed on: 'tokens' (the response's tokens; SPEC §5, the papers' objective in generate mode), 'choice' (choose mode only: the choose policy's own log-probability of the sampled action, log-softmax over the admissible actions' scores at the rollout temperature; one ratio per decision, the entropy of the choice distribution) or 'auto' (choice in choose mode, else tokens).")


@dataclass
class TrainUpdates(Updates):
    """How far one update moves the policy, and how its rows are batched."""

    weight_decay: float = setting(0.0, "Weight decay of the RL updates' SGD step, θ ← θ − lr·(∇L + λ·θ) (for SGD without momentum decoupled and L2 decay are the same step). Non-zero decay moves the weights even when every advantage is 0, so it is off by default.", ge=0)
    lr_schedule: Literal["constant", "linear", "cosine"] = setting("constant", "Learning-rate schedule over the updates.")
    warmup_updates: int = setting(0, "Linear warm-up length in updates.", ge=0)
    max_grad_norm: float = setting(1.0, "Gradient clipping norm of every SGD step (0 = off).", ge=0)
    mini_batches: int = setting(1, "SGD steps per epoch (the rows are split into this many mini-batches).", ge=1)
    micro_batch_rows: int = setting(8, "Rows per forward/backward (gradient accumulation fills a mini-batch); must be ≥ 2 when pairs are used.", ge=1)
    skip_zero_advantage_rows: bool = setting(False, "Leave out rows whose advantage is exactly 0 and that are in no pair (their policy-gradient term is 0; only their KL/entropy terms are lost). A CPU speed option.")
    max_train_rows: int = setting(0, "Train on a uniformly random subset of at most this many rows per update and process (pair-joined rows stay together; 0 = all rows). A CPU speed option.", ge=0)
    logprob_batch_rows: int = setting(16, "Rows per no-grad forward when computing old/reference log-probs.", ge=1)


@dataclass
class TrainWarmStart(WarmStart):
    """Behaviour cloning on stored walkthroughs before the first RL update (AdamW, its own
    optimiser, not checkpointed: a run killed during the warm start starts it again). Validation
    runs before it and, with eval_after_warm_start, after it. With full fine-tuning and
    kl_coef > 0 the KL reference becomes the warm-started policy."""

    warm_start_loss: Literal["auto", "tokens", "choice"] = setting("auto", "Warm-start objective: 'tokens' (token NLL of the expert's response), 'choice' (NLL of the expert's choice among the admissible actions, as choose mode samples them) or 'auto' (choice in choose mode, else tokens).")
    warm_start_batch_rows: int = setting(8, "Rows per warm-start optimizer step (split into micro_batch_rows forwards).", ge=1)
    eval_after_warm_start: bool = setting(True, "Validate after the warm start as well (logged as 'eval_warm_start', not part of the learning curve).")


@dataclass
class TrainSchedule(Schedule):
    """What the run trains and validates on, for how long, and when it checkpoints."""

    eval_at_start: bool = setting(True, "Also validate before the first update.")
    eval_train_games: bool = setting(False, "Also play every training game once (at val_temperature, the same seeds both times) right before the first update (after the warm start) and after the last: what the RL phase changed on the games it trained on (logged as eval_train_before / eval_train_after, in summary.txt).")
    save_every: int = setting(5, "Write a checkpoint every N updates (and at the end).", ge=1)
    keep_checkpoints: int = setting(2, "How many complete checkpoints to keep.", ge=1)
    seed: int = setting(0, "Random seed (task sampling, generation, initialisation).")


@dataclass
class OutputSettings:
    """Where the run folder goes and what it shows."""

    output_dir: Annotated[str, tyro.conf.arg(aliases=("-o",))] = setting("runs", "Parent folder of run folders.")
    run_name: str = setting("", "Run folder name (default: preset-estimator-seed-timestamp).")
    tensorboard: bool = setting(True, "Also write TensorBoard event files.")
    progress: bool = setting(True, "Show a progress bar.")
    preset: str = setting("", "Name of the preset this configuration came from (informational).")


@dataclass
class TrainConfig:
    """Everything a training run needs (defaults = the papers' ALFWorld recipe, SPEC §5), in
    sections; ``rollout``, ``objective``, ``update``, ``warm_start`` and ``schedule`` extend the
    sections the arena uses (:mod:`trainers.settings`)."""

    env: Section[EnvSettings] = field(default_factory=EnvSettings)
    policy: Section[PolicySettings] = field(default_factory=PolicySettings)
    prompt: Section[PromptSettings] = field(default_factory=PromptSettings)
    rollout: Section[TrainRollouts] = field(default_factory=TrainRollouts)
    credit: Section[CreditSettings] = field(default_factory=CreditSettings)
    objective: Section[ObjectiveConfig] = field(default_factory=ObjectiveConfig)
    update: Section[TrainUpdates] = field(default_factory=TrainUpdates)
    warm_start: Section[TrainWarmStart] = field(default_factory=TrainWarmStart)
    schedule: Section[TrainSchedule] = field(default_factory=TrainSchedule)
    output: Section[OutputSettings] = field(default_factory=OutputSettings)

    def env_make_kwargs(self) -> dict[str, Any]:
        """``env_kwargs`` for ``gym.make``, with the run's horizon: a rubricgym environment
        gets ``max_steps`` (one horizon for the environment's truncation, its budget-binned
        matching keys and the rollouts)."""
        from agent_envs.registration import ENV_IDS

        env = self.env
        return {**env.env_kwargs, "max_steps": env.max_steps} if env.env_id in ENV_IDS else dict(env.env_kwargs)

    def validate(self) -> TrainConfig:
        """Check every field (its type, choices and the bounds declared with it), then the
        settings that constrain each other; raise :class:`ConfigError` naming the first bad one."""
        try:
            check(self)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not self.rollout.val_temperature > 0:
            raise ConfigError(f"val_temperature must be > 0; got {self.rollout.val_temperature!r}")
        horizon = self.env.env_kwargs.get("max_steps")
        if horizon is not None and horizon != self.env.max_steps:
            raise ConfigError(f"env_kwargs max_steps {horizon!r} differs from max_steps {self.env.max_steps}: the run has one "
                              "horizon, set it with --max-steps")
        if self.objective.pair_coef > 0 and self.update.micro_batch_rows < 2 and self.credit.estimator == "mcgpo":
            raise ConfigError("micro_batch_rows must be ≥ 2 when estimator='mcgpo' (both rows of a pair share a micro-batch)")
        if self.policy.trainable_layers and self.policy.lora:
            raise ConfigError("trainable_layers must be 0 when lora=true (LoRA already chooses what trains)")
        if self.credit.rl_loss == "choice" and self.prompt.action_mode != "choose":
            raise ConfigError("rl_loss='choice' needs action_mode='choose' (generated responses have no candidate set)")
        self._validate_estimator()
        return self

    def update_rule(self) -> UpdateRuleConfig:
        """The shared update rule's settings (:mod:`trainers.update_rule`): ``ppo_epochs``
        epochs, ``target_kl``, ``adv_norm``."""
        return self.update.rule()

    def loss_unit(self, value: str) -> str:
        """Resolve a loss setting (``warm_start_loss`` or ``rl_loss``): ``"auto"`` is
        ``"choice"`` in choose mode and ``"tokens"`` otherwise; other values stand."""
        if value != "auto":
            return value
        return "choice" if self.prompt.action_mode == "choose" else "tokens"

    def estimator_params(self) -> dict[str, Any]:
        """The estimator's keyword parameters: the papers' setting that the environment's family
        declares (:meth:`agent_envs.family.Family.estimator_params`, as the arena takes them, e.g.
        GraphGPO's γ = 0.8 on Sokoban), with the ``estimator_params`` setting on top."""
        from agent_envs.family import estimator_params

        return estimator_params(self.env.env_id, self.credit.estimator, self.credit.estimator_params)

    def _validate_estimator(self) -> None:
        from wrappers.credit import available_estimators, get_estimator

        names = available_estimators()
        if self.credit.estimator not in names:
            raise ConfigError(f"estimator must be one of {', '.join(map(repr, names))}; got {self.credit.estimator!r}")
        try:
            get_estimator(self.credit.estimator, **self.estimator_params())
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"estimator_params: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict, a mapping per section (JSON/YAML/TOML friendly)."""
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """``{setting: value}`` with the sections dissolved (each name is unique)."""
        return flatten(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the configuration as YAML (or JSON when the suffix is ``.json``), one mapping per section."""
        path = Path(path)
        data = self.to_dict()
        if path.suffix == ".json":
            path.write_text(json.dumps(data, indent=2) + "\n")
        else:
            import yaml

            path.write_text(yaml.safe_dump(data, sort_keys=False))


#: Settings that no longer exist, and what a value under that name in an old file means.
_DROPPED = {"backend": "transformers"}  # 'vllm' was refused before it was dropped (VLLM_REMOVED)


def _leaf_paths() -> dict[str, tuple[str, ...]]:
    global _PATHS
    if _PATHS is None:
        _PATHS = leaf_paths(TrainConfig)
    return _PATHS


_PATHS: dict[str, tuple[str, ...]] | None = None


def _section_class(name: str) -> type:
    """The section dataclass that holds setting ``name``."""
    return typing.get_type_hints(TrainConfig)[_leaf_paths()[name][0]]


def _leaf_field(name: str) -> dataclasses.Field:
    return next(f for f in dataclasses.fields(_section_class(name)) if f.name == name)


def _leaf_type(name: str) -> Any:
    """The setting's type (``get_type_hints`` drops the ``Annotated`` flag options)."""
    return typing.get_type_hints(_section_class(name))[name]


def field_choices(name: str) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal`` setting of :class:`TrainConfig` (``None``: any value of its type)."""
    tp = _leaf_type(name)
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else None


def _is_text(name: str) -> bool:
    """Whether the setting holds a string (``str`` or a ``Literal`` of strings)."""
    choices = field_choices(name)
    tp = _leaf_type(name)
    return tp is str or (choices is not None and all(isinstance(c, str) for c in choices))


def _coerce(name: str, raw: Any) -> Any:
    """Convert a value read from a file or the command line to the setting's type."""
    tp = _leaf_type(name)
    origin = typing.get_origin(tp) or tp
    if origin is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    if origin in (float, int) and isinstance(raw, str):  # YAML 1.1 reads "1e-5" as a string
        try:
            return origin(raw)
        except ValueError:
            return raw
    if _is_text(name) and not isinstance(raw, str) and raw is not None:
        return str(raw)
    return raw


def _flat_items(data: dict[str, Any]) -> dict[str, Any]:
    """A file's mapping as ``{setting: value}``: sections (current files) and flat keys (files
    written before the sections, old names included) alike; dropped settings checked and left out."""
    sections = {f.name for f in dataclasses.fields(TrainConfig)}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in sections and isinstance(value, dict):
            out.update(value)
        elif key in _DROPPED:
            if key == "backend" and value == "vllm":
                raise ConfigError(VLLM_REMOVED)
            if value != _DROPPED[key]:
                raise ConfigError(f"{key} was removed; only {_DROPPED[key]!r} was ever accepted; got {value!r}")
        else:
            out[key] = value
    return out


def available_presets() -> list[str]:
    """Names of the packaged presets (``trainers/presets/*.toml|yaml``)."""
    return sorted({p.stem for p in PRESETS_DIR.glob("*") if p.suffix in (".toml", ".yaml", ".yml")})


def _read_file(path: Path) -> dict[str, Any]:
    try:
        if path.suffix == ".toml":
            if sys.version_info >= (3, 11):
                import tomllib
            else:  # pragma: no cover
                import tomli as tomllib
            data = tomllib.loads(path.read_text())
        elif path.suffix in (".yaml", ".yml", ".json"):
            import yaml

            data = yaml.safe_load(path.read_text()) or {}
        else:
            raise ConfigError(f"config file {path} must end in .toml, .yaml, .yml or .json")
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001  (tomllib/yaml errors differ)
        raise ConfigError(f"config file {path} could not be parsed: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of field = value")
    return data


def flat_settings(data: dict[str, Any]) -> dict[str, Any]:
    """A configuration mapping (a run's ``config.yaml`` or ``run`` record; nested by section, or
    flat as written before the sections) as ``{setting: value}`` under today's names."""
    paths = _leaf_paths()
    items = {}
    for key, value in _flat_items(data).items():
        for name in RENAMED.get(key, (key,)) if key not in paths else (key,):
            items[name] = _coerce(name, value) if name in paths else value
    return items


def _from_mapping(data: dict[str, Any], base: TrainConfig | None = None, source: str = "config") -> TrainConfig:
    cfg = base if base is not None else TrainConfig()
    items = flat_settings(data)
    try:
        return nest(items, TrainConfig, cfg, source=source)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def apply_overrides(cfg: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``field=value`` strings (values parsed as YAML: ``3``, ``1e-5``, ``true``,
    ``{gamma: 0.1}``, ``[a, b]``); ``env_kwargs.max_steps=8`` sets one key of a dict field."""
    import yaml

    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like field=value")
        key, raw = item.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        if key in _leaf_paths() and _is_text(key):  # strings are taken verbatim ("no" must not become False)
            value = raw.strip()
        else:
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                value = raw
        if "." in key:
            head, sub = key.split(".", 1)
            current = _get(cfg, head) if head in _leaf_paths() else None
            if not isinstance(current, dict):
                raise ConfigError(f"override {item!r}: {head!r} is not a dict field")
            current[sub] = value
            continue
        _from_mapping({key: value}, cfg, source="override")
    return cfg


def load_config(source: str | os.PathLike[str] | None = None, overrides: list[str] | None = None, *, validate: bool = True) -> TrainConfig:
    """Build a configuration from a preset name or a file, then apply overrides.

    Args:
        source: A preset name (``available_presets()``), a ``.toml``/``.yaml``/``.json``
            file, or ``None`` for the defaults.  A file may name ``preset = "..."`` to start
            from a preset.
        overrides: ``field=value`` strings (see :func:`apply_overrides`).
        validate: Run :meth:`TrainConfig.validate`.
    """
    cfg = TrainConfig()
    if source is not None:
        source = str(source)
        path = Path(source)
        if path.suffix in (".toml", ".yaml", ".yml", ".json") and path.exists():
            data = _read_file(path)
            named = _flat_items(data).get("preset")
            if named:
                cfg = load_config(named, validate=False)
            cfg = _from_mapping(data, cfg, source=str(path))
        elif source in available_presets():
            preset_path = next(p for p in sorted(PRESETS_DIR.glob(source + ".*")))
            cfg = _from_mapping(_read_file(preset_path), cfg, source=str(preset_path))
            cfg.output.preset = source
        else:
            raise ConfigError(
                f"config {source!r} is neither a file nor a preset; presets: {', '.join(available_presets())}"
            )
    if overrides:
        apply_overrides(cfg, overrides)
    return cfg.validate() if validate else cfg


def _get(cfg: TrainConfig, name: str) -> Any:
    """The value of setting ``name`` (a leaf of one of the sections)."""
    section, leaf = _leaf_paths()[name]
    return getattr(getattr(cfg, section), leaf)


def config_help() -> list[tuple[str, str, str, str, str]]:
    """``(section, name, type, default, help)`` for every setting (a table for docs;
    `rubricgym train --help` shows the same through tyro, grouped by section)."""
    out = []
    defaults = TrainConfig()
    for name, (section, _) in _leaf_paths().items():
        f = _leaf_field(name)
        tp = _leaf_type(name)
        help_text = f.metadata["help"]
        choices = field_choices(name)
        if choices is not None:
            help_text += " Choices: " + ", ".join(map(str, choices)) + "."
        type_name = "str" if choices is not None else getattr(tp, "__name__", str(tp))
        out.append((section, name, type_name, repr(_get(defaults, name)), help_text))
    return out
