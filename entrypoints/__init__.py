"""How Chronicle starts: the composition root, the subject table, the CLI, settings and logs."""
