"""The model's state and its copies: the prefix a new prompt reuses (prefix_cache), the
prompt cache's RAM and disk tiers of parked states (prompt_cache, prompt_disk) and the state
saved beside a conversation (saved_state). It never imports `worker/` or `batch/`."""
