"""Analyses of a loaded kernel (f4pipe.codeobj.program): the timing rules along an executed path
(timing), the static check over every path (hazards), the loosest correct waits and the repairs
a kernel lacks (waits), which kernel arguments its code reads (kernargs), and LLVM as a check on
the rules (oracle)."""
