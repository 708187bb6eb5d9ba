"""Programs shipped to the nodes as text (the transport runs them with the node's python3)."""
