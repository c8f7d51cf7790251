"""The stage drivers: the GEMM stages, the round trip, the shape-edge sweep and the tuned-table
audit over a whole aiter; the result store (reuse by content), result sets and archives, and
the facts the workflow records."""
