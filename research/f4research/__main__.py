"""`f4research <tool> [args]`: run one of f4pipe's research tools (see the package docstring)."""

from __future__ import annotations

import importlib
import sys

TOOLS = {
    "oracle": ("crosscheck", "cross-check f4pipe's timing rules against LLVM on generated kernels"),
    "decodecheck": ("decodecheck", "f4pipe's gfx950 decoder against tinygrad's on code objects"),
    "splitk": ("splitkspread", "the seed's splitK table against draws, atomic orders, roundings"),
    "accuracy": ("accuracy", "the cycle model on aiter's recorded MI355X timings"),
    "heldback": ("heldback", "the cycle model on the timings it was not fitted on"),
    "variants": ("variants", "candidate model mechanisms, refitted and scored"),
    "origami": ("origami", "AMD's Origami on the same rows (builds it in a venv)"),
}


def usage() -> str:
    lines = ["usage: f4research TOOL [args]", "", "tools:"]
    lines += [f"  {name:<10} {why}" for name, (_, why) in TOOLS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0
    if args[0] not in TOOLS:
        print(f"f4research: no tool {args[0]!r}\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"f4research.{TOOLS[args[0]][0]}")
    sys.argv = [f"f4research {args[0]}", *args[1:]]
    return module.main()


if __name__ == "__main__":
    sys.exit(main())
