"""The wire protocols the server speaks, each a small adapter over one request model
(`server/request.py`): its schema (published in /openapi.json and checked before anything
reaches the engine), its requests (the wire -> `ChatRequest` / `CompletionRequest`) and its
encoding (answers, stream events, errors -> the wire). `validate.py` is the one schema check
they share: `openai/` (chat completions and the legacy completions), `anthropic/` (Messages
and count_tokens), `responses/` (OpenAI's Responses API, with its store of responses).
`conversation.py` is what the last two share when they build a conversation, `sealed.py` the
thought a client carries back opaquely (a thinking signature, `encrypted_content`)."""
