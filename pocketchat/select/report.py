"""Plain-text renderings of a profile and a recommendation, for the terminal."""

from __future__ import annotations

import re
import textwrap

from pocketchat.errors import RPC_REINSTALL, NothingFits
from pocketchat.select.estimate import fmt_gb
from pocketchat.select.speed import DEFAULT_CPU_GBPS
from pocketchat.select.budget import cpu_budget
from pocketchat.select.ladder import DEFAULT_CTX
from pocketchat.select.thinking import default_budget
from pocketchat.types import Candidate, HardwareProfile, Recommendation


TABLE_WIDTH = 120  # the candidates table wraps its reasons to stay within this many columns
TOK_S_PART = re.compile(r"~\d+ tok/s \(estimate\)")


def run_command(c: Candidate, lang: str) -> str:
    """The pocketchat command that runs this candidate."""
    cmd = f"pocketchat --model {c.build.id}"
    if lang != "en":
        cmd += f" --lang {lang}"
    if c.plan and c.plan.n_ctx != DEFAULT_CTX:
        cmd += f" --ctx {c.plan.n_ctx}"
    return cmd


def llama_cpp_command(c: Candidate) -> str | None:
    """The same plan for stock llama.cpp's llama-server."""
    p = c.plan
    if p is None or c.build.format != "gguf":
        return None
    quant = c.build.quant if c.build.quant != "mixed" else (c.build.filename or c.build.id)
    cmd = f"llama-server -hf {c.build.repo_id}:{quant} -c {p.n_ctx} -t {p.n_threads} -ngl {99 if p.n_gpu_layers < 0 else p.n_gpu_layers}"
    if p.cpu_moe:
        cmd += " --cpu-moe"
    elif p.n_cpu_moe:
        cmd += f" --n-cpu-moe {p.n_cpu_moe}"
    return cmd


MLX_DRAFTS = ("drafts: off on MLX (its hybrid cache cannot be cut back to a draft's accepted "
              "tokens); --draft runs on llama.cpp")


def draft_line(c: Candidate) -> str:
    """The plan's drafts, where they are worth a line: why an MLX plan runs none, and the
    drafts a llama.cpp plan runs (`--draft auto|ngram`); '' for a plan without drafts."""
    if c.plan is None:
        return ""
    if c.build.format == "mlx":
        return MLX_DRAFTS
    return f"drafts: {c.plan.draft} (up to {c.plan.draft_depth} tokens a step)" if c.plan.draft != "off" else ""


DOCUMENT_TOKENS = 10_000  # the document a prompt speed is told in (a long report, a chapter)


def prompt_line(tok_s: float | None, source: str = "estimate") -> str:
    """How fast a prompt is read, in the time a document takes ("reads about 27 prompt
    tokens/s (estimate): a 10,000-token document in about 6 minutes"); '' when not known."""
    if not tok_s or tok_s <= 0:
        return ""
    seconds = DOCUMENT_TOKENS / tok_s
    took = (f"{seconds:.0f} seconds" if seconds < 90 else f"{seconds / 60:.0f} minutes" if seconds < 5400
            else f"{seconds / 3600:.1f} hours")
    figure = f"{tok_s:.0f}" if tok_s >= 10 else f"{tok_s:.1f}"
    return (f"reads about {figure} prompt tokens/s ({source}): a {DOCUMENT_TOKENS:,}-token document "
            f"in about {took}")


def _tok_s(c: Candidate) -> str:
    return f"~{c.estimated_decode_tok_s:.0f}" if c.estimated_decode_tok_s is not None else "-"


def format_recommendation(rec: Recommendation) -> str:
    lines: list[str] = []
    r = rec.recommended
    if r is not None and r.plan is not None:
        lines.append(f"Recommended: {r.build.id} ({fmt_gb(r.build.size_bytes)}, {r.build.quant}, {r.build.backend})")
        lines.append(f"  placement: {r.plan.describe()}; context {r.plan.n_ctx}; "
                     f"~{r.estimated_decode_tok_s:.0f} tok/s ({r.speed_source})")
        if reads := prompt_line(r.estimated_prompt_tok_s, r.prompt_source):
            lines += _wrap(f"  prompt: {reads}", "          ")
        if drafts := draft_line(r):
            lines += _wrap(f"  {drafts}", "          ")
        if r.plan.serve_parallel > 1:
            lines.append(f"  serve: {r.plan.serve_parallel} answers at once (--parallel), each "
                         f"with its own {r.plan.n_ctx}-token context")
        if r.estimated_anonymous_bytes is not None:
            lines += _wrap("  memory: " + memory_parts(r.estimated_memory_bytes, r.estimated_anonymous_bytes,
                                                        r.estimated_repacked_bytes or 0), "          ")
        lines += _wrap(f"  why: {_without_gave_up(r.reason)}", "       ")
        if r.gave_up:
            lines += _wrap(f"  gave up to fit: {', '.join(r.gave_up)}", "       ")
        budget = default_budget(r.estimated_decode_tok_s, r.speed_source)
        lines += _wrap(f"  {budget.line()}", "       ")
        lines.append(f"  run:  {run_command(r, rec.lang)}")
        stock = llama_cpp_command(r)
        if stock:
            lines.append(f"  or with stock llama.cpp: {stock}")
    else:
        lines.append("Nothing fits this machine.")
        lines += _wrap("  " + nothing_fits_summary(rec), "  ")
    for note in rec.notes:
        lines += _wrap(f"note: {note}", "  ")
    lines.append("")
    header = ("build", "size", "fits", "placement", "memory", "tok/s", "reason")
    rows = [header]
    for c in rec.candidates:
        mark = "yes" if c.fits and c.eligible else ("no" if not c.fits else "n/a")
        if c is r or (r is not None and c.build.id == r.build.id):
            mark = "BEST"
        rows.append((c.build.id, fmt_gb(c.build.size_bytes), mark,
                     c.plan.placement if c.plan else "-", fmt_gb(c.estimated_memory_bytes),
                     _tok_s(c), _table_reason(c.reason) if c.fits else c.reason))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    indent = sum(widths) + 2 * len(widths)
    for row in rows:
        reason = textwrap.wrap(row[-1], max(TABLE_WIDTH - indent, 30)) or [""]
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + reason[0])
        lines += [" " * indent + more for more in reason[1:]]
    lines.append("")
    if rec.hardware.memory_bandwidth_gbps:
        bandwidth = f"{rec.hardware.memory_bandwidth_gbps:.1f} GB/s memory bandwidth"
    else:
        bandwidth = f"the default {DEFAULT_CPU_GBPS:.0f} GB/s memory bandwidth (not measured)"
    kernels = ("; this machine's kernel speeds" if rec.hardware.kernels is not None else
               "; kernel speeds not measured")
    lines.append(f"Memory and speed are estimates (weights + KV cache + buffers; {bandwidth}{kernels}).")
    if any(c.speed_source != "estimate" for c in rec.candidates):
        lines.append("A speed marked measured comes from `pocketchat bench` on this machine; the "
                     "others are scaled by how far the estimate was off there.")
    return "\n".join(lines)


def memory_parts(total: int, anonymous: int, repacked: int) -> str:
    """A CPU plan's memory in words: the anonymous part (and the repacked weights in it), the file's."""
    copy = f" ({fmt_gb(repacked)} of it llama.cpp's repacked copy of weights)" if repacked else ""
    return (f"{fmt_gb(total)} to decode at full speed: {fmt_gb(anonymous)} anonymous{copy} + "
            f"{fmt_gb(total - anonymous)} of the file's pages (page cache)")


def _wrap(text: str, indent: str) -> list[str]:
    """A long line as lines of at most TABLE_WIDTH columns, continued under `indent`."""
    return textwrap.wrap(text, TABLE_WIDTH, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False) or [text]


def _table_reason(reason: str) -> str:
    """A candidate's reason without what its row's columns already say (fits: memory, tok/s)."""
    parts = [p for p in reason.split("; ") if not p.startswith("fits: ") and not TOK_S_PART.fullmatch(p)]
    return "; ".join(parts) or "fits"


def _without_gave_up(reason: str) -> str:
    """A reason without its "gives up ..." part (said on a line of its own)."""
    return "; ".join(p for p in reason.split("; ") if not p.startswith("gives up "))


def nothing_fits_summary(rec: Recommendation) -> str:
    """How much is free and what the smallest build on offer needs; or, when no build is on
    offer at all (a backend or language that rules every build out), why not."""
    hw = rec.hardware
    free = (f"{fmt_gb(cpu_budget(hw))} of RAM is free for a model "
            f"({fmt_gb(hw.ram_available_bytes)} available of {fmt_gb(hw.ram_total_bytes)})")
    eligible = [c for c in rec.candidates if c.eligible]
    if not eligible:
        reasons = list(dict.fromkeys(c.why_not or c.reason for c in rec.candidates))
        return ("no build can run with these settings: " + "; ".join(reasons[:2])
                if reasons else free)
    smallest = min(eligible, key=lambda c: c.estimated_memory_bytes)
    return f"{free}; the smallest build, {smallest.build.id}: {smallest.reason}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


PROFILE_WIDTH = 78  # the CPU flags wrap to stay within this many columns (a dialog, a narrow terminal)


def format_profile(hw: HardwareProfile) -> str:
    indent = " " * len("CPU:       ")
    flags = textwrap.wrap("flags: " + " ".join(hw.cpu_flags), PROFILE_WIDTH, initial_indent=indent,
                          subsequent_indent=indent + "       ", break_long_words=False,
                          break_on_hyphens=False) if hw.cpu_flags else []
    lines = [
        f"OS:        {hw.os} {hw.arch}",
        f"CPU:       {hw.cpu_name} ({_count(hw.cpu_physical_cores, 'core')}, "
        f"{_count(hw.cpu_logical_cores, 'thread')})",
        *flags,
        f"RAM:       {fmt_gb(hw.ram_total_bytes)} total, {fmt_gb(hw.ram_available_bytes)} available",
        "Bandwidth: " + (f"{hw.memory_bandwidth_gbps:.1f} GB/s (measured copy)"
                         if hw.memory_bandwidth_gbps else "not measured"),
        "Disk:      " + (f"{fmt_gb(hw.disk_free_bytes)} free where models are stored"
                         if hw.disk_free_bytes is not None else "unknown"),
    ]
    if not hw.gpus:
        lines.append("GPU:       none")
    for g in hw.gpus:
        kind = "Metal budget" if g.vendor == "apple" else ("shared" if g.unified_memory else "VRAM")
        lines.append(f"GPU:       {g.name} ({g.vendor}), {fmt_gb(g.vram_total_bytes)} {kind}"
                     + ("" if g.unified_memory else f", {fmt_gb(g.vram_free_bytes)} free"))
    offload = {True: "yes", False: "no (CPU-only build)", None: "not installed"}[hw.llama_gpu_offload]
    lines.append(f"Backends:  {', '.join(hw.backends) or 'none'}; llama.cpp GPU offload: {offload}")
    if hw.llama_rpc is not None:
        rpc = "yes" if hw.llama_rpc else f"no (to pool machines, rebuild: {RPC_REINSTALL})"
        lines.append(f"RPC:       llama.cpp RPC backend (pool machines with --rpc): {rpc}")
    if hw.cpu_busy_cores is not None:
        lines.append(f"Busy:      {hw.cpu_busy_cores:.1f} cores' worth of CPU used by other programs")
    lines += kernel_lines(hw)
    for note in hw.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def kernel_lines(hw: HardwareProfile) -> list[str]:
    """The kernel probe's rates: GB/s of weights decoded per type, experts/dense, per thread count."""
    k = hw.kernels
    if k is None:
        return ["Kernels:   not measured (speed estimates from the memory bandwidth alone)"]
    indent = " " * len("Kernels:   ")
    took = f" in {k.seconds:.1f} s" if k.seconds else ""
    lines = [f"Kernels:   decode GB/s of weights, experts/dense, measured{took}"
             + (f" with {k.build}" if k.build else "")]
    rows = [(f"{r.threads} thread{'s' if r.threads != 1 else ''}", r) for r in k.at]
    if k.prompt is not None:
        n = k.prompt.threads
        rows.append((f"a prompt's batch, per token, {n} thread{'s' if n != 1 else ''}", k.prompt))
    for label, rates in rows:
        names = list(dict.fromkeys(t for t, _, _ in rates.rates))
        parts = []
        for t in names:
            pair = [rates.rate(t, role) if any(tt == t and ro == role for tt, ro, _ in rates.rates) else None
                    for role in ("expert", "dense")]
            parts.append(f"{t} " + "/".join(f"{r:.1f}" if r else "-" for r in pair))
        lines += textwrap.wrap(f"{label}: " + ", ".join(parts), PROFILE_WIDTH,
                               initial_indent=indent, subsequent_indent=indent + "  ", break_long_words=False)
    return lines


def short_of_disk(rec: Recommendation) -> Candidate | None:
    """The smallest eligible build that fits in memory but not on the disk (None when memory,
    not the disk, is what stops every build)."""
    held = [c for c in rec.candidates
            if c.eligible and c.plan is not None and not c.fits and not c.downloaded]
    return min(held, key=lambda c: c.build.size_bytes, default=None)


def nothing_fits(rec: Recommendation, hint: str | None = None) -> NothingFits:
    """The one error every command gives when no build fits (the figures, and what to try):
    disk advice when the disk is what is short, memory advice otherwise (or `hint`)."""
    disk = short_of_disk(rec)
    if disk is not None:
        from pocketchat.paths import settings

        where = settings().hf_cache_dir
        return NothingFits(
            f"not enough free disk to download a build that fits this machine's memory: the "
            f"smallest, {disk.build.id}, {disk.reason}",
            hint=f"Free disk space where models are stored ({where}), or set HF_HUB_CACHE to a "
                 "folder on a larger disk; or use --model starter to chat with the small embedded "
                 "model.")
    if not any(c.eligible for c in rec.candidates):
        hint = hint or ("Change the setting that rules the builds out (--backend, --lang), or "
                        "name a build with --model.")
    return NothingFits(nothing_fits_summary(rec),
                       hint=hint or "Close other programs, try a smaller --ctx, or use --model "
                                    "starter to chat with the small embedded model.")
