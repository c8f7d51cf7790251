"""f4pipe's research tools, kept out of the installed product: they call f4pipe's public
functions and nothing in f4pipe imports them.

- `oracle`, `crosscheck`: LLVM 22 as an independent check of f4pipe's timing rules (generated
  kernels compiled with llc for gfx950; `nox -s oracle`, `nox -s fuzz`).
- `accuracy`, `heldback`, `variants`, `origami`: the cycle model's evaluation on aiter's
  recorded MI355X timings, on the later timings it was not fitted on, candidate mechanisms
  scored the same way, and AMD's Origami on the same rows (`nox -s bench`).

Run one as `f4research <tool> [args]` (`f4research --help` lists them).
"""
