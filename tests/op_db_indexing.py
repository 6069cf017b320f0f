"""Op rows: indexing."""
ROWS = []
