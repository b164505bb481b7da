"""Sessions: create, update, close, list."""
