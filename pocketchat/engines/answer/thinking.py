"""Split a stream of text deltas into answer text and thinking text.

Reasoning models (POCKET, Qwen3) write their reasoning inside `<think>...</think>` before the
answer. The tags can arrive split across deltas (`"<thi"`, `"nk>"`), so the splitter holds back
only the few characters that might be the start of a tag and releases everything else at once:
streaming is never delayed by more than one tag's length.

    splitter = ThinkSplitter()
    for delta in deltas:
        answer, thinking = splitter.feed(delta)
    answer, thinking = splitter.flush()

When the prompt already opened the block (a chat template whose generation prompt ends with
`<think>`), start with `ThinkSplitter(in_thinking=True)`.

A thought comes before the answer: once answer text has started, a `<think>` in it is text
(a model that writes about the tag, or one past its thought), as llama.cpp's and vLLM's
reasoning parsers read it.
"""

from __future__ import annotations

from pocketchat.engines.answer.partial import partial_suffix

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"


class ThinkSplitter:
    """Streaming `<think>` splitter: `feed(delta) -> (answer_delta, thinking_delta)`.

    Whitespace right after a tag (the newline models put after `<think>` and the blank line
    after `</think>`) is dropped, so neither part starts with stray blank lines.
    """

    def __init__(self, *, in_thinking: bool = False, strip: bool = True,
                 answer_started: bool = False) -> None:
        self.in_thinking = in_thinking
        self._strip = strip
        self._pending = ""
        self._after_tag = in_thinking  # drop leading whitespace of the next segment
        self._answer_started = answer_started  # a prefilled answer goes on: nothing to strip
        self.saw_thinking = in_thinking

    def feed(self, delta: str) -> tuple[str, str]:
        """Take one text delta; return the answer and thinking text that can be released."""
        text = self._pending + delta
        self._pending = ""
        answer: list[str] = []
        thinking: list[str] = []
        while text:
            if not self.in_thinking and self._answer_started:
                self._emit(text, answer, thinking)  # past the thought: all of it is answer
                break
            tag = CLOSE_TAG if self.in_thinking else OPEN_TAG
            at = text.find(tag)
            if at >= 0 and not self.in_thinking and self._starts_answer(text[:at]):
                self._emit(text, answer, thinking)  # the tag comes after answer text: text
                break
            if at >= 0:
                self._emit(text[:at], answer, thinking)
                text = text[at + len(tag) :]
                self.in_thinking = not self.in_thinking
                self.saw_thinking = True
                self._after_tag = True
                continue
            keep = partial_suffix(text, (tag,))
            if keep and (self.in_thinking or not self._starts_answer(text[:-keep])):
                self._pending = text[-keep:]
                text = text[:-keep]
            self._emit(text, answer, thinking)
            break
        return "".join(answer), "".join(thinking)

    def flush(self) -> tuple[str, str]:
        """End of stream: release what was held back (an unfinished tag is plain text)."""
        text, self._pending = self._pending, ""
        answer: list[str] = []
        thinking: list[str] = []
        self._emit(text, answer, thinking)
        return "".join(answer), "".join(thinking)

    def _starts_answer(self, text: str) -> bool:
        return bool(text.strip() if self._strip else text)

    def _emit(self, text: str, answer: list[str], thinking: list[str]) -> None:
        if self._strip and self._after_tag:
            text = text.lstrip()
            if not text:
                return
            self._after_tag = False
        if not text:
            return
        if self.in_thinking:
            thinking.append(text)
        else:
            if self._strip and not self._answer_started:
                text = text.lstrip()
                if not text:
                    return
            self._answer_started = True
            answer.append(text)
