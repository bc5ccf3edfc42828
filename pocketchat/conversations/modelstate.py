"""The model's state kept beside a conversation, so reopening it does not make the model read
it all again: saved after each answer, restored when a saved conversation opens.

Both run in a thread (a state can be hundreds of MB); neither raises: a state that cannot be
written or read only costs the time to read the conversation again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pocketchat.conversations import Conversation, prune_states
from pocketchat.engines.state.saved_state import saved_tokens
from pocketchat.engines.types import Engine, StatefulEngine, liveness_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    """What opening a conversation did with its saved state: a line for the chat."""

    loaded: bool
    text: str
    tokens: int = 0  # what the context holds once it loaded (the chat's meter shows it too)


def save(engine: Engine | None, conversation: Conversation) -> int:
    """Save the engine's state as this conversation's; the bytes written (0: not saved)."""
    if not isinstance(engine, StatefulEngine) or not conversation.messages:
        return 0
    if not liveness_of(engine).responding:  # it could not answer; the state stays as saved
        return 0
    path = conversation.state_path
    try:
        written = engine.save_state(path)
    except Exception as exc:  # noqa: BLE001 - a cache: losing it costs time, not text
        log.warning("could not save the model state of %s: %s", conversation.id, exc)
        return 0
    prune_states(path.parent)
    return written


def restore(engine: Engine | None, conversation: Conversation) -> Restored | None:
    """Load this conversation's saved state into the engine; None when there is nothing to say
    (an empty conversation, an engine without saved states)."""
    if not isinstance(engine, StatefulEngine) or not conversation.engine_messages():
        return None
    path = conversation.state_path
    if not path.exists():
        return Restored(False, "No saved model state for this chat: the first answer reads "
                               "the whole conversation again.")
    tokens = saved_tokens(path)
    try:
        why = engine.load_state(path)
    except Exception as exc:  # noqa: BLE001 - see save()
        why = f"the saved model state did not load ({exc}); the conversation is processed again"
    if why is not None:
        return Restored(False, why[:1].upper() + why[1:] + ".")
    return Restored(True, f"Restored the model's state of this chat ({tokens:,} tokens of context): "
                          "the next answer reads only your new message.", tokens)
