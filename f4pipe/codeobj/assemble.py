"""Assemble AMDGPU assembly into a code object: llvm-mc (in-process assembler) + ld.lld -shared.

The processor and its features come from the file's own `.amdgcn_target` directive (co2asm
writes it from the original ELF header), and the code object version from
`.amdhsa_code_object_version`, so a hand-edited .s needs no flags to rebuild the same kind of
object. Linking ourselves, rather than through the clang driver, avoids a driver process and
works with any LLVM that has llvm-mc and ld.lld.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from f4pipe.codeobj.toolchain import Toolchain
from f4pipe.core.errors import InputError
from f4pipe.core.fsio import atomic_path, read_input_text

#: co2asm's largest output for aiter's objects is a few MB of text.
MAX_ASM_BYTES = 512 << 20
_TARGET = re.compile(r'^\s*\.amdgcn_target\s+"amdgcn-amd-amdhsa--(?P<id>[^"]+)"', re.M)


@dataclass(frozen=True)
class AsmTarget:
    mcpu: str
    mattr: tuple[str, ...]  # e.g. ("+xnack", "-sramecc")


def read_target(asm: str, source: str = "<asm>") -> AsmTarget:
    """Processor and features from the `.amdgcn_target` directive (e.g. gfx942:sramecc+:xnack-)."""
    m = _TARGET.search(asm)
    if not m:
        raise InputError(
            f'{source}: no `.amdgcn_target "amdgcn-amd-amdhsa--<gfxNNN>"` directive; '
            "f4pipe assemble reads the processor from it (co2asm writes one)"
        )
    arch, *feats = m.group("id").split(":")
    mattr = []
    for feat in feats:
        if feat[-1:] not in "+-" or not feat[:-1]:
            raise InputError(f"{source}: bad target feature {feat!r} in .amdgcn_target")
        mattr.append(f"{feat[-1]}{feat[:-1]}")
    return AsmTarget(mcpu=arch, mattr=tuple(mattr))


def assemble(asm_path: str | Path, out_path: str | Path, toolchain: Toolchain) -> Path:
    """Assemble `asm_path` into the code object `out_path` (written atomically)."""
    asm_path, out_path = Path(asm_path), Path(out_path)
    if not asm_path.exists() and not asm_path.is_symlink():
        raise InputError(f"{asm_path}: no such assembly file")
    asm = read_input_text(asm_path, "assembly file", MAX_ASM_BYTES)
    target = read_target(asm, str(asm_path))
    mc_args = ["-triple=amdgcn-amd-amdhsa", f"-mcpu={target.mcpu}", "-filetype=obj"]
    if target.mattr:
        mc_args.append(f"-mattr={','.join(target.mattr)}")
    with tempfile.TemporaryDirectory(prefix="f4pipe-as-") as tmp:
        obj = Path(tmp) / (asm_path.stem + ".o")
        toolchain.run("llvm-mc", [*mc_args, asm_path, "-o", obj])
        with atomic_path(out_path) as tmp_out:
            toolchain.run("ld.lld", ["-shared", "--no-undefined", obj, "-o", tmp_out])
    return out_path
