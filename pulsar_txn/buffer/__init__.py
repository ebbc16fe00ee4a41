"""Transaction buffer: per-partition transaction state, markers and read-committed filtering."""
