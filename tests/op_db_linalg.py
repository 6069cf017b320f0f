"""Op rows: linalg."""
ROWS = []
