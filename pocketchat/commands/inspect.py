"""`pocketchat inspect MODEL`: what a GGUF's header says and what it needs here, without downloading it."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from pocketchat.choose.selection import Selection, add_selection_args
from pocketchat.textsafe import visible


def configure(p: argparse.ArgumentParser) -> None:
    p.description = ("Read a model's GGUF header (from disk, or the first MB over HTTP from the Hub) and "
                     "show its architecture, the memory it needs per context size and how it fits this "
                     "machine. Nothing is downloaded.")
    p.add_argument("spec", metavar="MODEL",
                   help="a build id, REPO:QUANT, REPO/FILE.gguf, a local .gguf file or 'starter'")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_selection_args(p, model=False)


def read_facts(spec: str, offline: bool):
    """(name, facts, where the header came from) for the starter, a local file, a model on
    disk, or one on the Hub (its header read over HTTP Range)."""
    from pocketchat.choose.model import gguf_facts
    from pocketchat.errors import CorruptModel, ModelNotFound
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.store import api as store
    from pocketchat.store.spec import parse_spec

    s = parse_spec(spec)
    if s.folder:
        raise CorruptModel(f"{spec} is a folder; inspect reads GGUF files",
                           hint="Give a .gguf file, a build id, REPO:QUANT or REPO/FILE.gguf.")
    # Named as the chat and `bench` name the model (`ModelChoice.label`), so bench's speeds apply.
    if s.local is not None:  # the starter, or a file here
        from pocketchat.store.starter import STARTER_LABEL

        return (STARTER_LABEL if s.starter else s.local.name), facts_of(check_gguf(s.local)), str(s.local)
    local = store.local_path(s)
    facts = gguf_facts(local) if local is not None else None
    if facts is not None:
        return (s.build.id if s.build is not None else local.name), facts, str(local)
    rm = store.resolve(s, offline=offline)
    if rm.format != "gguf" or rm.offline:
        why = "an MLX folder" if rm.format != "gguf" else "not on disk, and the Hub was not asked (offline)"
        raise ModelNotFound(f"cannot read the header of {spec}: {why}",
                            hint="Inspect works on GGUF files, on disk or on the Hub.")
    from pocketchat.store.header import remote_facts

    facts = remote_facts(rm, min_file_bytes=0)
    if facts is None:
        raise ModelNotFound(f"cannot read the header of {spec} from the Hub")
    return rm.name, facts, f"{rm.repo_id}/{rm.primary.path} (header read over HTTP)"


def report(name: str, facts, where: str, sel: Selection) -> dict:
    """Everything inspect shows, as plain data."""
    from pocketchat.engines.llamacpp.arch import knows_arch
    from pocketchat.errors import ModelTooLarge
    from pocketchat.select import fit
    from pocketchat.select.estimate import build_from_facts
    from pocketchat.select.header import check_fits, memory_table

    profile = sel.profile(kernels=True)  # the speeds below are this machine's kernels'
    rows = memory_table(facts, profile, name)
    speeds = sel.calibration(profile)  # what `pocketchat bench` measured here corrects them
    plan, gave_up = None, ()
    thinking = None
    speed = None
    try:
        check_fits(facts, profile, name)
        cand = fit.judge(build_from_facts(facts, name), profile, n_ctx=sel.ctx, backend=sel.backend,
                         threads=sel.threads, downloaded=True, forced=True, draft=sel.drafts, speeds=speeds)
        plan, gave_up = cand.plan, cand.gave_up
        if plan is not None and cand.estimated_decode_tok_s:
            speed = {"decode_tok_s": round(cand.estimated_decode_tok_s, 1), "source": cand.speed_source,
                     "prompt_tok_s": (round(cand.estimated_prompt_tok_s, 1)
                                      if cand.estimated_prompt_tok_s else None),
                     "prompt_source": cand.prompt_source}
        if plan is not None:
            from pocketchat.commands.think import candidate_budget

            budget = candidate_budget(cand)
            thinking = {"tokens": budget.tokens, "why": budget.why}
        verdict = (f"fits: {plan.describe()}; context {plan.n_ctx}; serve runs "
                   f"{plan.serve_parallel} at once (--parallel)" if plan
                   else f"does not fit at --ctx {sel.ctx}")
    except ModelTooLarge as exc:
        verdict = exc.message
    data = {k: v for k, v in asdict(facts).items()}
    data.update(expert_bytes=facts.expert_bytes, other_bytes=facts.other_bytes,
                kv_bytes_per_token_f16=facts.kv_bytes_per_token(), active_bytes=facts.active_bytes)
    return {
        "model": name, "source": where, "facts": data, "runtime_knows_arch": knows_arch(facts.arch),
        "memory": [{"n_ctx": r.n_ctx, **asdict(r.need), "total": r.need.total,
                    "anonymous": r.need.anonymous, "mapped": r.need.mapped, "resident": r.need.resident,
                    "placement": r.placement.placement if r.placement else None,
                    "n_cpu_moe": r.placement.n_cpu_moe if r.placement else None} for r in rows],
        "plan": asdict(plan) if plan else None, "verdict": verdict, "gave_up": list(gave_up),
        "thinking_budget": thinking, "speed": speed,
    }


def format_report(d: dict) -> str:
    from pocketchat.store.types import human_bytes as fmt_gb

    f = d["facts"]
    kinds = f"{len(f['kv_layers'])} with a KV cache"
    if f["recurrent_layers"]:
        kinds += f", {len(f['recurrent_layers'])} recurrent ({fmt_gb(f['recurrent_state_bytes'])} of state)"
    if f["swa_layers"]:
        kinds += f", {len(f['swa_layers'])} of them sliding-window ({f['sliding_window']} tokens)"
    known = {True: "yes", False: "NO: this llama.cpp cannot load it", None: "unknown (llama-cpp-python missing)"}
    lines = [
        f"{d['model']}  ({d['source']})",
        f"  architecture: {f['arch']}; runtime can load it: {known[d['runtime_knows_arch']]}",
        f"  layers: {f['block_count']} ({kinds})",
        f"  attention: {f['n_head']} heads, KV heads {sorted(set(f['kv_heads'])) or '-'}, key/value length "
        f"{f['key_length']}/{f['value_length']}; KV cache {fmt_gb(f['kv_bytes_per_token_f16'])} per token (F16)",
        f"  context: {f['context_length'] or 'unknown'} trained; vocabulary {f['vocab_size']:,} tokens",
        f"  weights: {fmt_gb(f['weight_bytes'])} (file {fmt_gb(f['file_bytes'])})",
    ]
    if f["expert_layer_bytes"]:
        per = f["expert_bytes"] / max(len(f["expert_layer_bytes"]), 1)
        lines.append(f"  experts: {f['expert_count']} routed, {f['expert_used_count']} used per token; "
                     f"{fmt_gb(f['expert_bytes'])} in {len(f['expert_layer_bytes'])} layers ({fmt_gb(per)} each), "
                     f"{fmt_gb(f['other_bytes'])} the rest; {fmt_gb(f['active_bytes'])} read per token")
    widths = (7, 10, 10, 10, 10, 10, 10, 10, 10, 10, 22)
    lines += ["", "  memory needed to decode at full speed (estimate, loaded on the CPU; anonymous + "
              "file-backed = total; placement: the fastest that fits here)",
              "  " + "  ".join(h.rjust(w) for h, w in zip(
                  ("n_ctx", "weights", "KV", "state", "ckpts", "compute", "runtime", "total", "anonymous",
                   "file", "placement"), widths, strict=False))]
    for r in d["memory"]:
        place = r["placement"] or "does not fit"
        if r["placement"] == "gpu+cpu-experts" and r["n_cpu_moe"]:
            place += f" ({r['n_cpu_moe']} in RAM)"
        lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(
            (str(r["n_ctx"]), fmt_gb(r["weights"]), fmt_gb(r["kv_cache"]), fmt_gb(r["state"]),
             fmt_gb(r["checkpoints"]), fmt_gb(r["compute"]), fmt_gb(r["overhead"]), fmt_gb(r["total"]),
             fmt_gb(r["anonymous"]), fmt_gb(r["mapped"]), place), widths, strict=False)))
    if d["memory"]:
        lines += _memory_notes(d["memory"][0], f["embedding_bytes"])
    lines += ["", f"  on this machine: {d['verdict']}"]
    if d["gave_up"]:
        lines.append(f"  gave up to fit: {', '.join(d['gave_up'])}")
    if sp := d.get("speed"):
        from pocketchat.select.report import prompt_line

        reads = prompt_line(sp["prompt_tok_s"], sp["prompt_source"])
        lines.append(f"  speed here: ~{sp['decode_tok_s']:.0f} tok/s generating ({sp['source']})"
                     + (f"; {reads}" if reads else ""))
    if d.get("thinking_budget"):
        from pocketchat.select.thinking import DefaultBudget

        lines.append("  " + DefaultBudget(**d["thinking_budget"]).line())
    return "\n".join(lines)


def _memory_notes(row: dict, embedding: int) -> list[str]:
    """What the anonymous and file-backed parts hold, and what RSS will show."""
    from pocketchat.store.types import human_bytes as fmt_gb

    notes = []
    if row["repacked"]:
        notes.append(f"  anonymous: llama.cpp's repacked copy of {fmt_gb(row['repacked'])} of the weights (the "
                     "types this CPU has interleaved kernels for), the KV cache, state, buffers and runtime")
    if embedding:
        notes.append(f"  the {fmt_gb(embedding)} token embeddings are read a row per token, not counted")
    if row["cold"]:
        notes.append(f"  after loading, RSS shows about {fmt_gb(row['resident'])}: {fmt_gb(row['cold'])} of it "
                     "file pages read once while loading (page cache the kernel drops when memory is needed)")
    return notes


def run(args: argparse.Namespace) -> int:
    sel = Selection.from_args(args)
    name, facts, where = read_facts(args.spec, sel.offline)
    data = report(name, facts, where, sel)
    if args.json:
        print(json.dumps(data, indent=1))
    else:
        print(visible(format_report(data)))
    return 0
