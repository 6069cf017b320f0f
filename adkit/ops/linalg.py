"""Built-in ops: linalg (being written)."""
