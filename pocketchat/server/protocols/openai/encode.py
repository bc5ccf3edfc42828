"""OpenAI's responses: usage, timings, logprobs, tool calls, prompt progress and errors in
the shapes its clients read (the bodies are described in schema.py)."""

from __future__ import annotations

from typing import Any, Sequence

from pocketchat.engines.types import PromptProgress, Stats, TokenLogprob, ToolCall
from pocketchat.errors import ApiError
from pocketchat.server.protocols.validate import said


def prompt_progress(progress: PromptProgress, stats: Stats) -> dict[str, int]:
    """llama.cpp's `prompt_progress` object: the whole prompt (`total`), the part reused from
    the cache (`cache`), the tokens in the model's state so far (`processed`, the cached ones
    included) and the milliseconds since the prompt's evaluation began (`time_ms`)."""
    return {"total": stats.prompt_length, "cache": stats.reused_tokens,
            "processed": stats.reused_tokens + progress.done,
            "time_ms": int(progress.seconds * 1000)}


def usage(stats: Stats) -> dict[str, Any]:
    """OpenAI's `usage`: the whole prompt, the part of it the engine reused from its cache
    (`cached_tokens`: not evaluated for this request), and the generated tokens."""
    prompt, completion = prompt_length(stats), int(stats.generated_tokens)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": stats.reused_tokens},
        "completion_tokens_details": {"reasoning_tokens": stats.thinking_tokens},
        "thinking_end": stats.thinking_end,
    }


def prompt_length(stats: Stats) -> int:
    """The whole prompt in tokens (the evaluated ones when an engine gives no length)."""
    return stats.prompt_length or stats.prompt_tokens


def timings(stats: Stats) -> dict[str, Any]:
    """llama.cpp server's `timings` extension: the engine's own prompt and decode figures."""
    return {
        "prompt_n": stats.prompt_tokens,
        "prompt_ms": round(stats.prompt_seconds * 1000, 3),
        "prompt_per_second": round(stats.prompt_tok_s, 3),
        "predicted_n": stats.generated_tokens,
        "predicted_ms": round(stats.decode_seconds * 1000, 3),
        "predicted_per_second": round(stats.decode_tok_s, 3),
        "cache_n": stats.reused_tokens,
    }


def error_body(exc: ApiError) -> dict[str, Any]:
    """OpenAI's error object: `{"error": {"message", "type", "param", "code"}}`."""
    return {"error": {"message": said(exc), "type": exc.type, "param": exc.param, "code": exc.code}}


def logprob_entries(lps: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    """OpenAI's `logprobs.content`: each token with its logprob, bytes and top alternatives."""
    return [{"token": lp.token, "logprob": lp.logprob, "bytes": list(lp.bytes),
             "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}
                              for t in lp.top]} for lp in lps]


def tool_call_entries(calls: Sequence[ToolCall], start: int = 0) -> list[dict[str, Any]]:
    """OpenAI's `tool_calls` (each with its `index` in the answer, as streaming needs)."""
    return [{"index": start + i, "id": c.id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]


def legacy_logprobs(lps: Sequence[TokenLogprob], offset: int = 0) -> dict[str, Any]:
    """The completions endpoint's `logprobs`: tokens, their logprobs, top ones, text offsets."""
    offsets, at = [], offset
    for lp in lps:
        offsets.append(at)
        at += len(lp.token)
    return {"tokens": [lp.token for lp in lps], "token_logprobs": [lp.logprob for lp in lps],
            "top_logprobs": [{t.token: t.logprob for t in lp.top} for lp in lps],
            "text_offset": offsets}
