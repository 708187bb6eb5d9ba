"""Types every layer may import: the errors the CLI shows, the one result model, atomic writes."""
