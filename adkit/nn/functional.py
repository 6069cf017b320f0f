"""adkit.nn.functional (being written)."""
