"""One answer, step by step (the recipe `base.EngineBase` runs for `chat` and `complete`).

1. the prompt: the conversation fitted and rendered (`render.plan_prompt`), or a raw prompt's
   tokens as given; the answer's mask and logprobs and its tool-call parser
   (`constrain.request`);
2. reuse: the prompt cache across conversations and the prefix cache keep the longest part
   of the state the prompt shares;
3. the rest of the prompt is fed (`_read_prompt`): a long one in pieces with a
   `Chunk.progress` between them; a long system message parked for other conversations
   where it ends, and, on a state that cannot be cut back, a checkpoint where the
   conversation ends;
4. the token loop (`loop.steps`: sampling, the ends, the thought's budget); its text goes
   through `answer.AnswerStream` (reasoning split off, tool calls parsed);
5. the final chunk carries the stats (`stats`) and why the answer stopped; after it, when the
   caller reads on, the state is settled for the next turn (`settle.settle`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Generator, Iterator, Sequence

from pocketchat.errors import ContextOverflow, EngineError, UnsupportedRequest
from pocketchat.engines.answer.stream import AnswerStream, Piece, TextStream
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.constrain.request import call_parser, token_control
from pocketchat.engines.answer.context import reply_reserve
from pocketchat.engines.answer.loop import CLOSING_LINE, Cancelled, Meter, Thought, steps
from pocketchat.engines.answer.rate import RecentRate
from pocketchat.engines.answer.render import PromptPlan, ahead_plan, closing_tokens, plan_prompt
from pocketchat.engines.answer.sampling import merge_sampling
from pocketchat.engines.answer.settle import settle
from pocketchat.engines.answer.thinking import CLOSE_TAG
from pocketchat.engines.types import ChatOptions, Chunk, Message, PromptProgress, Stats, StopReason


AHEAD_TOO_LONG = ("the files do not fit the context: nothing was read ahead, and passages will "
                  "be retrieved for the question")


@dataclass
class Progress:
    """One answer's figures as it goes (what its chunks' stats are made of)."""

    plan: PromptPlan
    started: float
    prepared: int  # tokens evaluated after the previous answer, for this one
    kept: int = 0  # tokens of the prompt reused from the cache
    ttft: float | None = None
    settled: bool = False  # the state ended where this prompt could go on (a boundary)
    rate: RecentRate = field(default_factory=RecentRate)  # decode tok/s of the last seconds
    meter: Meter = field(default_factory=Meter)
    thought: Thought | None = None
    generated: int = 0



def _setup(engine: Any, messages: tuple[Message, ...], opts: ChatOptions,
           prompt: str | Sequence[int] | None) -> tuple[PromptPlan, Any, Any]:
    """The prompt's plan, the token control and the answer's text stream."""
    if prompt is not None:  # raw: encoded as is; a checkpoint just before its last token
        tokens = engine._prompt_tokens(prompt)
        if not tokens:
            raise UnsupportedRequest("the prompt is empty and this model has no "
                                     "beginning-of-text token to start from", param="prompt")
        budget = engine.n_ctx - reply_reserve(engine.n_ctx, opts.max_tokens)
        if len(tokens) > budget:
            raise ContextOverflow(len(tokens), budget)
        stable = len(tokens) - 1 if not engine.cache.trimmable and len(tokens) > 1 else None
        control = (None if opts.logprobs is None else
                   TokenControl(token_bytes=engine._token_bytes, top=opts.logprobs))
        return PromptPlan(tokens, (), False, 0, stable), control, TextStream()
    plan = plan_prompt(engine, messages, opts)
    control = token_control(engine, plan, opts)
    prefilled = plan.prefill is not None and not plan.in_thinking and bool(
        plan.prefill.content.split(CLOSE_TAG)[-1].strip())  # its answer text goes on
    return plan, control, AnswerStream(in_thinking=plan.in_thinking,
                                       parser=call_parser(engine, opts), answer_started=prefilled)

def answer(engine: Any, messages: tuple[Message, ...], opts: ChatOptions,
            prompt: str | Sequence[int] | None = None) -> Iterator[Chunk]:
    started = time.perf_counter()
    prepared, settled = engine._prepared, engine._settled
    engine._prepared, engine._settled = 0, False
    if opts.read_ahead and prompt is None:
        yield from read_ahead(engine, messages, opts, Progress(
            PromptPlan([], messages, False, 0, None), started, prepared, settled=settled))
        return
    try:
        plan, control, out = _setup(engine, messages, opts, prompt)
    except Exception as exc:  # noqa: BLE001 - a request it cannot take ends with an error chunk
        yield Chunk.failed(exc, Stats(context_limit=engine.n_ctx), prefix=f"{engine.label} failed: ")
        return
    progress = Progress(plan, started, prepared, settled=settled)
    if prompt is None and opts.thinking and engine.thinks:
        progress.thought = Thought(closing_tokens(engine, CLOSING_LINE),
                                   opts.thinking_budget, engine._end_thought)
    try:
        finish, last = yield from _produce(engine, plan, opts, progress, out, control)
    except Exception as exc:  # noqa: BLE001 - a failed answer ends with an error chunk
        engine.cache.reset()  # stopped mid-computation: its state is unknown
        yield Chunk.failed(exc, stats(engine, progress, final=True), prefix=f"{engine.label} failed: ")
        return
    if finish in ("stop", "length"):
        _feed_pending(engine)
    last = last + out.flush()
    reason: StopReason = finish  # type: ignore[assignment]
    if finish == "length":
        capped = opts.max_tokens is not None and progress.generated >= max(opts.max_tokens, 0)
        reason = "cap" if capped else "context"
    elif finish == "stop" and getattr(out, "calls", None):
        finish = reason = "tool_calls"
    final = replace(stats(engine, progress, final=True), stop_reason=reason)
    yield Chunk(text=last.text, thinking=last.thinking, stats=final,
                finish_reason=finish,  # type: ignore[arg-type]
                tool_calls=last.calls, logprobs=last.logprobs)
    if (prompt is None and finish in ("stop", "length", "tool_calls")
            and not engine._cancel.is_set()):
        settle(engine, plan, "".join(out.text), tuple(out.calls), opts, "".join(out.thinking))

def _produce(engine: Any, plan: PromptPlan, opts: ChatOptions, progress: Progress, out: Any,
             control: TokenControl | None) -> Generator[Chunk, None, tuple[str, Piece]]:
    """Reuse what the cache holds, evaluate the rest, run the token loop; yields the
    chunks before the last and returns the finish reason and the last piece."""
    tokens = plan.tokens
    max_new = engine.n_ctx - len(tokens)
    if opts.max_tokens is not None:
        max_new = min(max_new, max(opts.max_tokens, 0))
    engine._meter = progress.meter
    engine._pending = []
    ends = engine.end_tokens if opts.ignore_eos else ()
    engine._begin(merge_sampling(engine.plan.sampling, opts, ends), control)
    engine._control = control
    if engine._drafting is not None:
        engine._drafting.begin()
    if engine.prompt_cache.prepare(engine.cache, tokens, at_boundary=progress.settled):
        progress.prepared = 0  # another conversation's state: none prepared for it
    progress.kept = start = engine.cache.prepare(tokens).keep
    if max_new <= 0:
        return "length", Piece()
    loop = None
    try:
        with engine.batcher.member(engine._seq):
            start = yield from _read_prompt(engine, plan, start, progress)
            loop = steps(engine, tokens[start:], max_new=max_new, meter=progress.meter,
                         room=lambda: engine.n_ctx - len(engine.cache.tokens),
                         thought=progress.thought, pending=engine._pending,
                         in_thinking=lambda: bool(getattr(out, "in_thinking", False)))
            for step in loop:
                progress.generated += step.tokens
                progress.rate.add(progress.generated)
                if progress.ttft is None:
                    progress.ttft = time.perf_counter() - progress.started
                piece = out.feed(step.text, step.logprob)
                if step.finish is not None:
                    return step.finish, piece
                if piece:
                    yield Chunk(text=piece.text, thinking=piece.thinking,
                                tool_calls=piece.calls, logprobs=piece.logprobs,
                                stats=stats(engine, progress))
                if engine._cancel.is_set():
                    return "cancelled", Piece()
                if piece.calls and not opts.parallel_tool_calls:
                    return "stop", Piece()  # one call was asked for: the answer ends with it
    except Cancelled:
        return "cancelled", Piece()
    finally:
        if loop is not None:
            loop.close()
    return ("cancelled" if engine._cancel.is_set() else "stop"), Piece()

def read_ahead(engine: Any, messages: tuple[Message, ...], opts: ChatOptions, progress: Progress
               ) -> Iterator[Chunk]:
    """`ChatOptions.read_ahead`: evaluate the conversation up to where its last user message's
    own text begins (`render.ahead_plan`), as a prompt is read (progress chunks, checkpoint and
    prompt cache at its end), then one final chunk; the next answer reads only the rest."""
    try:
        plan = ahead_plan(engine, messages, opts)
    except Exception as exc:  # noqa: BLE001 - a conversation it cannot read ends with an error
        yield Chunk.failed(exc, Stats(context_limit=engine.n_ctx), prefix=f"{engine.label} failed: ")
        return
    progress.plan = plan
    tokens, finish = plan.tokens, "stop"
    engine._meter = progress.meter
    if tokens:
        if engine.prompt_cache.prepare(engine.cache, tokens, leave=0, at_boundary=progress.settled):
            progress.prepared = 0
        progress.kept = start = engine.cache.prepare(tokens, leave=0).keep
        try:
            with engine.batcher.member(engine._seq):
                yield from _read_prompt(engine, plan, start, progress, leave=0)
        except Cancelled:
            finish = "cancelled"
        except Exception as exc:  # noqa: BLE001 - a failed reading ends with an error chunk
            engine.cache.reset()
            yield Chunk.failed(exc, stats(engine, progress, final=True),
                               prefix=f"{engine.label} failed: ")
            return
        # the state ends where the next prompt goes on: what the next answer reuses
        engine._prepared = progress.prepared + len(engine.cache.tokens) - start
        engine._settled = finish == "stop"
    figures = replace(stats(engine, progress, final=True), stop_reason=finish)
    if not tokens and plan.whole:
        figures = replace(figures, retrieval=AHEAD_TOO_LONG)
    yield Chunk(stats=figures, finish_reason=finish)  # type: ignore[arg-type]


def _read_prompt(engine: Any, plan: PromptPlan, start: int, progress: Progress, *,
                 leave: int = 1) -> Generator[Chunk, None, int]:
    """Evaluate the prompt from `start` to `leave` tokens before its end (a piece also ends
    where a long system message or the asked message's attachments do, parked, and at
    `plan.stable`, checkpointed); a long one piece by piece with a progress chunk first and
    after each (a read-ahead, `leave` 0, checkpointed after each: a state that cannot be cut
    back keeps what was read when Enter stops it mid-step); returns where it stopped."""
    tokens, shared, stable, attached = plan.tokens, plan.shared, plan.stable, plan.attached
    end, at, began = len(tokens) - leave, start, time.perf_counter()
    piece = max(1, min(int(getattr(engine.plan, "n_batch", 512) or 512), engine.n_ctx))
    long = end - start + 1 > piece

    def report() -> Chunk:
        done = PromptProgress(at - start, len(tokens) - start, time.perf_counter() - began)
        return Chunk(stats=stats(engine, progress), progress=done)

    if long:
        yield report()
    while at < end:
        marks = [m for m in (shared, stable, attached) if m is not None and at < m <= end]
        stop = min([end] + marks + ([at + piece] if long else []))
        engine.feed(tokens[at:stop])
        at = stop
        if at == shared:
            engine.prompt_cache.park(engine.cache.ops, tokens[:shared], shared=True)
        if at == attached:
            engine.prompt_cache.park(engine.cache.ops, tokens[:attached], shared=True)
        if at in (stable, attached) or (leave == 0 and long):
            engine.cache.save_checkpoint()  # a read-ahead stopped mid-step loses one piece
        if long:
            yield report()
    return at

def _feed_pending(engine: Any) -> None:
    """Feed the last sampled token: counted, and cached for the next turn."""
    if not engine._pending or len(engine.cache.tokens) >= engine.n_ctx:
        return
    last, engine._pending[:] = list(engine._pending), []
    try:
        engine.feed(last)
    except (Cancelled, EngineError):
        pass

def stats(engine: Any, progress: Progress, *, final: bool = False) -> Stats:
    """The answer's figures so far (the peak memory, a system call, on the final chunk only)."""
    p_n, p_s, g_n, g_s = progress.meter.split()
    threads, full, note = engine._threads_now()
    thought = progress.thought
    return Stats(prompt_tokens=p_n, prompt_seconds=p_s, generated_tokens=g_n,
                 decode_seconds=g_s, ttft_seconds=progress.ttft,
                 context_used=len(engine.cache.tokens), context_limit=engine.n_ctx,
                 dropped_messages=progress.plan.dropped,
                 peak_memory_bytes=engine._peak_memory() if final else None,
                 prompt_length=len(progress.plan.tokens), reused_tokens=progress.kept,
                 conversation_tokens=progress.plan.whole or len(progress.plan.tokens),
                 prepared_tokens=min(progress.prepared, progress.kept),
                 recent_tok_s=progress.rate.tok_s(), threads=threads, threads_full=full,
                 threads_note=note, thinking_tokens=thought.tokens if thought else 0,
                 thinking_end=thought.end if thought else "", **_draft_figures(engine),
                 **_retrieval(progress.plan))


def _retrieval(plan: PromptPlan) -> dict[str, Any]:
    if plan.retrieval is None:
        return {}
    return {"retrieval": plan.retrieval.note, "sources": plan.retrieval.sources}


def _draft_figures(engine: Any) -> dict[str, int]:
    drafting = engine._drafting
    if drafting is None:
        return {}
    f = drafting.figures
    return {"draft_steps": f.steps, "drafted_tokens": f.drafted, "accepted_tokens": f.accepted}

