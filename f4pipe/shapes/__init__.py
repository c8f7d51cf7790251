"""Which shapes a kernel is safe at: the shape-edge rules, the sweep that proves them, the
tuned-table audit and model traffic."""
