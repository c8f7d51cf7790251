"""Every figure the README states, measured as a newcomer meets them: a fresh clone of this
repository's HEAD, an empty HOME (so the aiter wheel, LLVM and every Python package are
downloaded on the way), the README's install line, then its two commands.

Steps, each timed in wall seconds and CPU seconds (user + sys of the step's whole process tree,
from getrusage), with the largest process's peak memory:

1. install: `python3 -m venv .venv && python -m pip install -e .`; then the venv's size and
   whether pip backtracked (its "looking at multiple versions" lines);
2. the main job: `benchmarks/main_job.py --clone` in the fresh clone (cold `snakemake --cores 1
   all`, which also provisions LLVM and downloads the wheel, then a byte-identical aiter
   update);
3. `f4pipe try` on a one-line edit (an `s_nop 0` before the first `s_waitcnt`) of 32x128 and
   256x256, twice each: first and repeated;
4. the test suite: `nox -s verify` from the activated venv, as the README runs it;
5. disk: the venv, `.nox/`, `~/.cache/f4pipe` (by part), pip's cache, the clone's results;
6. with `--ci`: `.ci/run` in a second fresh clone and HOME, from a venv holding nothing (CI's
   machine: Python and pip), which installs nox itself and builds `.nox/verify`.

Run it on a quiet machine (`python benchmarks/newcomer.py [--ci] [--json FILE]`, about 20
minutes on two cores, 30 with `--ci`); the README quotes one run and names its commit.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TRY_KERNELS = (
    "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128",
    "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256",
)

#: Runs a command and prints its process tree's rusage as JSON on stderr's last line.
RUSAGE_WRAPPER = """
import json, resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": rc, "cpu": r.ru_utime + r.ru_stime, "maxrss_kb": r.ru_maxrss}),
      file=sys.stderr)
"""


@dataclass
class Step:
    name: str
    wall_s: float
    cpu_s: float
    peak_gb: float
    output: str

    def line(self) -> str:
        return (
            f"{self.name:<34} {self.wall_s:8.1f} s wall {self.cpu_s:8.1f} CPU-s "
            f"{self.peak_gb:6.2f} GB peak"
        )


def run_step(name: str, command: list[str], cwd: Path, env: dict[str, str]) -> Step:
    """Run `command`, timed; exits with its output when it fails."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", RUSAGE_WRAPPER, *command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - start
    *rest, last = proc.stderr.rstrip().splitlines() or [""]
    usage = json.loads(last)
    output = proc.stdout + "\n".join(rest)
    if usage["rc"] != 0:
        raise SystemExit(f"{name}: `{' '.join(command)}` exited {usage['rc']}\n{output[-4000:]}")
    return Step(name, round(wall, 1), round(usage["cpu"], 1), usage["maxrss_kb"] / 2**20, output)


#: A fresh machine's PATH, after the Python this script runs with (its base interpreter, not
#: a venv or a version manager's shim, which would look for its state under the empty HOME).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


def newcomer_env(home: Path, venv: Path | None) -> dict[str, str]:
    """A login shell's environment with an empty HOME, `venv` activated when given."""
    path = [str(Path(sys.base_prefix) / "bin"), *SYSTEM_PATH]
    env = {"HOME": str(home), "LANG": "C.UTF-8", "PATH": os.pathsep.join(path)}
    if venv:
        env.update(VIRTUAL_ENV=str(venv), PATH=os.pathsep.join([str(venv / "bin"), *path]))
    return env


def disk_gb(path: Path) -> float:
    """Bytes under `path` (each hard-linked file once), in GB; 0 when it does not exist."""
    if not path.exists():
        return 0.0
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) / 1e9


def fresh_clone(root: Path) -> tuple[Path, Path]:
    clone, home = root / "f4pipe", root / "home"
    home.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    return clone, home


def install(clone: Path, home: Path) -> tuple[Step, dict]:
    env = newcomer_env(home, None)
    command = "python3 -m venv .venv && . .venv/bin/activate && python -m pip install -e ."
    step = run_step("install (venv + pip install -e .)", ["bash", "-c", command], clone, env)
    facts = {
        "venv_gb": round(disk_gb(clone / ".venv"), 2),
        "backtracking_lines": len(re.findall(r"looking at multiple versions", step.output)),
        "took_longer_warning": "taking longer than usual" in step.output,
    }
    return step, facts


def one_line_edit(clone: Path, env: dict[str, str], kernel: str) -> Path:
    """co2asm of `kernel` with `s_nop 0` inserted before its first s_waitcnt."""
    co = min((clone / "resources" / "aiter").glob(f"pypi-*/f4gemm/{kernel}.co"))
    asm = clone / f"{kernel}.s"
    subprocess.run(["f4pipe", "co2asm", str(co), "-o", str(asm)], env=env, cwd=clone, check=True)
    text = asm.read_text()
    at = text.index("\ts_waitcnt")
    edit = clone / f"{kernel}.edit.s"
    edit.write_text(text[:at] + "\ts_nop 0\n" + text[at:])
    return edit


def try_steps(clone: Path, env: dict[str, str]) -> list[Step]:
    steps = []
    for kernel in TRY_KERNELS:
        edit = one_line_edit(clone, env, kernel)
        tile = kernel.rsplit("_", 1)[1]
        for attempt in ("first", "repeated"):
            steps.append(
                run_step(f"try {tile} ({attempt})", ["f4pipe", "try", str(edit)], clone, env)
            )
    return steps


def suite_counts(output: str) -> str:
    found = re.findall(r"=+ (.*?(?:passed|failed).*?) in [\d.]+s", output)
    return found[-1] if found else "?"


def disk(clone: Path, home: Path) -> dict[str, float]:
    cache = home / ".cache" / "f4pipe"
    parts = {
        "venv": clone / ".venv",
        "nox": clone / ".nox",
        "f4pipe_cache": cache,
        "pip_cache": home / ".cache" / "pip",
        "results": clone / "results",
        "resources": clone / "resources",
    }
    sizes = {name: round(disk_gb(path), 2) for name, path in parts.items()}
    if cache.is_dir():
        sizes |= {f"f4pipe_cache/{p.name}": round(disk_gb(p), 2) for p in sorted(cache.iterdir())}
    sizes["install_and_tests"] = round(sizes["venv"] + sizes["nox"] + sizes["f4pipe_cache"], 2)
    return sizes


def ci_run(root: Path) -> Step:
    """`.ci/run` in a fresh clone and HOME, from a venv holding only pip (CI's machine)."""
    clone, home = fresh_clone(root / "ci")
    bare = root / "ci" / "python"
    subprocess.run([sys.executable, "-m", "venv", str(bare)], check=True)
    step = run_step(
        ".ci/run (fresh clone, empty HOME)", [".ci/run"], clone, newcomer_env(home, bare)
    )
    step.name += f": {suite_counts(step.output)}"
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ci", action="store_true", help="also time .ci/run in its own clone")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(f"f4pipe {commit}, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory(prefix="f4pipe-newcomer-") as tmp:
        root = Path(tmp)
        clone, home = fresh_clone(root)
        step, install_facts = install(clone, home)
        steps = [step]
        print(step.line(), install_facts, flush=True)
        env = newcomer_env(home, clone / ".venv")
        step = run_step(
            "main job (benchmarks/main_job.py)",
            ["python", "benchmarks/main_job.py", "--clone", str(clone)],
            clone,
            env,
        )
        steps.append(step)
        main_job = step.output.strip()
        print(main_job, flush=True)
        for step in try_steps(clone, env):
            steps.append(step)
            print(step.line(), flush=True)
        step = run_step("nox -s verify", ["nox", "-s", "verify"], clone, env)
        step.name += f": {suite_counts(step.output)}"
        steps.append(step)
        print(step.line(), flush=True)
        sizes = disk(clone, home)
        print("disk (GB):", json.dumps(sizes), flush=True)
        if args.ci:
            shutil.rmtree(clone / ".venv")  # the newcomer's machine is done; CI's is another
            step = ci_run(root)
            steps.append(step)
            print(step.line(), flush=True)
    if args.json:
        figures = {
            "commit": commit,
            "cores": os.cpu_count(),
            "steps": [{k: v for k, v in asdict(s).items() if k != "output"} for s in steps],
            "install": install_facts,
            "main_job": main_job.splitlines(),
            "disk_gb": sizes,
        }
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
