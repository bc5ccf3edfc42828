"""Every error pocketchat raises on purpose; the CLI prints each as one message and a hint."""

from __future__ import annotations


class PocketchatError(Exception):
    """Root of pocketchat's errors: a message for the user and a hint of what to do."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):  # keep the class, message, hint and every field across a pipe
        return (_restore, (type(self), self.args, dict(self.__dict__)))


def _restore(cls: type, args: tuple, state: dict) -> "PocketchatError":
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class UsageError(PocketchatError, ValueError):
    """A command-line argument that cannot be used."""


class HardwareProfileError(PocketchatError, ValueError):
    """A hardware-profile JSON file that is malformed or has unknown keys."""


class NothingFits(PocketchatError, MemoryError):
    """No build fits this machine."""


class ModelNotFound(PocketchatError, FileNotFoundError):
    """A build, repo file or local model that does not exist."""


class RepoNotFound(ModelNotFound):
    """A Hugging Face repository that does not exist (404)."""


class GatedRepo(PocketchatError, PermissionError):
    """A gated or private repository that needs a token (401/403)."""

    hint = "Set HF_TOKEN to a Hugging Face token that has access, or run `hf auth login`."


class AmbiguousModel(PocketchatError, LookupError):
    """A repo:quant that matches no file or several files."""


class DownloadError(PocketchatError, ConnectionError):
    """A download that failed after its retries; the partial file is kept."""

    hint = "Run the same command again: the download resumes where it stopped."


class DownloadInterrupted(DownloadError):
    """A download stopped by the user (Ctrl-C); the partial file is kept."""


class ChecksumMismatch(PocketchatError, ValueError):
    """Downloaded bytes whose SHA-256 differs from the Hub's; never used."""


class DiskFull(PocketchatError, OSError):
    """Not enough free disk for a download."""


class NotWritable(PocketchatError, PermissionError):
    """A folder pocketchat must write to (the model cache) that is read-only or not permitted."""


class OfflineError(PocketchatError, ConnectionError):
    """The network is off or the Hub unreachable, and the model is not on disk."""


class CorruptModel(PocketchatError, ValueError):
    """A model file that is truncated, corrupt or not a model at all."""

    hint = ("If pocketchat downloaded it, remove it with `pocketchat models rm NAME` and download it "
            "again; otherwise get a fresh copy of the file.")


class ModelTooLarge(PocketchatError, MemoryError):
    """A model that does not fit the memory it is about to be loaded into."""


class UnsupportedModel(PocketchatError, ValueError):
    """A model whose architecture the installed runtime cannot load."""

    hint = ("Update llama-cpp-python (pip install -U llama-cpp-python) to a version that knows it, "
            "or pick another model.")


class EngineCrashed(PocketchatError, RuntimeError):
    """The runtime's worker process died (abort, segfault, out-of-memory kill)."""

    hint = "The conversation is kept; restart the engine (or pick a smaller build) and go on."

    def __init__(
        self, message: str, *, exitcode: int | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.exitcode = exitcode


class EngineError(PocketchatError, RuntimeError):
    """The runtime refused a request (bad options, load failure)."""


class SessionBusy(EngineError, TimeoutError):
    """A Python API session still answering another call when this one's turn was due (its
    `timeout=` ran out), or a thread that starts an answer while its own last one is unread."""


class EngineClosed(EngineError):
    """A request to an engine that was closed (`close()`): it cannot answer any more."""

    hint = "Open the model again."

    def __init__(self, message: str = "the engine is closed", *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)


class EngineNotResponding(EngineError):
    """The model's worker process is alive but does not answer: stopped by a signal (SIGSTOP,
    Ctrl+Z), stuck, or starved by the system (a swap storm)."""

    hint = ("Restart the model (Ctrl+R in the chat; the conversation is kept). If the process "
            "resumes (SIGCONT), it goes on by itself.")


class BackendMissing(PocketchatError, ImportError):
    """A backend library that is not installed or cannot run on this machine."""


class HubUnreachable(OfflineError):
    """The Hugging Face Hub (or HF_ENDPOINT) could not be reached: no connection, DNS, timeout."""

    hint = "Check the connection, or run with --offline to use only what is on disk."


class DownloadDeclined(PocketchatError):
    """The user said no when asked to download; nothing was downloaded."""


class ContextOverflow(EngineError, ValueError):
    """A message that alone does not fit the context window, even with older turns dropped."""

    hint = "Shorten the message, or restart with a larger context (--ctx)."

    def __init__(self, prompt_tokens: int, limit: int, *, hint: str | None = None,
                 whole: int | None = None) -> None:
        super().__init__(
            f"the message needs {prompt_tokens} tokens but the context has room for {limit}",
            hint=hint,
        )
        self.prompt_tokens = prompt_tokens
        self.limit = limit
        self.whole = prompt_tokens if whole is None else whole  # the whole conversation's


class MetalBudgetExceeded(ModelTooLarge):
    """A model (weights + KV cache) larger than Metal's recommended GPU working set on a Mac."""

    def __init__(self, message: str, *, need_bytes: int, budget_bytes: int,
                 total_bytes: int | None = None, suggested_limit_mb: int | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.need_bytes = need_bytes
        self.budget_bytes = budget_bytes
        self.total_bytes = total_bytes
        self.suggested_limit_mb = suggested_limit_mb  # None: raising the limit cannot help


RPC_REINSTALL = ('CMAKE_ARGS="-DGGML_RPC=on" pip install --force-reinstall --no-cache-dir '
                 "llama-cpp-python==0.3.36")


class RpcUnavailable(BackendMissing):
    """The installed llama-cpp-python was built without the RPC backend (no --rpc, no rpc-server)."""

    hint = (f"Rebuild it with RPC (--no-cache-dir: pip may hold a wheel built without it): "
            f"{RPC_REINSTALL}")


class HelperUnreachable(PocketchatError, ConnectionError):
    """An --rpc helper that cannot be reached or does not speak llama.cpp's RPC protocol."""

    hint = ("Start `pocketchat rpc-server` on the helper machine (with --host and --allow-remote "
            "for a trusted network), check HOST:PORT, or leave --rpc out to run alone.")

    def __init__(self, message: str, *, endpoint: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.endpoint = endpoint


class HelperGone(EngineCrashed):
    """An --rpc helper went away while the model was loaded (killed, network dropped)."""

    hint = ("The conversation is kept. Ctrl+R reloads the model: with the helper if it is back, "
            "else on this machine alone when it fits.")

    def __init__(self, message: str, *, endpoint: str = "", exitcode: int | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, exitcode=exitcode, hint=hint)
        self.endpoint = endpoint


class UnsupportedRequest(PocketchatError, ValueError):
    """A request the engine cannot honour as asked (a JSON schema or tool choice it cannot
    enforce); `param` names the part (e.g. "response_format.json_schema.schema.properties.x")."""

    code = "unsupported_parameter"  # the API error's code

    def __init__(self, message: str, *, param: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.param = param


class TemplateRefused(UnsupportedRequest):
    """A conversation the model's chat template refuses (its `raise_exception`: Qwen3.5/3.6's
    want a user query and a system message only first); the message has the template's words."""

    code = "invalid_value"
    hint = ("Send a conversation the model's chat template takes (the template's words say "
            "what it wants).")

    def __init__(self, message: str, *, param: str | None = "messages",
                 hint: str | None = None) -> None:
        super().__init__(message, param=param, hint=hint)


class ApiError(PocketchatError, ValueError):
    """A request the OpenAI-compatible server refuses, with its HTTP status and OpenAI's
    error `type` and `code` (`{"error": {"message", "type", "param", "code"}}` on the wire)."""

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error",
                 code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.type = type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})


class DocumentRefused(PocketchatError, ValueError):
    """A file that cannot go into a conversation (a folder, unreadable, binary, an encrypted or
    image-only PDF, empty, too large); the message names the file and says what is accepted;
    `part` names the request part that carried it (e.g. "messages[0].content[1]")."""

    code = "invalid_value"
    hint = ("Attach text, Markdown, code, CSV, JSON, HTML or a PDF with a text layer "
            "(at most the size the message gives).")

    def __init__(self, message: str, *, name: str = "", part: str | None = None,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.name = name
        self.part = part


class ToolConfigError(PocketchatError, ValueError):
    """A tool-server config (mcp.json or `--mcp FILE`) that is missing, not JSON, or not the
    `{"mcpServers": {NAME: {"command"...} | {"url"...}}}` shape; the message names the file and
    what is wrong there."""

    hint = ('Each server is {"command": "...", "args": [...], "env": {...}} or {"url": '
            '"http://..."} under "mcpServers" (see docs/tools.md).')

    def __init__(self, message: str, *, path: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.path = path
