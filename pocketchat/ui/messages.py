"""Messages between the chat's parts (a leaf module: it imports nothing else from ui/)."""

from __future__ import annotations

from textual.message import Message

from pocketchat.engines.types import Engine


class EngineReady(Message):
    """The engine opened (posted from the startup thread)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self.engine = engine


class EngineFailed(Message):
    """Preparing or opening the engine failed."""

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


class EngineLost(Message):
    """The engine died during an answer (the chat says so; the app lets it go)."""


class StartupProgress(Message):
    """Bytes downloaded so far while preparing the model."""

    def __init__(self, done: int, total: int | None, what: str, at: float) -> None:
        super().__init__()
        self.done, self.total, self.what, self.at = done, total, what, at


class StartupNote(Message):
    """Something the user should know about how the model was set up (a lowered --ctx)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class StartupStatus(Message):
    """What the startup does now ("Loading the model")."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class LoadProgress(Message):
    """How far the model's load is: the engine's `on_progress(stage, fraction)`."""

    def __init__(self, stage: str, fraction: float) -> None:
        super().__init__()
        self.stage, self.fraction = stage, fraction
