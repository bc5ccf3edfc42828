"""Small, pure formatters for figures on screen: bytes, durations, token counts."""

from __future__ import annotations

from pocketchat.errors import PocketchatError


def describe_error(error: BaseException) -> tuple[str, str]:
    """One line for the user and a hint; never a traceback."""
    if isinstance(error, PocketchatError):
        return error.message or type(error).__name__, error.hint
    return f"{type(error).__name__}: {error}", ""


def human_bytes(n: float | None, *, like: float | None = None) -> str:
    """'1.5 GB'; with `like`, in the unit `like` would get (so two figures on a line share one)."""
    if n is None:
        return "?"
    value = float(n)
    scale = max(float(like), value) if like else value
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(scale) < 1000 or unit == "TB":
            if unit == "B":
                return f"{int(value)} B"
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
        value /= 1000
        scale /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - the loop always returns


def human_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds < 0:
        return "?"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def compact_count(n: int) -> str:
    """4096 -> '4096', 32768 -> '32.8k', 131072 -> '131k'."""
    if n < 10_000:
        return str(n)
    if n < 100_000:
        return f"{n / 1000:.1f}k"
    return f"{n // 1000}k"


def meter(fraction: float, width: int = 10) -> str:
    """A text bar such as '████▌░░░░░' for a fraction in [0, 1]."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = int(round(fraction * width * 8))
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part else ""
    bar = "█" * full + partial.strip()
    return bar + "░" * (width - len(bar))


def restoring_line(size: int | None = None) -> str:
    """The status while a saved model state loads (llama.cpp reports no progress for it)."""
    return "Restoring the chat's saved model state" + (f" ({human_bytes(size)})" if size else "")


def prompt_progress_line(done: int, total: int, tok_s: float, seconds_left: float | None,
                         what: str = "the prompt") -> str:
    """'Reading the prompt 1,024/3,525 tokens · 240 tok/s · 10.4 s left' (plain text; `what`
    names what is read: 'notes.md' for a file read ahead)."""
    parts = [f"Reading {what} {done:,}/{total:,} tokens"]
    if tok_s > 0:
        parts.append(f"{tok_s:.0f} tok/s")
    if seconds_left is not None:
        parts.append(f"{human_duration(seconds_left)} left")
    return " · ".join(parts)


def dropped_line(n: int) -> str:
    """The note when earlier messages no longer fit the context."""
    one = n == 1
    return (f"{n} earlier message{'' if one else 's'} no longer fit{'s' if one else ''} the context "
            f"and {'was' if one else 'were'} left out of what the model saw.")


THOUGHT_ENDS = {"budget": "ended at its budget", "user": "ended by you"}


def thinking_title(tokens: int, seconds: float | None, end: str = "") -> str:
    """The thinking block's title: 'Thinking · 412 tokens · 38 s' (a figure not known yet left
    out), and how it ended when it did not end by itself ('· ended by you')."""
    parts = ["Thinking"]
    if tokens:
        parts.append(f"{tokens:,} token{'' if tokens == 1 else 's'}")
    if seconds is not None:
        parts.append(f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s")
    if end in THOUGHT_ENDS:
        parts.append(THOUGHT_ENDS[end])
    return " · ".join(parts)


def thinking_figure(tokens: int, budget: int | None) -> str:
    """The status bar's thinking figure: 'think 412/576' against the budget, 'think 412'
    without one."""
    return f"think {tokens:,}/{budget:,}" if budget else f"think {tokens:,}"


def draft_figure(tokens_per_step: float) -> str:
    """The status bar's drafting figure: 'draft 2.4/step', the tokens a step that verified a
    draft emitted on average (its accepted drafted tokens and one); '' when no step did."""
    return f"draft {tokens_per_step:.1f}/step" if tokens_per_step > 0 else ""
