"""The command palette's chat commands, as a Textual command `Provider` (Ctrl+P)."""

from __future__ import annotations

from typing import Callable, Iterator

from textual.command import DiscoveryHit, Hit, Hits, Provider

from pocketchat import conversations
from pocketchat.conversations import Conversation
from pocketchat.ui import thinking
from pocketchat.ui.chat import Chat
from pocketchat.ui.screens import ConversationsScreen

PaletteCommand = tuple[str, str, Callable[[], object]]


class ChatCommands(Provider):
    """New chat, system prompt, thinking on/off and its budget, answer now, attach a file,
    copy, hardware, saved chats, restart."""

    def _commands(self) -> Iterator[PaletteCommand]:
        app = self.app
        chats = self.screen.query(Chat)
        if chats:
            chat = chats.first(Chat)
            yield "New chat", "Start a new conversation (Ctrl+N)", chat.new_chat
            yield "System prompt", "Set the system prompt of this chat", chat.edit_system_prompt
            if getattr(chat.info, "thinking", None) is not False:  # only for a model that thinks
                state = "off" if chat.thinking else "on"
                yield f"Thinking {state}", f"Turn the model's thinking {state}", chat.toggle_thinking
                yield ("Thinking budget", "The most tokens the next answers may think (off, on, "
                       "unlimited or N)", lambda: thinking.edit_budget(chat))
                if thinking.in_thought(chat):
                    yield ("Answer now", "End the thinking now; the answer follows (Ctrl+T)",
                           lambda: thinking.answer_now(chat))
            yield ("Attach a file", "Put a file (text, code, CSV, JSON, HTML, PDF) in the next "
                   "message; it is read while you type (Ctrl+O)", chat.files.ask)
            if chat.files.pending:
                yield ("Remove the attached files", "Take the files off the next message",
                       chat.files.clear)
            for tool in chat.tools.listed:  # the MCP servers' tools (--mcp, mcp.json)
                yield (f"Use the tool {tool.name}", f"The next answer calls it ({tool.server}: "
                       f"{tool.summary or 'no description'})",
                       lambda name=tool.name: chat.tools.force(chat, name))
            yield "Copy last answer", "Copy the last answer to the clipboard", lambda: copy_answer(chat)
        yield ("Hardware and recommendation", "What runs, on what, and why",
               lambda: app.run_action("about"))
        if chats:
            yield ("Open a saved conversation", "Pick one of the saved chats",
                   lambda: open_saved(chat))
            yield "Restart the engine", "Reload the model (Ctrl+R)", lambda: app.run_action("restart")

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)


def copy_answer(chat: Chat) -> None:
    answer = chat.conversation.last_answer()
    if answer is None:
        chat.notify("No answer to copy yet.", severity="warning")
        return
    chat.app.copy_to_clipboard(answer.content)
    chat.notify("Copied the last answer.")


def open_saved(chat: Chat) -> None:
    saved, skipped = conversations.scan()
    if skipped:
        chat.notify(f"{len(skipped)} unreadable conversation file(s) skipped.", severity="warning")

    async def opened(choice: Conversation | None) -> None:
        if choice is not None:
            await chat.open_conversation(choice)

    chat.app.push_screen(ConversationsScreen(saved), callback=opened)
