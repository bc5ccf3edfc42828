"""After an answer: the state made to hold the answer as the next prompt will, so the next
turn evaluates only its new message (`settle`)."""

from __future__ import annotations

from typing import Any

from pocketchat.engines.answer.loop import Cancelled
from pocketchat.engines.answer.render import PRESERVE_THINKING, PromptPlan, history_tokens
from pocketchat.engines.types import ChatOptions, Message


def settle(engine: Any, plan: PromptPlan, answer: str, calls: tuple, opts: ChatOptions,
           thinking: str = "") -> None:
    """Evaluate the answer as the next prompt will hold it (errors only cost the reuse). Its
    reasoning goes with it when the request keeps reasoning in the history
    (`preserve_thinking`: the caller sends it back as `reasoning_content`)."""
    reasoning = thinking if (opts.template_kwargs or {}).get(PRESERVE_THINKING) else ""
    if not (answer or calls or reasoning) or engine._closed:
        return
    messages = plan.messages
    if plan.prefill is not None:  # the answer continues the prefilled turn
        messages, answer = messages[:-1], plan.prefill.content + answer
    try:
        turn = Message("assistant", answer, tool_calls=calls, reasoning=reasoning or None)
        history = history_tokens(engine, (*messages, turn), opts.thinking, opts)
        if not history or len(history) >= engine.n_ctx - 1:
            return
        reuse = engine.cache.prepare(history, leave=0)
        if reuse.keep < len(history):
            engine._evaluate(history[reuse.keep:])
        engine._prepared = len(history) - reuse.keep
        engine._settled = True
    except Cancelled:
        engine._prepared = 0  # the evaluation left the state consistent with cache.tokens
    except Exception:  # noqa: BLE001 - a cache that cannot settle is reset
        engine.cache.reset()
        engine._prepared = 0
