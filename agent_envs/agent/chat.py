"""Chat messages and chat-template turns: how a decision prompt reaches a chat model.

Duck-typed over the tokenizer (anything with transformers' ``apply_chat_template``); imports
no model library.

Example:
    >>> build_messages("Goal: put a mug in the sink.", system="You are a household agent.")[0]["role"]
    'system'
"""

from __future__ import annotations

from typing import Any

__all__ = ["build_messages", "chat_next_turn", "chat_start"]


def build_messages(prompt: str, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for a prompt (a system message only when one is given; without one,
    some chat templates insert their own default)."""
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": prompt})
    return msgs


def chat_start(tokenizer: Any, text: str) -> str:
    """The first user message in the tokenizer's chat template, ending with the assistant header."""
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)


def chat_next_turn(tokenizer: Any, text: str, after_eos: bool = True) -> str:
    """The template text that follows an assistant response: end of that turn, the next user
    message ``text`` and the assistant header.

    Found by rendering a conversation with and without the new message (so any chat template
    works); ``after_eos``: the response already ended with the tokenizer's EOS token (the
    usual stop), so a leading EOS text is left out.

    >>> from trainers.models import build_tiny_tokenizer
    >>> chat_next_turn(build_tiny_tokenizer(), "You see a mug.")
    '\\n<|im_start|>user\\nYou see a mug.<|im_end|>\\n<|im_start|>assistant\\n'
    """
    marker = "\x00RUBRICGYM\x00"
    base = [{"role": "user", "content": "u"}, {"role": "assistant", "content": marker}]
    full = tokenizer.apply_chat_template(base + [{"role": "user", "content": text}], add_generation_prompt=True,
                                         tokenize=False)
    cut = full.find(marker)
    if cut < 0:  # a template that drops earlier assistant turns: plain text
        return f"\n{text}\n"
    tail = full[cut + len(marker):]
    eos = getattr(tokenizer, "eos_token", None)
    if after_eos and eos and tail.startswith(eos):
        tail = tail[len(eos):]
    return tail
