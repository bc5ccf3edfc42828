"""One engine's life in its own process, for the documents tests and benchmark: load the model
with a disk tier, answer one question about a file greedily, close, print the figures as JSON.

    python -m support.documents_run MODEL DISK_BYTES FILE QUESTION [N_CTX]"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    from pocketchat.documents import read_path
    from pocketchat.engines.llamacpp.engine import LlamaCppEngine
    from pocketchat.engines.types import ChatOptions, Message
    from support.prompt_disk_run import plan

    model, disk, path, question = Path(argv[0]), int(argv[1]), Path(argv[2]), argv[3]
    n_ctx = int(argv[4]) if len(argv) > 4 else 4096
    engine = LlamaCppEngine(plan(disk, n_ctx), model, name=model.stem)
    options = ChatOptions(temperature=0, max_tokens=8, ignore_eos=True, thinking=False)
    asked = time.perf_counter()
    try:
        chunks = list(engine.chat([Message("system", "Answer from the document."),
                                   Message("user", question, attachments=(read_path(path),))],
                                  options))
    finally:
        engine.close()  # waits for the disk tier's writes
    final = chunks[-1]
    if final.error:
        raise SystemExit(f"the answer failed: {final.error}")
    s = final.stats
    print(json.dumps({"answer": "".join(c.text for c in chunks), "prompt_length": s.prompt_length,
                      "reused": s.reused_tokens, "evaluated": s.evaluated_tokens,
                      "ttft": s.ttft_seconds, "seconds": time.perf_counter() - asked}))


if __name__ == "__main__":
    main(sys.argv[1:])
