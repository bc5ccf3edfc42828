"""Ollama's API through the real `ollama` npm client (JavaScript, run by node) against the real
`pocketchat serve` on the starter: chat and generate, streaming and not, a JSON-schema `format`,
list/show/ps, and a refused endpoint answered in Ollama's error shape (the client raises its
message). The client is the one .ci/run installs with npm into POCKETCHAT_AGENT_CLIS (default
~/.cache/pocketchat/agent-clis); without node, npm or that install these tests skip, saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support.serverproc import running

pytestmark = pytest.mark.slow  # a real model, server and node: the second CI lane

FOLDER = Path(os.environ.get("POCKETCHAT_AGENT_CLIS") or Path.home() / ".cache/pocketchat/agent-clis")
MODULES = FOLDER / "node_modules"

SCRIPT = r"""
const { Ollama } = require('ollama');
const client = new Ollama({ host: process.env.OLLAMA_HOST });
const ask = [{ role: 'user', content: 'Name a colour.' }];
const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'],
                 additionalProperties: false };
(async () => {
  const out = {};
  const chat = await client.chat({ model: 'm', messages: ask, options: { num_predict: 6 } });
  out.chat = { role: chat.message.role, content: chat.message.content, done: chat.done,
               eval_count: chat.eval_count, prompt_eval_count: chat.prompt_eval_count };
  let streamed = '', parts = 0, last = null;
  for await (const part of await client.chat({ model: 'm', messages: ask, stream: true,
                                                options: { num_predict: 6 } })) {
    streamed += part.message.content; parts += 1; last = part;
  }
  out.stream = { text: streamed, parts, done: last.done, eval_count: last.eval_count };
  const gen = await client.generate({ model: 'm', prompt: 'The sky is', options: { num_predict: 4 } });
  out.generate = { response: gen.response, done: gen.done, eval_count: gen.eval_count };
  const fmt = await client.chat({ model: 'm', messages: [{ role: 'user', content: 'Say ok.' }],
                                  format: schema, options: { num_predict: 24 } });
  out.format = fmt.message.content;
  out.list = (await client.list()).models.map((m) => m.name);
  out.show = Object.keys(await client.show({ model: 'm' }));
  out.ps = (await client.ps()).models.length;
  try { await client.pull({ model: 'llama3' }); out.pull = 'no error'; }
  catch (err) { out.pull = { name: err.name, message: err.message, status: err.status_code }; }
  console.log(JSON.stringify(out));
})().catch((err) => { console.error(err.stack || String(err)); process.exit(1); });
"""


def _client_or_skip() -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node or npm is not installed: the ollama npm client cannot run")
    if not (MODULES / "ollama" / "package.json").is_file():
        pytest.skip(f"the ollama npm package is not installed under {FOLDER} (.ci/run installs it)")


def test_the_ollama_javascript_client_chats_generates_and_lists(tmp_path):
    pytest.importorskip("llama_cpp")
    _client_or_skip()
    with running(["--model", "starter", "--ctx", "2048", "--draft", "off"], tmp_path) as srv:
        env = {**os.environ, "NODE_PATH": str(MODULES), "OLLAMA_HOST": srv.url}
        done = subprocess.run(["node", "-e", SCRIPT], capture_output=True, text=True, env=env,
                              timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    chat = out["chat"]
    assert chat["role"] == "assistant" and chat["content"] and chat["done"] is True
    assert 0 < chat["eval_count"] <= 6 and chat["prompt_eval_count"] > 0
    stream = out["stream"]
    assert stream["parts"] > 1 and stream["text"] and stream["done"] is True
    assert 0 < stream["eval_count"] <= 6
    gen = out["generate"]
    assert gen["response"] and gen["done"] is True and 0 < gen["eval_count"] <= 4
    assert isinstance(json.loads(out["format"])["ok"], bool)  # the schema held
    assert len(out["list"]) == 1
    assert {"modelfile", "details", "model_info"} & set(out["show"])
    assert out["ps"] == 1
    pull = out["pull"]
    assert pull != "no error" and pull["name"] == "ResponseError" and pull["message"], pull
    assert "pocketchat" in pull["message"]  # says what pocketchat does instead
