"""The GEMM host side: operands and their layouts, the kernarg, the CPU reference, verification,
the shapes to run, and one launch (gemm.run_gemm) on any device."""
