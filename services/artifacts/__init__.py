"""Generated artifacts: store, generate, refine, variations, previews, retention; their queries and report."""
