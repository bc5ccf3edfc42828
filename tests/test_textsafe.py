"""Text from a model, a file or a server shown harmlessly; pasted ESC kept in order."""

from __future__ import annotations

import pytest

from pocketchat.textsafe import is_safe, one_line, pasted, visible
from pocketchat.ui.pasteguard import END, START, PasteGuard


def test_visible_shows_every_control_character_and_keeps_lines():
    text = "a\x1b]0;T\x07b\x1b[2J\tc\r\nd\re\x7f\x9bf\u202eg"
    shown = visible(text)
    assert shown == "a␛]0;T␇b␛[2J\tc\nd␍e␡\\x9bf\\u202eg"
    assert is_safe(shown) and not is_safe(text)
    assert one_line("a\nb\tc") == "a␊b␉c"
    assert pasted("x\r\ny\rz\x1b") == "x\ny\nz␛"
    assert visible("plain ünïcode 한국어 ✓") == "plain ünïcode 한국어 ✓"


@pytest.mark.parametrize("cut", range(1, 30))
def test_paste_guard_turns_esc_inside_a_paste_into_a_picture_wherever_the_reads_split(cut):
    stream = "k\x1b[A" + START + "abc \x1b[2J def" + END + "\x1b[B" + START + "x\x1by" + END + "\x1b"
    guard = PasteGuard()
    out = guard.filter(stream[:cut]) + guard.filter(stream[cut:])
    assert out == "k\x1b[A" + START + "abc ␛[2J def" + END + "\x1b[B" + START + "x␛y" + END + "\x1b"


def test_paste_guard_leaves_keys_alone():
    guard = PasteGuard()
    assert guard.filter("\x1b") == "\x1b"  # a lone Esc key is not held back
    assert guard.filter("\x1b[200") == "\x1b[200"
    assert guard.filter("~q\x1bz") == "~q␛z"  # the split START was seen: a paste began
