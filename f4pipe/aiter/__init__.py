"""aiter's f4gemm directory as f4pipe reads it: the fetched tree, its manifest and tuned tables,
locating it, and aiter's own tile heuristic and lookup."""
