"""OpenAI's Responses API (`POST /v1/responses`, `GET`/`DELETE /v1/responses/{id}`): schema
(the published JSON Schema), requests (validation into the request model), encode (the
response object, stream events), store (stored responses, in RAM within a bound)."""
