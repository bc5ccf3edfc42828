"""The model's tool calls in the terminal chat: each shown as a folded block with its arguments,
confirmed in a dialog (once, always in this chat, never in this chat, or deny) unless the tool
is safe or answered before, run in a thread, its result folded under it and sent back to the
model as the tool's turn.

`ToolRunner.run(calls)` does one step of the loop for the chat widget (chat.py), which then asks
the model again, at most `loop.MAX_STEPS` answers a message. Esc in the dialog denies the call
and ends the loop; a tool's text reaches the screen only through `textsafe.visible`.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Collapsible, Label, Static

from pocketchat.conversations import Conversation
from pocketchat.engines.types import ToolCall
from pocketchat.textsafe import one_line, visible
from pocketchat.tools.loop import settle
from pocketchat.tools.permissions import Permissions
from pocketchat.ui.widgets import PromptInput

if TYPE_CHECKING:
    from pocketchat.tools.servers import ToolServers
    from pocketchat.tools.tool import Tool

SHOWN_CHARS = 4000  # of a result, on screen (the model gets the whole result)
CHOICES = {"once": "allowed once", "always": "allowed always in this chat",
           "never": "never in this chat", "deny": "denied", "stop": "denied, and the loop stopped"}


def pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


class ToolCallView(Vertical):
    """One call: its name and arguments (folded), the decision, then its result (folded)."""

    def __init__(self, call: ToolCall, result: str | None = None) -> None:
        super().__init__(classes="tool-call")
        self.call = call
        self._saved = result  # a saved chat's result for this call

    def compose(self) -> ComposeResult:
        with Collapsible(title=one_line(f"Tool: {self.call.name}"), collapsed=True,
                         classes="tool-arguments"):
            yield Static(visible(pretty(self.call.arguments)), markup=False)
        yield Label("", classes="tool-decision")
        if self._saved is not None:
            yield self._result(self._saved, True, "")

    def decided(self, text: str) -> None:
        self.query_one(".tool-decision", Label).update(visible(text))

    @staticmethod
    def _result(text: str, ok: bool, note: str) -> Collapsible:
        title = ("Result" if ok else "Failed") + (f" · {one_line(note)}" if note else "")
        shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "\n…"
        return Collapsible(Static(visible(shown), markup=False), title=title, collapsed=True,
                           classes="tool-result")

    async def show_result(self, text: str, ok: bool, note: str) -> None:
        await self.mount(self._result(text, ok, note))


class ConfirmToolScreen(ModalScreen[str]):
    """May the model run this tool? once / always / never / deny; Esc denies it and stops the
    loop (the model is told, and asked nothing more for this message)."""

    BINDINGS = [Binding("escape", "choose('stop')", "Stop"), Binding("o", "choose('once')", "Once"),
                Binding("a", "choose('always')", "Always"), Binding("n", "choose('never')", "Never"),
                Binding("d", "deny", "Deny")]

    def __init__(self, call: ToolCall, tool: Tool) -> None:
        super().__init__()
        self.call, self.tool = call, tool

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(visible(f"The model wants to run {self.call.name} "
                                f"(server {self.tool.server})."))
            yield Static(visible(pretty(self.call.arguments)), markup=False, classes="arguments")
            with Horizontal(classes="buttons"):
                yield Button("Once (o)", variant="primary", id="once")
                yield Button("Always (a)", id="always")
                yield Button("Never (n)", id="never")
                yield Button("Deny (d)", id="deny")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "deny")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice)

    def action_deny(self) -> None:
        self.dismiss("deny")


class ToolRunner:
    """The chat's tools: listed once, each call decided, confirmed and run."""

    def __init__(self, servers: ToolServers | None) -> None:
        self.servers = servers
        self._tools: list[Tool] | None = None
        self.notes: list[str] = []
        self.busy = False  # calls of the last answer are being confirmed or run
        self.forced: str | None = None  # the tool the next message's answer must call

    async def tools(self) -> list[Tool]:
        """The tools the model may call (the servers started on the first ask)."""
        if self.servers is None:
            return []
        if self._tools is None:
            self._tools = await asyncio.to_thread(self.servers.tools)
            self.notes = list(self.servers.notes)
        return self._tools

    @property
    def listed(self) -> list[Tool]:
        """The tools known so far (the palette shows them; `tools()` lists them)."""
        return list(self._tools or ())

    def force(self, chat: Any, name: str) -> None:
        """The next message's answer calls `name` (the palette's "Use the tool ...")."""
        self.forced = name
        chat.notify(visible(f"The next answer calls {name}."))

    def prefetch(self, chat: Any) -> None:
        """List the tools in the background (the servers start) when there are any."""
        if self.servers is not None:
            chat.run_worker(self.tools(), group="tools", exit_on_error=False)

    async def offer(self, chat: Any, *, first: bool) -> tuple[list[Tool], str | None]:
        """The tools for the chat's next answer and the one it must call (the palette's
        choice, for a message's first answer); what starting the servers had to say (a server
        that failed) goes in the chat once. Busy meanwhile: nothing else is sent."""
        self.busy = True
        try:
            tools = await self.tools()
        finally:
            self.busy = False
        notes, self.notes = self.notes, []
        for note in notes:
            chat.notice(note, kind="warning")
        forced = None
        if first:
            forced, self.forced = self.forced, None
        return tools, forced

    def follow_up(self, chat: Any, calls: Sequence[ToolCall]) -> None:
        """After an answer that called tools: run them, then ask the model again (a worker of
        its own: the answer's timer task, which calls this, ends first)."""
        self.busy = True

        async def step() -> None:
            try:
                go_on = await self.run(chat, chat.conversation, calls)
            finally:
                self.busy = False
            if go_on and chat.engine is not None and chat.stream is None:
                await chat._answer_step(chat._step + 1)

        chat.run_worker(step(), group="tools", exit_on_error=False)

    async def run(self, chat: Any, conversation: Conversation, calls: Sequence[ToolCall]) -> bool:
        """Run one answer's calls (their views mounted in `chat`'s log, their turns added to
        `conversation`); False when the user stopped the loop (Esc in the dialog)."""
        by_name = {t.name: t for t in await self.tools()}
        permissions = Permissions.from_json(conversation.tool_answers)
        stopped = False
        for call in calls:
            view = ToolCallView(call)
            await chat.chat_log.mount(view)
            chat.chat_log.scroll_end(animate=False)
            tool = by_name.get(call.name)

            async def ask(asking: bool, call: ToolCall = call, tool: Tool | None = tool) -> str | None:
                return await self._ask(chat, call, tool) if asking and tool else None

            done = await settle(call, tool, permissions, self.servers, ask, stopped=stopped)
            if done.choice is not None:
                view.decided(CHOICES[done.choice])
            elif done.ran:
                view.decided("runs without asking (safe, or always in this chat)")
            elif stopped:
                view.decided("not run: the loop was stopped")
            stopped = stopped or done.choice == "stop"
            conversation.tool_answers = permissions.to_json()
            await view.show_result(done.text, done.ok, done.note)
            conversation.add("tool", done.text, tool_call_id=call.id, name=call.name)
        conversation.save()
        chat.query_one(PromptInput).focus()
        return not stopped

    @staticmethod
    async def _ask(chat: Any, call: ToolCall, tool: Tool) -> str:
        answered: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        chat.app.push_screen(ConfirmToolScreen(call, tool),
                             lambda choice: answered.done() or answered.set_result(choice or "stop"))
        choice = await answered
        chat.query_one(PromptInput).focus()  # typing goes to the message again, not the log
        return choice
