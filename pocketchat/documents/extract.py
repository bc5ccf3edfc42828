"""A file's bytes into an `Attachment`: text, Markdown, code, CSV/JSON and HTML as their text,
PDF page by page through pypdf (pure Python, no system library), anything else refused.

Every refusal is one `DocumentRefused` that names the file and says what is accepted: a folder,
a file that cannot be read, binary data, an encrypted PDF (one opened by an empty password is
read), a PDF without a text layer, an empty file, one over `MAX_FILE_BYTES` or whose text is
over `MAX_TEXT_CHARS`. Control characters never reach the text (a terminal shows it later).
"""

from __future__ import annotations

import hashlib
import io
import re
from html.parser import HTMLParser
from pathlib import Path

from pocketchat.documents.attachment import Attachment
from pocketchat.errors import DocumentRefused

MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_TEXT_CHARS = 4_000_000  # about a million tokens: far past any context, still retrievable
ACCEPTED = "text, Markdown, code, CSV, JSON, HTML and PDF (with a text layer)"

KINDS = {
    "markdown": {".md", ".markdown", ".mdx", ".rst"},
    "csv": {".csv", ".tsv"},
    "json": {".json", ".jsonl", ".ndjson"},
    "html": {".html", ".htm", ".xhtml"},
    "pdf": {".pdf"},
    "code": {".py", ".js", ".ts", ".tsx", ".jsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs",
             ".go", ".java", ".kt", ".swift", ".rb", ".php", ".cs", ".sh", ".bash", ".zsh",
             ".sql", ".lua", ".r", ".m", ".scala", ".pl", ".hs", ".ml", ".ex", ".exs",
             ".toml", ".yaml", ".yml", ".ini", ".cfg", ".xml", ".css", ".scss", ".vue",
             ".svelte", ".dart", ".zig", ".nim", ".jl", ".ps1", ".bat", ".makefile",
             ".dockerfile", ".gradle", ".tex"},
}
# Not text whatever their bytes look like: refused at once, by name.
BINARY = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tiff", ".heic", ".ico", ".zip",
          ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar", ".tar", ".docx", ".doc", ".xlsx", ".xls",
          ".pptx", ".ppt", ".odt", ".ods", ".epub", ".exe", ".dll", ".so", ".dylib", ".bin",
          ".gguf", ".safetensors", ".mp3", ".mp4", ".wav", ".mov", ".mkv", ".sqlite", ".db"}
MEDIA = {"application/pdf": "pdf", "text/html": "html", "text/markdown": "markdown",
         "text/csv": "csv", "application/json": "json"}
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")  # all but \t \n \r


def _refuse(name: str, why: str) -> DocumentRefused:
    return DocumentRefused(f"{name}: {why}", name=name)


def read_path(path: str | Path) -> Attachment:
    """The file at `path` read into an attachment (see the module docstring for refusals)."""
    path = Path(path).expanduser()
    name = path.name or str(path)
    if path.is_dir():
        raise _refuse(name, "is a folder; attach the files in it one by one")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise _refuse(name, f"is {size / 2**20:.0f} MiB; files up to "
                                f"{MAX_FILE_BYTES // 2**20} MiB can be attached")
        data = path.read_bytes()
    except DocumentRefused:
        raise
    except FileNotFoundError:
        raise _refuse(name, "no such file") from None
    except OSError as exc:
        raise _refuse(name, f"cannot be read ({exc.strerror or exc})") from None
    return from_bytes(data, name)


def kind_of(name: str, data: bytes, media_type: str | None = None) -> str:
    """What the file is: by its first bytes (a PDF), its media type, then its name."""
    if data[:5] == b"%PDF-":
        return "pdf"
    base = (media_type or "").split(";")[0].strip().lower()
    if base in MEDIA:
        return MEDIA[base]
    suffix = Path(name).suffix.lower() or ("." + name.lower() if "." not in name else "")
    for kind, suffixes in KINDS.items():
        if suffix in suffixes:
            return kind
    if suffix in BINARY or base.startswith(("image/", "audio/", "video/")):
        return "binary"
    return "text"


def from_bytes(data: bytes, name: str, media_type: str | None = None) -> Attachment:
    """`data` (a file called `name`) read into an attachment."""
    name = Path(name.replace("\\", "/")).name or "file"
    if len(data) > MAX_FILE_BYTES:
        raise _refuse(name, f"is {len(data) / 2**20:.0f} MiB; files up to "
                            f"{MAX_FILE_BYTES // 2**20} MiB can be attached")
    if not data.strip():
        raise _refuse(name, "is empty")
    kind = kind_of(name, data, media_type)
    pages = 0
    if kind == "binary":
        raise _refuse(name, f"is not a file pocketchat reads; it reads {ACCEPTED}")
    if kind == "pdf":
        text, pages = _pdf(name, data)
    else:
        text = _decode(name, data)
        if kind == "html":
            text = html_text(text)
    text = _clean(text)
    if not text.strip():
        raise _refuse(name, "has no text" if kind != "pdf" else
                      "has no text layer (a scan?); pocketchat reads a PDF's text, not its images")
    if len(text) > MAX_TEXT_CHARS:
        raise _refuse(name, f"holds {len(text):,} characters of text; at most "
                            f"{MAX_TEXT_CHARS:,} can be attached")
    return Attachment(name=name, text=text, sha256=hashlib.sha256(data).hexdigest(), kind=kind,
                      size=len(data), pages=pages)


def _decode(name: str, data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError:
            pass
    if b"\x00" in data[:65536]:
        raise _refuse(name, f"is binary data, not text; pocketchat reads {ACCEPTED}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
    if len(_CONTROL.findall(text[:65536])) > 0.01 * min(len(text), 65536):
        raise _refuse(name, f"is binary data, not text; pocketchat reads {ACCEPTED}")
    return text


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("", text)


def _pdf(name: str, data: bytes) -> tuple[str, int]:
    """(the text with a `[page N]` line before each page that has text, the page count)."""
    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError:  # pragma: no cover - a dependency
        raise _refuse(name, "is a PDF and pypdf is not installed (pip install pypdf)") from None
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")
            except Exception:  # noqa: BLE001 - a cipher pypdf cannot open without extras
                opened = 0
            if not opened:
                raise _refuse(name, "is an encrypted PDF; save a copy without a password "
                                    "and attach that")
        parts = []
        for number, page in enumerate(reader.pages, start=1):
            text = (page.extract_text() or "").strip()
            if text:
                parts.append(f"[page {number}]\n{text}")
        return "\n\n".join(parts), len(reader.pages)
    except DocumentRefused:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError,
            RecursionError, OSError) as exc:
        raise _refuse(name, f"is not a PDF pocketchat can read ({type(exc).__name__})") from None


class _Text(HTMLParser):
    """An HTML page's text: scripts and styles left out, blocks on their own lines."""

    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
              "article", "header", "footer", "pre", "blockquote", "table", "ul", "ol", "hr"}
    SKIP = {"script", "style", "noscript", "template", "head"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.out.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.out.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.out.append(data)


def html_text(html: str) -> str:
    """The readable text of an HTML page."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = [" ".join(line.split()) for line in "".join(parser.out).split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
