"""The OpenAI-compatible local server over one engine (`pocketchat serve`).

app.py (Starlette routes, streaming, errors) over host.py (the engine, its loading and
restart, the bounded queue); protocols/ read each wire format into the request model
(request.py) and encode answers, checked against the schema openapi.py publishes; reply.py applies
stop sequences; guard.py checks the API key and the Host header. Run with uvicorn.
"""
