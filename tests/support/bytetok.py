"""llguidance over a byte vocabulary (one token a byte, plus end-of-text): grammars matched
against exact text with no model, for fast tests of what a grammar admits."""

from __future__ import annotations

EOS = 256


class _Bytes:
    eos_token_id = EOS
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    special_token_ids = [EOS]

    def __call__(self, text):
        return list(text.encode("utf-8") if isinstance(text, str) else text)


def byte_tokenizer():
    from llguidance import LLTokenizer, TokenizerWrapper

    return LLTokenizer(TokenizerWrapper(_Bytes()))


def admits(grammar: str, text: str, tokenizer=None) -> bool:
    """Whether llguidance's `grammar` (grammar text) accepts exactly `text`."""
    from llguidance import LLMatcher

    tokenizer = tokenizer or byte_tokenizer()
    matcher = LLMatcher(tokenizer, grammar, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    tokens = tokenizer.tokenize_str(text)
    return matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting()
