"""One engine's life in its own process, for the documents tests and benchmark: load the model
with a disk tier, answer one question about a file greedily, close, print the figures as JSON.

    python -m support.documents_run MODEL DISK_BYTES FILE QUESTION [N_CTX [MODE [THREADS]]]

MODE: "attach" (the file attached, asked at once), "paste" (its text pasted before the
question, as before attachments existed), or "ahead:S" (attached, read ahead while the
question is "typed" for S seconds, then Enter: a read-ahead still going is stopped there and
the answer reads the rest). `ttft` is from Enter to the first answer token."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    from pocketchat.documents import read_path
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions, Message
    from support.prompt_disk_run import plan

    model, disk, path, question = Path(argv[0]), int(argv[1]), Path(argv[2]), argv[3]
    n_ctx = int(argv[4]) if len(argv) > 4 else 4096
    mode = argv[5] if len(argv) > 5 else "attach"
    threads = int(argv[6]) if len(argv) > 6 else 1
    began = time.perf_counter()
    engine = LlamaCppEngine(plan(disk, n_ctx, threads), model, name=model.stem)
    loaded = time.perf_counter() - began
    options = ChatOptions(temperature=0, max_tokens=8, ignore_eos=True, thinking=False)
    system = Message("system", "Answer from the document.")
    doc = read_path(path)
    user = Message("user", question, attachments=(doc,))
    if mode == "paste":
        user = Message("user", doc.text + "\n\n" + question)
    ahead = {"tokens": 0, "seconds": 0.0, "finish": ""}
    try:
        if mode.startswith("ahead:"):
            def read() -> None:
                t = time.perf_counter()
                final = list(engine.chat([system, Message("user", "", attachments=(doc,))],
                                         ChatOptions(read_ahead=True, thinking=False)))[-1]
                ahead.update(tokens=final.stats.evaluated_tokens, finish=final.finish_reason,
                             seconds=time.perf_counter() - t)
            reader = threading.Thread(target=read)
            reader.start()
            reader.join(float(mode.split(":", 1)[1]))  # the user types the question
            if reader.is_alive():
                engine.cancel()  # Enter: what was read stays, the answer reads the rest
            reader.join()
        enter = time.perf_counter()
        chunks, first = [], None
        for chunk in engine.chat([system, user], options):
            if first is None and (chunk.text or chunk.thinking):
                first = time.perf_counter() - enter
            chunks.append(chunk)
    finally:
        engine.close()  # waits for the disk tier's writes
    final = chunks[-1]
    if final.error:
        raise SystemExit(f"the answer failed: {final.error}")
    s = final.stats
    print(json.dumps({"answer": "".join(c.text for c in chunks), "prompt_length": s.prompt_length,
                      "reused": s.reused_tokens, "evaluated": s.evaluated_tokens,
                      "prompt_tok_s": s.prompt_tok_s, "ttft": first, "load_seconds": loaded,
                      "ahead_tokens": ahead["tokens"], "ahead_seconds": ahead["seconds"],
                      "ahead_finish": ahead["finish"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
