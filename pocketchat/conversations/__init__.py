"""Saved conversations: one JSON file each, written atomically so a crash never loses one.

A conversation is saved after every message and, while an answer streams, at a bounded rate
(`Autosave`). The answer in flight is saved marked `interrupted`; the mark is cleared when the
answer finishes, so a process killed mid-answer (even `kill -9`) leaves a file that says the
answer was cut short, and loses at most the tokens since the last save.

One writer per file: a chat holds the conversation it shows (`hold`, an OS file lock that ends
with the process), so a second window opening it gets a copy (`Conversation.copy`). Should two
writers still meet (a file system without locks), `save` sees that the file changed since this
process last read or wrote it and saves this side as a copy instead of writing over the other's
turns (`Conversation.forked_from` says so).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from pocketchat.filehold import Hold, hold_file, holder  # noqa: F401 - conversations.Hold, .holder
from pocketchat.paths import settings
from pocketchat.documents.attachment import Attachment
from pocketchat.engines.types import Message, Stats, ToolCall

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
TITLE_LENGTH = 60
STATES = "states"  # the model's saved state of a conversation: <folder>/states/<id>.state
LOCKS = ".locks"  # <folder>/.locks/<id>.lock: held while a chat has the conversation open
MAX_SAVED_STATES = 3  # states kept on disk: the most recently saved conversations'


@dataclass
class ChatMessage:
    """One turn as the user saw it: the text, the thinking, a summary of the figures, a user
    turn's files (saved whole: `--continue` sends them to the model again), an assistant
    turn's tool calls, and a "tool" turn's result (`tool_call_id`: the call it answers)."""

    role: str
    content: str = ""
    thinking: str = ""
    stats: dict[str, Any] | None = None
    interrupted: bool = False
    created: float = field(default_factory=time.time)
    attachments: tuple[Attachment, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None  # a tool turn's tool

    def to_json(self) -> dict[str, Any]:
        data = {"role": self.role, "content": self.content, "thinking": self.thinking,
                "stats": dict(self.stats) if self.stats is not None else None,
                "interrupted": self.interrupted, "created": self.created}
        if self.attachments:  # a turn without files is saved as it always was
            data["attachments"] = [a.to_json() for a in self.attachments]
        if self.tool_calls:
            data["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                  for c in self.tool_calls]
        if self.role == "tool":
            data |= {"tool_call_id": self.tool_call_id, "name": self.name}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChatMessage:
        role = data["role"]
        if role not in ("user", "assistant", "system", "tool"):
            raise ValueError(f"unknown role {role!r}")
        return cls(
            role=role,
            content=str(data.get("content", "")),
            thinking=str(data.get("thinking", "")),
            stats=data.get("stats") or None,
            interrupted=bool(data.get("interrupted", False)),
            created=float(data.get("created", 0.0)),
            attachments=tuple(Attachment.from_json(a) for a in data.get("attachments") or ()),
            tool_calls=tuple(ToolCall(str(c["id"]), str(c["name"]), str(c["arguments"]))
                             for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id") or None,
            name=data.get("name") or None,
        )


def stats_summary(stats: Stats) -> dict[str, Any]:
    """The figures worth keeping with an answer (plain JSON numbers)."""
    return {
        "prompt_tokens": stats.prompt_tokens,  # evaluated for this answer
        "prompt_length": stats.prompt_length,
        "reused_tokens": stats.reused_tokens,
        "generated_tokens": stats.generated_tokens,
        "decode_tok_s": round(stats.decode_tok_s, 2),
        "prompt_tok_s": round(stats.prompt_tok_s, 2),
        "ttft_seconds": round(stats.ttft_seconds, 3) if stats.ttft_seconds is not None else None,
        "context_used": stats.context_used,
        "context_limit": stats.context_limit,
    } | ({"retrieval": stats.retrieval, "sources": list(stats.sources)} if stats.retrieval else {})


def new_id(now: float | None = None) -> str:
    """A sortable, unique id: local time to the second plus a random suffix."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now).strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{secrets.token_hex(3)}"


def make_title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_LENGTH else line[: TITLE_LENGTH - 1].rstrip() + "…"


@dataclass
class Conversation:
    """A chat: its messages, the system prompt and the model it was held with."""

    id: str = field(default_factory=new_id)
    title: str = ""
    created: float = field(default_factory=time.time)
    updated: float = 0.0
    model: str = ""
    model_path: str = ""  # the file or folder it ran from: `--continue` reopens the same model
    system: str | None = None
    thinking_budget: int | None = None  # the web chat's per-chat budget (None: the server's)
    tool_answers: dict[str, Any] = field(default_factory=dict)  # tools.Permissions.to_json()
    messages: list[ChatMessage] = field(default_factory=list)
    directory: Path | None = field(default=None, repr=False, compare=False)
    forked_from: str | None = field(default=None, repr=False, compare=False)  # id it was copied from
    _seen: tuple[int, int] | None = field(default=None, repr=False, compare=False)  # file as last read/written

    @property
    def path(self) -> Path:
        return (self.directory or settings().conversations_dir) / f"{self.id}.json"

    @property
    def state_path(self) -> Path:
        """Where the model's state for this conversation is saved (`--continue` loads it)."""
        return self.path.parent / STATES / f"{self.id}.state"

    @property
    def display_title(self) -> str:
        return self.title or "(empty)"

    def add(self, role: str, content: str = "", **kwargs: Any) -> ChatMessage:
        message = ChatMessage(role=role, content=content, **kwargs)
        self.messages.append(message)
        if role == "user" and not self.title:  # a file sent without a question: its name
            self.title = make_title(content or ", ".join(a.name for a in message.attachments))
        return message

    def context_used(self) -> int:
        """Tokens of context the chat filled at its last answer (0 when none is known)."""
        for message in reversed(self.messages):
            if message.role == "assistant" and message.stats:
                try:
                    return max(int(message.stats.get("context_used") or 0), 0)
                except (TypeError, ValueError):
                    return 0
        return 0

    def tool_result(self, call_id: str) -> str | None:
        """The saved result of the tool call `call_id` (None: it has none)."""
        for message in self.messages:
            if message.role == "tool" and message.tool_call_id == call_id:
                return message.content
        return None

    def last_answer(self) -> ChatMessage | None:
        for message in reversed(self.messages):
            if message.role == "assistant" and message.content:
                return message
        return None

    def engine_messages(self) -> list[Message]:
        """What the model is sent: the system prompt, then every turn with text, files or tool
        calls (no thinking), and the tools' results; a user turn's files go with it
        (`Message.attachments`)."""
        out = [Message("system", self.system)] if self.system else []
        out += [
            Message(m.role, m.content, attachments=m.attachments,  # type: ignore[arg-type]
                    tool_calls=m.tool_calls, tool_call_id=m.tool_call_id, name=m.name)
            for m in self.messages
            if m.role == "tool" or m.role in ("user", "assistant")
            and (m.content or m.attachments or m.tool_calls)
        ]
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "id": self.id,
            "title": self.title,
            "created": self.created,
            "updated": self.updated,
            "model": self.model,
            "model_path": self.model_path,
            "system": self.system,
            "messages": [m.to_json() for m in self.messages],
        } | ({"thinking_budget": self.thinking_budget} if self.thinking_budget is not None else {}) \
          | ({"tool_answers": dict(self.tool_answers)} if any(self.tool_answers.values()) else {})

    @classmethod
    def from_json(cls, data: dict[str, Any], directory: Path | None = None) -> Conversation:
        if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
            raise ValueError("not a pocketchat conversation")
        return cls(
            id=str(data["id"]),
            title=str(data.get("title", "")),
            created=float(data.get("created", 0.0)),
            updated=float(data.get("updated", 0.0)),
            model=str(data.get("model", "")),
            model_path=str(data.get("model_path") or ""),
            system=data.get("system") or None,
            thinking_budget=_budget(data.get("thinking_budget")),
            tool_answers=data["tool_answers"] if isinstance(data.get("tool_answers"), dict) else {},
            messages=[ChatMessage.from_json(m) for m in data["messages"]],
            directory=directory,
        )

    def copy(self) -> Conversation:
        """The same chat under a new id (its own file), saying what it was copied from."""
        twin = Conversation.from_json(self.to_json(), directory=self.directory)
        twin.id, twin.forked_from = new_id(), self.id
        twin.title = make_title(f"{self.display_title} (copy)") if self.title else ""
        return twin

    def save(self) -> Path:
        """Write the conversation atomically; an empty one (no message) is not written. When
        another process wrote the file since this one last read or wrote it, this side becomes
        a copy (new id, `forked_from` set) so that neither side's turns are lost."""
        if not self.messages:
            return self.path
        if self._seen is not None and _signature(self.path) not in (self._seen, None):
            log.warning("conversation %s changed on disk: saving this side as a copy", self.id)
            self.id, self.forked_from = new_id(), self.id
            self.title = make_title(f"{self.display_title} (copy)")
        self.updated = time.time()
        atomic_write_json(self.path, self.to_json())
        self._seen = _signature(self.path)
        return self.path


def _budget(value: Any) -> int | None:
    """A saved thinking budget: a whole number of tokens, else none."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _signature(path: Path) -> tuple[int, int] | None:
    """What tells one write of a file from another (mtime in ns, size); None: no file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def hold(conversation: Conversation) -> Hold | int:
    """Hold `conversation` for this process: the `Hold`, or the id of the live process that
    already holds it (0 when not known; `holder`). Where the file system has no locks, the hold is
    granted (and `save` still refuses to write over another process's turns)."""
    return hold_file(conversation.path.parent / LOCKS / f"{conversation.id}.lock", conversation.id)


def save_problem(exc: OSError, folder: Path | None = None) -> str:
    """What to do about a conversation that could not be saved, from the error's errno."""
    folder = folder or settings().conversations_dir
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return f"Free some disk space on the disk of {folder}."
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR):
        return (f"The folder {folder} cannot be written to: fix its permissions, or set "
                "POCKETCHAT_DATA_DIR to a folder you can write to.")
    return f"Check the folder {folder}."


def atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    """Temp file in the same directory, fsync, rename over the old file, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # directories cannot be opened on some systems (Windows)
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


class Autosave:
    """Saves a conversation at most once per `interval` seconds while an answer streams."""

    def __init__(self, conversation: Conversation, interval: float = 1.0) -> None:
        self.conversation = conversation
        self.interval = interval
        self._last = 0.0
        self.saves = 0

    def touch(self) -> bool:
        """Save if the last save is older than the interval; True when it saved."""
        now = time.monotonic()
        if now - self._last < self.interval:
            return False
        self.flush()
        return True

    def flush(self) -> None:
        self.conversation.save()
        self._last = time.monotonic()
        self.saves += 1


def prune_states(folder: Path, keep: int = MAX_SAVED_STATES) -> list[Path]:
    """Delete saved model states beyond the `keep` most recent (each with its key file);
    the states deleted."""
    states = sorted(folder.glob("*.state"), key=_mtime, reverse=True)
    gone = []
    for path in states[keep:]:
        for p in (path, path.with_name(path.name + ".json")):
            try:
                p.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete the saved model state %s: %s", p, exc)
        gone.append(path)
    return gone


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def load(path_or_id: str | Path, directory: Path | None = None) -> Conversation:
    """One conversation by file path or id; raises ValueError/OSError when it cannot be read."""
    folder = directory or settings().conversations_dir
    path = Path(path_or_id)
    if path.suffix != ".json" or not path.exists():
        path = folder / f"{path_or_id}.json"
    seen = _signature(path)
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    conversation = Conversation.from_json(data, directory=path.parent)
    conversation._seen = seen
    return conversation


def _iter_files(directory: Path) -> Iterator[Path]:
    if directory.is_dir():
        yield from (p for p in directory.glob("*.json") if not p.name.startswith("."))


def scan(directory: Path | None = None) -> tuple[list[Conversation], list[tuple[Path, str]]]:
    """Every readable conversation, newest first, and the files skipped with the reason."""
    folder = directory or settings().conversations_dir
    found: list[Conversation] = []
    skipped: list[tuple[Path, str]] = []
    for path in _iter_files(folder):
        try:
            found.append(load(path, directory=folder))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("skipping unreadable conversation %s: %s", path.name, exc)
            skipped.append((path, f"{type(exc).__name__}: {exc}"))
    found.sort(key=lambda c: (c.updated or c.created, c.id), reverse=True)
    return found, skipped


def list_all(directory: Path | None = None) -> list[Conversation]:
    """Every readable conversation, newest first; a corrupt file is skipped with a warning."""
    return scan(directory)[0]


def last(directory: Path | None = None) -> Conversation | None:
    """The most recently updated conversation, or None."""
    conversations = list_all(directory)
    return conversations[0] if conversations else None
