"""Running: the waves, the writers (threads, worker processes, a streamed restore) and the journal."""
