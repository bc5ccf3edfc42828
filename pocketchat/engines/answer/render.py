"""The prompt of one answer: the conversation fitted, rendered with the model's template, and
where its stable parts end (the prefix the next prompt shares, a long system message).

`render` is the one caller of the backend's template (`_apply_template`): tools offered (or
the fallback section for a template without tools), thinking on or off, the template's kwargs,
and a trailing assistant message continued (a prefill). `plan_prompt` fits the conversation
into the window and says where the conversation ends before the generation prompt (`stable`,
checkpointed on a state that cannot be cut back) and where a long first system message ends
(`shared`, parked for other conversations). `history_tokens` is what every next prompt after a
conversation starts with (the settling of an answer evaluates it).

A user message's attachments are rendered as `<document>` blocks before its text
(`documents.prompt`); where they end (`attached`) is checkpointed and parked like a system
prompt, so a changed question, a new chat with the same file, or a restart reads only the
question. When they do not fit the window, passages are retrieved for the question
(`documents.retrieve`, `PromptPlan.retrieval`). `ahead_plan` is the prompt of a read-ahead:
the conversation up to where the last user message's own text begins.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from pocketchat.documents.prompt import with_documents
from pocketchat.documents.retrieve import Retrieval, choose
from pocketchat.errors import ContextOverflow
from pocketchat.engines.constrain.grammar import offered_tools
from pocketchat.engines.constrain.tools import knows_tools, template_messages
from pocketchat.engines.answer.context import fit_messages, reply_reserve, split_turns
from pocketchat.engines.state.prefix_cache import common_prefix
from pocketchat.engines.answer.template import thinking_prompt
from pocketchat.engines.answer.thinking import CLOSE_TAG, OPEN_TAG
from pocketchat.engines.types import ChatOptions, Message

PROBES = ("A", "\n\n", " x", "1")  # next-message stand-ins: where the next prompt is sure to agree
PRESERVE_THINKING = "preserve_thinking"  # the template kwarg that keeps every turn's reasoning
PREFILL_MARK = "\u2063pocketchat-prefill\u2063"  # where a prefilled assistant turn's text ends
CLOSING = "\n\n{line}\n" + CLOSE_TAG + "\n\n"  # how a thought the loop ends is closed


@dataclass(frozen=True)
class PromptPlan:
    tokens: list[int]
    messages: tuple[Message, ...]
    in_thinking: bool
    dropped: int
    stable: int | None  # where the conversation ends before the generation prompt
    prefill: Message | None = None  # a trailing assistant turn the answer continues
    shared: int | None = None  # where a long first system message ends (a shared prefix)
    whole: int = 0  # prompt tokens of the whole conversation, before old turns were dropped
    attached: int | None = None  # where the asked message's attachments end (a shared prefix)
    retrieval: Retrieval | None = None  # passages chosen: the attachments did not fit whole


def render(engine: Any, messages: Sequence[Message], thinking: bool, *, generation: bool = True,
           options: ChatOptions | None = None) -> str:
    """The prompt text for `messages` (see the module docstring); with `generation`, the
    assistant's generation prompt, or the continuation of a trailing assistant message
    (rendered without its end of turn)."""
    opts = options or ChatOptions(thinking=thinking)
    messages = tuple(_expanded(m) for m in messages)
    tools = offered_tools(opts)
    kwargs: dict[str, Any] = dict(opts.template_kwargs or {})
    kwargs["enable_thinking"] = thinking
    aware = knows_tools(engine.template_source)
    if tools and aware:
        kwargs["tools"] = [dict(t) for t in tools]
    if generation and messages and messages[-1].role == "assistant":
        last = messages[-1]
        marked = (*messages[:-1], replace(last, content=last.content + PREFILL_MARK))
        text = engine._apply_template(template_messages(marked, tools, aware=aware),
                                      generation=False, **kwargs)
        at = text.rfind(PREFILL_MARK)
        if at >= 0:
            return text[:at]
        head = render(engine, messages[:-1], thinking, options=opts)  # a template that drops it
        return head + last.content
    text = engine._apply_template(template_messages(messages, tools, aware=aware),
                                  generation=generation, **kwargs)
    if generation:
        text = thinking_prompt(text, thinking=thinking, knows_switch=engine.knows_thinking_switch,
                               mentions_think=engine.mentions_think)
    return text


def plan_prompt(engine: Any, messages: tuple[Message, ...], opts: ChatOptions) -> PromptPlan:
    """The conversation fitted into the window (oldest turns out), rendered and tokenized."""
    rendered: dict[tuple[Message, ...], tuple[str, list[int]]] = {}

    def count(ms: Sequence[Message]) -> int:
        key = tuple(ms)
        if key not in rendered:
            text = render(engine, key, opts.thinking, options=opts)
            rendered[key] = (text, engine._encode(text))
        return len(rendered[key][1])

    budget = engine.n_ctx - reply_reserve(engine.n_ctx, opts.max_tokens)
    retrieval = None
    try:
        fitted = fit_messages(messages, count, budget)
    except ContextOverflow:
        fitted, retrieval = _retrieve(engine, messages, count, budget)
    count(fitted.messages)
    text, tokens = rendered[fitted.messages]
    prefill = fitted.messages[-1] if fitted.messages[-1].role == "assistant" else None
    before = fitted.messages[:-1] if prefill is not None else fitted.messages
    stable = None
    if not engine.cache.trimmable:
        head = engine._encode(render(engine, before, opts.thinking, generation=False,
                                     options=opts))
        if 0 < len(head) < len(tokens) and tokens[: len(head)] == head:
            stable = len(head)
    if prefill is None:
        in_thinking = text.rstrip().endswith(OPEN_TAG)
    else:  # the prefill may have opened the reasoning without closing it
        in_thinking = text.rfind(OPEN_TAG) > text.rfind(CLOSE_TAG)
    return PromptPlan(tokens, fitted.messages, in_thinking, fitted.dropped, stable, prefill,
                      shared_end(engine, fitted.messages, tokens, opts), fitted.whole,
                      attached_end(engine, before, tokens, opts), retrieval)


def _expanded(message: Message) -> Message:
    if not message.attachments:
        return message
    return replace(message, content=with_documents(message.content, message.attachments),
                   attachments=())


def _asked(messages: Sequence[Message]) -> int | None:
    """The index of the last message when it is a user message with attachments."""
    if messages and messages[-1].role == "user" and messages[-1].attachments:
        return len(messages) - 1
    return None


def _retrieve(engine: Any, messages: tuple[Message, ...], count: Any, budget: int) -> Any:
    """The conversation fitted with the asked message's attachments cut to the passages that
    answer it (older turns go first, as ever); ContextOverflow when even that cannot fit."""
    i = _asked(messages)
    if i is None:
        return fit_messages(messages, count, budget), None  # raises the overflow again
    asked = messages[i]
    bare = replace(asked, attachments=tuple(a.excerpted("", "") for a in asked.attachments))
    system, _ = split_turns(messages)
    room = budget - count((*system, bare))
    for _attempt in range(4):  # a passage's tokens in the blocks may differ a little: shrink
        if room <= 0:
            break
        chosen, retrieval = choose(asked.attachments, asked.content, room,
                                   lambda text: len(engine._encode(text)))
        cut = (*messages[:i], replace(asked, attachments=chosen))
        try:
            return fit_messages(cut, count, budget), retrieval
        except ContextOverflow:
            room = int(room * 0.8)
    return fit_messages(messages[i:], count, budget), None  # the overflow, counted whole


def attached_end(engine: Any, before: Sequence[Message], tokens: list[int], opts: ChatOptions
                 ) -> int | None:
    """Where the asked message's attachments end in `tokens`: what every question about them
    after this conversation starts with (None without attachments)."""
    i = _asked(before)
    if i is None:
        return None
    head = _probed(engine, before[:i], opts.thinking, opts, before[i].attachments)
    end = common_prefix(head, tokens)
    return end if 0 < end < len(tokens) - 1 else None


def ahead_plan(engine: Any, messages: tuple[Message, ...], opts: ChatOptions) -> PromptPlan:
    """A read-ahead's prompt: the conversation up to where the last user message's own text
    begins (its attachments read), whole, or nothing when that does not fit the window (the
    question will choose passages)."""
    last = messages[-1] if messages else None
    head = (_probed(engine, messages[:-1], opts.thinking, opts, last.attachments)
            if last is not None and last.role == "user" else [])
    budget = engine.n_ctx - reply_reserve(engine.n_ctx, opts.max_tokens)
    whole = len(head)
    if whole > budget:
        head = []  # `whole` says how long it would have been
    end = len(head) or None
    # shared_end wants a mark before the prompt's end: the read-ahead's ends where it does
    shared = shared_end(engine, messages, [*head, -1], opts) if head else None
    return PromptPlan(head, messages, False, 0, end, None, shared, whole, end)


def shared_end(engine: Any, messages: tuple[Message, ...], tokens: list[int], opts: ChatOptions
               ) -> int | None:
    """Where a first system message (with the tools the template puts beside it) ends in
    `tokens`, when the prompt cache is on and it is at least `min_shared` tokens long."""
    pc = engine.prompt_cache
    if not pc.enabled or len(messages) < 2 or messages[0].role != "system":
        return None
    key = repr((messages[0], opts.thinking, opts.tools, opts.tool_choice, opts.template_kwargs))
    memo = getattr(engine, "_shared_memo", None)
    if memo is not None and memo[0] == key:
        head = memo[1]
    else:
        head = _probed(engine, messages[:1], opts.thinking, opts)
        engine._shared_memo = (key, head)  # the same system message turn after turn
    end = common_prefix(head, tokens)
    if pc.min_shared <= end < len(tokens):
        return end
    return None


def _probed(engine: Any, messages: Sequence[Message], thinking: bool,
            options: ChatOptions | None, attachments: tuple = ()) -> list[int]:
    """The tokens every conversation that goes on from `messages` with a user message (with
    `attachments`) starts with: the common prefix of its renders with each of the `PROBES` as
    that message's text. A
    template refuses a conversation without a user query (Qwen3.5/3.6's), never one with it;
    one that refuses even these gives no prefix."""
    shared: list[int] | None = None
    for probe in PROBES:
        try:
            asked = Message("user", probe, attachments=attachments)
            toks = engine._encode(render(engine, (*messages, asked), thinking,
                                         generation=False, options=options))
        except Exception:  # noqa: BLE001 - a template's refusal: nothing is known to be shared
            return []
        shared = toks if shared is None else shared[: common_prefix(shared, toks)]
    return shared or []


def history_tokens(engine: Any, messages: Sequence[Message], thinking: bool,
                   options: ChatOptions | None = None) -> list[int]:
    """The tokens every next prompt after `messages` starts with: the conversation as the
    template renders it in the history, up to where the next user message's text goes."""
    return _probed(engine, messages, thinking, options)


def closing_tokens(engine: Any, line: str) -> list[int]:
    """The tokens that close a thought the loop ends: `line`, then the end-of-thinking tag as
    the template writes it after a thought (empty when the model does not think)."""
    if not engine.thinks:
        return []
    return engine._encode(CLOSING.format(line=line))
