"""POCKET at the size users run it: write a full-size synthetic POCKET GGUF, then measure it here.

    python benchmarks/pocket_scale.py [--out PATH] [--quant Q2_K|IQ1_M|Q3_K_M|Q4_K_M] [--skip-write]
        [--write-only] [--parts load,speed,repack,memory,limit,turns] [--rounds 3] [--threads N]
        [--no-cold] [--limit-runs 3] [--turns 6] [--json FILE] [--layers N --experts N --vocab N --seed S]

The model (benchmarks/pocket_gguf.py): `qwen35moe` with POCKET-35B's shape and the build's
tensor types, random weights quantized by ggml's own quantizer; Q2_K is 12.94 GB and is
written in about a minute (`--skip-write` reuses the file at `--out`). Needs ~13 GB of disk
(8.3 GB for IQ1_M) and ~21 GB of RAM (the model's need plus the pages a load reads once); not
part of CI. Then, printing each figure with the command behind it (`--parts` picks some):

1. the plan: `pocketchat inspect FILE --json` (memory parts, threads, batch, context);
2. load time, cold (page cache dropped: `sync; echo 3 > /proc/sys/vm/drop_caches`, needs
   root; `--no-cold` skips it) and warm, for pocketchat's worker and bare llama-cpp-python;
3. pp512 and tg128, `--rounds` times alternating: `pocketchat bench -p 512 -n 128 -r 1`
   (the worker, as users run it) and a bare llama-cpp-python loop on the same file with the
   plan's threads, batch, n_ctx and flash-attention setting and the engine's guards only
   (`new_llama`: AMX, or the bare loop crashes where the worker does not); llama.cpp's own
   counters for both; medians, and the bare decode with 1 thread against all; and ("quiet") bursts of
   bare decode in the moments the other processes leave the CPU alone (a shared machine);
4. decode against the bandwidth limit: bytes of weights one token reads, from the file's own
   tensor table (the active experts' share of the routed experts, every other tensor whole,
   one row of the token embeddings), against the copy bandwidth the probe measures
   (`pocketchat.select.bandwidth.measure_gbps`, with the probe's threads);
5. memory: peak RssAnon and RssFile of the process that holds the model (/proc/PID/status,
   sampled every 0.2 s), and what decoding really touches: after the load the bare loop
   clears its pages' referenced bits (/proc/self/clear_refs), runs pp512 + tg128 and sums
   the `Referenced` pages of its anonymous memory and of the model's mapping (/proc/self/smaps).
   Those against the plan's parts;
6. the smallest working memory limit: a cgroup v2 `memory.max` where the machine offers one
   (on this dev machine the memory controller is cgroup v1, owned by the session's own
   machinery, and left alone), else the bare loop under `RLIMIT_DATA` (the anonymous part:
   llama.cpp's repacked weights, KV cache, buffers), bisected over `--limit-runs` runs
   (each stops by itself: an allocation fails or it decodes 16 tokens), plus the file
   pages decoding touches;
7. `pocketchat bench --turns 6`: evaluated tokens and time to first token of turns 2-6.

Subprocesses get a fresh POCKETCHAT_CACHE_DIR / POCKETCHAT_DATA_DIR, so no measured speed
lands in your own cache and `inspect` shows the uncalibrated estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (str(REPO), str(Path(__file__).resolve().parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

GB = 1e9
GiB = 1024**3
KiB = 1024


# -- the child processes -------------------------------------------------------------------


def bare_llama(cfg: dict):
    """The bare anchor's model: llama-cpp-python's `Llama` with the engine's guards (AMX) and
    nothing else of pocketchat's; `no_repack` is llama.cpp's --no-repack."""
    from pocketchat.engines.llamacpp.load import new_llama

    return new_llama(cfg["path"], repack=not cfg.get("no_repack"), n_ctx=cfg["n_ctx"],
                     n_batch=cfg["n_batch"], n_ubatch=cfg["n_batch"], n_threads=cfg["threads"],
                     n_threads_batch=cfg["threads_batch"], flash_attn=cfg["flash_attn"], use_mmap=True)


def child_bare(cfg: dict) -> None:
    """Bare llama-cpp-python: load, then pp / tg with llama.cpp's own counters; JSON lines out."""
    if cfg.get("rlimit_data"):
        lim = int(cfg["rlimit_data"])
        resource.setrlimit(resource.RLIMIT_DATA, (lim, lim))
    import llama_cpp
    import numpy as np

    def emit(**kv) -> None:
        print(json.dumps(kv), flush=True)

    t0 = time.perf_counter()
    llm = bare_llama(cfg)
    emit(event="loaded", load_s=time.perf_counter() - t0, status=proc_status(os.getpid()))
    if cfg.get("load_only"):
        return
    ctx = llm._ctx.ctx
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(0)

    def logits() -> "np.ndarray":
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))

    def counters() -> tuple[float, int, float, int]:
        llama_cpp.llama_synchronize(ctx)  # llama.cpp books a decode's time when it synchronizes
        p = llama_cpp.llama_perf_context(ctx)
        return p.t_p_eval_ms, p.n_p_eval, p.t_eval_ms, p.n_eval

    llm.eval([int(t) for t in rng.integers(300, n_vocab - 16, 8)])  # warm-up
    if cfg.get("clear_refs"):
        Path("/proc/self/clear_refs").write_text("1")
    out: dict = {}
    if cfg.get("pp"):
        llm.reset()
        counters()
        llama_cpp.llama_perf_context_reset(ctx)
        llm.eval([int(t) for t in rng.integers(300, n_vocab - 16, cfg["pp"])])
        t_p, n_p, _, _ = counters()
        out["pp_tok_s"] = n_p / (t_p / 1000)
    if cfg.get("tg"):
        llm.reset()
        llm.eval([int(t) for t in rng.integers(300, n_vocab - 16, 16)])
        llm.eval([int(np.argmax(logits()))])  # the first generated token starts the count
        counters()
        llama_cpp.llama_perf_context_reset(ctx)
        for _ in range(cfg["tg"] - 1):
            llm.eval([int(np.argmax(logits()))])
        _, _, t_e, n_e = counters()
        out["tg_tok_s"] = n_e / (t_e / 1000)
    if cfg.get("clear_refs"):
        out["referenced"] = referenced(os.getpid(), cfg["path"])
    emit(event="done", status=proc_status(os.getpid()), **out)


def others_cpu(seconds: float = 1.0) -> float:
    """Cores' worth of CPU that processes other than this one used over `seconds`."""
    def sample() -> tuple[int, int]:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
        busy = sum(int(x) for x in fields) - int(fields[3]) - int(fields[4])  # less idle, iowait
        me = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        return busy, int(me[11]) + int(me[12]) + int(me[13]) + int(me[14])  # utime stime cutime cstime
    b0, m0 = sample()
    time.sleep(seconds)
    b1, m1 = sample()
    return max((b1 - b0) - (m1 - m0), 0) / os.sysconf("SC_CLK_TCK") / seconds


def child_quiet(cfg: dict) -> None:
    """Bare decode in the machine's quiet moments: load once, then each time the other processes
    use under `idle` cores for 3 s running, decode `tg` tokens; `bursts` times, within `minutes`."""
    import llama_cpp
    import numpy as np

    llm = bare_llama(cfg)
    ctx, n_vocab = llm._ctx.ctx, llm.n_vocab()
    rng = np.random.default_rng(0)
    deadline = time.monotonic() + 60 * cfg["minutes"]
    done = 0
    while done < cfg["bursts"] and time.monotonic() < deadline:
        if any(others_cpu() >= cfg["idle"] for _ in range(3)):
            continue
        pp = 0.0
        if cfg.get("pp"):
            llm.reset()
            llama_cpp.llama_synchronize(ctx)
            llama_cpp.llama_perf_context_reset(ctx)
            llm.eval([int(t) for t in rng.integers(300, n_vocab - 16, cfg["pp"])])
            llama_cpp.llama_synchronize(ctx)
            perf = llama_cpp.llama_perf_context(ctx)
            pp = perf.n_p_eval / (perf.t_p_eval_ms / 1000)
        llm.reset()
        llm.eval([int(t) for t in rng.integers(300, n_vocab - 16, 16)])
        ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
        llm.eval([int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))])
        llama_cpp.llama_synchronize(ctx)
        llama_cpp.llama_perf_context_reset(ctx)
        b0 = time.monotonic()
        for _ in range(cfg["tg"]):
            ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
            llm.eval([int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))])
        llama_cpp.llama_synchronize(ctx)
        perf = llama_cpp.llama_perf_context(ctx)
        after = others_cpu()
        done += 1
        print(json.dumps({"event": "burst", "tg_tok_s": perf.n_eval / (perf.t_eval_ms / 1000), "pp_tok_s": pp,
                          "seconds": time.monotonic() - b0, "others_after": after}), flush=True)


def child_pcload(cfg: dict) -> None:
    """pocketchat's worker engine, opened as the chat opens it: the time until it is ready."""
    from pocketchat.choose.model import choose_model
    from pocketchat.choose.selection import Selection
    from pocketchat.engines import open_engine

    choice = choose_model(Selection(model=cfg["path"], offline=True).checked())
    t0 = time.perf_counter()
    engine = open_engine(choice.plan, choice.path, name=choice.name)
    load_s = time.perf_counter() - t0
    engine.close()
    print(json.dumps({"event": "loaded", "load_s": load_s}), flush=True)


# -- /proc --------------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """RssAnon, RssFile, VmHWM, VmData of a process, in bytes ({} when it is gone)."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmHWM", "VmRSS", "VmData"):
                out[key] = int(rest.split()[0]) * KiB
    except (OSError, ValueError):
        return {}
    return out


def referenced(pid: int, model_path: str) -> dict[str, int]:
    """Bytes of the process's pages referenced since clear_refs: the model file's mapping,
    and anonymous memory (heap and anonymous mappings)."""
    model = os.path.realpath(model_path)
    ref = {"file_model": 0, "anon": 0, "rss_model": 0}
    current = None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            path = head[5] if len(head) > 5 else ""
            current = "file_model" if path == model else ("anon" if path in ("", "[heap]") else None)
        elif current and head[0] == "Referenced:":
            ref[current] += int(head[1]) * KiB
        elif current == "file_model" and head[0] == "Rss:":
            ref["rss_model"] += int(head[1]) * KiB
    return ref


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


class Watch:
    """Samples RssAnon / RssFile of a process tree every 0.2 s; peaks of the largest process."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, {"RssAnon": 0, "RssFile": 0, "Rss": 0, "VmHWM": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for p in descendants(self.pid):
                s = proc_status(p)
                if s:
                    for k in ("RssAnon", "RssFile", "VmHWM"):
                        self.peak[k] = max(self.peak[k], s.get(k, 0))
                    self.peak["Rss"] = max(self.peak["Rss"], s.get("RssAnon", 0) + s.get("RssFile", 0))
            self._stop.wait(0.2)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.peak


def drop_caches() -> bool:
    """Empty the page cache (root only): the next load reads the file from disk."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3")
        return True
    except OSError:
        return False


def loadavg() -> float:
    return os.getloadavg()[0]


# -- running things ------------------------------------------------------------------------


class Runner:
    def __init__(self, path: Path, env: dict[str, str], log: list[dict]) -> None:
        self.path, self.env, self.log = path, env, log

    def pocketchat(self, *args: str, timeout: float = 1800) -> tuple[dict, dict]:
        """`pocketchat ARGS` (JSON out) and the peak memory of its largest process."""
        cmd = [sys.executable, "-m", "pocketchat", *args]
        shown = "pocketchat " + " ".join(args)
        print(f"  $ {shown}   (load {loadavg():.1f})", flush=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
        watch = Watch(proc.pid)
        out, err = proc.communicate(timeout=timeout)
        peak = watch.stop()
        if proc.returncode != 0:
            raise SystemExit(f"{shown} failed ({proc.returncode}): {err.strip()[-2000:]}")
        data = json.loads(out)
        self.log.append({"command": shown, "result": data, "peak": peak})
        return data, peak

    def child(self, mode: str, cfg: dict, *, timeout: float = 1800, show: str = "") -> tuple[list[dict], dict, int]:
        """This script as a child process (`--child MODE`): its JSON lines, peak memory, exit code."""
        cmd = [sys.executable, __file__, "--child", mode, json.dumps(cfg)]
        print(f"  $ {show or mode}   (load {loadavg():.1f})", flush=True)
        env = dict(self.env, GGML_NO_BACKTRACE="1")  # an abort says why, without a debugger's trace
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        watch = Watch(proc.pid)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        peak = watch.stop()
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        errors = [x.strip() for x in err.splitlines()
                  if re.search(r"error|fail|abort|cannot|unable|GGML_ASSERT|Killed", x, re.I)]
        self.log.append({"command": show or mode, "config": cfg, "result": lines, "peak": peak,
                         "rc": proc.returncode, "loadavg": loadavg(),
                         "error": (errors or err.strip().splitlines() or [f"exit {proc.returncode}"])[0][:200]
                         if proc.returncode else "", "stderr_tail": err[-1500:] if proc.returncode else ""})
        return lines, peak, proc.returncode


def bytes_per_token(path: Path) -> tuple[float, dict[str, float]]:
    """Weight bytes one generated token reads, from the file's own tensor table."""
    from pocketchat.modelfile.gguf import EXPERT_TENSOR, check_gguf

    info = check_gguf(path)
    used = min(info.expert_used_count, info.expert_count) / max(info.expert_count, 1)
    parts = {"active experts": 0.0, "dense": 0.0, "embedding row": 0.0}
    has_output = any(t.name == "output.weight" for t in info.tensors)
    for t in info.tensors:
        if EXPERT_TENSOR.search(t.name):
            parts["active experts"] += t.nbytes * used
        elif t.name == "token_embd.weight" and has_output:
            parts["embedding row"] += t.nbytes / t.shape[-1]
        else:
            parts["dense"] += t.nbytes
    return sum(parts.values()), parts


def speed_estimate(path: Path, gbps: float, threads: int) -> float:
    """The plan's uncalibrated decode estimate for this file on the CPU."""
    from pocketchat.modelfile.facts import facts_of
    from pocketchat.modelfile.gguf import check_gguf
    from pocketchat.select.estimate import build_from_facts
    from pocketchat.select.speed import decode_tok_s

    build = build_from_facts(facts_of(check_gguf(path)), path.name)
    import platform

    return decode_tok_s(build, "cpu", cpu_bandwidth_gbps=gbps, threads=threads, arch=platform.machine())


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


# -- the benchmark ------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="the model file (default: POCKET-35B-<QUANT>-synthetic.gguf "
                                             "in pocketchat's cache folder)")
    ap.add_argument("--quant", default="Q2_K", choices=("Q2_K", "IQ1_M", "Q3_K_M", "Q4_K_M"),
                    help="the build's tensor types (default Q2_K)")
    ap.add_argument("--skip-write", action="store_true", help="use the file at --out as it is")
    ap.add_argument("--write-only", action="store_true", help="write the file and stop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, help="fewer blocks than POCKET's 40 (tests, quick looks)")
    ap.add_argument("--experts", type=int, help="fewer routed experts than POCKET's 256")
    ap.add_argument("--mtp", action="store_true", help="with the MTP block (Qwen3.5's draft head)")
    ap.add_argument("--vocab", type=int, help="a smaller vocabulary than POCKET's 248,320")
    ap.add_argument("--rounds", type=int, default=3, help="alternating pocketchat/bare rounds (default 3)")
    ap.add_argument("--threads", type=int, help="threads for both (default: the plan's)")
    ap.add_argument("--no-cold", action="store_true", help="do not drop the page cache for cold loads")
    ap.add_argument("--limit-runs", type=int, default=3, help="runs bisecting the memory limit (0: skip)")
    ap.add_argument("--turns", type=int, default=6, help="turns of `bench --turns` (0: skip)")
    ap.add_argument("--parts", type=lambda v: tuple(x for x in v.split(",") if x), default=PARTS,
                    help=f"what to measure, comma-separated (default all: {','.join(PARTS)})")
    ap.add_argument("--quiet-bursts", type=int, default=5, help="decode bursts in quiet moments (default 5)")
    ap.add_argument("--quiet-minutes", type=float, default=15, help="how long to wait for them (default 15)")
    ap.add_argument("--quiet-idle", type=float, default=0.15,
                    help="quiet: the other processes use less than this many cores (default 0.15)")
    ap.add_argument("--json", type=Path, help="also write every figure and command here")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "CONFIG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        {"bare": child_bare, "pcload": child_pcload, "quiet": child_quiet}[args.child[0]](json.loads(args.child[1]))
        return 0

    import pocket_gguf as pg
    from pocketchat.paths import settings

    path = args.out or settings().cache_dir / "scale" / f"POCKET-35B-{args.quant}-synthetic.gguf"
    path = path.expanduser().resolve()
    if args.skip_write:
        if not path.is_file():
            raise SystemExit(f"--skip-write: no model at {path}; run once without it to write one")
    else:
        shape = pg.shape_for(args.layers, args.experts, mtp=1 if args.mtp else 0)
        path.parent.mkdir(parents=True, exist_ok=True)
        print(f"writing {path} ({args.quant}, {shape.n_layer} blocks, {shape.n_expert} experts) ...", flush=True)
        t0 = time.perf_counter()
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if time.perf_counter() - last[0] > 5 or done == total:
                last[0] = time.perf_counter()
                print(f"  {100 * done / total:5.1f}%", flush=True)

        pg.write_pocket(path, quant=args.quant, shape=shape, n_vocab=args.vocab or pg.POCKET_VOCAB,
                        seed=args.seed, progress=progress)
        print(f"wrote {path.stat().st_size / GB:.2f} GB in {time.perf_counter() - t0:.0f} s")
    if args.write_only:
        return 0

    log: list[dict] = []
    figures: dict = {"model": str(path), "size_bytes": path.stat().st_size, "quant": args.quant}
    with tempfile.TemporaryDirectory(prefix="pocket-scale-") as tmp:
        env = dict(os.environ, POCKETCHAT_CACHE_DIR=f"{tmp}/cache", POCKETCHAT_DATA_DIR=f"{tmp}/data",
                   POCKETCHAT_OFFLINE="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
        run = Runner(path, env, log)
        try:
            measure(run, path, args, figures)
        finally:
            if args.json:
                args.json.write_text(json.dumps({"figures": figures, "log": log}, indent=1))
    return 0


PARTS = ("load", "speed", "quiet", "repack", "memory", "limit", "turns")


@dataclass
class Session:
    """What the parts share: the runner, the file, the plan, the bare loop's settings, the figures."""

    run: Runner
    path: Path
    args: argparse.Namespace
    figures: dict
    plan: dict = field(default_factory=dict)
    row: dict | None = None  # the plan's memory at its context (inspect --json)
    bare: dict = field(default_factory=dict)
    threads: int = 1
    gbps: float = 0.0
    limit: float = 0.0
    worker_peaks: list[dict] = field(default_factory=list)  # the pocketchat worker's, per run
    refs: list[dict] = field(default_factory=list)  # pages referenced in bare runs


def measure(run: Runner, path: Path, args: argparse.Namespace, figures: dict) -> None:
    ses = Session(run, path, args, figures)
    the_plan(ses)
    bandwidth(ses)
    parts = args.parts
    for name, part in (("load", loads), ("speed", speed), ("quiet", quiet), ("repack", no_repack),
                       ("memory", memory), ("limit", limit_part), ("turns", turns)):
        if name in parts:
            part(ses)


def _threads_args(ses: Session) -> list[str]:
    return ["--threads", str(ses.args.threads)] if ses.args.threads else []


def the_plan(ses: Session) -> None:
    print(f"\n== the plan\n  model {ses.path} ({ses.path.stat().st_size / GB:.2f} GB)")
    data, _ = ses.run.pocketchat("inspect", str(ses.path), "--json", *_threads_args(ses))
    plan = data.get("plan") or {}
    if not plan:
        raise SystemExit(f"the plan does not fit this machine: {data.get('verdict')}")
    ses.plan = plan
    ses.row = next((r for r in data["memory"] if r["n_ctx"] == plan["n_ctx"]), None)
    ses.figures["plan"] = {"plan": plan, "memory": ses.row, "verdict": data.get("verdict")}
    ses.threads = ses.args.threads or plan["n_threads"]
    ses.bare = {"path": str(ses.path), "n_ctx": plan["n_ctx"], "n_batch": plan.get("n_batch", 512),
                "threads": ses.threads, "threads_batch": ses.args.threads or plan["n_threads_batch"],
                "flash_attn": bool(plan.get("flash_attn"))}
    print(f"  {data['verdict']}")
    print(f"  n_ctx {plan['n_ctx']}, threads {ses.threads}, batch {ses.bare['n_batch']}, "
          f"flash-attn {ses.bare['flash_attn']}, KV {plan.get('kv_type')}")
    if ses.row:
        r = ses.row
        print(f"  memory at n_ctx {r['n_ctx']}: total {r['total'] / GB:.2f} GB = anonymous {r.get('anonymous', 0) / GB:.2f}"
              f" (repacked weights {r.get('repacked', 0) / GB:.2f}, KV {r['kv_cache'] / GB:.2f}, state "
              f"{r['state'] / GB:.2f}, checkpoints {r['checkpoints'] / GB:.2f}, compute {r['compute'] / GB:.2f}, "
              f"runtime {r['overhead'] / GB:.2f}) + file-backed {r.get('mapped', 0) / GB:.2f}; "
              f"RSS after a load {r.get('resident', 0) / GB:.2f}")


def bandwidth(ses: Session) -> None:
    import psutil

    from pocketchat.select.bandwidth import copy_threads, measure_gbps

    print("\n== bandwidth and bytes per token")
    per_token, parts = bytes_per_token(ses.path)
    ses.gbps = measure_gbps(threads=copy_threads(psutil.cpu_count(logical=False) or 1))
    ses.limit = ses.gbps * GB / per_token
    ses.figures.update(bytes_per_token=per_token, bytes_per_token_parts=parts, bandwidth_gbps=ses.gbps,
                       bandwidth_limit_tok_s=ses.limit)
    print(f"  weights read per token: {per_token / GB:.3f} GB ("
          + ", ".join(f"{k} {v / GB:.3f}" for k, v in parts.items()) + ")")
    print(f"  copy bandwidth (pocketchat.select.bandwidth.measure_gbps): {ses.gbps:.1f} GB/s -> "
          f"limit {ses.limit:.1f} tok/s")


def loads(ses: Session) -> None:
    print("\n== load time (cold: page cache dropped first)")
    out: dict[str, dict[str, float]] = {"pocketchat": {}, "bare": {}}
    for temp in ("cold", "warm"):
        if temp == "cold" and (ses.args.no_cold or not drop_caches()):
            print("  cold: skipped (--no-cold, or not root)")
            continue
        lines, peak, _ = ses.run.child("pcload", {"path": str(ses.path)},
                                       show="pocketchat worker: open_engine(plan, FILE)")
        ses.worker_peaks.append(peak)
        out["pocketchat"][temp] = lines[-1]["load_s"] if lines else float("nan")
        if temp == "cold":
            drop_caches()
        lines, _, _ = ses.run.child("bare", {**ses.bare, "load_only": True}, show="bare: llama_cpp.Llama(FILE, ...)")
        out["bare"][temp] = lines[-1]["load_s"] if lines else float("nan")
        print(f"  {temp}: pocketchat {out['pocketchat'][temp]:.1f} s, bare {out['bare'][temp]:.1f} s")
    ses.figures["load_s"] = out


def speed(ses: Session) -> None:
    args, run = ses.args, ses.run
    print(f"\n== pp512 / tg128, {args.rounds} alternating rounds")
    pc_pp, pc_tg, bare_pp, bare_tg, loadavgs = [], [], [], [], []
    bench = ["bench", "--model", str(ses.path), "-p", "512", "-n", "128", "-r", "1", "--json",
             "--ctx", str(ses.plan["n_ctx"]), *_threads_args(ses)]
    for r in range(args.rounds):
        before = loadavg()
        data, peak = run.pocketchat(*bench)
        res = {x["test"]: x["tok_s"] for x in data["results"]}
        pc_pp.append(res.get("pp512", float("nan")))
        pc_tg.append(res.get("tg128", float("nan")))
        ses.worker_peaks.append(peak)
        lines, _, rc = run.child("bare", {**ses.bare, "pp": 512, "tg": 128, "clear_refs": True},
                                 show="bare: Llama(...); eval 512 random tokens; 128 greedy evals")
        done = lines[-1] if lines else {}
        if rc != 0 or "tg_tok_s" not in done:
            raise SystemExit(f"the bare loop failed: {run.log[-1]['error']}")
        bare_pp.append(done["pp_tok_s"])
        bare_tg.append(done["tg_tok_s"])
        ses.refs.append(done["referenced"])
        loadavgs.append((before, loadavg()))
        print(f"  round {r + 1}: pocketchat pp {pc_pp[-1]:.1f} tg {pc_tg[-1]:.2f} | "
              f"bare pp {bare_pp[-1]:.1f} tg {bare_tg[-1]:.2f} tok/s")
    lines, _, _ = run.child("bare", {**ses.bare, "threads": 1, "tg": 128},
                            show="bare, 1 thread: Llama(..., n_threads=1); 128 greedy evals")
    tg1 = lines[-1].get("tg_tok_s", float("nan")) if lines else float("nan")
    est = speed_estimate(ses.path, ses.gbps, ses.threads)
    ses.figures["speed"] = {"pocketchat_pp": pc_pp, "pocketchat_tg": pc_tg, "bare_pp": bare_pp,
                            "bare_tg": bare_tg, "bare_tg_1_thread": tg1, "estimate_tok_s": est,
                            "loadavg_per_round": loadavgs}
    print(f"  medians: pocketchat pp512 {med(pc_pp):.1f}, tg128 {med(pc_tg):.2f}; bare pp512 {med(bare_pp):.1f}, "
          f"tg128 {med(bare_tg):.2f} tok/s")
    print(f"  pocketchat / bare: pp {med(pc_pp) / med(bare_pp):.3f}, tg {med(pc_tg) / med(bare_tg):.3f}")
    print(f"  decode / bandwidth limit ({ses.limit:.1f} tok/s): pocketchat {med(pc_tg) / ses.limit:.2f}, "
          f"bare {med(bare_tg) / ses.limit:.2f}")
    print(f"  bare decode, 1 thread {tg1:.2f} vs {ses.threads} threads {med(bare_tg):.2f} tok/s "
          f"({med(bare_tg) / tg1:.2f}x)")
    print(f"  the plan's speed estimate (select.speed.decode_tok_s at {ses.gbps:.1f} GB/s, {ses.threads} "
          f"threads): {est:.2f} tok/s = {est / med(pc_tg):.2f}x pocketchat's measured decode")


def no_repack(ses: Session) -> None:
    print("\n== without repacking (llama.cpp --no-repack: use_extra_bufts=False)")
    lines, peak, _ = ses.run.child("bare", {**ses.bare, "pp": 512, "tg": 128, "clear_refs": True, "no_repack": True},
                                   show="bare without repacking: load, pp512, tg128")
    got = {**(lines[0] if lines else {}), **(lines[-1] if lines else {})}
    ses.figures["no_repack"] = {**got, "peak": peak}
    if "tg_tok_s" in got:
        print(f"  load {got['load_s']:.1f} s (warm), pp512 {got['pp_tok_s']:.1f}, tg128 {got['tg_tok_s']:.2f} tok/s; "
              f"peak RssAnon {peak['RssAnon'] / GB:.2f} GB, RssFile {peak['RssFile'] / GB:.2f} GB, "
              f"file pages used {got['referenced']['file_model'] / GB:.2f} GB")
    else:
        print(f"  failed: {ses.run.log[-1]['error']}")


def memory(ses: Session) -> None:
    run = ses.run
    print("\n== memory of the loaded process (GB)")
    if not ses.refs:  # no speed rounds: a short chat in the worker, and a bare run for the pages used
        _, peak = run.pocketchat("bench", "--model", str(ses.path), "-p", "64", "-n", "8", "-r", "1", "--json",
                                 "--ctx", str(ses.plan["n_ctx"]), *_threads_args(ses))
        ses.worker_peaks.append(peak)
        lines, _, rc = run.child("bare", {**ses.bare, "pp": 512, "tg": 16, "clear_refs": True},
                                 show="bare: Llama(...); eval 512 random tokens; 16 greedy evals")
        if rc != 0 or not lines or "referenced" not in lines[-1]:
            raise SystemExit(f"the bare loop failed: {run.log[-1]['error']}")
        ses.refs.append(lines[-1]["referenced"])
    worker = {k: max(p[k] for p in ses.worker_peaks) for k in ses.worker_peaks[0]}
    ref = {k: max(x[k] for x in ses.refs) for k in ses.refs[0]}
    need = worker["RssAnon"] + ref["file_model"]
    ses.figures["memory"] = {"worker_peak": worker, "referenced": ref, "measured_need": need}
    print(f"  pocketchat worker: peak RssAnon {worker['RssAnon'] / GB:.2f}, RssFile {worker['RssFile'] / GB:.2f}, "
          f"anon+file {worker['Rss'] / GB:.2f}, VmHWM {worker['VmHWM'] / GB:.2f}")
    print(f"  pages referenced while evaluating 512 tokens and decoding (bare, after clear_refs): model mapping "
          f"{ref['file_model'] / GB:.2f} of {ref['rss_model'] / GB:.2f} resident; anonymous {ref['anon'] / GB:.2f}")
    print(f"  needed to decode at full speed: the worker's anonymous {worker['RssAnon'] / GB:.2f} + the file "
          f"pages decoding uses {ref['file_model'] / GB:.2f} = {need / GB:.2f}")
    row = ses.row
    if row:
        if "anonymous" in row:
            print(f"  the plan at n_ctx {row['n_ctx']}: anonymous {row['anonymous'] / GB:.2f} (repacked weights "
                  f"{row['repacked'] / GB:.2f}) vs the worker's peak {worker['RssAnon'] / GB:.2f}; file-backed "
                  f"{row['mapped'] / GB:.2f} vs used {ref['file_model'] / GB:.2f}; RSS after a load "
                  f"{row['resident'] / GB:.2f} vs peak {worker['Rss'] / GB:.2f}")
        print(f"  the plan's total {row['total'] / GB:.2f} vs the measured need {need / GB:.2f}: "
              f"{100 * (row['total'] - need) / need:+.1f}%")
    ses.figures["memory"]["worker"] = worker


def limit_part(ses: Session) -> None:
    if ses.args.limit_runs <= 0:
        return
    print("\n== the smallest working memory limit")
    if not ses.refs:
        memory(ses)
    limit_search(ses.run, ses.bare, ses.figures["memory"]["worker"], ses.figures["memory"]["referenced"],
                 ses.row, ses.args.limit_runs, ses.figures)


def quiet(ses: Session) -> None:
    """Decode on a quiet machine: bursts of the bare loop while the others leave the CPU alone."""
    a = ses.args
    print(f"\n== decode in quiet moments (others under {a.quiet_idle} cores for 3 s; up to {a.quiet_bursts} "
          f"bursts of 32 tokens within {a.quiet_minutes} min)")
    out = {}
    configs = [(f"{ses.threads} threads", {"threads": ses.threads}),
               (f"{ses.threads} threads, no repack", {"threads": ses.threads, "no_repack": True})]
    if ses.threads > 1:
        configs.insert(1, ("1 thread", {"threads": 1}))
    for label, extra in configs:
        cfg = {**ses.bare, **extra, "tg": 32, "pp": 128, "bursts": a.quiet_bursts, "minutes": a.quiet_minutes,
               "idle": a.quiet_idle}
        lines, _, _ = ses.run.child("quiet", cfg, timeout=60 * a.quiet_minutes + 600,
                                    show=f"bare, {label}, quiet moments: pp128 + 32 greedy evals per burst")
        bursts = [x for x in lines if x.get("event") == "burst"]
        tg, pp = [x["tg_tok_s"] for x in bursts], [x["pp_tok_s"] for x in bursts]
        out[label] = {"bursts": bursts, "tg_median": med(tg), "pp_median": med(pp)}
        print(f"  {label}: {len(bursts)} bursts; tg " + ", ".join(f"{x:.2f}" for x in tg)
              + f" (median {med(tg):.2f}, {med(tg) / ses.limit:.2f} of the bandwidth limit); pp128 median "
              f"{med(pp):.1f} tok/s")
    est = speed_estimate(ses.path, ses.gbps, ses.threads)
    m = out[configs[0][0]]["tg_median"]
    print(f"  the plan's speed estimate {est:.2f} tok/s = {est / m:.2f}x the quiet decode")
    ses.figures["quiet"] = {**out, "estimate_tok_s": est}


def turns(ses: Session) -> None:
    n = ses.args.turns
    if n <= 0:
        return
    print(f"\n== pocketchat bench --turns {n}")
    data, _ = ses.run.pocketchat("bench", "--model", str(ses.path), "--turns", str(n), "--json", *_threads_args(ses))
    rows = data["results"]
    ses.figures["turns"] = rows
    for t in rows:
        print(f"  {t['test']}: prompt {t['prompt_tokens']}, reused {t['reused_tokens']}, "
              f"evaluated {t['evaluated_tokens']}, TTFT {t['ttft_s']:.2f} s")


def cgroup_v2_memory() -> Path | None:
    """The cgroup v2 folder with a memory controller this process may limit, or None."""
    for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        try:
            if "memory" in (root / "cgroup.controllers").read_text().split():
                return root
        except OSError:
            continue
    return None


def limit_search(run: Runner, cfg: dict, peak: dict, ref: dict, row: dict | None, runs: int,
                 figures: dict) -> None:
    """Bisect RLIMIT_DATA over `runs` runs of the bare loop (load, pp64, tg16)."""
    if cgroup_v2_memory() is None:
        print("  no cgroup v2 memory controller here (memory.max): limiting the anonymous part "
              "with RLIMIT_DATA instead; the file pages decoding uses are added as measured")
    lo, hi = int(peak["RssAnon"] * 0.85), int(peak["RssAnon"] * 1.5)
    tried: list[tuple[int, bool, str]] = []
    for _ in range(runs):
        mid = (lo + hi) // 2
        lines, _, rc = run.child("bare", {**cfg, "pp": 64, "tg": 16, "rlimit_data": mid}, timeout=900,
                                 show=f"bare under RLIMIT_DATA={mid / GB:.2f} GB: load, pp64, tg16")
        ok = rc == 0 and bool(lines) and "tg_tok_s" in lines[-1]
        why = f"decodes ({lines[-1]['tg_tok_s']:.2f} tok/s)" if ok else run.log[-1]["error"] or "failed"
        tried.append((mid, ok, why))
        print(f"    {mid / GB:.2f} GB: {why}")
        if ok:
            hi = mid
        else:
            lo = mid
    passed = [m for m, ok, _ in tried if ok]
    if not passed:
        figures["limit"] = {"tried": tried}
        print(f"  no limit tried decodes; the smallest that works is above {lo / GB:.2f} GB "
              f"(more --limit-runs narrow it)")
        return
    smallest_anon = min(passed)
    need = smallest_anon + ref["file_model"]
    figures["limit"] = {"tried": tried, "smallest_rlimit_data": smallest_anon, "working_limit": need}
    print(f"  smallest RLIMIT_DATA that decodes: {smallest_anon / GB:.2f} GB (the largest that failed: "
          f"{lo / GB:.2f} GB); + the file pages decoding uses {ref['file_model'] / GB:.2f} = {need / GB:.2f} GB")
    print("  (RLIMIT_DATA bounds the anonymous address space, not what is resident: the compute "
          "buffers' untouched pages count)")
    if row:
        print(f"  the plan: {row['total'] / GB:.2f} GB, {100 * (row['total'] - need) / need:+.1f}% of that limit")


if __name__ == "__main__":
    raise SystemExit(main())
