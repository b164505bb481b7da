"""Chronicle's aggregates and their events: pure Python, no I/O."""
