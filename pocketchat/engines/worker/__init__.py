"""The model in its own process: the parent's engine (parent.WorkerEngine), the child that
serves it (child), how the process is launched and reaped (process), the answers the child
runs at once (lanes), whether it still responds (liveness), and the pool of workers (pooled)."""
