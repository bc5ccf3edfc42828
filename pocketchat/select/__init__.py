"""Hardware probe, build catalog and the pure fit/rank decisions. Imports no backend."""
