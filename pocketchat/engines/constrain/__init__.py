"""What a request asks of the answer's tokens: the grammar of a forced tool call or a JSON
format (grammar, xmlparams, finite), the per-token mask and logprobs (control), the tools as the
template renders them (tools) and the calls parsed back from the text (toolcalls)."""
