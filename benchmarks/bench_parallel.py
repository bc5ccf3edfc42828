"""Several clients at once: `serve --parallel 4` vs one client vs a bare batched llama.cpp loop.

In one run, round by round, each round starting with the next figure (a pause between them),
so every figure sees the same load on the machine:
  one@p1    `pocketchat serve --parallel 1` (today's path), one client asking --tokens tokens
  one@p4    `pocketchat serve --parallel 4`, one client (the single user's cost of the batcher)
  four@p4   the same server, 4 concurrent clients, each --tokens tokens
  bare      llama-cpp-python alone: the 4 prompts in one batch, then --tokens steps decoding
            the 4 sequences in one `llama_batch` (greedy), in this process; on an MLX model
            (`--model tiny-qwen35moe-mlx`, or a folder: the servers run `--backend mlx`),
            mlx-lm's own `BatchGenerator` over the 4 prompts
Clients are raw HTTP SSE readers asking for exactly --tokens tokens (ignore_eos); a figure is
tokens / wall time from the requests to the last token (prompt included, for all four). It
prints the medians and the ratios: four@p4 / bare (goal >= 0.9), four@p4 / one@p4 (goal >=
1.3), one@p4 / one@p1 (goal >= 0.97), and the p95 time to first token with 4 clients.

    PYTHONPATH=. python benchmarks/bench_parallel.py [--model starter|PATH.gguf] [--runs 3]
    PYTHONPATH=. python benchmarks/bench_parallel.py --model tiny-qwen35moe   (writes it)
    PYTHONPATH=. python benchmarks/bench_parallel.py --model POCKET.gguf --sequential --tokens 64
    PYTHONPATH=. python benchmarks/bench_parallel.py --model tiny-qwen35moe-mlx   (MLX, writes it)
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.serverproc import ServerProcess  # noqa: E402

PAUSE = 1.0  # seconds between measurements
MODEL = ["starter"]  # the name the servers answer to (the --model spec)
PROMPTS = ["Write a short story about a lighthouse keeper and a storm.",
           "Explain how a bicycle gear works.",
           "Describe a walk through a forest in autumn.",
           "List some facts about the moon and its phases."]


def stream(url: str, prompt: str, tokens: int, out: dict) -> None:
    """One streamed answer: out gets 'ttft' and 'end' (monotonic) and 'n' content events."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    body = json.dumps({"model": MODEL[0], "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": tokens, "stream": True, "ignore_eos": True,
                       "temperature": 0}).encode()
    start = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"server answered {resp.status}: {resp.read()[:300]!r}")
    n = 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        event = json.loads(line[5:])
        if any(c.get("delta", {}).get("content") or c.get("delta", {}).get("reasoning_content")
               for c in event.get("choices", [])):  # a thinking model's first tokens are reasoning
            if n == 0:
                out["ttft"] = time.monotonic() - start
            n += 1
    out["end"], out["n"] = time.monotonic(), n
    conn.close()


def clients(url: str, count: int, tokens: int) -> tuple[float, list[float]]:
    """(aggregate tok/s, TTFTs) of `count` concurrent clients."""
    outs: list[dict] = [{} for _ in range(count)]
    threads = [threading.Thread(target=stream, args=(url, PROMPTS[i % 4], tokens, outs[i]))
               for i in range(count)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = max(o["end"] for o in outs)
    return count * tokens / (end - start), [o["ttft"] for o in outs]


class Bare:
    """The 4 sequences decoded in one llama_batch a step by llama-cpp-python, nothing else."""

    def __init__(self, path: Path, n_ctx: int, threads: int) -> None:
        from pocketchat.engines.llamacpp.load import load_llama
        from pocketchat.engines.answer.template import template_for
        from pocketchat.modelfile.gguf import check_gguf
        from pocketchat.types import LoadPlan

        info = check_gguf(path)
        plan = LoadPlan("llama.cpp", "cpu", 0, n_ctx, threads, threads, parallel=4)
        self.llm = load_llama(plan, path, info).llm
        self.lib = sys.modules["llama_cpp"]
        template, _ = template_for(info.chat_template, arch=info.arch, model=path.stem,
                                   has_token=lambda t: False)
        self.prompts = [self.llm.tokenize(template.apply([{"role": "user", "content": p}],
                                                         generation=True).encode(),
                                          add_bos=False, special=True) for p in PROMPTS]
        self.batch = self.lib.llama_batch_init(max(512, sum(map(len, self.prompts))), 0, 1)
        chain = self.lib.llama_sampler_chain_init(self.lib.llama_sampler_chain_default_params())
        self.lib.llama_sampler_chain_add(chain, self.lib.llama_sampler_init_greedy())
        self.sampler = chain

    def run(self, tokens: int) -> float:
        lib, ctx, batch = self.lib, self.llm.ctx, self.batch
        mem = lib.llama_get_memory(ctx)
        for s in range(4):
            lib.llama_memory_seq_rm(mem, s, -1, -1)
        start = time.monotonic()
        j, last = 0, []
        for s, toks in enumerate(self.prompts):
            for i, t in enumerate(toks):
                batch.token[j], batch.pos[j], batch.n_seq_id[j] = t, i, 1
                batch.seq_id[j][0], batch.logits[j] = s, int(i == len(toks) - 1)
                j += 1
            last.append(j - 1)
        batch.n_tokens = j
        assert lib.llama_decode(ctx, batch) == 0
        pos = [len(p) for p in self.prompts]
        for _ in range(tokens):
            nxt = [lib.llama_sampler_sample(self.sampler, ctx, idx) for idx in last]
            for s in range(4):
                batch.token[s], batch.pos[s], batch.n_seq_id[s] = nxt[s], pos[s], 1
                batch.seq_id[s][0], batch.logits[s] = s, 1
                pos[s] += 1
            batch.n_tokens = 4
            last = [0, 1, 2, 3]
            assert lib.llama_decode(ctx, batch) == 0
        return 4 * tokens / (time.monotonic() - start)

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_sampler_free(self.sampler)
        self.llm.close()


class BareMlx:
    """The 4 prompts through mlx-lm's own BatchGenerator (greedy), nothing else."""

    def __init__(self, path: Path) -> None:
        import mlx_lm

        self.model, tok = mlx_lm.load(str(path))
        self.prompts = [tok.apply_chat_template([{"role": "user", "content": p}],
                                                add_generation_prompt=True) for p in PROMPTS]

    def run(self, tokens: int) -> float:
        from mlx_lm.generate import BatchGenerator

        gen = BatchGenerator(self.model, stop_tokens=[])
        start = time.monotonic()
        gen.insert(self.prompts, max_tokens=[tokens] * len(self.prompts))
        done = 0
        while done < len(self.prompts):
            _, answers = gen.next()
            done += sum(1 for a in answers if a.finish_reason is not None)
        gen.close()
        return len(self.prompts) * tokens / (time.monotonic() - start)

    def close(self) -> None:
        self.model = None


def model_path(spec: str, tmp: Path) -> tuple[str, Path]:
    if spec == "tiny-qwen35moe-mlx":
        from support.mlx_fixture import write_tiny_qwen35_moe

        path = write_tiny_qwen35_moe(tmp / "tiny-qwen35moe-mlx")
        return str(path), path
    if spec == "tiny-qwen35moe":
        from support.tinyqwen35 import QWEN35_TEMPLATE, write_tiny_qwen35moe

        path = write_tiny_qwen35moe(tmp / "tiny-qwen35moe.gguf", chat_template=QWEN35_TEMPLATE)
        return str(path), path
    if spec == "starter":
        from pocketchat.store.starter import starter_path

        return "starter", starter_path()
    return spec, Path(spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="starter")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=None,
                    help="the bare loop's threads (default: the plan's, as the servers use)")
    ap.add_argument("--sequential", action="store_true",
                    help="one model in memory at a time (each round starts each server and the "
                         "bare loop anew and stops it): a full-size model's repacked weights do "
                         "not fit three times")
    args = ap.parse_args()
    if args.threads is None:
        from pocketchat.select import defaults
        from pocketchat.select.probe import detect

        args.threads = defaults.threads(detect(measure_bandwidth=False))
    tmp = Path(tempfile.mkdtemp(prefix="bench-parallel-"))
    spec, path = model_path(args.model, tmp)
    MODEL[0] = spec
    mlx = path.is_dir()
    common = ["--model", spec, "--ctx", str(args.ctx), "--queue", "8",
              *(["--backend", "mlx"] if mlx else [])]
    for n in (1, 4):
        (tmp / f"p{n}").mkdir()
    figures: dict[str, list[float]] = {"one@p1": [], "one@p4": [], "four@p4": [], "bare": []}
    ttfts: list[float] = []
    if args.sequential:
        sequential(args, path, common, tmp, figures, ttfts)
        return report(args, figures, ttfts)
    servers = {n: ServerProcess([*common, "--parallel", str(n)], tmp / f"p{n}") for n in (1, 4)}
    bare = None
    try:
        for srv in servers.values():
            srv.wait_ready(300)
        bare = BareMlx(path) if mlx else Bare(path, args.ctx, args.threads)
        for srv in servers.values():  # warm-up: pages in, first-request costs
            clients(srv.url, 1, 8)
        bare.run(8)
        def four() -> float:
            tok_s, t = clients(servers[4].url, 4, args.tokens)
            ttfts.extend(t)
            return tok_s

        measures = {"one@p1": lambda: clients(servers[1].url, 1, args.tokens)[0],
                    "one@p4": lambda: clients(servers[4].url, 1, args.tokens)[0],
                    "four@p4": four, "bare": lambda: bare.run(args.tokens)}
        names = list(measures)
        for r in range(args.runs):
            for name in names[r % 4:] + names[: r % 4]:  # each round starts with the next one
                time.sleep(PAUSE)  # the last one's spinning threads settle
                figures[name].append(measures[name]())
            print(f"run {r + 1}: " + "  ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items()),
                  flush=True)
    finally:
        if bare is not None:
            bare.close()
        for srv in servers.values():
            srv.stop()
    return report(args, figures, ttfts)


def sequential(args: argparse.Namespace, path: Path, common: list[str], tmp: Path,
               figures: dict[str, list[float]], ttfts: list[float]) -> None:
    """`--sequential`: each round holds one model at a time: the --parallel 1 server (one
    client), the --parallel 4 server (one client, then four), the bare loop."""
    for r in range(args.runs):
        for n in (1, 4):
            srv = ServerProcess([*common, "--parallel", str(n)], tmp / f"p{n}")
            try:
                srv.wait_ready(600)
                clients(srv.url, 1, 8)  # warm-up: pages in, first-request costs
                time.sleep(PAUSE)
                figures[f"one@p{n}"].append(clients(srv.url, 1, args.tokens)[0])
                if n == 4:
                    time.sleep(PAUSE)
                    tok_s, t = clients(srv.url, 4, args.tokens)
                    figures["four@p4"].append(tok_s)
                    ttfts.extend(t)
            finally:
                srv.stop()
        bare = BareMlx(path) if path.is_dir() else Bare(path, args.ctx, args.threads)
        try:
            bare.run(8)
            time.sleep(PAUSE)
            figures["bare"].append(bare.run(args.tokens))
        finally:
            bare.close()
        print(f"run {r + 1}: " + "  ".join(f"{k} {v[-1]:.1f}" for k, v in figures.items()),
              flush=True)


def report(args: argparse.Namespace, figures: dict[str, list[float]], ttfts: list[float]) -> int:
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"\n{args.model}, {args.tokens} tokens a client, {args.runs} runs (medians, tok/s):")
    for k, v in med.items():
        print(f"  {k:8} {v:8.1f}")
    p95 = sorted(ttfts)[max(0, round(0.95 * len(ttfts)) - 1)]
    print(f"  four@p4 / bare   {med['four@p4'] / med['bare']:.2f}  (goal >= 0.9)")
    print(f"  four@p4 / one@p4 {med['four@p4'] / med['one@p4']:.2f}  (goal >= 1.3)")
    print(f"  one@p4 / one@p1  {med['one@p4'] / med['one@p1']:.2f}  (goal >= 0.97)")
    print(f"  p95 TTFT, 4 clients: {p95 * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
