"""The wire protocols the server speaks, each a small adapter over one request model
(`server/request.py`): its schema (published in /openapi.json and checked before anything
reaches the engine), its requests (the wire -> `ChatRequest` / `CompletionRequest`) and its
encoding (answers, stream events, errors -> the wire). `validate.py` is the one schema check
they share. Today `openai/` (chat completions and the legacy completions); Anthropic's Messages
and OpenAI's Responses come next, each one more package of the same three modules."""
