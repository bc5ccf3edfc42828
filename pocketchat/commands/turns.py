"""`pocketchat bench --turns N`: a multi-turn conversation, per turn what the prompt cache saved.

N user messages of about MESSAGE_TOKENS tokens each (random words, sized by token count on the
model's own tokenizer: two probe prompts give tokens per word), greedy, answers capped at
ANSWER_TOKENS. Each turn's row: the whole prompt, the tokens reused from the cache (of which
`prepared`: evaluated right after the previous answer, the answer as the history renders it),
the tokens evaluated, the time to first token. Messages shrink when N turns would not fit the
context, so the conversation is never cut (a cut conversation cannot be reused).

Each answer goes back into the history with its reasoning (`reasoning_content`, as an app that
keeps it sends it); the template decides what it keeps. `template_kwargs` reach the template:
with Qwen3.6's `preserve_thinking`, every earlier turn keeps its reasoning, so the prompt
extends the model's state where it diverged at the last answer without it. `compare_table`
shows two runs side by side (`pocketchat bench --turns N --preserve-thinking`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from pocketchat.commands.mdtable import markdown_table

WORDS = (
    "river stone light paper window garden music table story mountain cloud letter bridge "
    "market summer winter forest silver engine circle market yellow thunder harbor candle "
    "orchard meadow lantern compass voyage falcon marble velvet copper ribbon glacier"
).split()
MESSAGE_TOKENS = 150
ANSWER_TOKENS = 32
TURN_OVERHEAD = 16  # role headers and the generation prompt, per turn (a generous guess)


@dataclass(frozen=True)
class TurnRow:
    test: str
    prompt_tokens: int
    reused_tokens: int
    evaluated_tokens: int
    ttft_s: float
    prepared_tokens: int = 0  # of the reused: evaluated after the previous answer, for this turn

    @property
    def kept_tokens(self) -> int:
        """Prompt tokens the state already held when the previous answer ended."""
        return self.reused_tokens - self.prepared_tokens

    def as_dict(self) -> dict[str, Any]:
        return {"test": self.test, "prompt_tokens": self.prompt_tokens,
                "reused_tokens": self.reused_tokens, "prepared_tokens": self.prepared_tokens,
                "evaluated_tokens": self.evaluated_tokens, "ttft_s": round(self.ttft_s, 4)}


def context_needed(turns: int) -> int:
    return turns * (MESSAGE_TOKENS + ANSWER_TOKENS + TURN_OVERHEAD) + 256


def message_tokens(n_ctx: int, turns: int) -> int:
    """Tokens per user message so that `turns` turns fit `n_ctx` (at most MESSAGE_TOKENS)."""
    room = (n_ctx - 128) // max(1, turns) - ANSWER_TOKENS - TURN_OVERHEAD
    return max(8, min(MESSAGE_TOKENS, room))


def final_chunk(chunks, on_progress: Any = None) -> Any:
    """The last chunk of a benchmark answer (`on_progress(PromptProgress)` sees the prompt
    being read); EngineError when it failed."""
    from pocketchat.errors import EngineError

    final = None
    for final in chunks:
        if final.progress is not None and on_progress is not None:
            on_progress(final.progress)
    if final is None or final.finish_reason == "error":
        raise EngineError(f"the benchmark answer failed: {final.error if final else 'no output'}")
    return final


def tokens_per_word(engine, words: list[str]) -> float:
    """The model's tokens per random word, from two probe prompts' lengths."""
    from pocketchat.engines.types import ChatOptions, Message

    lengths = []
    for n in (8, 40):
        msg = Message("user", " ".join(words[:n]))
        lengths.append(final_chunk(engine.chat([msg], ChatOptions(max_tokens=1))).stats.prompt_length)
    slope = (lengths[1] - lengths[0]) / 32
    return slope if slope > 0 else 1.5


def run_turns(engine, turns: int, thinking: bool, seed: int = 7,
              template_kwargs: dict[str, Any] | None = None, label: str = "",
              thinking_budget: int | None = None) -> list[TurnRow]:
    """Chat `turns` turns as the app does; one row per turn. `label` starts the first
    message (two runs on one engine: the second does not reuse the first)."""
    from pocketchat.engines.types import ChatOptions, Message

    rng = random.Random(seed)
    pool = [rng.choice(WORDS) for _ in range(64)]
    per_word = tokens_per_word(engine, pool)
    size = message_tokens(engine.info.n_ctx, turns)
    n_words = max(2, round(size / per_word))
    opts = ChatOptions(temperature=0.0, max_tokens=ANSWER_TOKENS, thinking=thinking, seed=seed,
                       thinking_budget=thinking_budget if thinking else None,
                       template_kwargs=dict(template_kwargs) if template_kwargs else None)
    messages: list[Message] = []
    rows = []
    for k in range(1, turns + 1):
        head = f"{label}Message {k}: " if k == 1 else f"Message {k}: "
        messages.append(Message("user", head + " ".join(rng.choice(WORDS) for _ in range(n_words))))
        answer, reasoning = [], []
        final = None
        for final in engine.chat(messages, opts):
            answer.append(final.text)
            reasoning.append(final.thinking)
        final_chunk([final] if final is not None else [])  # raises on a failed answer
        s = final.stats
        rows.append(TurnRow(f"turn{k}", s.prompt_length, s.reused_tokens, s.evaluated_tokens,
                            s.ttft_seconds or 0.0, s.prepared_tokens))
        if "".join(answer) or "".join(reasoning):
            messages.append(Message("assistant", "".join(answer),
                                    reasoning="".join(reasoning) or None))
    return rows


def table(name: str, rows: list[TurnRow]) -> str:
    head = ["model", "test", "prompt", "reused", "evaluated", "TTFT"]
    body = [[name, r.test, str(r.prompt_tokens), str(r.reused_tokens), str(r.evaluated_tokens),
             f"{r.ttft_s * 1000:.0f} ms"] for r in rows]
    return markdown_table(head, body)


def compare_table(name: str, runs: dict[str, list[TurnRow]]) -> str:
    """Runs side by side, per turn: the prompt, the tokens the state held from the previous
    answer (`kept`), those evaluated after it (`prepared`) and in the turn (`evaluated`)."""
    head = ["model", "test"]
    for label in runs:
        head += [f"prompt ({label})", f"kept ({label})", f"prepared ({label})",
                 f"evaluated ({label})"]
    columns = list(runs.values())
    body = []
    for i, first in enumerate(columns[0]):
        row = [name, first.test]
        for rows in columns:
            r = rows[i]
            row += [str(r.prompt_tokens), str(r.kept_tokens), str(r.prepared_tokens),
                    str(r.evaluated_tokens)]
        body.append(row)
    return markdown_table(head, body)
