"""What one request asks of the answer's tokens: its mask and logprobs (`token_control`) and
the parser of the tool calls it may make (`call_parser`), in the model's call format."""

from __future__ import annotations

from typing import Any

from pocketchat.errors import UnsupportedRequest
from pocketchat.engines.constrain.control import TokenControl
from pocketchat.engines.constrain.grammar import checked_grammar, forced_tools, offered_tools
from pocketchat.engines.constrain.toolcalls import ToolCallParser, call_format
from pocketchat.engines.constrain.tools import knows_tools
from pocketchat.engines.types import ChatOptions


def model_call_format(template_source: str) -> str:
    """The call format the model writes: its template's, or JSON for a template without tools."""
    return call_format(template_source) if knows_tools(template_source) else "json"


def call_parser(engine: Any, opts: ChatOptions) -> ToolCallParser | None:
    """The parser of the answer's tool calls; None when no tools are offered."""
    tools = offered_tools(opts)
    if not tools:
        return None
    return ToolCallParser(model_call_format(engine.template_source), tools,
                          forced=forced_tools(opts) is not None)


def token_control(engine: Any, plan: Any, opts: ChatOptions) -> TokenControl | None:
    """The answer's mask and logprobs, or None (nothing to do per token); raises
    UnsupportedRequest for a constraint that cannot be enforced."""
    needs = (opts.response_format and opts.response_format.get("type") not in (None, "text")
             ) or (opts.tools and opts.tool_choice not in ("auto", "none"))
    tokenizer = engine._ll_tokenizer() if needs else None
    grammar = None
    if needs:
        grammar = checked_grammar(opts, model_call_format(engine.template_source), tokenizer)
    if grammar is None and opts.logprobs is None:
        return None
    prefill = getattr(plan, "prefill", None)
    control = TokenControl(token_bytes=engine._token_bytes, tokenizer=tokenizer,
                           grammar=grammar, top=opts.logprobs,
                           in_thinking=getattr(plan, "in_thinking", False),
                           may_think=opts.thinking and engine.mentions_think and prefill is None)
    if prefill is not None and not control.consume_prefill(prefill.content):
        raise UnsupportedRequest("the prefilled assistant message does not fit the requested "
                                 "format", param="messages")
    return control
