"""Files into a conversation, without a model: what each kind of file reads as, every refusal as
one line naming the file, passages that keep their page or lines, BM25 finding the passage a
question's words are in, and retrieval filling the room it is given in the files' order."""

from __future__ import annotations

import os

import pytest

from pocketchat.documents import Attachment, attach, from_bytes, read_path
from pocketchat.documents.passages import split
from pocketchat.documents.prompt import lead, with_documents
from pocketchat.documents.rank import ranked
from pocketchat.documents.retrieve import choose
from pocketchat.errors import DocumentRefused
from support.pdfmake import encrypted_pdf, pdf_bytes


def test_text_markdown_code_csv_json_and_html_read_as_their_text(tmp_path):
    cases = {"notes.txt": ("plain words\r\nline two", "text", "plain words\nline two"),
             "README.md": ("# Title\n\nBody", "markdown", "# Title\n\nBody"),
             "main.py": ("def f():\n    return 1\n", "code", "def f():\n    return 1\n"),
             "data.csv": ("a,b\n1,2\n", "csv", "a,b\n1,2\n"),
             "x.json": ('{"k": [1, 2]}', "json", '{"k": [1, 2]}')}
    for name, (body, kind, text) in cases.items():
        (tmp_path / name).write_text(body, newline="")
        got = read_path(tmp_path / name)
        assert (got.name, got.kind, got.text) == (name, kind, text)
        assert got.size == len(body.encode()) and len(got.sha256) == 64
    page = ("<html><head><title>t</title><style>p{}</style></head><body><h1>Report</h1>"
            "<p>First &amp; <b>bold</b></p><script>alert(1)</script><p>Second</p></body></html>")
    html = from_bytes(page.encode(), "page.html")
    assert html.kind == "html" and html.text == "Report\n\nFirst & bold\n\nSecond"


def test_a_pdf_reads_page_by_page_with_its_page_numbers(tmp_path):
    path = tmp_path / "paper.pdf"
    path.write_bytes(pdf_bytes([["Abstract: bees."], [], ["Results (table 2)."]]))
    got = read_path(path)
    assert got.kind == "pdf" and got.pages == 3
    assert got.text == "[page 1]\nAbstract: bees.\n\n[page 3]\nResults (table 2)."
    # by its bytes, whatever it is called (an API part without a good name)
    assert from_bytes(path.read_bytes(), "upload").kind == "pdf"


def test_the_same_bytes_are_the_same_file_wherever_they_come_from(tmp_path):
    (tmp_path / "a.txt").write_text("same words")
    assert read_path(tmp_path / "a.txt").sha256 == from_bytes(b"same words", "other.txt").sha256


def test_control_characters_never_reach_the_text():
    got = from_bytes(b"red \x1b[31mtext\x1b[0m\x07 and a\tb", "t.txt")
    assert "\x1b" not in got.text and "\x07" not in got.text and "\t" in got.text


@pytest.mark.parametrize("make, words", [
    (lambda p: p.mkdir(), "is a folder"),
    (lambda p: None, "no such file"),
    (lambda p: p.write_bytes(b""), "is empty"),
    (lambda p: p.write_bytes(b"  \n\n "), "is empty"),
    (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200)), "binary"),
    (lambda p: p.write_bytes(encrypted_pdf([["secret plans"]])), "encrypted PDF"),
    (lambda p: p.write_bytes(pdf_bytes([[]])), "no text layer"),
    (lambda p: p.write_bytes(b"%PDF-1.4\nnot really a pdf"), "not a PDF pocketchat can read"),
])
def test_each_bad_file_is_one_line_that_names_it(tmp_path, make, words):
    path = tmp_path / "thing.dat"
    make(path)
    with pytest.raises(DocumentRefused) as caught:
        read_path(path)
    message = str(caught.value)
    assert message.startswith("thing.dat: ") and words in message and "\n" not in message
    assert caught.value.name == "thing.dat" and isinstance(caught.value, ValueError)
    assert caught.value.hint  # what is accepted


def test_a_named_binary_type_says_what_is_read(tmp_path):
    with pytest.raises(DocumentRefused, match="photo.jpg: is not a file pocketchat reads; it reads text"):
        from_bytes(b"\xff\xd8\xff\xe0 JFIF", "photo.jpg")


def test_an_unreadable_file_says_so(tmp_path, monkeypatch):
    path = tmp_path / "locked.txt"
    path.write_text("x")
    path.chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: the refusal the system gives everyone else
        def denied(self):
            raise PermissionError(13, "Permission denied", str(self))
        monkeypatch.setattr(type(path), "read_bytes", denied)
    with pytest.raises(DocumentRefused, match=r"locked.txt: cannot be read \(Permission denied\)"):
        read_path(path)


def test_a_huge_file_is_refused_by_its_size_before_it_is_read(tmp_path, monkeypatch):
    from pocketchat.documents import extract

    monkeypatch.setattr(extract, "MAX_FILE_BYTES", 1024)
    path = tmp_path / "big.log"
    with open(path, "wb") as f:
        f.truncate(10 * 2**20)  # sparse: its size, not its bytes
    with pytest.raises(DocumentRefused, match=r"big.log: is 10 MiB; files up to 0 MiB"):
        read_path(path)


def test_the_prompt_puts_each_file_before_the_question():
    a = Attachment("a.md", "alpha", "0" * 64, "markdown", 5)
    b = Attachment('we"ird<.pdf', "[page 1]\nbeta", "1" * 64, "pdf", 9, pages=1)
    text = with_documents("What do they say?", (a, b))
    assert text == ('<document name="a.md">\nalpha\n</document>\n\n'
                    '<document name="we&quot;ird&lt;.pdf" pages="1">\n[page 1]\nbeta\n</document>'
                    "\n\nWhat do they say?")
    assert lead(()) == "" and with_documents("q", ()) == "q"


def test_attach_goes_to_the_last_user_message():
    from pocketchat.engines.types import Message

    a = Attachment("a.txt", "alpha", "0" * 64, "text", 5)
    msgs = (Message("system", "s"), Message("user", "one"), Message("assistant", "x"),
            Message("user", "two"))
    got = attach(msgs, [a])
    assert got[3].attachments == (a,) and got[1].attachments == () and got[:3] == msgs[:3]
    assert attach((Message("system", "s"),), [a]) is None


def test_passages_cover_the_text_and_keep_pages_and_lines():
    pdf = from_bytes(pdf_bytes([["one " * 50] * 10, ["two " * 50] * 10]), "r.pdf")
    passages = split(pdf, size=600)
    assert {p.page for p in passages} == {1, 2}
    assert all(p.where.startswith("page ") for p in passages)
    assert " ".join(p.text for p in passages).split() == pdf.text.replace("[page 1]", "").replace(
        "[page 2]", "").split()
    text = Attachment("t.txt", "\n".join(f"line {i}" for i in range(1, 201)), "", "text", 0)
    parts = split(text, size=300)
    assert parts[0].where == "lines 1-" + str(parts[0].last_line)
    assert parts[-1].last_line == 200
    joined = "\n".join(p.text for p in parts)
    assert joined.split("\n") == text.text.split("\n")
    long = Attachment("m.json", "x" * 5000, "", "json", 0)
    assert [len(p.text) for p in split(long, size=1200)] == [1200, 1200, 1200, 1200, 200]


def test_bm25_finds_the_passage_the_words_are_in():
    docs = ["The bakery opens at seven.", "Sourdough costs four euros at the bakery.",
            "Rye bread is sold out on Mondays."]
    assert ranked("How much does the sourdough cost?", docs)[0] == 1
    assert ranked("Monday rye", docs)[0] == 2
    assert ranked("zebra", docs) == [0, 1, 2]  # nothing matches: the files' order


def test_retrieval_fills_the_room_with_the_best_passages_in_the_files_order():
    pages = [[f"Chapter {i}: the harbour has {i} boats and a lighthouse."] * 8 for i in range(1, 41)]
    pages[16] = ["The secret ingredient of the harbour soup is saffron."] * 8
    doc = from_bytes(pdf_bytes(pages), "town.pdf")
    count = lambda text: len(text) // 4  # noqa: E731 - a stand-in tokenizer
    chosen, retrieval = choose([doc], "What is the secret ingredient of the soup?", 600, count)
    assert "saffron" in chosen[0].text and "town.pdf, page 17" in retrieval.sources
    assert sum(count(p) + 8 for p in chosen[0].text.split("\n\n")) <= 600 + 8
    places = [int(s.rsplit(" ", 1)[1]) for s in retrieval.sources]
    assert places == sorted(places)  # the file's order, not the ranking's
    assert chosen[0].excerpt == (f"{retrieval.chosen} of {retrieval.passages} passages: pages "
                                 + ", ".join(map(str, places)))
    assert chosen[0].name == doc.name and chosen[0].sha256 == doc.sha256
    assert f"{retrieval.chosen} of {retrieval.passages} passages" in retrieval.note
    assert "% of the text" in retrieval.note
