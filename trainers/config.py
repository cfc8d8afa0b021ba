"""Training configuration: a typed dataclass, presets, YAML/TOML files and overrides.

Every field carries its type (``Literal`` for a choice) and its help text in
``metadata["help"]`` (TRL style); ``rubricgym train``'s flags are generated from them by tyro
(:mod:`trainers.typed_cli`, ``rubricgym train --help``).  Files and presets are mappings of
field = value; :func:`load_config` also takes ``field=value`` override strings (the Python
API; the command line uses the flags).  A configuration is validated before any work
starts; a bad value raises :class:`ConfigError` naming the field and the allowed values.

Example:
    >>> cfg = load_config("demo", overrides=["group_size=4", "estimator=grpo", "estimator_params={}"])
    >>> cfg.group_size, cfg.estimator
    (4, 'grpo')
    >>> load_config("demo", overrides=["action_mode=shout"])
    Traceback (most recent call last):
    ...
    trainers.config.ConfigError: action_mode must be one of 'generate', 'choose'; got 'shout'
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import tyro

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
    "load_config",
]

PRESETS_DIR = Path(__file__).resolve().parent / "presets"


class ConfigError(ValueError):
    """An invalid configuration; the message names the field and what is allowed."""


#: Why ``backend = "vllm"`` is refused, and what to use instead.
VLLM_REMOVED = ("backend='vllm' was removed (its weight sync was never run and was not LoRA-safe); "
                "use backend='transformers', or generate with vLLM on GPUs through the TRL or verl "
                "integrations, which take rubricgym's environments and credit estimators (docs/integrations.md)")


def _f(default: Any, help: str, **kw: Any) -> Any:
    """A field with its help text (``metadata["help"]``, which tyro shows in ``--help``)."""
    meta = {"help": help}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda d=default: json.loads(json.dumps(d)), metadata=meta)
    return field(default=default, metadata=meta, **kw)


@dataclass
class TrainConfig:
    """Everything a training run needs (defaults = the papers' ALFWorld recipe, SPEC §5)."""

    # --- environment and tasks ---------------------------------------------------------
    env_id: str = _f("ALFWorld-Rubric-v0", "Gymnasium id of the environment (a registered rubricgym id or any id whose env follows SPEC §2).")
    env_kwargs: YamlDict = _f({}, "Keyword arguments for gym.make, a mapping (in a TOML file {max_steps = 50}; as a flag '{max_steps: 50}').")
    train_split: str = _f("train", "Task split the training tasks come from (passed as options['split'] to reset).")
    val_split: str = _f("valid_seen", "Task split of the fixed validation set.")
    train_tasks: int = _f(0, "Number of training task indices to sample from (0 = every task the environment reports for the split).")
    val_tasks: int = _f(128, "Size of the fixed validation set (the first N task indices of val_split).")
    max_steps: int = _f(50, "Episode horizon in decisions (ALFWorld 50, WebShop 15); a rubricgym environment is made with it (its truncation and budget-binned keys), the one horizon of the run.")
    env_workers: int = _f(0, "Worker processes that step the environments (0 = step them in the trainer process).")
    env_timeout: float = _f(600.0, "With env_workers > 0: seconds a worker may take to answer one batched reset or step before the run stops with an error naming it (0 = wait forever).")
    torch_threads: int = _f(0, "CPU threads for torch (0 = auto: the cores not busy at the start, measured over 0.25 s, at least 1; $RUBRICGYM_TORCH_THREADS overrides). Results are bit-reproducible (e.g. across --resume) only with a fixed count. Ignored on GPU.")
    rubric_shaping: float = _f(0.0, "Rubric event shaping coefficient [MCGPO Eq. 18]: each step's penalty gets coef·(channels that rose − channels that fell), which estimators add to the step's return (0 = off; needs info['rubric']).")

    # --- model ---------------------------------------------------------------------------
    model: str = _f("smollm2", "Policy: 'tiny-llama', 'tiny-qwen2' (random, for tests), 'smollm2' (packaged SmolLM2-135M-Instruct), a local folder or a hub id.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = _f("auto", "Parameter dtype; 'auto' = bfloat16 on a bf16-capable GPU, float32 otherwise.")
    rollout_dtype: Literal["auto", "float32", "bfloat16"] = _f("auto", "Weights the rollout policy runs on: 'float32' (the training model itself), 'bfloat16' (a bf16 copy refreshed after every update: faster on CPU, probabilities within a few percent), 'auto' = bfloat16 on CPU when mixed_precision is bf16, else float32.")
    mixed_precision: Literal["auto", "no", "bf16", "fp16"] = _f("auto", "Accelerate mixed precision; 'auto' = bf16 on a bf16-capable GPU or a CPU with AMX bf16, else none.")
    lora: bool = _f(False, "Train peft LoRA adapters instead of all weights (the reference policy is then the base model with adapters disabled).")
    lora_r: int = _f(16, "LoRA rank r of the adapter matrices.")
    lora_alpha: int = _f(32, "LoRA scaling alpha (the update is scaled by alpha / r).")
    lora_dropout: float = _f(0.0, "LoRA dropout (0 keeps the rollout and training policies identical).")
    lora_target_modules: list = _f(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], "Module names that get LoRA adapters.")
    trainable_layers: int = _f(0, "Train only the top N transformer blocks and the final norm; the embeddings (and a tied LM head) and the lower blocks stay frozen (0 = train everything). A CPU speed option: the backward pass stops at the lowest trainable block. Not with lora.")
    gradient_checkpointing: bool = _f(True, "Recompute activations in the backward pass to save memory.")

    # --- prompts and rollouts --------------------------------------------------------------
    action_mode: Literal["generate", "choose"] = _f("generate", "'generate': the policy writes free text that is parsed into an action (the papers' setting); 'choose': the policy scores every admissible action by its log-probability and samples among them (always valid).")
    prompt_style: Literal["think", "action_only"] = _f("think", "'think': reason in <think>...</think> then answer <action>...</action>; 'action_only': answer only <action>...</action>.")
    history_length: int = _f(2, "How many recent (observation, action) pairs the prompt shows.")
    list_actions: bool = _f(True, "Show the admissible actions in the prompt.")
    compact_prompt: bool = _f(False, "Shorter prompts with the same fields: no opening sentence, observations without banners, blank lines or a repeated goal line (a CPU speed option).")
    system_prompt: str = _f("", "System message sent with every prompt ('' = none; some chat templates then insert their own default).")
    max_prompt_tokens: int = _f(2048, "Prompts longer than this are cut from the left (the history goes first).")
    max_response_tokens: int = _f(512, "Longest generated response.")
    groups_per_update: int = _f(16, "P: task groups per update.")
    group_size: int = _f(8, "G: sibling rollouts per task group.")
    temperature: float = _f(1.0, "Rollout sampling temperature.")
    top_p: float = _f(1.0, "Rollout nucleus sampling (1 = off).")
    val_temperature: float = _f(0.4, "Validation sampling temperature.")
    backend: Literal["transformers"] = _f("transformers", "Generation backend: 'transformers' (generate on the policy itself; CPU and GPU). For vLLM on GPUs use the TRL or verl integrations (docs/integrations.md).")
    rollout_batch_size: int = _f(64, "Most sequences generated or scored in one forward batch.")
    save_rollouts: bool = _f(True, "Write each update's trajectories to rollouts/update_XXXXX.jsonl.")

    # --- credit and objective ---------------------------------------------------------------
    estimator: str = _f("graphgpo", "Credit estimator by name (wrappers.credit.available_estimators()).")
    estimator_params: YamlDict = _f({}, "Keyword parameters of the estimator, a mapping (e.g. '{gamma: 0.1}').")
    rl_loss: Literal["auto", "tokens", "choice"] = _f("auto", "What the PPO ratio, KL and entropy are computed on: 'tokens' (the response's tokens; SPEC §5, the papers' objective in generate mode), 'choice' (choose mode only: the choose policy's own log-probability of the sampled action, log-softmax over the admissible actions' scores at the rollout temperature; one ratio per decision, the entropy of the choice distribution) or 'auto' (choice in choose mode, else tokens).")
    pair_coef: float = _f(0.05, "λ_pair: weight of MCGPO's pairwise loss (used when the estimator returns pairs).")
    clip_ratio: float = _f(0.2, "PPO clip ε: ρ is clipped to [1-ε, 1+ε].")
    dual_clip: float = _f(3.0, "Dual-clip constant c: for A < 0 the loss is min(ℓ_clip, -c·A).")
    kl_coef: float = _f(0.01, "Weight of the k3 KL estimate to the frozen reference policy (0 = no reference).")
    kl_clip: float = _f(10.0, "The k3 estimate is clipped to [-kl_clip, kl_clip].")
    entropy_coef: float = _f(0.001, "Entropy bonus weight.")

    # --- optimisation -------------------------------------------------------------------------
    learning_rate: float = _f(0.01, "Step size of the RL updates' plain SGD (no momentum, no Adam: the step is proportional to the gradient, so all-zero advantages leave the weights where they are), applied to advantages in units of their running RMS (adv_norm); the trust region (target_kl) bounds how far one update moves the policy whatever the step size.")
    weight_decay: float = _f(0.0, "Weight decay of the RL updates' SGD step, θ ← θ − lr·(∇L + λ·θ) (for SGD without momentum decoupled and L2 decay are the same step). Non-zero decay moves the weights even when every advantage is 0, so it is off by default.")
    lr_schedule: Literal["constant", "linear", "cosine"] = _f("constant", "Learning-rate schedule over the updates.")
    warmup_updates: int = _f(0, "Linear warm-up length in updates.")
    max_grad_norm: float = _f(1.0, "Gradient clipping norm of every SGD step (0 = off).")
    ppo_epochs: int = _f(4, "The update rule's epochs: at most this many passes of SGD mini-batch steps over each update's rows; after each, KL(π_old ‖ π_new) is measured and the update stops at the trust region (target_kl). π_old is the rollout policy for every epoch.")
    mini_batches: int = _f(1, "SGD steps per epoch (the rows are split into this many mini-batches).")
    target_kl: float = _f(0.05, "Trust region of one update: the mean KL(π_old ‖ π_new) over the update's decisions (nats; exact over the candidates with rl_loss='choice', the k3 estimate over response tokens otherwise). When an epoch ends above it, θ − θ_old is halved until it is within (TRPO's backtracking line search) and the update stops (trainers/update_rule.py; the arena uses the same rule). 0 = no trust region.")
    adv_norm: Literal["running_rms", "none"] = _f("running_rms", "'running_rms': divide the advantages by the bias-corrected running RMS of the non-zero advantages seen so far (multiplying every advantage by a constant then changes nothing); 'none': use them as the estimator returns them. Either way |A| ≤ 1e-9 counts as 0.")
    rl_update: bool = _f(True, "Apply the policy update. false = a control run: rollouts, credit, metrics and evaluations as usual, the weights never move (what learning is measured against).")
    micro_batch_rows: int = _f(8, "Rows per forward/backward (gradient accumulation fills a mini-batch); must be ≥ 2 when pairs are used.")
    skip_zero_advantage_rows: bool = _f(False, "Leave out rows whose advantage is exactly 0 and that are in no pair (their policy-gradient term is 0; only their KL/entropy terms are lost). A CPU speed option.")
    max_train_rows: int = _f(0, "Train on a uniformly random subset of at most this many rows per update and process (pair-joined rows stay together; 0 = all rows). A CPU speed option.")
    logprob_batch_rows: int = _f(16, "Rows per no-grad forward when computing old/reference log-probs.")

    # --- warm start (behaviour cloning before RL) ---------------------------------------------
    warm_start_tasks: int = _f(0, "Behaviour-clone the stored walkthroughs of this many training tasks before the first update (ALFWorld games store one; 0 = off). Validation runs before it and, with eval_after_warm_start, after it. With full fine-tuning and kl_coef > 0 the KL reference becomes the warm-started policy.")
    warm_start_epochs: int = _f(1, "Passes over the walkthrough rows.")
    warm_start_lr: float = _f(1e-4, "AdamW learning rate of the warm start (its own optimizer, not checkpointed: a run killed during the warm start starts again).")
    warm_start_loss: Literal["auto", "tokens", "choice"] = _f("auto", "Warm-start objective: 'tokens' (token NLL of the expert's response), 'choice' (NLL of the expert's choice among the admissible actions, as choose mode samples them) or 'auto' (choice in choose mode, else tokens).")
    warm_start_batch_rows: int = _f(8, "Rows per warm-start optimizer step (split into micro_batch_rows forwards).")
    eval_after_warm_start: bool = _f(True, "Validate after the warm start as well (logged as 'eval_warm_start', not part of the learning curve).")

    # --- schedule, evaluation, output ------------------------------------------------------------
    updates: int = _f(250, "Number of policy updates.")
    eval_every: int = _f(5, "Validate every N updates (and before the first and after the last).")
    eval_at_start: bool = _f(True, "Also validate before the first update.")
    eval_train_games: bool = _f(False, "Also play every training game once (at val_temperature, the same seeds both times) right before the first update (after the warm start) and after the last: what the RL phase changed on the games it trained on (logged as eval_train_before / eval_train_after, in summary.txt).")
    save_every: int = _f(5, "Write a checkpoint every N updates (and at the end).")
    keep_checkpoints: int = _f(2, "How many complete checkpoints to keep.")
    seed: int = _f(0, "Random seed (task sampling, generation, initialisation).")
    output_dir: Annotated[str, tyro.conf.arg(aliases=("-o",))] = _f("runs", "Parent folder of run folders.")
    run_name: str = _f("", "Run folder name (default: preset-estimator-seed-timestamp).")
    tensorboard: bool = _f(True, "Also write TensorBoard event files.")
    progress: bool = _f(True, "Show a progress bar.")
    preset: str = _f("", "Name of the preset this configuration came from (informational).")

    def env_make_kwargs(self) -> dict[str, Any]:
        """``env_kwargs`` for ``gym.make``, with the run's horizon: a rubricgym environment
        gets ``max_steps`` (one horizon for the environment's truncation, its budget-binned
        matching keys and the rollouts)."""
        from agent_envs.registration import ENV_IDS

        return {**self.env_kwargs, "max_steps": self.max_steps} if self.env_id in ENV_IDS else dict(self.env_kwargs)

    def validate(self) -> TrainConfig:
        """Check every field; raise :class:`ConfigError` naming the first bad one."""
        if self.backend == "vllm":
            raise ConfigError(VLLM_REMOVED)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            choices = field_choices(f.name)
            if choices is not None and value not in choices:
                raise ConfigError(f"{f.name} must be one of {', '.join(map(repr, choices))}; got {value!r}")
            _check_type(f.name, value, _field_types()[f.name])
        positive = ("groups_per_update", "group_size", "max_steps", "max_prompt_tokens", "max_response_tokens",
                    "rollout_batch_size", "ppo_epochs", "mini_batches", "micro_batch_rows",
                    "logprob_batch_rows", "warm_start_epochs", "warm_start_batch_rows", "updates", "eval_every", "save_every", "keep_checkpoints",
                    "lora_r", "lora_alpha")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be an integer ≥ 1; got {getattr(self, name)!r}")
        for name in ("history_length", "val_tasks", "train_tasks", "env_workers", "warmup_updates", "torch_threads", "max_train_rows", "warm_start_tasks",
                     "trainable_layers"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be an integer ≥ 0; got {getattr(self, name)!r}")
        for name in ("temperature", "val_temperature", "learning_rate", "warm_start_lr"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0; got {getattr(self, name)!r}")
        horizon = self.env_kwargs.get("max_steps") if isinstance(self.env_kwargs, dict) else None
        if horizon is not None and horizon != self.max_steps:
            raise ConfigError(f"env_kwargs max_steps {horizon!r} differs from max_steps {self.max_steps}: the run has one "
                              "horizon, set it with --max-steps")
        if not (self.env_timeout >= 0 and math.isfinite(self.env_timeout)):
            raise ConfigError(f"env_timeout must be a number of seconds ≥ 0 (0 = wait forever); got {self.env_timeout!r}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1]; got {self.top_p!r}")
        if not 0 < self.clip_ratio < 1:
            raise ConfigError(f"clip_ratio must be in (0, 1); got {self.clip_ratio!r}")
        if not self.dual_clip > 1:
            raise ConfigError(f"dual_clip must be > 1; got {self.dual_clip!r}")
        for name in ("kl_coef", "kl_clip", "entropy_coef", "pair_coef", "weight_decay", "max_grad_norm", "rubric_shaping"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be ≥ 0; got {getattr(self, name)!r}")
        if not 0 <= self.lora_dropout < 1:
            raise ConfigError(f"lora_dropout must be in [0, 1); got {self.lora_dropout!r}")
        if self.pair_coef > 0 and self.micro_batch_rows < 2 and self.estimator == "mcgpo":
            raise ConfigError("micro_batch_rows must be ≥ 2 when estimator='mcgpo' (both rows of a pair share a micro-batch)")
        if self.trainable_layers and self.lora:
            raise ConfigError("trainable_layers must be 0 when lora=true (LoRA already chooses what trains)")
        if not (math.isfinite(self.target_kl) and self.target_kl >= 0):
            raise ConfigError(f"target_kl must be a finite number ≥ 0; got {self.target_kl!r}")
        if self.rl_loss == "choice" and self.action_mode != "choose":
            raise ConfigError("rl_loss='choice' needs action_mode='choose' (generated responses have no candidate set)")
        self._validate_estimator()
        return self

    def update_rule(self) -> UpdateRuleConfig:
        """The shared update rule's settings (:mod:`trainers.update_rule`): ``ppo_epochs``
        epochs, ``target_kl``, ``adv_norm``."""
        return UpdateRuleConfig(epochs=self.ppo_epochs, target_kl=float(self.target_kl), adv_norm=self.adv_norm)

    def loss_unit(self, value: str) -> str:
        """Resolve a loss setting (``warm_start_loss`` or ``rl_loss``): ``"auto"`` is
        ``"choice"`` in choose mode and ``"tokens"`` otherwise; other values stand."""
        if value != "auto":
            return value
        return "choice" if self.action_mode == "choose" else "tokens"

    def _validate_estimator(self) -> None:
        from wrappers.credit import available_estimators, get_estimator

        names = available_estimators()
        if self.estimator not in names:
            raise ConfigError(f"estimator must be one of {', '.join(map(repr, names))}; got {self.estimator!r}")
        try:
            get_estimator(self.estimator, **self.estimator_params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"estimator_params: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (JSON/YAML/TOML friendly)."""
        return dataclasses.asdict(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the configuration as YAML (or JSON when the suffix is ``.json``)."""
        path = Path(path)
        data = self.to_dict()
        if path.suffix == ".json":
            path.write_text(json.dumps(data, indent=2) + "\n")
        else:
            import yaml

            path.write_text(yaml.safe_dump(data, sort_keys=False))


def field_choices(name: str) -> tuple[Any, ...] | None:
    """The allowed values of a ``Literal`` field of :class:`TrainConfig` (``None``: any value of its type)."""
    tp = _field_types()[name]
    return typing.get_args(tp) if typing.get_origin(tp) is Literal else None


def _is_text(name: str) -> bool:
    """Whether the field holds a string (``str`` or a ``Literal`` of strings)."""
    choices = field_choices(name)
    return _field_types()[name] is str or (choices is not None and all(isinstance(c, str) for c in choices))


def _field_types() -> dict[str, Any]:
    global _TYPES
    if _TYPES is None:
        _TYPES = typing.get_type_hints(TrainConfig)
    return _TYPES


_TYPES: dict[str, Any] | None = None


def _check_type(name: str, value: Any, tp: Any) -> None:
    origin = typing.get_origin(tp) or tp
    if origin is Literal:
        return  # checked against field_choices
    if origin is bool:
        ok = isinstance(value, bool)
    elif origin is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif origin is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif origin in (dict, list, str):
        ok = isinstance(value, origin)
    else:  # pragma: no cover
        ok = True
    if not ok:
        raise ConfigError(f"{name} must be of type {getattr(origin, '__name__', origin)}; got {value!r}")


def _coerce(name: str, raw: Any) -> Any:
    """Convert a value read from a file or the command line to the field's type."""
    tp = _field_types()[name]
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


def _from_mapping(data: dict[str, Any], base: TrainConfig | None = None, source: str = "config") -> TrainConfig:
    cfg = base if base is not None else TrainConfig()
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    for key, value in data.items():
        if key not in names:
            close = [n for n in names if n.split("_")[0] == key.split("_")[0]]
            hint = f" (did you mean {', '.join(sorted(close))}?)" if close else ""
            raise ConfigError(f"{source}: unknown field {key!r}{hint}")
        setattr(cfg, key, _coerce(key, value))
    return cfg


def apply_overrides(cfg: TrainConfig, overrides: list[str]) -> TrainConfig:
    """Apply ``field=value`` strings (values parsed as YAML: ``3``, ``1e-5``, ``true``,
    ``{gamma: 0.1}``, ``[a, b]``); ``env_kwargs.max_steps=8`` sets one key of a dict field."""
    import yaml

    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like field=value")
        key, raw = item.split("=", 1)
        key = key.strip().lstrip("-").replace("-", "_")
        if key in _field_types() and _is_text(key):  # strings are taken verbatim ("no" must not become False)
            value = raw.strip()
        else:
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                value = raw
        if "." in key:
            head, sub = key.split(".", 1)
            current = getattr(cfg, head, None)
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
            if data.get("preset"):
                cfg = load_config(data["preset"], validate=False)
            cfg = _from_mapping(data, cfg, source=str(path))
        elif source in available_presets():
            preset_path = next(p for p in sorted(PRESETS_DIR.glob(source + ".*")))
            cfg = _from_mapping(_read_file(preset_path), cfg, source=str(preset_path))
            cfg.preset = source
        else:
            raise ConfigError(
                f"config {source!r} is neither a file nor a preset; presets: {', '.join(available_presets())}"
            )
    if overrides:
        apply_overrides(cfg, overrides)
    return cfg.validate() if validate else cfg


def config_help() -> list[tuple[str, str, str, str]]:
    """``(name, type, default, help)`` for every field (a table for docs; `rubricgym train --help` shows the same through tyro)."""
    out = []
    for f in dataclasses.fields(TrainConfig):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        tp = _field_types()[f.name]
        help_text = f.metadata["help"]
        choices = field_choices(f.name)
        if choices is not None:
            help_text += " Choices: " + ", ".join(map(str, choices)) + "."
        type_name = "str" if choices is not None else getattr(tp, "__name__", str(tp))
        out.append((f.name, type_name, repr(default), help_text))
    return out
