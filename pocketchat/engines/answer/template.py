"""Turn a conversation into the prompt text the model was trained on, from its GGUF template.

The template is the Jinja2 `tokenizer.chat_template` in the file's metadata, rendered with
llama-cpp-python's `Jinja2ChatFormatter` (a sandboxed environment with the Hugging Face
extensions). Each renderer's `apply(dicts, generation=, **kwargs)` gives the raw text; the one
thinking policy (`thinking_prompt`, used by both backends) switches thinking off the way the
model expects: `enable_thinking=False` for templates that know the variable (Qwen3, POCKET), an
empty `<think></think>` block prefilled for templates that mention `<think>` but not the switch.

A file without a template (`template_for`) gets llama.cpp's built-in template for its format,
told by its special tokens (`<|im_start|>`: ChatML) or its architecture (gemma3: Gemma), with a
note saying so; when llama.cpp has none, the model runs as a plain text completion.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

from pocketchat.errors import EngineError, TemplateRefused

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
EMPTY_THINK = "<think>\n\n</think>\n\n"


def thinking_prompt(text: str, *, thinking: bool, knows_switch: bool,
                    mentions_think: bool) -> str:
    """A rendered generation prompt with thinking switched off the way the model expects:
    the template did it (it knows `enable_thinking`), or an empty think block is prefilled."""
    if thinking or not mentions_think or knows_switch:
        return text
    tail = text.rstrip()
    if tail.endswith("<think>"):
        return tail + "\n\n</think>\n\n"
    if not tail.endswith("</think>"):
        return text + EMPTY_THINK
    return text


class ChatTemplate:
    """A compiled chat template; `apply(dicts, generation=...)` gives its text."""

    def __init__(self, template: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        self.source = template or CHATML
        self.is_fallback = template is None
        self.knows_thinking_switch = "enable_thinking" in self.source
        self.mentions_think = "<think>" in self.source
        try:
            self._formatters = {
                gen: Jinja2ChatFormatter(template=self.source, eos_token=eos_token,
                                         bos_token=bos_token, add_generation_prompt=gen)
                for gen in (True, False)
            }
        except Exception as exc:  # jinja2.TemplateSyntaxError and friends
            raise EngineError(
                f"the model's chat template cannot be read: {exc}",
                hint="The GGUF file's tokenizer.chat_template is broken; try another build.",
            ) from exc

    def apply(self, dicts: list[dict], *, generation: bool = True, **kwargs: Any) -> str:
        """The template's text for message dicts; kwargs reach the template (tools, ...)."""
        try:
            return self._formatters[generation](messages=dicts, **kwargs).prompt
        except Exception as exc:  # the template's raise_exception, or a render error
            raise TemplateRefused(f"the model's chat template refused the conversation: {exc}"
                                  ) from exc


# Special tokens that give a model's chat format away, and llama.cpp's built-in template for it.
TOKEN_TEMPLATES = (
    ("<|im_start|>", "chatml"),
    ("<|start_header_id|>", "llama3"),
    ("<start_of_turn>", "gemma"),
    ("<|START_OF_TURN_TOKEN|>", "command-r"),
    ("[SYSTEM_PROMPT]", "mistral-v7"),
)
# GGUF architectures whose chat format llama.cpp knows by name.
ARCH_TEMPLATES = {
    "gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma",
    "phi3": "phi3", "command-r": "command-r", "cohere2": "command-r", "chatglm": "chatglm4",
    "exaone": "exaone3", "exaone4": "exaone4", "granite": "granite", "granitemoe": "granite",
    "orion": "orion", "minicpm": "minicpm", "llama4": "llama4", "gpt-oss": "gpt-oss",
    "hunyuan-moe": "hunyuan-moe", "hunyuan-dense": "hunyuan-dense", "rwkv6": "rwkv-world",
    "rwkv7": "rwkv-world",
}


def builtin_templates() -> set[str]:
    """The names of llama.cpp's built-in chat templates (llama_chat_builtin_templates)."""
    import llama_cpp

    names = (ctypes.c_char_p * 256)()
    count = llama_cpp.llama_chat_builtin_templates(names, 256)
    return {names[i].decode() for i in range(min(count, 256)) if names[i]}


class BuiltinTemplate:
    """One of llama.cpp's built-in chat templates, applied by llama.cpp (no thinking switch)."""

    knows_thinking_switch = mentions_think = False
    is_fallback = True

    def __init__(self, name: str) -> None:
        self.name = self.source = name

    def apply(self, dicts: list[dict], *, generation: bool = True, **kwargs: Any) -> str:
        import llama_cpp

        keep = [(str(d["role"]).encode(), str(d["content"]).encode()) for d in dicts]
        chat = (llama_cpp.llama_chat_message * len(keep))(*[llama_cpp.llama_chat_message(r, c) for r, c in keep])
        size = 4 * sum(len(r) + len(c) for r, c in keep) + 1024
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(self.name.encode(), chat, len(keep), generation, buf, size)
            if n < 0:
                raise TemplateRefused(f"llama.cpp's {self.name!r} template refused the conversation")
            if n <= size:
                return buf.raw[:n].decode("utf-8", errors="replace")
            size = n + 1
        raise EngineError(f"llama.cpp's {self.name!r} template gave no prompt")  # pragma: no cover


class PlainCompletion:
    """No chat format at all: the messages' text one after another, the model continues it."""

    knows_thinking_switch = mentions_think = False
    is_fallback = True
    source = ""

    def apply(self, dicts: list[dict], *, generation: bool = True, **kwargs: Any) -> str:
        return "\n\n".join(str(d["content"]) for d in dicts if d.get("content"))


def template_for(template: str | None, *, arch: str, model: str, has_token: Callable[[str], bool],
                 bos_token: str = "", eos_token: str = "") -> tuple[ChatTemplate | BuiltinTemplate | PlainCompletion, str]:
    """The renderer for a GGUF's chat template and a note for the user ("" when it has one)."""
    if template is not None:
        return ChatTemplate(template, bos_token=bos_token, eos_token=eos_token), ""
    known = builtin_templates()
    name = next((n for token, n in TOKEN_TEMPLATES if n in known and has_token(token)), None)
    name = name or (ARCH_TEMPLATES.get(arch) if ARCH_TEMPLATES.get(arch) in known else None)
    if name is not None:
        return BuiltinTemplate(name), (f"{model} has no chat template: using llama.cpp's built-in "
                                       f"'{name}' template ({arch} architecture).")
    return PlainCompletion(), (f"{model} has no chat template, and llama.cpp has none for its "
                               f"architecture ({arch}): it runs as a plain text completion.")
