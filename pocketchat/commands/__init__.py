"""One module per CLI command: each has `configure(parser)` and `run(args) -> int`."""
