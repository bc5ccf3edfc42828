"""The request model every protocol reads its wire format into, and what an endpoint runs:
a conversation (or raw prompts) with its `ChatOptions`, how the answer is sent (stream, usage,
progress), stop sequences and the number of answers."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pocketchat.engines.types import ChatOptions, Message, Stats


@dataclass(frozen=True, kw_only=True)
class Generation:
    """What every generating request carries: the options, the model asked for, how the answer
    is sent (stream, usage, progress), stop sequences and the number of answers."""

    options: ChatOptions
    model: str | None = None
    stream: bool = False
    include_usage: bool = False
    stop: tuple[str, ...] = ()
    n: int = 1
    return_progress: bool = False  # stream `prompt_progress` events while the prompt is read
    # What the server's default thinking (`serve --think`) gives this request: "all" (it said
    # nothing of thinking), "budget" (it turned thinking on without a budget), "" (nothing).
    thinking_from_server: str = ""


@dataclass(frozen=True, kw_only=True)
class ChatRequest(Generation):
    """A validated chat request."""

    messages: tuple[Message, ...]
    logprobs: bool = False  # send choices[].logprobs (options.logprobs holds top_logprobs)


Prompt = str | tuple[int, ...]  # a raw prompt: text, or token ids


@dataclass(frozen=True, kw_only=True)
class CompletionRequest(Generation):
    """A validated raw-prompt request (`/v1/completions`): prompts (text or token ids), each
    answered `n` times; choice `i * n + j` is prompt i's answer j."""

    prompts: tuple[Prompt, ...]
    echo: bool = False
    logprobs: int | None = None  # legacy: None off, N the alternatives per token (0..5)


def seeded(options: ChatOptions, index: int) -> ChatOptions:
    """The options of a request's answer number `index` (seeds seed, seed+1, ...)."""
    if index == 0 or options.seed is None:
        return options
    return replace(options, seed=(options.seed + index) % 2**32)


def combined(stats: list[Stats]) -> Stats:
    """The figures of a request's n answers: the first one's prompt, every answer's tokens."""
    first = stats[0]
    return replace(first, generated_tokens=sum(s.generated_tokens for s in stats),
                   decode_seconds=sum(s.decode_seconds for s in stats))
