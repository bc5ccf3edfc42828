"""Conversations that take turns through the server (the prompt cache's test and benchmark).

Three conversations, continued in turn for `rounds` rounds each through the real `openai`
client; the first has a long system prompt (`SYSTEM`: 1,000 tokens of the tiny models'
byte-level vocabulary), the second a short one, the third none. A fourth conversation starts
with the first one's system prompt. Each request asks for a few tokens with thinking off and
`ignore_eos` (the tiny model's answers are nonsense of a fixed length); what each request
evaluated is read from `usage`: `prompt_tokens - prompt_tokens_details.cached_tokens`, and
what llama.cpp's own counters saw evaluated from the `timings` extension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# 1,000 bytes: one token each in the byte-level vocabulary (its two merges never occur).
SYSTEM = ("You are a careful assistant for a tiny workshop. Answer briefly, name a tool, "
          "and say what to look at first. ")
SYSTEM = (SYSTEM * (1000 // len(SYSTEM) + 1))[:1000]
assert "he" not in SYSTEM and "ll" not in SYSTEM
OPTIONS = {"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}}


@dataclass(frozen=True)
class Row:
    conversation: int
    round: int
    prompt_tokens: int
    cached_tokens: int
    new_tokens: int  # the new user message's text, in tokens (at most its bytes)
    counted: int  # prompt tokens the engine's own counters saw evaluated (`timings.prompt_n`)

    @property
    def evaluated(self) -> int:
        return self.prompt_tokens - self.cached_tokens


def user_text(conversation: int, rnd: int) -> str:
    return f"Conversation {conversation}, round {rnd}: what about part {conversation * 10 + rnd}?"


def ask(client: Any, model: str, messages: list[dict], conversation: int, rnd: int,
        max_tokens: int) -> Row:
    text = user_text(conversation, rnd)
    messages.append({"role": "user", "content": text})
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens,
                                       temperature=0, extra_body=OPTIONS)
    messages.append({"role": "assistant", "content": r.choices[0].message.content or ""})
    details = r.usage.prompt_tokens_details
    counted = (r.model_extra or {}).get("timings", {}).get("prompt_n", -1)
    return Row(conversation, rnd, r.usage.prompt_tokens,
               (details.cached_tokens or 0) if details else 0, len(text.encode()), counted)


def run(client: Any, model: str, *, rounds: int = 6, max_tokens: int = 8) -> list[Row]:
    """The three conversations in turn, then the fourth; one row per request."""
    convs: list[list[dict]] = [[{"role": "system", "content": SYSTEM}],
                               [{"role": "system", "content": "Be brief."}], []]
    rows = [ask(client, model, messages, i + 1, rnd, max_tokens)
            for rnd in range(1, rounds + 1) for i, messages in enumerate(convs)]
    fourth: list[dict] = [{"role": "system", "content": SYSTEM}]
    rows.append(ask(client, model, fourth, 4, 1, max_tokens))
    return rows
