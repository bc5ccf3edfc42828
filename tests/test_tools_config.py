"""The tool-server config (mcp.json, --mcp), the chat's answers to "run this tool?", and the
names the model calls tools by. No server is started here."""

from __future__ import annotations

import json

import pytest

from pocketchat import paths
from pocketchat.errors import ToolConfigError
from pocketchat.tools.config import DEFAULT_TIMEOUT, load_config
from pocketchat.tools.permissions import Permissions
from pocketchat.tools.tool import MAX_NAME, Tool, finished, model_names


def write(tmp_path, data) -> object:
    path = tmp_path / "mcp.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_the_claude_desktop_shape_and_pocketchats_own_keys(tmp_path):
    path = write(tmp_path, {"globalShortcut": "Ctrl+Space", "mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                  "env": {"A": "1"}, "safe": ["read_file"], "timeout": 5, "autoApprove": []},
        "web": {"url": "http://127.0.0.1:9000/mcp", "headers": {"Authorization": "Bearer x"},
                "safe": True},
        "old": {"command": "old-server", "disabled": True},
    }})
    config = load_config(path)
    files, web, old = config.servers
    assert (files.name, files.command, files.args, files.env) == (
        "files", "npx", ("-y", "@modelcontextprotocol/server-filesystem", "/tmp"), {"A": "1"})
    assert files.transport == "stdio" and files.timeout == 5.0
    assert files.is_safe("read_file") and not files.is_safe("write_file")
    assert web.transport == "http" and web.headers == {"Authorization": "Bearer x"}
    assert web.is_safe("anything") and web.timeout == DEFAULT_TIMEOUT
    assert old.disabled and config.enabled == (files, web)
    assert config.path == path


def test_a_missing_default_file_is_an_empty_config(tmp_path, monkeypatch):
    monkeypatch.setenv("POCKETCHAT_CONFIG_DIR", str(tmp_path / "nowhere"))
    paths.reset()
    try:
        config = load_config()
    finally:
        monkeypatch.undo()
        paths.reset()
    assert config.servers == () and config.path is None


def test_the_default_file_is_read_from_the_config_folder(tmp_path, monkeypatch):
    write(tmp_path, {"mcpServers": {"t": {"command": "x"}}})
    monkeypatch.setenv("POCKETCHAT_CONFIG_DIR", str(tmp_path))
    paths.reset()
    try:
        assert [s.name for s in load_config().servers] == ["t"]
    finally:
        monkeypatch.undo()
        paths.reset()


def test_a_missing_explicit_file_is_one_error_naming_it(tmp_path):
    with pytest.raises(ToolConfigError) as caught:
        load_config(tmp_path / "gone.json")
    assert "gone.json" in caught.value.message and "does not exist" in caught.value.message
    assert caught.value.hint


def test_bad_json_names_the_file_line_and_column(tmp_path):
    path = write(tmp_path, '{"mcpServers": {\n  "a": {"command": "x",}\n}}')
    with pytest.raises(ToolConfigError) as caught:
        load_config(path)
    message = caught.value.message
    assert str(path) in message and "not JSON" in message and "line 2" in message
    assert "column" in message


@pytest.mark.parametrize("entry, said", [
    ({"args": ["x"]}, 'neither "command"'),
    ({"command": 3}, '"command" must be a non-empty string'),
    ({"command": "x", "url": "http://h"}, 'both "command" and "url"'),
    ({"url": "ftp://h"}, '"url" must be an http'),
    ({"command": "x", "args": "a b"}, '"args" must be a list of strings'),
    ({"command": "x", "env": {"A": 1}}, '"env" must be an object of strings'),
    ({"command": "x", "safe": "yes"}, '"safe" must be true, false or a list'),
    ({"command": "x", "timeout": 0}, '"timeout" must be a number of seconds above 0'),
    ({"command": "x", "timeout": "10"}, '"timeout" must be a number'),
    ({"command": "x", "disabled": "no"}, '"disabled" must be true or false'),
    ("npx server", 'must be an object with "command" or "url"'),
])
def test_a_wrong_server_entry_names_the_server_and_what_is_wrong(tmp_path, entry, said):
    path = write(tmp_path, {"mcpServers": {"files": entry}})
    with pytest.raises(ToolConfigError) as caught:
        load_config(path)
    assert str(path) in caught.value.message and "'files'" in caught.value.message
    assert said in caught.value.message


@pytest.mark.parametrize("data, said", [
    ([1, 2], "the top level must be an object"),
    ({"mcpServers": ["a"]}, '"mcpServers" must be an object'),
])
def test_a_wrong_top_level_is_one_error(tmp_path, data, said):
    with pytest.raises(ToolConfigError, match=said):
        load_config(write(tmp_path, data))


def test_an_empty_file_or_object_has_no_servers(tmp_path):
    assert load_config(write(tmp_path, "")).servers == ()
    assert load_config(write(tmp_path, {})).servers == ()


def test_the_cli_prints_a_bad_config_as_one_error(tmp_path, capsys):
    from pocketchat.cli import main

    path = write(tmp_path, "{nope")
    assert main(["tools", "--mcp", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(path) in err and "Traceback" not in err


def tool(name: str, safe: bool = False) -> Tool:
    return Tool(name=name, server="s", tool=name, safe=safe)


def test_nothing_runs_without_a_yes_unless_safe():
    p = Permissions()
    assert p.decide(tool("write_file")) == "ask"
    assert p.decide(tool("read_file", safe=True)) == "run"


def test_once_and_deny_are_for_this_call_only():
    p = Permissions()
    assert p.answer("write_file", "once") == "run"
    assert p.decide(tool("write_file")) == "ask"
    assert p.answer("write_file", "deny") == "refuse"
    assert p.decide(tool("write_file")) == "ask"


def test_always_and_never_hold_for_the_chat_and_survive_saving():
    p = Permissions()
    assert p.answer("write_file", "always") == "run"
    assert p.answer("delete", "never") == "refuse"
    again = Permissions.from_json(json.loads(json.dumps(p.to_json())))
    assert again.decide(tool("write_file")) == "run"
    assert again.decide(tool("delete")) == "refuse"
    assert again.decide(tool("delete", safe=True)) == "refuse"  # the user's "never" wins
    again.answer("delete", "always")
    assert again.decide(tool("delete")) == "run"


def test_an_unreadable_saved_state_asks_again():
    for data in (None, "x", {"always": "write_file"}, {"always": [1, None]}):
        assert Permissions.from_json(data).decide(tool("write_file")) == "ask"
    with pytest.raises(ValueError):
        Permissions().answer("x", "maybe")


def test_tool_names_are_their_own_unless_two_servers_share_one():
    names = model_names([("files", "read_file"), ("files", "write_file"), ("notes", "read_file"),
                         ("notes", "search")])
    assert names == ["files_read_file", "write_file", "notes_read_file", "search"]


def test_tool_names_are_cleaned_cut_and_unique():
    long = "a" * 80
    names = model_names([("my server", "get.weather now"), ("s1", long), ("s2", long),
                         ("x", "tool"), ("x", "tool")])
    assert names[0] == "get_weather_now"
    assert all(len(n) <= MAX_NAME for n in names) and len(set(names)) == len(names)
    assert all(c.isalnum() or c in "_-" for n in names for c in n)
    assert names[1].startswith("s1_") and names[2].startswith("s2_")


def test_a_result_is_made_safe_and_cut_with_a_note():
    result = finished("\x1b]0;title\x07" + "x" * 20_000, ok=True)
    assert "\x1b" not in result.text and "\x07" not in result.text
    assert len(result.text) == 16_000
    assert "16,000" in result.note and "left out" in result.note
    assert finished("short", ok=True).note == ""
