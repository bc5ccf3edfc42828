"""Pooling machines through llama.cpp's RPC backend (ggml-rpc), from Python.

llama-cpp-python does not pass `rpc_servers` on, but a build with `-DGGML_RPC=on` ships
libggml-rpc and registers the "RPC" backend; this package reaches it through ctypes:

- `endpoints`: `HOST:PORT` parsing and checks (pure; imports nothing native).
- `wire`: a small client of the RPC wire protocol that asks a helper for its memory and times
  the link, with timeouts: llama.cpp's own client aborts the process when a server cannot be
  reached, so nothing native touches a helper before `wire.reachable()` said yes.
- `ggml`: llama-cpp-python's ggml libraries: where they are, and the one ctypes binding of
  ggml's backend registry (also used for MoE placement, engines/llamacpp/moe.py).
- `client`: the helpers' devices for `llama_model_params.devices`, and socket tuning.
- `server`: llama.cpp's RPC server on this machine (`pocketchat rpc-server`).

The RPC protocol has no authentication: listen on loopback, or on a network you trust.
Nothing here imports `engines`; the pooled engine is `engines/worker/pooled.py`.
"""
