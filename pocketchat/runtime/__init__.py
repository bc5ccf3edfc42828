"""Model store, engines (llama.cpp, MLX) and the worker process that hosts them."""
