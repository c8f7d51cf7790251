"""Code objects and the round trip: read, disassemble (co2asm), reassemble, prove equivalent; the
toolchain and gfx950's resource facts."""
