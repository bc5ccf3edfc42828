"""Tools for the chat from MCP servers: the config (config.py), the servers behind a synchronous
API (servers.py, one session each in session.py), a tool and a call's result (tool.py), and the
user's answers to "run this tool?" per chat (permissions.py). Below engines: nothing here knows
a model; the chat front ends drive the loop."""
