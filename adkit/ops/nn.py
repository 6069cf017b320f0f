"""Built-in ops: nn (being written)."""
