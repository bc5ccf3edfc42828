"""The text being written (ui/tail.py): wrapped as a Static wraps it, and an update repaints
only the rows it changed, not the whole screenful."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Static

from support.uitools import run
from pocketchat.ui.tail import Tail

STORY = ("The keeper climbed the stairs as the storm rolled in from the west, "
         "counting the steps the way his father had taught him.\n\n"
         "Night fell. A-very-long-word-that-does-not-fit-on-one-line-" * 3 + "\n"
         "    indented line\n\nThe lamp turned")


class Side(App):
    CSS = "Tail, Static { width: 40; height: 30; }"

    def compose(self) -> ComposeResult:
        yield Tail()
        yield Static("", markup=False)


def rows(widget, n: int) -> list[str]:
    return [widget.render_line(y).text.rstrip() for y in range(n)]


def test_the_tail_wraps_text_as_a_static_does_while_it_grows():
    async def scenario():
        app = Side()
        async with app.run_test(size=(100, 32)) as pilot:
            tail, static = app.query_one(Tail), app.query_one(Static)
            text = ""
            for word in STORY.split(" "):  # a word at a time, as an answer streams
                text += word + " "
                tail.set_text(text)
                static.update(text.rstrip("\n"))
                await pilot.pause()
                assert rows(tail, 30) == rows(static, 30), text
            assert tail.rows == static.get_content_height(static.size, static.size, 40)
            assert tail.rows > 10

            tail.set_text("Settled: a new, shorter tail")  # not an append: all of it again
            static.update("Settled: a new, shorter tail")
            await pilot.pause()
            assert rows(tail, 30) == rows(static, 30)
            assert tail.rows == 1
            tail.set_text("  \n ")
            assert tail.rows == 0  # blank text takes no rows

    run(scenario())


def test_appending_repaints_only_the_rows_from_the_last_line_down():
    async def scenario():
        app = Side()
        async with app.run_test(size=(100, 32)) as pilot:
            tail = app.query_one(Tail)
            tail.set_text(STORY)
            await pilot.pause()
            before = tail.rows
            painted: list[int] = []
            render_line = tail.render_line

            def counted(y: int):
                painted.append(y)
                return render_line(y)

            tail.render_line = counted
            tail.set_text(STORY + " brighter")
            await pilot.pause()
            assert painted, "the new word was not painted"
            assert min(painted) == before - 1  # the last line's row: the rows above are kept
            assert rows(tail, before)[-1].endswith("The lamp turned brighter")

            painted.clear()
            tail.set_text(STORY + " brighter\n\nA new paragraph")
            await pilot.pause()
            assert min(painted) == before - 1 and max(painted) == before + 1
            assert tail.rows == before + 2

    run(scenario())
