"""The command palette's commands and the dialogs they open (a mixin of ChatApp)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.screen import Screen

from pocketchat import conversations
from pocketchat.conversations import Conversation
from pocketchat.errors import PocketchatError
from pocketchat.engines.types import EngineInfo
from pocketchat.ui.screens import ConversationsScreen, InfoScreen, SystemPromptScreen
from pocketchat.ui.widgets import PLACEMENT_WORDS

if TYPE_CHECKING:
    from pocketchat.ui.app import ChatApp

    _Base = ChatApp
else:
    _Base = object


class PaletteCommands(_Base):
    """New chat, system prompt, thinking on/off, copy, hardware, saved chats, restart."""

    def action_system_prompt(self) -> None:
        def apply(value: str | None) -> None:
            if value is None:
                return
            self.conversation.system = value or None
            self.default_system = value or None
            if self.conversation.messages:
                self.conversation.save()
            self.notify("System prompt set." if value else "System prompt cleared.")

        self.push_screen(SystemPromptScreen(self.conversation.system), callback=apply)

    def action_toggle_thinking(self) -> None:
        self.thinking = not self.thinking
        self.notify(f"Thinking {'on' if self.thinking else 'off'} for the next answers.")

    def action_copy_answer(self) -> None:
        answer = self.conversation.last_answer()
        if answer is None:
            self.notify("No answer to copy yet.", severity="warning")
            return
        self.copy_to_clipboard(answer.content)
        self.notify("Copied the last answer.")

    def action_about(self) -> None:
        text = self.about() if callable(self.about) else self.about
        self.push_screen(InfoScreen(about_markdown(self.info, text)))

    def action_open_saved(self) -> None:
        saved, skipped = conversations.scan()
        if skipped:
            self.notify(f"{len(skipped)} unreadable conversation file(s) skipped.",
                        severity="warning")

        async def opened(choice: Conversation | None) -> None:
            if choice is not None:
                await self.open_conversation(choice)

        self.push_screen(ConversationsScreen(saved), callback=opened)


    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("New chat", "Start a new conversation (Ctrl+N)", self.action_new_chat)
        yield SystemCommand("System prompt", "Set the system prompt of this chat",
                            self.action_system_prompt)
        state = "off" if self.thinking else "on"
        yield SystemCommand(f"Thinking {state}", f"Turn the model's thinking {state}",
                            self.action_toggle_thinking)
        yield SystemCommand("Copy last answer", "Copy the last answer to the clipboard",
                            self.action_copy_answer)
        yield SystemCommand("Hardware and recommendation", "What runs, on what, and why",
                            self.action_about)
        yield SystemCommand("Open a saved conversation", "Pick one of the saved chats",
                            self.action_open_saved)
        yield SystemCommand("Restart the engine", "Reload the model (Ctrl+R)", self.action_restart)
        yield from super().get_system_commands(screen)


def describe_error(error: BaseException) -> tuple[str, str]:
    """One line for the user and a hint; never a traceback."""
    if isinstance(error, PocketchatError):
        return error.message or type(error).__name__, error.hint
    return f"{type(error).__name__}: {error}", ""


def about_markdown(info: EngineInfo | None, extra: str | None) -> str:
    lines = ["# What is running", ""]
    if info is None:
        lines.append("No model is running.")
    else:
        lines += [f"- **Model:** {info.model}", f"- **Backend:** {info.backend}",
                  f"- **Placement:** {PLACEMENT_WORDS.get(info.placement, info.placement)}", f"- **Context:** {info.n_ctx} tokens"]
        if info.path:
            lines.append(f"- **File:** `{info.path}`")
    if extra:
        lines += ["", extra]
    return "\n".join(lines)


