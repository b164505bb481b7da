"""Event -> read-model writers and the engine that runs them."""
