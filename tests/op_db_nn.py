"""Op rows: nn."""
ROWS = []
