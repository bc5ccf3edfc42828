"""The legacy `/v1/completions` endpoint continues the raw prompt (no chat template), through
the real `openai` client's `completions.create` against the real server with the starter:
greedy text equals a bare llama-cpp-python greedy continuation token for token, stream and not,
`echo`, `logprobs` in the legacy shape, `max_tokens`, `stop`, the prefix cache reused."""

from __future__ import annotations

import math

import pytest

from support.serverproc import client, model, running  # noqa: F401 - module fixtures

openai = pytest.importorskip("openai")
llama_cpp = pytest.importorskip("llama_cpp")

pytestmark = pytest.mark.slow
PROMPT = "The capital of France is"
GREEDY = dict(temperature=0, extra_body={"ignore_eos": True, "repeat_penalty": 1.0})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The starter served as the bare llama runs it: one sequence and no drafts (with `--draft
    auto` a verified batch's logits sum in another order than one token's, and a near tie of
    two tokens may then fall the other way)."""
    with running(["--model", "starter", "--ctx", "1024", "--parallel", "1", "--draft", "off"],
                 tmp_path_factory.mktemp("serve")) as srv:
        yield srv


@pytest.fixture(scope="module")
def bare():
    """llama-cpp-python alone on the same file: what a raw continuation must be."""
    from pocketchat.engines.llamacpp.load import new_llama
    from pocketchat.store.starter import starter_path

    llm = new_llama(starter_path(), n_ctx=1024)
    yield llm
    llm.close()


def bare_greedy(llm, prompt: str, n: int) -> list[str]:
    """The first `n` tokens llama.cpp's own greedy sampler continues `prompt` with."""
    llm.reset()
    pieces = []
    for tok in llm.generate(llm.tokenize(prompt.encode(), add_bos=True, special=True),
                            temp=0, top_k=1, repeat_penalty=1.0, reset=True):
        pieces.append(llm.detokenize([tok]).decode("utf-8", errors="replace"))
        if len(pieces) == n:
            return pieces
    return pieces


def test_greedy_continuation_equals_llama_cpp_token_for_token(client, model, bare):
    expected = bare_greedy(bare, PROMPT, 24)
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=24, logprobs=1, **GREEDY)
    choice = r.choices[0]
    assert choice.logprobs.tokens == expected
    assert choice.text == "".join(expected)
    assert choice.finish_reason == "length"
    # the raw prompt, not a chat turn: exactly its own tokens (a template adds ~20 more)
    assert r.usage.prompt_tokens == len(bare.tokenize(PROMPT.encode(), add_bos=True, special=True))
    assert r.usage.completion_tokens == 24


def test_stream_gives_the_same_text(client, model):
    whole = client.completions.create(model=model, prompt=PROMPT, max_tokens=20, **GREEDY)
    events = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=20, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    assert all(e.object == "text_completion" for e in events)
    text = "".join(e.choices[0].text for e in events if e.choices)
    assert text == whole.choices[0].text
    finishes = [e.choices[0].finish_reason for e in events if e.choices and e.choices[0].finish_reason]
    assert finishes == ["length"]
    assert events[-1].usage.completion_tokens == 20


def test_the_same_prompt_again_reuses_the_cache(client, model):
    longer = PROMPT + " Paris, and the capital of Italy is"
    client.completions.create(model=model, prompt=longer, max_tokens=2, **GREEDY)
    again = client.completions.create(model=model, prompt=longer, max_tokens=2, **GREEDY)
    assert again.usage.prompt_tokens_details.cached_tokens >= again.usage.prompt_tokens - 1


def test_echo_returns_the_prompt_before_the_continuation(client, model):
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, **GREEDY)
    echoed = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, echo=True, **GREEDY)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    streamed = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=8, echo=True,
                                              stream=True, **GREEDY))
    assert "".join(e.choices[0].text for e in streamed if e.choices) == echoed.choices[0].text


def test_logprobs_have_the_legacy_shape(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=10, logprobs=3, **GREEDY)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
    assert "".join(lp.tokens) == r.choices[0].text
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=False):
        assert isinstance(top, dict) and len(top) == 3
        assert logprob <= 0 and math.isclose(logprob, max(top.values()), abs_tol=1e-4)  # greedy
        assert token in top
    assert lp.text_offset[0] == 0
    assert all(b - a == len(t) for a, b, t in zip(lp.text_offset, lp.text_offset[1:], lp.tokens, strict=False))
    echoed = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, logprobs=0,
                                       echo=True, **GREEDY).choices[0]
    assert echoed.logprobs.text_offset[0] == len(PROMPT)  # offsets into the text returned
    streamed = [e.choices[0].logprobs for e in client.completions.create(
        model=model, prompt=PROMPT, max_tokens=10, logprobs=3, stream=True, **GREEDY)
        if e.choices and e.choices[0].logprobs]
    assert [t for s in streamed for t in s.tokens] == lp.tokens


def test_max_tokens_and_its_default(client, model):
    for n in (1, 5):
        r = client.completions.create(model=model, prompt=PROMPT, max_tokens=n, **GREEDY)
        assert r.usage.completion_tokens == n and r.choices[0].finish_reason == "length"
    r = client.completions.create(model=model, prompt=PROMPT, **GREEDY)
    assert r.usage.completion_tokens == 16  # OpenAI's default for this endpoint


def test_stop_ends_the_text_before_the_sequence(client, model, bare):
    expected = "".join(bare_greedy(bare, PROMPT, 24))
    assert "\n" in expected  # " Paris.\n\nThe United States ..."
    for stream in (False, True):
        r = client.completions.create(model=model, prompt=PROMPT, max_tokens=24, stop=["\n"],
                                      stream=stream, **GREEDY)
        if stream:
            events = list(r)
            text = "".join(e.choices[0].text for e in events if e.choices)
            finish = [e.choices[0].finish_reason for e in events if e.choices][-1]
        else:
            text, finish = r.choices[0].text, r.choices[0].finish_reason
        assert text == expected.split("\n")[0] and finish == "stop"
