"""Which model a command or the Python API runs, and its load plan: the user's selection
(`selection`), the choice itself (`model.choose_model`), and pooling with RPC helpers (`pooling`).
Below `api` and `commands`, which both use it."""
