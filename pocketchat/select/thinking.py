"""The thinking setting a user gives (`--think off|on|N|unlimited`, the chat's palette) and
the default budget: about a minute of thinking at this machine's decode speed.

Pure: a value in, a setting out; a speed in, a budget out. The engine enforces the budget
(`ChatOptions.thinking_budget`); this module only says what it is and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from pocketchat.errors import UsageError

THINK_SECONDS = 60.0  # the default budget: about this long a thought at the decode speed
MIN_BUDGET = 128  # below this a thought says little; a very slow machine waits longer instead
MAX_BUDGET = 8192  # a fast GPU: still a bound, about what the peers' "high" gives
UNKNOWN_SPEED_BUDGET = 1024  # when no speed is known (an unknown machine or model)
ROUND_TO = 64  # budgets are shown and used as multiples of this
MAX_GIVEN = 1_000_000  # a budget a user may type (larger: `unlimited`)
CHOICES = "off, on, unlimited or a number of tokens (e.g. 512)"


@dataclass(frozen=True)
class Think:
    """What a user asked for: thinking off, on with the default budget (`budget` None,
    `default` True), on with `budget` tokens, or on without a budget (`unlimited`)."""

    on: bool = True
    budget: int | None = None
    default: bool = True  # "on": the machine's default budget applies

    @property
    def unlimited(self) -> bool:
        return self.on and not self.default and self.budget is None

    def describe(self) -> str:
        if not self.on:
            return "off"
        if self.default:
            return "on"
        return "unlimited" if self.budget is None else f"{self.budget:,} tokens"

    def resolved(self, default_budget: int | None) -> tuple[bool, int | None]:
        """(thinking on, its budget) with the machine's default budget for "on"."""
        if not self.on:
            return False, None
        return True, (default_budget if self.default else self.budget)


OFF = Think(on=False, default=False)
ON = Think()
UNLIMITED = Think(default=False)


def parse_think(value: str, flag: str = "--think") -> Think:
    """`off`, `on`, `unlimited` or a budget in tokens (1 or more) -> Think; UsageError with
    the choices otherwise. `no`/`false`/`0` are off, `yes`/`true` on."""
    text = str(value).strip().lower().replace(",", "").replace("_", "")
    if text in ("off", "no", "false", "none", "0"):
        return OFF
    if text in ("on", "yes", "true", "default", "auto"):
        return ON
    if text in ("unlimited", "max", "nolimit"):
        return UNLIMITED
    if text.isdigit():
        n = int(text)
        if n > MAX_GIVEN:
            raise UsageError(f"{flag} {value}: a budget of more than {MAX_GIVEN:,} tokens",
                             hint=f"Give {flag} unlimited for no budget at all.")
        return Think(on=True, budget=n, default=False)
    raise UsageError(f"{flag} takes {CHOICES}; got {value!r}",
                     hint=f"For example {flag} 512 (think at most 512 tokens, then answer), "
                          f"{flag} off (answer at once) or {flag} on (this machine's default budget).")


@dataclass(frozen=True)
class DefaultBudget:
    """The default thinking budget of a model on a machine, and why ("about 58 s of thinking
    at ~10 tok/s, estimate")."""

    tokens: int
    why: str

    def line(self) -> str:
        """One line for `--recommend` and `inspect`."""
        return (f"thinking budget: {self.tokens:,} tokens by default ({self.why}; "
                "--think N or off changes it)")


def default_budget(decode_tok_s: float | None, source: str = "estimate") -> DefaultBudget:
    """About THINK_SECONDS of thinking at `decode_tok_s` (`source`: where that speed comes
    from: measured, estimate, ...), in multiples of ROUND_TO within MIN_BUDGET..MAX_BUDGET;
    UNKNOWN_SPEED_BUDGET without a speed."""
    if decode_tok_s is None or not decode_tok_s > 0 or decode_tok_s != decode_tok_s:
        return DefaultBudget(UNKNOWN_SPEED_BUDGET, "the decode speed here is not known")
    raw = decode_tok_s * THINK_SECONDS
    tokens = int(max(MIN_BUDGET, min(MAX_BUDGET, round(raw / ROUND_TO) * ROUND_TO)))
    seconds = tokens / decode_tok_s
    speed = f"~{decode_tok_s:.0f} tok/s" if decode_tok_s >= 10 else f"~{decode_tok_s:.1f} tok/s"
    if tokens == MAX_BUDGET and raw > MAX_BUDGET:
        why = f"the most by default: {_duration(seconds)} at {speed}, {source}"
    elif tokens == MIN_BUDGET and raw < MIN_BUDGET:
        why = f"the least by default: {_duration(seconds)} at {speed}, {source}"
    else:
        why = f"about {_duration(seconds)} of thinking at {speed}, {source}"
    return DefaultBudget(tokens, why)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min"
