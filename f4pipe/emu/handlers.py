"""The handler table: which function of ops_*.py executes each operation the decoder names.

One explicit table, built here and nowhere else (no registration by import side effect): the
executor (engine.py) looks each instruction's `name` up in HANDLERS, and a name missing from
it raises EmulatorError naming the instruction. A handler returns True when it set the pc
itself (branches, s_endpgm). tests/test_emu_decode.py checks that the keys are exactly the
operations isa.py decodes, and that every instruction of the 35 f4gemm kernels has one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from f4pipe.arch import isa
from f4pipe.arch.decode import Instruction
from f4pipe.emu import ops_memory, ops_mfma, ops_scalar, ops_vector

if TYPE_CHECKING:
    from f4pipe.emu.state import Sel, WaveState

#: A handler sees the waves through f4pipe.emu.state.WaveState, never the engine itself.
Handler = Callable[["WaveState", Instruction, "Sel"], bool | None]


def _each(names: tuple[str, ...] | list[str], fn: Handler) -> dict[str, Handler]:
    return dict.fromkeys(names, fn)


_SCALAR: dict[str, Handler] = {
    **_each(("s_add_u32", "s_sub_u32", "s_addc_u32", "s_subb_u32"), ops_scalar.s_addsub_u32),
    **_each(("s_add_i32", "s_sub_i32"), ops_scalar.s_addsub_i32),
    "s_addk_i32": ops_scalar.s_addk_i32,
    "s_movk_i32": ops_scalar.s_movk_i32,
    "s_mulk_i32": ops_scalar.s_mulk_i32,
    "s_mul_i32": ops_scalar.s_mul_i32,
    "s_mul_hi_u32": ops_scalar.s_mul_hi_u32,
    **_each(("s_and_b32", "s_or_b32", "s_xor_b32"), ops_scalar.s_logic),
    **_each(("s_lshl_b32", "s_lshr_b32", "s_ashr_i32"), ops_scalar.s_shift),
    **_each(("s_min_i32", "s_max_i32", "s_min_u32", "s_max_u32"), ops_scalar.s_minmax),
    "s_cselect_b32": ops_scalar.s_cselect_b32,
    "s_mov_b32": ops_scalar.s_mov_b32,
    "s_mov_b64": ops_scalar.s_mov_b64,
    **_each([n for n in isa.SOPC.values() if n.startswith("s_cmp_")], ops_scalar.s_cmp),
    "s_set_gpr_idx_on": ops_scalar.s_set_gpr_idx_on,
    "s_set_gpr_idx_off": ops_scalar.s_set_gpr_idx_off,
    **_each(("s_nop", "s_waitcnt"), ops_scalar.s_nothing),
    "s_endpgm": ops_scalar.s_endpgm,
    "s_barrier": ops_scalar.s_barrier,
    "s_branch": ops_scalar.s_branch,
    **_each(("s_cbranch_scc0", "s_cbranch_scc1"), ops_scalar.s_cbranch),
    **_each(list(isa.SMEM.values()), ops_scalar.s_load),
}

_VECTOR: dict[str, Handler] = {
    **_each(
        (
            "v_add_u32",
            "v_sub_u32",
            "v_subrev_u32",
            "v_and_b32",
            "v_or_b32",
            "v_xor_b32",
            "v_lshrrev_b32",
            "v_lshlrev_b32",
        ),
        ops_vector.v_int_binop,
    ),
    "v_add_i32": ops_vector.v_add_i32,
    "v_mul_i32_i24": ops_vector.v_mul_i32_i24,
    **_each(("v_mul_lo_u32", "v_mul_hi_u32"), ops_vector.v_mul_u32),
    "v_cndmask_b32": ops_vector.v_cndmask_b32,
    **_each(list(isa.VOPC.values()), ops_vector.v_cmp),
    "v_mul_f32": ops_vector.v_mul_f32,
    "v_mov_b32": ops_vector.v_mov_b32,
    **_each(("v_accvgpr_read_b32", "v_accvgpr_write_b32"), ops_vector.v_accvgpr_move),
    "v_readfirstlane_b32": ops_vector.v_readfirstlane_b32,
    "v_cvt_f32_u32": ops_vector.v_cvt_f32_u32,
    "v_cvt_u32_f32": ops_vector.v_cvt_u32_f32,
    "v_rcp_iflag_f32": ops_vector.v_rcp_iflag_f32,
    "v_cvt_pk_bf16_f32": ops_vector.v_cvt_pk_bf16_f32,
    "v_permlane16_swap_b32": ops_vector.v_permlane16_swap_b32,
    "v_mfma_scale_f32_16x16x128_f8f6f4": ops_mfma.v_mfma_scale_16x16x128,
}

_MEMORY: dict[str, Handler] = {
    **_each(("ds_read_b32", "ds_read_b64", "ds_read_b128"), ops_memory.ds_read),
    **_each(("ds_write_b32", "ds_write_b64", "ds_write_b128"), ops_memory.ds_write),
    **_each(
        ("buffer_load_dword", "buffer_load_dwordx2", "buffer_load_dwordx4"),
        ops_memory.buffer_load,
    ),
    **_each(
        ("buffer_store_dword", "buffer_store_dwordx2", "buffer_store_dwordx4"),
        ops_memory.buffer_store,
    ),
    "buffer_atomic_pk_add_bf16": ops_memory.buffer_atomic_pk_add_bf16,
}

#: Operation name (Instruction.name) -> the function that executes it.
HANDLERS: dict[str, Handler] = {**_SCALAR, **_VECTOR, **_MEMORY}
