"""Application services: command and query handlers, composition root, CLI, client."""
