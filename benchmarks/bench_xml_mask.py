"""What a forced tool call's mask costs per token in each call format, on a real vocabulary.

Run: python benchmarks/bench_xml_mask.py [--model starter|PATH.gguf] [--repeat 3]
Loads the model's vocabulary (llama.cpp, vocab only), builds the grammar of a forced call to
a tool whose string parameters carry `maxLength`, `pattern`, `format` and `enum` (the XML
format, which writes them as raw text, and the JSON format), and walks a valid call through
llguidance token by token: each step fills the token mask (timed) and consumes the next
token. Prints the median and the 95th percentile of the mask time per token for each format,
and, for scale, the same for the XML grammar with every string parameter unconstrained (the
lazy raw-text match the XML format used before string keywords were enforced). No model is
run: the figures are llguidance's alone, the part the XML change touches.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARAMS = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 60},
    "body": {"type": "string", "minLength": 200, "maxLength": 4000},
    "slug": {"type": "string", "pattern": "^[a-z0-9-]+$", "maxLength": 80},
    "site": {"type": "string", "format": "uri", "maxLength": 2083},
    "due": {"type": "string", "format": "date"},
    "mood": {"type": "string", "enum": ["calm", "busy", "stormy"]},
    "count": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["title", "body", "slug", "site", "due", "mood", "count"],
    "additionalProperties": False}
ARGS = {"title": "A dragon who bakes bread", "body": "Once upon a time, " * 40,
        "slug": "dragon-bakes-bread", "site": "https://example.com/stories/dragon?x=1",
        "due": "2026-12-05", "mood": "calm", "count": 7}


def call_text(fmt: str) -> str:
    if fmt == "json":
        return "<tool_call>\n" + json.dumps({"name": "post", "arguments": ARGS}) + "\n</tool_call>"
    body = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
                   for k, v in ARGS.items())
    return f"<tool_call>\n<function=post>\n{body}</function>\n</tool_call>"


def unconstrained_params() -> dict:
    props = {k: ({"type": "string"} if v.get("type") == "string" else v)
             for k, v in PARAMS["properties"].items()}
    return {**PARAMS, "properties": props}


def walk(grammar: str, text: str, tokenizer) -> list[float]:
    from llguidance import LLMatcher
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    matcher = LLMatcher(tokenizer, grammar, log_level=0)
    mask = allocate_token_bitmask(1, tokenizer.vocab_size)
    times = []
    for token in tokenizer.tokenize_str(text):
        t0 = time.perf_counter()
        fill_next_token_bitmask(matcher, mask)
        times.append(time.perf_counter() - t0)
        if not matcher.consume_token(token):
            raise SystemExit(f"the grammar refused the call text: {matcher.get_error()}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="starter")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from pocketchat.engines.constrain.grammar import checked_grammar
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions
    from pocketchat.store.starter import starter_path
    from pocketchat.types import LoadPlan

    path = starter_path() if args.model == "starter" else Path(args.model)
    plan = LoadPlan(backend="llama.cpp", placement="cpu", n_gpu_layers=0, n_ctx=512,
                    n_threads=2, n_threads_batch=2)
    eng = LlamaCppEngine(plan, path, name=path.name)
    try:
        tokenizer = eng._ll_tokenizer()
        print(f"vocabulary: {tokenizer.vocab_size} tokens ({path.name})")
        cases = [("xml, whole schema", PARAMS, "xml"), ("json, whole schema", PARAMS, "json"),
                 ("xml, strings unconstrained", unconstrained_params(), "xml")]
        for label, params, fmt in cases:
            options = ChatOptions(tools=({"type": "function", "function": {
                "name": "post", "parameters": params}},), tool_choice="required",
                parallel_tool_calls=False)
            t0 = time.perf_counter()
            grammar = checked_grammar(options, fmt, tokenizer)
            compile_ms = (time.perf_counter() - t0) * 1000
            times = [t for _ in range(args.repeat) for t in walk(grammar, call_text(fmt), tokenizer)]
            times.sort()
            print(f"{label:28s} compile+check {compile_ms:6.1f} ms; mask per token: median "
                  f"{statistics.median(times) * 1000:.3f} ms, p95 "
                  f"{times[int(len(times) * 0.95)] * 1000:.3f} ms over {len(times)} tokens")
    finally:
        eng.close()


if __name__ == "__main__":
    main()
