"""Built-in ops: inplace (being written)."""
