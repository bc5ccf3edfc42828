"""Anthropic's Messages API (`POST /v1/messages`, `/v1/messages/count_tokens`): schema (the
published JSON Schema), requests (validation into the request model), encode (messages,
stream events, usage, errors)."""
