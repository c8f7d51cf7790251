"""Analyses of a loaded kernel (f4pipe.codeobj.program): the timing rules along an executed path
(timing), the static check over every path (hazards), the loosest correct waits and the repairs
a kernel lacks (waits), and which kernel arguments its code reads (kernargs). LLVM's check on
these rules lives outside the package (research/f4research/oracle.py)."""
