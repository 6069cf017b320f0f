"""Built-in ops: indexing (being written)."""
