"""Turn a conversation into the prompt text the model was trained on, from its GGUF template.

The template is the Jinja2 `tokenizer.chat_template` in the file's metadata, rendered with
llama-cpp-python's `Jinja2ChatFormatter` (a sandboxed environment with the Hugging Face
extensions). Thinking is switched off the way the model expects: `enable_thinking=False` for
templates that know the variable (Qwen3, POCKET), an empty `<think></think>` block prefilled
for templates that mention `<think>` but not the switch. A file without a template gets
ChatML, which is what POCKET and SmolLM2 use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pocketchat.errors import EngineError
from pocketchat.engines.types import Message

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
EMPTY_THINK = "<think>\n\n</think>\n\n"


@dataclass(frozen=True)
class Prompt:
    text: str
    in_thinking: bool  # the prompt itself opened a <think> block: the reply starts inside it


class ChatTemplate:
    """A compiled chat template; `render(messages, thinking=...)` gives the prompt."""

    def __init__(self, template: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.source = template or CHATML
        self.is_fallback = template is None
        self.knows_thinking_switch = "enable_thinking" in self.source
        self.mentions_think = "<think>" in self.source
        try:
            self._formatter = Jinja2ChatFormatter(
                template=self.source, eos_token=eos_token, bos_token=bos_token,
                add_generation_prompt=True,
            )
        except Exception as exc:  # jinja2.TemplateSyntaxError and friends
            raise EngineError(
                f"the model's chat template cannot be read: {exc}",
                hint="The GGUF file's tokenizer.chat_template is broken; try another build.",
            ) from exc

    def render(self, messages: Sequence[Message], *, thinking: bool = True) -> Prompt:
        dicts = [{"role": m.role, "content": m.content} for m in messages]
        try:
            text = self._formatter(messages=dicts, enable_thinking=thinking).prompt
        except Exception as exc:  # the template's raise_exception, or a render error
            raise EngineError(
                f"the chat template rejected the conversation: {exc}",
                hint="Start a new conversation; if it happens again, report it.",
            ) from exc
        if not thinking and self.mentions_think and not self.knows_thinking_switch:
            tail = text.rstrip()
            if tail.endswith("<think>"):
                text = tail + "\n\n</think>\n\n"
            elif not tail.endswith("</think>"):
                text += EMPTY_THINK
        tail = text.rstrip()
        return Prompt(text=text, in_thinking=tail.endswith("<think>"))
