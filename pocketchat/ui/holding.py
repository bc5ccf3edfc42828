"""Which conversation this window holds: one writer per conversation file.

Two windows writing one conversation would lose the turns of one of them, so a window holds
the conversation it shows (`conversations.hold`) and works in a copy when another pocketchat
window has it open; and when a save found another writer anyway (`Conversation.forked_from`),
the window moves its hold to the copy it became. Each change comes with a line for the chat.
"""

from __future__ import annotations

from pocketchat import conversations
from pocketchat.conversations import Conversation


class Holding:
    """This window's hold on its conversation."""

    def __init__(self) -> None:
        self._hold: conversations.Hold | None = None
        self._shown: Conversation | None = None

    def take(self, conversation: Conversation) -> tuple[Conversation, str]:
        """Hold `conversation`, or a copy of it when another window has it: (the conversation
        to show, a line for the chat or "")."""
        self.release()
        got = conversations.hold(conversation)
        if isinstance(got, conversations.Hold):
            self._hold, self._shown = got, conversation
            return conversation, ""
        copy = conversation.copy()
        held = conversations.hold(copy)
        self._hold = held if isinstance(held, conversations.Hold) else None
        self._shown = copy
        where = f" (process {got})" if got else ""
        return copy, (f"This chat is open in another pocketchat window{where}. You are in a copy "
                      f"of it, \u201c{copy.display_title}\u201d, saved as a chat of its own; the "
                      "other window keeps the original.")

    def follow(self, conversation: Conversation) -> str:
        """After a save: when it made `conversation` a copy (another program wrote its file),
        hold the copy; a line for the chat, or ""."""
        if (not conversation.forked_from or conversation is not self._shown
                or (self._hold is not None and self._hold.conversation_id == conversation.id)):
            return ""
        self.take(conversation)
        return ("Another program wrote this chat while it was open here: this window's turns "
                f"are saved as a copy, \u201c{conversation.display_title}\u201d; nothing was lost.")

    def release(self) -> None:
        """Let other windows open the conversation (this window leaves it)."""
        if self._hold is not None:
            shown = self._shown
            self._hold.release(forget=shown is None or not shown.path.exists())
            self._hold = None
