"""OpenAI's chat completions and legacy completions: schema (the published JSON Schema),
requests (validation into the request model), encode (usage, logprobs, errors ...)."""
