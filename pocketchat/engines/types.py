"""The one interface a backend implements, and the typed chunks it yields."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Literal, Protocol, Sequence, runtime_checkable

from pocketchat.documents.attachment import Attachment
from pocketchat.errors import EngineError, PocketchatError

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "cancelled", "error", "tool_calls"]
StopReason = Literal["stop", "cap", "context", "cancelled", "error", "tool_calls"]
# How an answer's thought ended: by itself ("model"), at its budget ("budget"), when the user
# asked for the answer now (`Engine.end_thinking`, "user"); "" while thinking, or no thought.
ThinkingEnd = Literal["", "model", "budget", "user"]


@dataclass(frozen=True)
class ToolCall:
    """A function call the model made: `arguments` is JSON text (as OpenAI sends it)."""

    id: str  # "call_<hex>"; unique within an answer
    name: str
    arguments: str


@dataclass(frozen=True)
class Message:
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant turn that called tools
    tool_call_id: str | None = None  # a "tool" message: which call it answers
    name: str | None = None  # a "tool" message: the function's name, if given
    reasoning: str | None = None  # an assistant turn's reasoning_content (round trip)
    # a user message's files, put before its text when the prompt is rendered (`documents`)
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    bytes: tuple[int, ...]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability, with the `top` most likely alternatives."""

    token: str
    logprob: float
    bytes: tuple[int, ...]
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class ChatOptions:
    """Per-request settings; None means the model's default from the load plan."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    thinking: bool = True
    seed: int | None = None
    ignore_eos: bool = False  # keep generating past end-of-text (benchmarks: exactly N tokens)
    min_p: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: int | None = None  # None: off; N (0..20): each token's logprob + N alternatives
    tools: tuple[dict, ...] = ()  # OpenAI tool definitions, as sent ({"type": "function", ...})
    tool_choice: str | dict = "auto"  # "none" | "auto" | "required" | {"type": "function", ...}
    parallel_tool_calls: bool = True
    response_format: dict | None = None  # {"type": "json_object"} | {"type": "json_schema", ...}
    template_kwargs: dict | None = None  # chat_template_kwargs (enable_thinking stays `thinking`)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias added to its logit)
    # The most tokens the thought may take (with `thinking` on): at the budget the engine
    # closes it as the template writes a closed thought, and the answer follows. None: no
    # budget of its own (the thought still leaves room for an answer within max_tokens).
    thinking_budget: int | None = None
    # A trailing assistant message in `messages` is a prefill: the answer continues it (its
    # text is not repeated in the chunks).
    # Read ahead, answer nothing: evaluate the conversation up to where its last user message's
    # own text begins (its attachments, read while the question is typed), keep the state there
    # (a checkpoint, and the prompt cache), and end with a final chunk that generated nothing.
    read_ahead: bool = False


def tokens_per_step(steps: int, accepted: int) -> float:
    """Tokens a verifying step emitted on average: its accepted drafts and the one token it
    samples after them (a correction or a bonus); 0 when no step verified a draft."""
    return (accepted + steps) / steps if steps else 0.0


@dataclass(frozen=True)
class Stats:
    """Figures for the answer so far, from the runtime's own counters.

    `prompt_tokens` are the prompt tokens evaluated for this answer (`evaluated_tokens`);
    `prompt_length` is the whole prompt, of which `reused_tokens` came from the cache
    (`prepared_tokens` of those were evaluated right after the previous answer, while the
    user read it: the answer as the next prompt holds it).
    """

    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    generated_tokens: int = 0
    decode_seconds: float = 0.0
    ttft_seconds: float | None = None
    context_used: int = 0
    context_limit: int = 0
    dropped_messages: int = 0
    peak_memory_bytes: int | None = None
    prompt_length: int = 0
    conversation_tokens: int = 0  # the whole conversation's prompt, before any was dropped
    reused_tokens: int = 0
    prepared_tokens: int = 0
    stop_reason: StopReason | None = None  # set on the last chunk: why the answer stopped
    recent_tok_s: float = 0.0  # decode tok/s over the last few seconds (0.0: not yet known)
    # CPU threads decoding now, of the plan's count, and why they moved ('1 of 2 threads: the
    # machine is busy'; '' when nothing moved lately); 0: the backend has no such count.
    threads: int = 0
    threads_full: int = 0
    threads_note: str = ""
    thinking_tokens: int = 0  # tokens of the thought so far (its closing included)
    thinking_end: ThinkingEnd = ""  # how the thought ended ("" while thinking, or none)
    # Drafted tokens (`--draft`): steps that verified a draft, tokens drafted, tokens accepted.
    draft_steps: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    # The attachments did not fit the context: passages were retrieved for the question.
    # `retrieval` says so and how much was read ("" when every file went in whole);
    # `sources` are the passages' places ("report.pdf, page 3"), in the files' order.
    retrieval: str = ""
    sources: tuple[str, ...] = ()

    @property
    def tokens_per_step(self) -> float:
        """Tokens a verifying step emitted on average (accepted drafts + one); 0: no drafts."""
        return tokens_per_step(self.draft_steps, self.accepted_tokens)

    @property
    def evaluated_tokens(self) -> int:
        return self.prompt_tokens

    @property
    def prompt_tok_s(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@dataclass(frozen=True)
class PromptProgress:
    """How far the evaluation of a long prompt is: `done` of `total` tokens (the tokens this
    answer evaluates; the cached ones are not counted) after `seconds`."""

    done: int
    total: int
    seconds: float

    @property
    def tok_s(self) -> float:
        return self.done / self.seconds if self.seconds > 0 and self.done else 0.0

    @property
    def seconds_left(self) -> float | None:
        """The time the rest takes at the rate so far; None before the first piece is done."""
        rate = self.tok_s
        return (self.total - self.done) / rate if rate > 0 else None


@dataclass(frozen=True)
class Chunk:
    """A piece of an answer: new answer text and/or thinking text, with the stats so far.

    While a long prompt is evaluated (more than one piece), chunks without text carry
    `progress`. The last chunk of an answer has `finish_reason` set; on "error", `error` says what and
    `failure` is the typed error (class, message, hint) when there is one.
    """

    text: str = ""
    thinking: str = ""
    stats: Stats = field(default_factory=Stats)
    finish_reason: FinishReason | None = None
    error: str | None = None
    failure: PocketchatError | None = None
    tool_calls: tuple[ToolCall, ...] = ()  # calls completed in this chunk (each once, in order)
    logprobs: tuple[TokenLogprob, ...] = ()  # one per generated token of this chunk's text
    progress: PromptProgress | None = None  # set on the chunks sent while a long prompt is read

    @classmethod
    def failed(cls, exc: BaseException, stats: Stats | None = None, *, prefix: str = "") -> "Chunk":
        """The last chunk of an answer that failed with `exc`."""
        if not isinstance(exc, PocketchatError):
            exc = EngineError(f"{prefix}{type(exc).__name__}: {exc}")
        stats = replace(stats or Stats(), stop_reason="error")
        return cls(stats=stats, finish_reason="error", error=exc.message, failure=exc)


@dataclass(frozen=True)
class EngineInfo:
    """What is running, for headers and bench tables."""

    backend: str
    model: str
    placement: str
    n_ctx: int
    path: str = ""
    notes: tuple[str, ...] = ()  # things the user should know (e.g. a built-in chat template is used)
    thinking: bool | None = None  # whether the model thinks (<think>); None: not known
    sequences: int = 1  # answers run at once (serve --parallel N: `sequences.Sequences` has N)
    parallel_note: str = ""  # why a plan's parallel N > 1 runs one at a time here ("" if not)


NOT_RESPONDING = "the model process is not responding"


@dataclass(frozen=True)
class Liveness:
    """Whether the process that runs the model answers (`WatchedEngine.liveness()`).

    `reason` is "stopped" (a signal stopped it: SIGSTOP, Ctrl+Z; the system's process state
    says so) or "silent" (nothing heard from it for `silent_seconds` while it used no CPU:
    stuck, or starved by swapping); "" while it responds.
    """

    responding: bool = True
    silent_seconds: float = 0.0
    reason: Literal["", "stopped", "silent"] = ""

    @property
    def message(self) -> str:
        """'the model process is not responding (...)' for the user; "" while it responds."""
        if self.responding:
            return ""
        if self.reason == "stopped":
            return f"{NOT_RESPONDING}: it was stopped by a signal (SIGSTOP or Ctrl+Z)"
        return (f"{NOT_RESPONDING}: nothing heard from it for {self.silent_seconds:.0f} s "
                "(stuck, or the system is short of memory and swapping)")


@runtime_checkable
class Answer(Protocol):
    """One answer in flight: an iterator of its chunks (the last carries finish_reason) that
    is stopped, hurried or let go by itself, whatever else the engine runs at the time."""

    def __iter__(self) -> Iterator[Chunk]:
        ...

    def __next__(self) -> Chunk:
        ...

    def cancel(self) -> None:
        """Stop this answer (safe from another thread); it ends with 'cancelled'."""
        ...

    def end_thinking(self) -> None:
        """End this answer's thought now (safe from another thread; see `Engine.end_thinking`)."""
        ...

    def close(self) -> None:
        """Let go of the answer: a caller that stops reading before its end closes it, and
        the answer's sequence is free again once the engine has stopped it."""
        ...


@runtime_checkable
class Engine(Protocol):
    """A loaded model that answers conversations: `info.sequences` answers at once (1 but for
    `serve --parallel N`); each `chat`/`complete` takes one of them."""

    info: EngineInfo

    def chat(
        self, messages: Sequence[Message], options: ChatOptions | None = None
    ) -> Answer:
        """Stream the answer to the conversation; the last chunk carries finish_reason."""
        ...

    def complete(self, prompt: str | Sequence[int], options: ChatOptions | None = None
                 ) -> Answer:
        """Stream the raw continuation of `prompt` (text or token ids): no chat template,
        no reasoning split, no tools; the last chunk carries finish_reason."""
        ...

    def cancel(self) -> None:
        """Stop every answer in flight (safe from another thread); each ends with 'cancelled'."""
        ...

    def end_thinking(self) -> None:
        """End the thought of the answers in flight now (safe from another thread): the engine
        closes it as the budget does (`Stats.thinking_end` "user") and the answer follows;
        nothing happens outside a thought."""
        ...

    def status(self) -> dict:
        """Live figures between answers (e.g. {"cache": ...}: the prompt cache); {} for none."""
        ...

    def close(self) -> None:
        """Free the model's memory; the engine cannot be used after (`EngineClosed`)."""
        ...


@runtime_checkable
class StatefulEngine(Engine, Protocol):
    """An engine whose sequence state can be saved beside a conversation (`--continue`)."""

    def save_state(self, path: Path) -> int:
        """Write what the state holds to `path`; the bytes written (0: nothing written)."""
        ...

    def load_state(self, path: Path) -> str | None:
        """Restore a state `save_state` wrote; None when it loaded, else a note saying why not."""
        ...


@runtime_checkable
class WatchedEngine(Engine, Protocol):
    """An engine whose model runs in a process of its own, watched for liveness: an answer in
    flight waits while the process does not respond (it may resume), `cancel()` ends it at once
    then (finish_reason 'cancelled'), and new requests raise `EngineNotResponding`."""

    def liveness(self) -> Liveness:
        """The latest verdict (sampled a few times a second; cheap to call)."""
        ...

    def kill(self) -> None:
        """End the process at once (a stuck one cannot be asked to stop) and close the engine."""
        ...


def liveness_of(engine: Any) -> Liveness:
    """`engine.liveness()`, or "responding" for an engine with no process of its own."""
    fn = getattr(engine, "liveness", None)
    if not callable(fn):
        return Liveness()
    try:
        found = fn()
    except Exception:  # noqa: BLE001 - a closed engine: nothing to watch
        return Liveness()
    return found if isinstance(found, Liveness) else Liveness()
