"""What f4pipe knows of gfx950 itself, before any code object: encoding tables, the decoder and
its display, each instruction's effects (registers, counters, LDS), the wait-state rule table,
and the register and LDS budgets with the occupancy rule."""
