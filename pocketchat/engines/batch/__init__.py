"""Several sequences on one context: the step loop that decodes them together (batcher) and
the engine that hands each answer its own sequence (sequences)."""
