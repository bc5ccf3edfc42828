"""The chat widget: the conversation, the prompt and the live status bar, and the answer in flight.

It knows an `Engine` (handed over by the app once it opens) and the conversation; it knows
nothing of how the engine starts. When the engine dies mid-answer it says so in the chat and
posts `EngineLost` for the app; a disk too full to hold the conversation ends the app."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.timer import Timer
from textual.widget import AwaitMount

from pocketchat.conversations import Conversation, save_problem
from pocketchat.errors import EngineCrashed, HelperGone
from pocketchat.engines.types import ChatOptions, Engine, EngineInfo
from pocketchat.ui import enginewatch
from pocketchat.ui.attach import AttachHandlers, Attachments
from pocketchat.ui.chips import ChipBar
from pocketchat.ui.follow import Follower
from pocketchat.ui.format import describe_error, dropped_line, prompt_progress_line, restoring_line
from pocketchat.ui.messages import EngineLost
from pocketchat.ui.holding import Holding
from pocketchat.ui.screens import SystemPromptScreen
from pocketchat.ui.streaming import AnswerStream, RenderPacer, StreamUpdate
from pocketchat.ui import restoring
from pocketchat.ui.toolcalls import ToolCallView, ToolRunner
from pocketchat.tools.loop import MAX_STEPS, offered
from pocketchat.ui.thinking import budget_of, saved_figures
from pocketchat.ui.widgets import (
    AnswerView,
    ChatLog,
    Notice,
    PromptInput,
    StatusBar,
    StatusFigures,
    UserMessage,
    Welcome,
    figures_from_stats,
    figures_line,
)


if TYPE_CHECKING:
    from pocketchat.tools.servers import ToolServers
STATUS_INTERVAL = 0.5  # the status bar's figures change at most twice a second while streaming
RESTART_HINT = "Ctrl+R restarts the engine (this conversation is kept); Ctrl+N starts a new chat."


class Chat(AttachHandlers, Vertical):
    """One conversation with one engine; every message is saved as it happens."""

    DEFAULT_CSS = "Chat { height: 1fr; }"

    def __init__(
        self,
        conversation: Conversation | None = None,
        *,
        system: str | None = None,
        thinking: bool = True,
        thinking_budget: Callable[[], int | None] | int | None = None,
        options: ChatOptions | None = None,
        save_interval: float = 1.0,
        tools: ToolServers | None = None,
        id: str | None = "chat",  # noqa: A002 - Textual's name
    ) -> None:
        super().__init__(id=id)
        self.default_system = system
        self.conversation = conversation or Conversation(system=system)
        if conversation is not None and system is not None:
            self.conversation.system = system
        self.thinking = thinking
        self.thinking_budget = thinking_budget  # None: no budget; see thinking.budget_of
        self.base_options = options or ChatOptions()
        self.save_interval = save_interval
        self.engine: Engine | None = None
        self.info: EngineInfo | None = None
        self.starting = False  # the app is opening an engine
        self.stuck = False  # the engine's process does not respond (see enginewatch)
        self.memory: int | None = None
        self.stream: AnswerStream | None = None
        self.last_stream: AnswerStream | None = None  # whether the chat is saved, for the reminder at exit
        self._answer: AnswerView | None = None
        self._pump_timer: Timer | None = None
        self._pacer = RenderPacer()
        self._status_at = 0.0
        self._shown_state = ""
        self._ending = False  # an ended answer's notices are being put on screen
        self._follower: Follower | None = None  # keeps the answer's newest line at the view's bottom
        self._mounting: list[AwaitMount] = []  # notices being mounted
        self._restored = threading.Event()  # no saved model state is being loaded
        self._restored.set()
        self._restore_task: asyncio.Task | None = None
        self.holding = Holding()  # one writer per conversation file
        self.files = Attachments(self)  # the files attached to the message being written
        self.tools = ToolRunner(tools)  # the MCP servers the model may call (none: no tools)
        self._step = 1  # the answer's step within its message (tool calls make more)

    def compose(self) -> ComposeResult:
        yield ChatLog(id="chat-log")
        yield ChipBar(id="attachments")
        yield PromptInput(id="prompt", placeholder="Ask anything · Enter sends · Ctrl+J new line")
        yield StatusBar(id="status")

    async def on_mount(self) -> None:
        await self._hold_and_show(self.conversation)
        self.query_one(PromptInput).focus()
        self.tools.prefetch(self)  # the tools listed now, for the palette and the first answer

    def on_unmount(self) -> None:
        self.holding.release()

    async def _hold_and_show(self, conversation: Conversation) -> None:
        """Show `conversation`, or a copy when another window holds it (and say so)."""
        try:
            self.conversation, note = self.holding.take(conversation)
        except OSError as exc:  # a full disk: the app ends with it (the CLI says it in a line)
            self.app.fatal_error = exc
            return self.app.exit(1, return_code=1)
        await self.show_conversation(self.conversation)
        if note:
            self.notice(note, kind="info")

    @property
    def chat_log(self) -> ChatLog:
        return self.query_one(ChatLog)

    # -- what is on screen -------------------------------------------------------------
    async def show_conversation(self, conversation: Conversation) -> None:
        log = self.chat_log
        await log.remove_children()
        log.anchor(False)  # anchored, a chat shorter than the screen sits at its bottom:
        log.scroll_target_y = log.scroll_y = 0  # the next one (the welcome) starts at the top
        widgets = []
        prompt = self.query_one(PromptInput)
        answers = [m for m in conversation.messages if m.role == "assistant"]
        for message in conversation.messages:
            if message.role == "user":
                widgets.append(UserMessage(message.content, message.attachments,
                                           (message.stats or {}).get("attachment_tokens")))
                prompt.remember(message.content)
            elif message.role == "assistant":
                widgets.append(AnswerView(message.content, message.thinking, thought=saved_figures(message.stats)))
                widgets += [ToolCallView(call, conversation.tool_result(call.id))
                            for call in message.tool_calls]
        if not widgets:
            await log.mount(Welcome())
        else:
            await log.mount_all(widgets)
            for view, message in zip(log.query(AnswerView).results(AnswerView), answers, strict=False):
                view.set_figures(figures_line(message.stats), message.interrupted)
        log.scroll_end(animate=False)
        bar = self.query_one(StatusBar)  # the context the saved chat filled, not 0
        bar.figures = dataclasses.replace(bar.figures, context_used=conversation.context_used())

    def notice(self, text: str, hint: str = "", kind: str = "error") -> Notice:
        widget = Notice(text, hint, kind)
        self._mounting.append(self.chat_log.mount(widget))
        if self.stream is None:  # in view once laid out, however long the chat above takes to lay out
            self.chat_log.anchor()
        else:  # the answer's follower owns the scrolling while it streams
            self.chat_log.scroll_end(animate=False)
        return widget

    def status(self, figures: StatusFigures) -> None:
        self.query_one(StatusBar).show(figures)

    def idle_status(self, state: str = "Ready", **changes: int) -> None:
        """The last answer's figures with a new state (and the `changes` given)."""
        old = self.query_one(StatusBar).figures
        limit = self.info.n_ctx if self.info else old.context_limit
        self.status(dataclasses.replace(old, state=state, context_limit=limit or 0,
                                        memory_bytes=self.memory, **changes))

    def set_memory(self, memory: int | None) -> None:
        self.memory = memory
        if (self.stream is None or self._ending) and self.query(StatusBar):  # else the next update
            self.idle_status(self.query_one(StatusBar).figures.state)

    # -- sending and streaming ------------------------------------------------------------
    async def on_prompt_input_submitted(self, event: PromptInput.Submitted) -> None:
        if self.stream is not None and self.stream.finished.is_set():
            await self._pump()  # the answer ended since the last tick: close it now, then send
        if self.stream is not None or self.tools.busy:
            self.notify("An answer is still streaming: Esc stops it.", severity="warning")
            return
        if self.engine is None:
            why = "still loading" if self.starting else "not running (Ctrl+R restarts it)"
            self.notify(f"The model is {why}.", severity="warning")
            return
        if enginewatch.refused(self):  # the prompt keeps the text
            return
        prompt = self.query_one(PromptInput)
        prompt.remember(event.text)
        prompt.clear()
        await self.send(event.text)

    async def send(self, text: str) -> None:
        assert self.engine is not None
        conversation = self.conversation
        if self.info is not None and not conversation.model_path:  # what `--continue` reopens
            conversation.model = conversation.model or self.info.model
            conversation.model_path = self.info.path
        files, tokens, reading = self.files.take()  # the answer waits for their read-ahead
        conversation.add("user", text, attachments=files,
                         stats={"attachment_tokens": tokens} if files else None)
        await self._answer_step(1, UserMessage(text, files, tokens), reading)

    async def _answer_step(self, step: int, asked: UserMessage | None = None,
                           reading: Any = None) -> None:
        """The model's answer to the conversation so far: its first to a message (`asked`,
        shown above it), or its next after its tool calls ran (toolcalls.py)."""
        assert self.engine is not None
        tools, forced = await self.tools.offer(self, first=step == 1)
        conversation = self.conversation
        history = conversation.engine_messages()
        message = conversation.add("assistant", interrupted=True)
        budget = budget_of(self) if self.thinking else None
        options = dataclasses.replace(self.base_options, thinking=self.thinking, thinking_budget=budget)
        options = offered(options, tools, last=step == MAX_STEPS, forced=forced)
        self._step = step
        shown = threading.Event()
        stream = AnswerStream(self.engine, conversation, message, history, options,
                              save_interval=self.save_interval,
                              wait_engine=enginewatch.answer_waiter(shown, self.last_stream,
                                                                    self._restored, reading))
        self.stream = self.last_stream = stream  # set before any await: an answer is under way
        await self.files.changed()  # the chips go: the message shows its files
        view = AnswerView(streaming=True)
        for welcome in self.chat_log.query(Welcome):
            await welcome.remove()
        # The answer's room is blank rows: the log follows its text (placed as it is laid out).
        self.chat_log.follower = self._follower = Follower(self.chat_log, view)
        self._follower.release()
        await self.chat_log.mount_all([asked, view] if asked is not None else [view])
        self.call_after_refresh(shown.set)  # then the model starts (the mount's layout is done)
        self._answer = view
        self.status(figures_from_stats(None, "Waiting for the first token", self.memory,
                                       self.info.n_ctx if self.info else 0, None))
        self.run_worker(stream.run, thread=True, group="stream", exit_on_error=False)
        self._pacer.restart()  # the pace the last answers settled on: a short answer starts there
        self._status_at, self._shown_state = 0.0, ""
        self._pump_timer = self.set_interval(self._pacer.interval, self._pump)

    async def _pump(self) -> None:
        """Render what arrived since the last tick (at most 10 times a second, see RenderPacer)."""
        stream, view, follower = self.stream, self._answer, self._follower
        if stream is None or view is None or follower is None or self._ending:
            return
        update = stream.drain()
        laid_out = await view.add_thinking(update.thinking)
        if update.thought is not None:  # the block's title: tokens, seconds
            view.set_thought(*update.thought)
        laid_out = await view.add_text(update.text) or laid_out
        if not laid_out:  # a layout places the view itself; new rows without one scroll it
            follower.follow()
        state = "Answering" if view.text else "Thinking" if view.thinking else "Waiting for the first token"
        if stream.thought_end_asked and not view.text and not stream.cancelled:
            state = "Ending the thought"
        if stream.cancelled and not view.text:
            state = "Stopping"  # Esc: what it said at once stays until the answer ends
        elif not self._restored.is_set() and not view.text:
            state = restoring_line()  # the answer waits for the state it goes on from
        elif not view.text and not view.thinking and (files := self.files.waiting_line()):
            state = files  # the answer waits for the files' read-ahead to end
        elif update.progress is not None and not view.text and not view.thinking:
            p = update.progress
            state = prompt_progress_line(p.done, p.total, p.tok_s, p.seconds_left)
        state = enginewatch.shown_state(self.stuck, state)
        now = time.monotonic()
        if update.done or state != self._shown_state or now - self._status_at >= STATUS_INTERVAL:
            self._shown_state, self._status_at = state, now
            limit = self.info.n_ctx if self.info else 0
            self.status(figures_from_stats(update.stats, state, self.memory, limit,
                                           update.first_token_at, stream.options.thinking_budget))
        if update.done:
            self._ending = True
            try:
                await self._finish(stream, view, update)
            finally:
                self._ending = False
        elif self._pacer.sample() and self._pump_timer is not None:
            self._pump_timer.stop()  # rendering costs too much (or little): a new pace
            self._pump_timer = self.set_interval(self._pacer.interval, self._pump)

    def _stop_pump(self) -> None:
        if self._pump_timer is not None:
            self._pump_timer.stop()
            self._pump_timer = None

    async def _finish(self, stream: AnswerStream, view: AnswerView, update: StreamUpdate) -> None:
        # This runs inside the pump timer's task: stopping the timer cancels the task, so the
        # timer stops last, after every await here.
        message = stream.message
        following = self._follower.following if self._follower else True
        await view.finish(figures_line(message.stats), message.interrupted)
        if following:  # the blank lines are gone: the log sticks to its end again
            self.chat_log.anchor()
        self.chat_log.follower = None
        stats = update.stats
        if update.exception is not None:
            self._answer_failed(update.exception)
        elif update.finish_reason == "error":
            self.notice(f"The model could not answer: {update.error or 'unknown error'}",
                        "Try again, or start a new chat with Ctrl+N.")
        elif update.finish_reason == "length" and (stats is None or stats.stop_reason != "cap"):
            used = stats.context_used if stats else 0
            limit = (stats.context_limit if stats else 0) or (self.info.n_ctx if self.info else 0)
            self.notice(f"The context is full ({used}/{limit} tokens): the answer stopped there.",
                        "Start a new chat with Ctrl+N, or restart with a larger --ctx.", "warning")
        if stats is not None and stats.dropped_messages:
            self.notice(dropped_line(stats.dropped_messages), kind="info")
        if moved := self.holding.follow(stream.conversation):
            self.notice(moved, kind="warning")
        if stream.save_error is not None:
            self.notice(f"Could not save the conversation: {stream.save_error}",
                        save_problem(stream.save_error, self.conversation.path.parent)
                        + " The chat goes on, unsaved.", "warning")
        self.idle_status(enginewatch.shown_state(self.stuck, "Stopped" if message.interrupted else "Ready"))
        mounting, self._mounting = self._mounting, []
        for mounted in mounting:  # the notices above are on screen before the answer counts as done
            await mounted
        if message.tool_calls and not message.interrupted and update.exception is None:
            self.tools.follow_up(self, message.tool_calls)  # run, then the model answers again
        self.stream, self._answer = None, None  # last: a test (or a user) sees it all done
        self.files.note_answer(message.stats)
        self.files.read()  # files attached while it streamed: read now
        self._stop_pump()

    def _answer_failed(self, error: BaseException) -> None:
        text, hint = describe_error(error)
        if isinstance(error, EngineCrashed):
            self.post_message(EngineLost())
            self.notice(f"The engine stopped: {text}",
                        error.hint if isinstance(error, HelperGone) else RESTART_HINT)
        else:
            self.notice(f"The answer failed: {text}", hint or RESTART_HINT)

    def stop(self) -> None:
        """Esc: ask the engine to stop; the answer ends when it does."""
        if self.stream is not None:
            self.stream.cancel()
            self.status(dataclasses.replace(self.query_one(StatusBar).figures, state="Stopping"))
        elif self.files.stop():  # the files' read-ahead: Enter reads them
            self.status(dataclasses.replace(self.query_one(StatusBar).figures, state="Stopped reading"))

    def shutdown(self, wait: float = 0.0) -> None:
        """Stop the answer in flight (waiting up to `wait` seconds for it to save)."""
        if self.stream is not None:
            self.stream.cancel()
        self.files.shutdown(wait)
        if wait and self.last_stream is not None:  # the answer saved, and the model's state
            self.last_stream.wait_settled(wait)

    # -- the model's saved state ------------------------------------------------------------
    def restore_state(self) -> None:
        """Load the conversation's saved model state into the engine (in a thread)."""
        restoring.start(self)

    # -- conversations ---------------------------------------------------------------------
    async def new_chat(self) -> None:
        await self.open_conversation(Conversation(system=self.default_system,
                                                  model=self.info.model if self.info else ""))

    async def open_conversation(self, conversation: Conversation) -> None:
        if self.stream is not None:
            self.stream.cancel()  # the thread saves the old conversation as far as it got
            self._stop_pump()
            self.stream, self._answer = None, None
            self.chat_log.follower = None
        self.query_one(StatusBar).figures = StatusFigures()
        self.files.restart()  # the files stay attached, read again after the new chat
        await self._hold_and_show(conversation)
        self.idle_status()
        self.query_one(PromptInput).focus()
        self.restore_state()
        self.files.read()
        await self.files.changed()

    def edit_system_prompt(self) -> None:
        def apply(value: str | None) -> None:
            if value is None:
                return
            self.conversation.system = value or None  # this chat's: Ctrl+N starts without it
            if self.conversation.messages:
                self.conversation.save()
            self.notify("System prompt set." if value else "System prompt cleared.")

        self.app.push_screen(SystemPromptScreen(self.conversation.system), callback=apply)

    def toggle_thinking(self) -> None:
        self.thinking = not self.thinking
        self.app.refresh_bindings()  # Ctrl+T shows only while thinking is on
        self.notify(f"Thinking {'on' if self.thinking else 'off'} for the next answers.")
