"""Every command README.md, the user guide and the model card show, run the way a user runs it: in a
fresh copy of the repository, from a venv that holds only the project's runtime dependencies (the
README's `python -m pip install -e .`, no extras). A command that needs a package only the test or
lint extras bring in fails here, as it would fail for a user.

The commands are read from the ```sh blocks of DOCS, plus the INLINE ones their text names. Each
one is in COMMANDS: it runs as written (the files its placeholders name, such as X.co, DIR or
shapes.csv, are put in the copy first), it runs in the form given there (a dry run of a whole
pipeline, a placeholder filled), or it is excluded with the reason why. A command of theirs
that COMMANDS does not know fails test_every_readme_command_is_run_or_excluded, so the test
follows the docs.

The venv is the README's own (`python3 -m venv`, then its install line in the fresh copy), but
its dependencies are not downloaded and unpacked again (700 MB and about 40 CPU-seconds): the
runtime dependencies the test's environment already holds, and only those (the closure of
pyproject's `dependencies` through each package's requirements and markers; no test or lint
extra), are linked into the venv's site-packages before the install line runs, which then finds
them satisfied and installs f4pipe alone. Their console scripts (snakemake, nox) are copied in
with the venv's python in their first line.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from workflow_run import make_local_aiter

from f4pipe.aiter.aiterdir import AiterDir
from f4pipe.cli import COMMANDS as F4PIPE_COMMANDS
from f4pipe.fetch import aiter_id_for

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: The pages whose commands a user copies: the front page, the user guide, the model card.
DOCS = (README, REPO / "docs" / "user-guide.md", REPO / "docs" / "model-card.md")
KERNEL = "f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128"
INSTALL = "python -m pip install -e ."


@dataclass(frozen=True)
class Run:
    """How the test runs a README command: `command` (default: as written) through bash in the
    user's copy, and the exit codes that mean it worked (1 is a verdict: README "Exit codes")."""

    command: str | None = None
    codes: tuple[int, ...] = (0,)
    why: str = ""  # why `command` differs from the README's text, when it does


@dataclass(frozen=True)
class Excluded:
    why: str


DRY_RUN = "a dry run (-n): the main job itself costs minutes of CPU; the report step runs the "
DRY_RUN += "same Snakefile for real on one kernel"
NEEDS_GPU = "needs a gfx950 GPU (the HIP shim commands run the same launcher here)"

#: Commands the README names in its text rather than in a ```sh block, run the same way.
INLINE = ("f4pipe --help", "nox -l", "snakemake --report report.html")

#: Every README command, in the order the test runs them: before the report step (the default
#: config, as cloned), the report step's own run, then what needs a result set.
COMMANDS: dict[str, Run | Excluded] = {
    INSTALL: Run(
        f"{INSTALL} --no-compile --quiet",
        why="no bytecode pass (Python compiles on import): half the install's CPU",
    ),
    "f4pipe --help": Run(),
    "f4pipe toolchain": Run(),
    "f4pipe fetch --source pypi|git|local ...": Run(
        "f4pipe fetch --source pypi", why="the default config's source: the pinned wheel"
    ),
    "snakemake --cores 1 all": Run("snakemake -n --cores 1 all", why=DRY_RUN),
    "snakemake --cores 4 all": Excluded(
        "the DAG of `snakemake --cores 1 all` with more cores: that one's dry run runs"
    ),
    "snakemake all --cores 8 --resources gpu=1": Run(
        "snakemake -n all --cores 8 --resources gpu=1", why=DRY_RUN
    ),
    "snakemake --workflow-profile workflow/profiles/slurm all --set-resources "
    "gemm_stage:slurm_partition=gpu": Run(
        "snakemake -n all --set-resources gemm_stage:slurm_partition=gpu",
        why="a dry run without the Slurm profile (excluded below with the line that uses it)",
    ),
    "f4pipe co2asm X.co -o X.s": Run(),
    "f4pipe assemble X.s -o X.co": Run(),
    "f4pipe roundtrip X.co --out DIR": Run(),
    "f4pipe hazards X.co": Run(),
    "f4pipe try EDIT.s": Run(
        "f4pipe try X.s", why="X.s: co2asm's output, an edit that changes nothing"
    ),
    "f4pipe waits X.co": Run(),
    "f4pipe gemm -m 512 -n 1024 -k 2048": Run(),
    "f4pipe predict -m M -n N -k K": Excluded(
        "its placeholders are the examples of 'Predicted throughput', which run"
    ),
    "f4pipe predict -m 4096 -n 4096 -k 4096": Run(),
    f"f4pipe predict -m 1 -n 16384 -k 16384 --kernel {KERNEL}": Run(),
    "f4pipe predict --shapes shapes.csv --json": Run(),
    "f4pipe predict -m 8192 -n 8192 -k 8192 --warm": Run(),
    "f4pipe audit-tuned --shapes config/shapes/deepseek-v3.csv": Run(codes=(0, 1)),
    "f4pipe audit-tuned --shape 1-4096,7168,2304 --cu-num 256 --predict": Run(codes=(0, 1)),
    "f4pipe audit-tuned --shapes my-model.csv --findings -o coverage.parquet": Run(codes=(0, 1)),
    "f4pipe tune --shapes config/shapes/deepseek-v3.csv -o deepseek-v3-tuned.csv": Run(
        "f4pipe tune --shapes shapes.csv -o deepseek-v3-tuned.csv",
        why="shapes.csv's two shapes: DeepSeek-V3's 2,024 rows need the traces of every kernel "
        "and about 74 emulated errRatio runs on a fresh cache (a minute or more)",
    ),
    "f4pipe tune --shapes config/shapes/deepseek-v3.csv -o tuned.csv": Run(
        "f4pipe tune --shapes shapes.csv -o tuned.csv",
        why="the same command as the user guide's, on shapes.csv's two shapes (above)",
    ),
    "f4pipe tune --shapes shapes.csv --out-dir tuned --table tune.parquet": Run(),
    "python -c 'from hip import hip; from f4pipe.hipshim import build_shim; "
    'build_shim("/tmp/shim", hip.HIP_VERSION)\'': Run(),
    "ROCM_PATH=/tmp/shim LD_LIBRARY_PATH=/tmp/shim/lib f4pipe gemm -m 32 -n 256 -k 512 "
    "--device hip": Run(
        "ROCM_PATH=/tmp/shim LD_LIBRARY_PATH=/tmp/shim/lib f4pipe gemm -m 32 -n 256 -k 512 "
        "--device hip --iters 2",
        why="the shim emulates every timed launch: 2 instead of the default 50 (20 CPU-s)",
    ),
    "nox -l": Run(),
    "snakemake --report report.html": Run(),
    "f4pipe compare OLD NEW [--json]": Run(
        "f4pipe compare OLD NEW --json", why="`[--json]` is the notation for an option"
    ),
    "f4pipe compare results/archives/<old-id>/*.tar.gz results/<new-id> -o "
    "results/compare/old__new": Run(),
    "f4pipe changes NEW --archives results/archives -o changes.json": Run(),
    # excluded
    "python3 -m venv .venv && . .venv/bin/activate": Excluded(
        "the test's own venv (the `venv` fixture) is the user's, made with `python3 -m venv`"
    ),
    "nox -s verify": Excluded(
        "the test suite itself (minutes on two cores, and this test is part of it); `nox -l` shows "
        "nox and the noxfile work in the user's environment"
    ),
    "cat /opt/rocm/.info/version": Excluded("needs ROCm"),
    'python -m pip install -e . "hip-python==7.0.*"': Excluded(
        "replaces hip-python with one ROCm release's, for a ROCm machine (`nox -s hip` runs "
        "each supported release on the HIP shim)"
    ),
    "f4pipe gemm -m 8192 -n 8192 -k 8192 --device hip --iters 50": Excluded(NEEDS_GPU),
    "nox -s hardware": Excluded(NEEDS_GPU),
    "F4PIPE_HW=1 python -m pytest -m isa -v -p no:cacheprovider --junitxml=isa-mi355x.xml "
    "tests/test_isa.py": Excluded(
        "needs a gfx950 GPU (tests/test_hipshim.py runs the same command on the HIP shim)"
    ),
    "snakemake --workflow-profile workflow/profiles/slurm all": Excluded(
        "needs snakemake-executor-plugin-slurm and a Slurm cluster (tests/test_cluster.py runs "
        "the DAG through a cluster executor)"
    ),
}


def normalized(command: str) -> str:
    """A command as words, comments dropped: README spacing and quoting do not matter."""
    return shlex.join(shlex.split(command, comments=True))


def readme_commands() -> list[str]:
    """Every command line of the ```sh blocks of DOCS (comment lines dropped), then INLINE."""
    text = "\n".join(doc.read_text() for doc in DOCS)
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        commands += [normalized(line) for line in block.splitlines() if normalized(line)]
    for command in INLINE:
        assert f"`{command}`" in text, f"the docs no longer name `{command}`"
        commands.append(normalized(command))
    return commands


def test_every_readme_command_is_run_or_excluded() -> None:
    known = {normalized(c) for c in COMMANDS}
    shown = readme_commands()
    assert [c for c in shown if c not in known] == [], "README commands COMMANDS does not know"
    assert sorted(known - set(shown)) == [], "COMMANDS the README no longer shows"
    assert all(how.why for how in COMMANDS.values() if isinstance(how, Excluded))


# ---------------------------------------------------------------------------------------------
# The user's environment


def runtime_dependencies() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


#: What a user's shell does not have: the test process's own package paths and settings.
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "AITER_ASM_DIR")


def runtime_distributions() -> list[metadata.Distribution]:
    """pyproject's runtime dependencies and all they require, as installed in the test's
    environment, following markers and requested extras (f4pipe's own extras left out)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(Requirement(r), "") for r in runtime_dependencies()]
    while todo:
        req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name in found:
            continue
        found[name] = dist = metadata.distribution(name)
        for text in dist.requires or ():
            todo += [(Requirement(text), e) for e in ("", *req.extras)]
    return list(found.values())


def link_distribution(dist: metadata.Distribution, venv: Path) -> None:
    """Link a distribution's top-level files into the venv's site-packages, and copy its
    scripts into the venv's bin/ with the venv's python as their interpreter."""
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    scripts = Path(sys.prefix, "bin").resolve()
    for entry in dist.files or ():
        source = Path(dist.locate_file(entry)).resolve()
        if entry.parts[0] == ".." and source.parent == scripts:
            script = venv / "bin" / source.name
            lines = source.read_bytes().split(b"\n", 1)
            if lines[0].startswith(b"#!") and b"python" in lines[0] and len(lines) == 2:
                script.write_bytes(b"#!" + str(venv / "bin" / "python").encode() + b"\n" + lines[1])
                script.chmod(0o755)
        elif entry.parts[0] not in ("..", "__pycache__"):
            link = site / entry.parts[0]
            if not link.is_symlink() and not link.exists():
                link.symlink_to(Path(dist.locate_file(entry.parts[0])))


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's venv, its runtime dependencies linked from the test's environment."""
    path = tmp_path_factory.mktemp("readme") / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    for dist in runtime_distributions():
        link_distribution(dist, path)
    return path


def user_env(venv: Path) -> dict[str, str]:
    """The venv first on PATH, and no directory that holds another f4pipe."""
    others = [
        p for p in os.environ["PATH"].split(os.pathsep) if p and not Path(p, "f4pipe").exists()
    ]
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env.update(
        PATH=os.pathsep.join([str(venv / "bin"), *others]),
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
    )
    return env


def fresh_copy(dest: Path) -> Path:
    """The repository's files as a clone has them (tracked and new, nothing ignored)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dest / rel)
    return dest


@dataclass
class User:
    """A user's shell: the fresh copy as working directory, the venv's commands."""

    cwd: Path
    env: dict[str, str]
    placeholders: dict[str, str]

    def run(self, command: str, codes: tuple[int, ...] = (0,)) -> str:
        for text, value in self.placeholders.items():
            command = command.replace(text, value)
        proc = subprocess.run(
            ["bash", "-c", command],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        output = proc.stdout + proc.stderr
        assert proc.returncode in codes, f"{command}: exit {proc.returncode}\n{output[-3000:]}"
        assert "Traceback" not in output, f"{command}:\n{output[-3000:]}"
        return output


@pytest.fixture(scope="module")
def user(venv: Path, tmp_path_factory: pytest.TempPathFactory) -> User:
    """The README's install line, run in a fresh copy with the venv's python."""
    copy = fresh_copy(tmp_path_factory.mktemp("clone"))
    found = User(copy, user_env(venv), {"/tmp/shim": str(tmp_path_factory.mktemp("shim"))})
    install = COMMANDS[INSTALL]
    assert isinstance(install, Run) and install.command
    found.run(install.command)
    return found


def fetched_f4gemm(user: User) -> Path:
    """The code objects `f4pipe fetch --source pypi` put in the copy."""
    return AiterDir.at(user.cwd / "resources", aiter_id_for({"kind": "pypi"})).f4gemm


def put_inputs(user: User) -> None:
    """The files the README's placeholders name: X.co (a real code object of the fetched aiter)
    and the shape lists shapes.csv (predict's columns) and my-model.csv (config/shapes' form)."""
    shutil.copyfile(fetched_f4gemm(user) / f"{KERNEL}.co", user.cwd / "X.co")
    (user.cwd / "shapes.csv").write_text("M,N,K\n1,2112,7168\n4096,4096,4096\n")
    (user.cwd / "my-model.csv").write_text("name,M,N,K\nqkv,1-8192,2112,7168\nout,1-64,7168,2048\n")


def run_one_kernel_pipeline(user: User) -> None:
    """A finished run for `snakemake --report`: the README's main job on one kernel, verify
    only, with config/config.yaml edited as a user edits it; OLD and NEW name its result set."""
    aiter = make_local_aiter(fetched_f4gemm(user), user.cwd / "one-kernel", (KERNEL,))
    config_path = user.cwd / "config" / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config.update(aiter={"kind": "local", "path": str(aiter)}, device="emulator", edits=[])
    config["verify"]["matrix"] = "smoke"
    for stage in ("splitk", "bench", "safety", "audit_tuned", "tune"):
        config[stage]["activate"] = False
    config_path.write_text(yaml.safe_dump(config))
    user.run("snakemake --cores 2 all")
    (archived,) = (user.cwd / "results" / "archives").iterdir()
    user.placeholders.update({"<old-id>": archived.name, "<new-id>": archived.name})
    for name in ("OLD", "NEW"):
        (user.cwd / name).symlink_to(user.cwd / "results" / archived.name)


#: What the test does before a command: put its inputs in place.
BEFORE = {
    "f4pipe co2asm X.co -o X.s": put_inputs,
    "snakemake --report report.html": run_one_kernel_pipeline,
}


@pytest.mark.slow
@pytest.mark.network  # the venv's first build downloads the dependencies
def test_readme_commands_run_in_a_users_environment(user: User) -> None:
    for extra in ("pytest", "ruff", "hypothesis"):  # the venv holds no test or lint extra
        user.run(f"python -c \"import importlib.util as u; exit(bool(u.find_spec('{extra}')))\"")
    for readme, how in COMMANDS.items():
        if isinstance(how, Excluded) or readme == INSTALL:  # the `user` fixture installed
            continue
        if readme in BEFORE:
            BEFORE[readme](user)
        output = user.run(how.command or readme, how.codes)
        if readme == "f4pipe --help":
            listed = [name for name in F4PIPE_COMMANDS if name in output]
            assert listed == list(F4PIPE_COMMANDS)
            user.run(" && ".join(f"f4pipe {name} --help >/dev/null" for name in F4PIPE_COMMANDS))
    assert (user.cwd / "report.html").stat().st_size > 0
    assert (user.cwd / "DIR" / "X.diff.txt").is_file()
