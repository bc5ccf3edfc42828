"""Where `serve` and `pocketchat web` say the web chat is: the address to open on this machine,
the one a phone on the network opens (with a QR code of it, drawn without escape codes), and
the browser opened only when asked."""

from __future__ import annotations

from pocketchat.commands import weblink


def test_a_loopback_server_gives_its_own_address_and_no_qr_code():
    said: list[str] = []
    url = weblink.announce("127.0.0.1", 8080, True, said.append)
    assert url == "http://127.0.0.1:8080/" and said == ["web chat: http://127.0.0.1:8080/"]


def test_a_server_on_every_address_gives_the_network_address_and_a_qr_code():
    assert weblink.page_url("0.0.0.0", 8080, lan=lambda: "192.168.1.20") == \
        "http://192.168.1.20:8080/"
    assert weblink.page_url("::", 9000, lan=lambda: None) == "http://127.0.0.1:9000/"
    assert weblink.page_url("fd00::5", 80) == "http://[fd00::5]:80/"
    said: list[str] = []
    weblink.announce("10.0.0.7", 8080, False, said.append)
    assert said[0].startswith("web chat: http://10.0.0.7:8080/") and "API key" in said[0]
    code = said[1].splitlines()
    assert len(code) > 10 and len({len(row) for row in code}) == 1  # a square block of rows
    assert set("".join(code)) <= set(" █▀▄")  # half blocks only: no escape sequence


def test_the_qr_code_holds_the_address():
    """Each character draws two modules (the top and bottom halves): the same pair always the
    same character, and different pairs different ones, so the drawing is the code itself."""
    import segno

    url = "http://192.168.1.20:8080/"
    matrix = [list(row) for row in segno.make(url, error="m").matrix]
    border = 4
    width = len(matrix[0]) + 2 * border
    light = [0] * width
    full = [light] * border + [[0] * border + row + [0] * border for row in matrix] + [light] * border
    if len(full) % 2:  # the last row's lower half is the terminal's own background
        full.append([1] * width)
    rows = weblink.qr_text(url).splitlines()
    assert len(rows) == len(full) // 2 and all(len(r) == width for r in rows)
    drawn: dict[tuple[int, int], str] = {}
    for y, row in enumerate(rows):
        for x, char in enumerate(row):
            pair = (bool(full[2 * y][x]), bool(full[2 * y + 1][x]))
            assert drawn.setdefault(pair, char) == char, (pair, char, drawn)
    assert len(set(drawn.values())) == len(drawn) == 4


def test_the_browser_opens_only_when_asked(monkeypatch):
    opened: list[str] = []
    monkeypatch.setattr(weblink.webbrowser, "open", opened.append)
    weblink.announce("127.0.0.1", 8080, True, lambda _: None)
    weblink.announce("127.0.0.1", 8081, True, lambda _: None, open_browser=True)
    for _ in range(100):
        if opened:
            break
        import time
        time.sleep(0.01)
    assert opened == ["http://127.0.0.1:8081/"]
