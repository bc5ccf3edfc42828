"""Files through every API on the real `pocketchat serve` (127.0.0.1, the starter, a 2,048-token
context), driven by the real `openai` and `anthropic` clients: OpenAI's `file` parts,
Anthropic's `document` blocks (base64 PDF, text, content), the Responses API's `input_file`
parts. A file reaches the prompt as the engine renders an attachment: the prompt's tokens are
exactly those of the same question with the file's `<document>` block written before it (the
engine's own count), and grow with a fact only the file holds. A file larger than the context
is answered from retrieved passages, and the response says so in its `pocketchat` object. A
file the server cannot take is one 400 naming the part, and the server answers the next
request. The starter is a 135M model: its answers' wording is never checked."""

from __future__ import annotations

import base64
import io
import json
import random

import pytest

from pocketchat.documents import from_bytes
from pocketchat.documents.prompt import with_documents
from support.serverproc import running

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
httpx = pytest.importorskip("httpx")
pypdf = pytest.importorskip("pypdf")

pytestmark = pytest.mark.slow
QUESTION = "What is the vault code?"
NOTE = b"Field notes.\nThe vault code is 4417.\nThe garden gate is painted green.\n"
LONGER = NOTE.replace(b"4417", b"4417-9921-3310-5582")  # the same file, a longer fact
PDF_LINES = ["Quarterly report", "The vault code is 4417.", "Revenue grew by nine percent."]


def pdf_bytes(lines: list[str]) -> bytes:
    """A one-page PDF written by hand: Helvetica, one text line each."""
    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    ops = "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({esc(t)}) Tj T*" for t in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        "/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Length {len(ops)} >>\nstream\n{ops}\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += (f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
            .encode())
    return bytes(out)


def encrypted_pdf() -> bytes:
    writer = pypdf.PdfWriter()
    for page in pypdf.PdfReader(io.BytesIO(pdf_bytes(PDF_LINES))).pages:
        writer.add_page(page)
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def big_text() -> tuple[bytes, int]:
    """A file of ~80 paragraphs (far over 2,048 tokens) and the line of its one fact."""
    rng = random.Random(7)
    words = ("harbor quarry ledger violet engine meadow copper signal tunnel orchard lantern "
             "saddle glacier pepper timber canvas marble falcon velvet compass thistle").split()
    lines: list[str] = []
    fact_line = 0
    for i in range(80):
        if i == 57:
            fact_line = len(lines) + 1
            lines.append("The lighthouse keeper's cat is named Biscuit and sleeps on the lamp.")
        else:
            lines.append(f"Section {i}. " + " ".join(rng.choice(words) for _ in range(60)) + ".")
        lines.append("")
    return "\n".join(lines).encode(), fact_line


@pytest.fixture(scope="module")
def server(tmp_path_factory, starter_gguf):
    home = tmp_path_factory.mktemp("documents")
    with running(["--model", "starter", "--ctx", "2048", "--parallel", "1"], home) as srv:
        yield srv


@pytest.fixture(scope="module")
def oai(server):
    return server.openai()


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def inline(data: bytes, name: str) -> str:
    """The question as the engine renders it with the file attached, written out by hand."""
    return with_documents(QUESTION, [from_bytes(data, name)])


def chat_tokens(oai, content, **kw) -> int:
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                    max_tokens=1, temperature=0, **kw)
    return r.usage.prompt_tokens


def file_part(data: bytes, name: str, url: bool = False) -> dict:
    mime = "application/pdf" if name.endswith(".pdf") else "text/plain"
    encoded = f"data:{mime};base64,{b64(data)}" if url else b64(data)
    return {"type": "file", "file": {"file_data": encoded, "filename": name}}


def test_openai_file_parts_reach_the_prompt_as_the_engine_renders_them(oai):
    bare = chat_tokens(oai, QUESTION)
    text = chat_tokens(oai, [{"type": "text", "text": QUESTION}, file_part(NOTE, "notes.txt")])
    assert text == chat_tokens(oai, inline(NOTE, "notes.txt"))  # the engine's own block
    assert text - bare >= 15  # the file's tokens (the fact among them) went in
    longer = chat_tokens(oai, [{"type": "text", "text": QUESTION}, file_part(LONGER, "notes.txt")])
    assert longer > text  # a fact only the file holds changes the prompt
    pdf = pdf_bytes(PDF_LINES)
    assert "4417" in from_bytes(pdf, "report.pdf").text  # pypdf reads the hand-made PDF
    as_pdf = chat_tokens(oai, [file_part(pdf, "report.pdf", url=True),
                               {"type": "text", "text": QUESTION}])
    assert as_pdf == chat_tokens(oai, inline(pdf, "report.pdf")) > bare + 15


def test_anthropic_documents_reach_the_prompt(claude):
    def count(content) -> int:
        return claude.messages.count_tokens(
            model="m", messages=[{"role": "user", "content": content}]).input_tokens

    ask = {"type": "text", "text": QUESTION}
    pdf = pdf_bytes(PDF_LINES)
    as_pdf = count([{"type": "document", "title": "report.pdf", "citations": {"enabled": True},
                     "source": {"type": "base64", "media_type": "application/pdf",
                                "data": b64(pdf)}}, ask])
    assert as_pdf == count(inline(pdf, "report.pdf")) > count(QUESTION) + 15
    text = count([{"type": "document", "title": "notes.txt", "context": "my notes",
                   "source": {"type": "text", "media_type": "text/plain",
                              "data": NOTE.decode()}}, ask])
    assert text == count(inline(NOTE, "notes.txt"))
    blocks = count([{"type": "document", "title": "notes.txt", "source": {
        "type": "content", "content": [{"type": "text", "text": NOTE.decode()}]}}, ask])
    assert blocks == text
    r = claude.messages.create(model="m", max_tokens=2, messages=[{"role": "user", "content": [
        {"type": "document", "title": "notes.txt",
         "source": {"type": "text", "media_type": "text/plain", "data": NOTE.decode()}}, ask]}])
    assert r.usage.input_tokens + r.usage.cache_read_input_tokens == text
    assert getattr(r, "pocketchat", None) is None  # whole: no retrieval said


def test_responses_input_file_reaches_the_prompt(oai):
    def tokens(content) -> int:
        r = oai.responses.create(model="m", input=[{"role": "user", "content": content}],
                                 max_output_tokens=1, reasoning={"effort": "none"}, store=False)
        return r.usage.input_tokens

    pdf = pdf_bytes(PDF_LINES)
    got = tokens([{"type": "input_file", "filename": "report.pdf",
                   "file_data": f"data:application/pdf;base64,{b64(pdf)}"},
                  {"type": "input_text", "text": QUESTION}])
    assert got == tokens(inline(pdf, "report.pdf")) > tokens(QUESTION) + 15


def _covers(sources: list[str], name: str, line: int) -> bool:
    for s in sources:
        where = s.removeprefix(f"{name}, ")
        if where.startswith("lines "):
            a, b = (int(x) for x in where[6:].split("-"))
            if a <= line <= b:
                return True
        elif where == f"line {line}":
            return True
    return False


def test_a_file_over_the_context_is_answered_from_retrieved_passages_and_said_so(
        oai, claude, server):
    data, line = big_text()
    ask = "What is the name of the lighthouse keeper's cat?"
    content = [file_part(data, "big.txt"), {"type": "text", "text": ask}]
    r = oai.chat.completions.create(model="m", messages=[{"role": "user", "content": content}],
                                    max_tokens=4, temperature=0)
    said = r.model_extra["pocketchat"]
    assert "do not fit the context" in said["retrieval"] and said["sources"]
    assert all(s.startswith("big.txt, line") for s in said["sources"])
    assert _covers(said["sources"], "big.txt", line)  # the passage with the fact was chosen
    assert r.usage.prompt_tokens <= 2048
    stream = oai.chat.completions.create(model="m", max_tokens=4, temperature=0, stream=True,
                                         messages=[{"role": "user", "content": content}])
    last = [c for c in stream][-1]
    assert last.choices[0].finish_reason and last.model_extra["pocketchat"] == said
    m = claude.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": [
        {"type": "document", "title": "big.txt", "source": {
            "type": "text", "media_type": "text/plain", "data": data.decode()}},
        {"type": "text", "text": ask}]}])
    assert m.model_extra["pocketchat"]["sources"] == said["sources"]
    resp = oai.responses.create(model="m", max_output_tokens=4, reasoning={"effort": "none"},
                                store=False, input=[{"role": "user", "content": [
                                    {"type": "input_file", "filename": "big.txt",
                                     "file_data": b64(data)},
                                    {"type": "input_text", "text": ask}]}])
    assert resp.model_extra["pocketchat"]["sources"] == said["sources"]
    events = sse(server, "/v1/messages", {"model": "m", "max_tokens": 4, "stream": True,
                                          "messages": [{"role": "user", "content": [
        {"type": "document", "title": "big.txt", "source": {
            "type": "text", "media_type": "text/plain", "data": data.decode()}},
        {"type": "text", "text": ask}]}]})
    assert events["message_delta"]["pocketchat"] == m.model_extra["pocketchat"]
    events = sse(server, "/v1/responses", {"max_output_tokens": 4, "stream": True, "store": False,
                                           "reasoning": {"effort": "none"}, "input": [
        {"role": "user", "content": [{"type": "input_file", "filename": "big.txt",
                                      "file_data": b64(data)}, {"type": "input_text", "text": ask}]}]})
    final = events.get("response.completed") or events["response.incomplete"]  # cut at 4 tokens
    assert final["response"]["pocketchat"]["sources"] == said["sources"]


def sse(server, path: str, body: dict) -> dict[str, dict]:
    """A stream's last event of each name."""
    out: dict[str, dict] = {}
    with httpx.stream("POST", server.url + path, json=body, timeout=300) as r:
        name = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                out[name] = json.loads(line[6:])
    return out


REFUSED = [  # (file bytes or base64 text, its name, a word the reason holds)
    ("not base64 at all!", "notes.txt", "base64"),
    (PNG, "diagram.png", "reads text"),
    (b"", "empty.txt", "empty"),
    (encrypted_pdf(), "locked.pdf", "encrypted"),
]


MEDIA = {"diagram.png": "image/png", "locked.pdf": "application/pdf"}


def _encoded(data) -> str:
    return data if isinstance(data, str) else b64(data)


@pytest.mark.parametrize("data, name, word", REFUSED, ids=[r[1] for r in REFUSED])
def test_a_file_the_server_cannot_take_is_one_400_naming_the_part(oai, claude, data, name, word):
    part = "messages[0].content[1]"
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "text", "text": QUESTION},
            {"type": "file", "file": {"file_data": _encoded(data), "filename": name}}]}])
    err = info.value.body
    assert err["param"] == part and part in err["message"] and word in err["message"], err
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "text", "text": QUESTION},
            {"type": "document", "title": name, "source": {
                "type": "base64", "media_type": MEDIA.get(name, "text/plain"),
                "data": _encoded(data)}}]}])
    body = info.value.body
    assert body["error"]["type"] == "invalid_request_error", body
    assert part in body["error"]["message"] and word in body["error"]["message"], body
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model="m", max_output_tokens=1, input=[{"role": "user", "content": [
            {"type": "input_text", "text": QUESTION},
            {"type": "input_file", "file_data": _encoded(data), "filename": name}]}])
    assert info.value.body["param"] == "input[0].content[1]", info.value.body
    assert word in info.value.body["message"], info.value.body
    r = oai.chat.completions.create(model="m", max_tokens=2, messages=[
        {"role": "user", "content": QUESTION}])  # the server goes on
    assert r.choices[0].finish_reason in ("stop", "length")


def test_sources_the_server_cannot_reach_are_refused_by_name(oai, claude, server):
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "file", "file": {"file_id": "file-abc123"}}]}])
    assert "Files API" in info.value.body["message"] and "file_data" in info.value.body["message"]
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}]}])
    assert "offline" in info.value.body["error"]["message"]
    for extra in ({"file_id": "file-abc123"}, {"file_url": "https://example.com/a.pdf"}):
        with pytest.raises(openai.BadRequestError) as info:
            oai.responses.create(model="m", max_output_tokens=1, input=[{"role": "user", "content": [
                {"type": "input_file", **extra}]}])
        assert info.value.body["param"] == f"input[0].content[0].{next(iter(extra))}"
    status, body = server.post_json("/v1/chat/completions", {"max_tokens": 1, "messages": [
        {"role": "assistant", "content": [file_part(NOTE, "notes.txt")]},
        {"role": "user", "content": QUESTION}]})
    assert status == 400 and body["error"]["param"] == "messages[0].content[0]", body
    assert json.dumps(body).count("user message") == 1
