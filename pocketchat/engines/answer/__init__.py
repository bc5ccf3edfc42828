"""One answer, any backend: the prompt rendered and fitted (render, context, template),
the one token loop (loop), the answer's run from prompt to settled state (run), its text split
into reasoning, answer and tool calls (stream, thinking, partial), sampling and its rates.
Nothing here knows of processes or of several sequences: `answer/` never imports `worker/` or
`batch/`."""
