"""What a co2asm .s says about its code object, read back without LLVM: for `f4pipe compare`.

A result set keeps `roundtrip/<kernel>.s` for every kernel. From it come the facts an update can
change and a user must hear about: the target, the code object version and the ELF ABI version it
implies, every `.amdhsa_*` kernel-descriptor directive, every entry of the metadata note
(kernarg size, LDS, register counts, arguments), and the instruction lines themselves.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import yaml

#: EI_ABIVERSION of an AMDHSA code object by code object version (LLVM AMDGPUUsage, "ELF Code
#: Object": ELFABIVERSION_AMDGPU_HSA_V4 = 2, _V5 = 3, _V6 = 4).
HSA_ABI_VERSION = {4: 2, 5: 3, 6: 4}


def header_facts(asm: str) -> dict[str, str]:
    """`.amdgcn_target`, `.amdhsa_code_object_version` and the ABI version it implies."""
    out: dict[str, str] = {}
    for line in asm.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == ".amdgcn_target":
            out["target"] = words[1].strip('"')
        elif len(words) == 2 and words[0] == ".amdhsa_code_object_version":
            out["code_object_version"] = words[1]
            abi = HSA_ABI_VERSION.get(int(words[1])) if words[1].isdigit() else None
            out["elf_abi_version"] = str(abi) if abi is not None else "?"
    return out


def descriptor_directives(asm: str) -> dict[str, str]:
    """`.amdhsa_*` lines of each `.amdhsa_kernel` block: "kernel.field" -> value."""
    out: dict[str, str] = {}
    kernel = None
    for line in asm.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == ".amdhsa_kernel" and len(words) == 2:
            kernel = words[1]
        elif words[0] == ".end_amdhsa_kernel":
            kernel = None
        elif kernel is not None and words[0].startswith(".amdhsa_"):
            out[f"{kernel}{words[0]}"] = " ".join(words[1:])
    return out


def metadata(asm: str) -> dict[str, Any]:
    """The `.amdgpu_metadata` block as data ({} when absent or not YAML)."""
    lines = asm.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == ".amdgpu_metadata")
        end = next(
            i for i in range(start, len(lines)) if lines[i].strip() == ".end_amdgpu_metadata"
        )
    except ValueError:
        return {}
    try:
        data = yaml.safe_load("\n".join(lines[start + 1 : end]))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def instructions(asm: str) -> list[str]:
    """The instruction lines (labels kept, as `name:`), comments and directives dropped."""
    out = []
    for line in asm.splitlines():
        code = line.split("//", 1)[0].strip()
        if not code or code.startswith("."):
            continue
        out.append(code)
    return out


def flat_metadata(value: Any, prefix: str = "") -> dict[str, Any]:
    """The metadata as "path: value" leaves. Kernels are keyed by their symbol, arguments by
    position and name (`args[3:pad]`: aiter's kernels have many arguments named pad), and the
    leading dot of metadata keys is dropped from paths."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            name = str(key).lstrip(".")
            out.update(flat_metadata(value[key], f"{prefix}.{name}" if prefix else name))
    elif isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        for i, item in enumerate(value):
            label = item.get(".name", item.get(".symbol"))
            key = label if prefix.endswith("kernels") else f"{i}:{label}" if label else str(i)
            out.update(flat_metadata(item, f"{prefix}[{key}]"))
    else:
        out[prefix] = value
    return out


@dataclass(frozen=True)
class InsnDiff:
    added: int
    removed: int
    changed: int
    count_a: int
    count_b: int

    def summary(self) -> str:
        return (
            f"+{self.added} -{self.removed} ~{self.changed} instructions "
            f"({self.count_a} -> {self.count_b} lines)"
        )


def instruction_diff(asm_a: str, asm_b: str) -> InsnDiff:
    """Instruction lines added, removed and changed (a replaced run pairs line by line)."""
    a, b = instructions(asm_a), instructions(asm_b)
    added = removed = changed = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "insert":
            added += j2 - j1
        elif tag == "delete":
            removed += i2 - i1
        elif tag == "replace":
            paired = min(i2 - i1, j2 - j1)
            changed += paired
            removed += i2 - i1 - paired
            added += j2 - j1 - paired
    return InsnDiff(added, removed, changed, len(a), len(b))


def fact_changes(asm_a: str, asm_b: str) -> list[str]:
    """Every header, descriptor and metadata fact that differs: "name: a -> b"."""
    out = []
    for facts in (header_facts, descriptor_directives):
        fa, fb = facts(asm_a), facts(asm_b)
        out += [
            f"{k}: {fa.get(k, '-')} -> {fb.get(k, '-')}"
            for k in sorted(fa.keys() | fb.keys())
            if fa.get(k) != fb.get(k)
        ]
    meta_a, meta_b = metadata(asm_a), metadata(asm_b)
    ma, mb = (
        {k: v for k, v in flat_metadata(m).items() if ".args[" not in k} for m in (meta_a, meta_b)
    )
    out += [
        f"metadata {k}: {ma.get(k, '-')} -> {mb.get(k, '-')}"
        for k in sorted(ma.keys() | mb.keys())
        if ma.get(k) != mb.get(k)
    ]
    aa, ab = kernel_args(meta_a), kernel_args(meta_b)
    for kernel in sorted(aa.keys() | ab.keys()):
        changed = _list_diff(aa.get(kernel, []), ab.get(kernel, []))
        if changed:
            out.append(f"metadata {kernel} args: {', '.join(changed)}")
    return out


def kernel_args(meta: dict[str, Any]) -> dict[str, list[str]]:
    """Per kernel symbol, its arguments as "name@offset:size kind"."""
    out: dict[str, list[str]] = {}
    for kernel in meta.get("amdhsa.kernels") or []:
        if isinstance(kernel, dict):
            out[str(kernel.get(".name"))] = [
                f"{a.get('.name', '?')}@{a.get('.offset')}:{a.get('.size')} {a.get('.value_kind')}"
                for a in kernel.get(".args") or []
                if isinstance(a, dict)
            ]
    return out


def _list_diff(a: list[str], b: list[str]) -> list[str]:
    """ "-x" for an element only `a` has, "+y" for one only `b` has, in order."""
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out += [f"-{x}" for x in a[i1:i2]] + [f"+{y}" for y in b[j1:j2]]
    return out
