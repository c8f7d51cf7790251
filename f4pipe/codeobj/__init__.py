"""Code objects: the ELF and its notes (codeobject), the kernel-descriptor field table
(descriptor), one parsed kernel image with its decoded text (program), co2asm, reassembly and
the equivalence proof, and the LLVM toolchain that knows gfx950."""
