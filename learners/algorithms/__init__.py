"""One module per algorithm: its typed config and its backend-neutral math."""
