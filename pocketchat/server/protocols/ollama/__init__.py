"""Ollama's native API (`/api/chat`, `/api/generate`, `/api/tags`, `/api/show`, `/api/ps`,
`/api/version`): schema (the bodies, published in /openapi.json), requests (read into the
request model), encode (its shapes), endpoints."""
