"""Built-in ops: comparison (being written)."""
