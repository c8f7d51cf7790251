"""The pipeline on a mistaken configuration: one line that names the file and the key, exit 2
(bad input, as every f4pipe command), no traceback, no schema dump, and what an earlier good run
produced left byte for byte.

Each case is a user's edit of config/config.yaml in a working directory that holds an earlier
run's outputs (a fetched aiter under resources/, a result set under results/), run as a user
runs the main job (`snakemake --cores 1 all`, here `-n` where the mistake is found before any
job runs). A wrong wheel pin is found by the first job (the source's aiter-id fact), before the
fetch could replace the fetched tree."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from workflow_run import KERNELS, REPO, make_local_aiter, snakemake, use_config, write_nop_edit

DEFAULT = yaml.safe_load((REPO / "config" / "config.yaml").read_text())


def edited(change: Callable[[dict], None]) -> str:
    config = yaml.safe_load(yaml.safe_dump(DEFAULT))
    change(config)
    return yaml.safe_dump(config, sort_keys=False)


def parent_of(config: dict, path: str) -> tuple[dict, str]:
    """The mapping that holds the dotted `path`'s last key, and that key."""
    *parents, last = path.split(".")
    for key in parents:
        config = config[key]
    return config, last


def set_key(path: str, value: object) -> Callable[[dict], None]:
    def change(config: dict) -> None:
        parent, last = parent_of(config, path)
        parent[last] = value

    return change


def rename_key(old: str, new: str) -> Callable[[dict], None]:
    def change(config: dict) -> None:
        parent, last = parent_of(config, old)
        parent[new] = parent.pop(last)

    return change


def drop_key(key: str) -> Callable[[dict], None]:
    return lambda config: config.pop(key)


#: (case, the config text, what the one line must say)
MISTAKES = {
    "unknown key": (
        edited(rename_key("device", "devise")),
        r"config/config\.yaml: unknown key 'devise' \(did you mean 'device'\?\)",
    ),
    "unknown nested key": (
        edited(rename_key("verify.matrix", "matrx")),
        r"config/config\.yaml: verify: unknown key 'matrx' \(did you mean 'matrix'\?\)",
    ),
    "value not allowed": (
        edited(set_key("device", "gpu")),
        r"config/config\.yaml: device: 'gpu' is not one of auto, hip, emulator",
    ),
    "wrong type": (
        edited(set_key("verify.activate", "sometimes")),
        r"config/config\.yaml: verify\.activate: 'sometimes' is not true or false",
    ),
    "unknown shape matrix": (
        edited(set_key("verify.matrix", "seeed")),
        r"config/config\.yaml: verify\.matrix: 'seeed' is not one of seed, ",
    ),
    "missing key": (
        edited(drop_key("toolchain")),
        r"config/config\.yaml: toolchain: missing \(a required key\)",
    ),
    "malformed pin": (
        edited(set_key("aiter.sha256", "not-a-sha256")),
        r"config/config\.yaml: aiter\.sha256: 'not-a-sha256' does not match",
    ),
    "architectures not a list": (
        edited(set_key("architectures", "gfx1250")),
        r"config/config\.yaml: architectures: 'gfx1250' is not all or a list of architectures",
    ),
    "yaml that does not parse": (
        (REPO / "config" / "config.yaml").read_text() + "device: [auto\n",
        r"config/config\.yaml:\d+: not valid YAML: ",
    ),
    "local path missing": (
        edited(set_key("aiter", {"kind": "local", "path": "no/such/dir"})),
        r"config/config\.yaml: aiter\.path: no/such/dir does not exist",
    ),
    "local path without kernels": (
        edited(set_key("aiter", {"kind": "local", "path": "empty"})),
        r"config/config\.yaml: aiter\.path: no f4gemm manifest \(f4gemm_bf16_per1x32Fp4\.csv\)",
    ),
    "local source with pypi keys": (
        edited(set_key("aiter", {**DEFAULT["aiter"], "kind": "local", "path": "empty"})),
        r"config/config\.yaml: aiter: aiter source .*: missing key\(s\) \[\], unknown key\(s\) "
        r"\['package', 'version'\]; a local source takes \['kind', 'path', 'sha256'\]",
    ),
}


def run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [*cmd, "--cores", "1", *args], capture_output=True, text=True, env=env, timeout=600
    )


def tree_digest(*roots: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory) -> Path:
    """A working directory after a good run's fetch, with a result set beside it."""
    work = tmp_path_factory.mktemp("earlier")
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(DEFAULT, sort_keys=False))
    (work / "empty").mkdir()
    # the default source's fetch job, as the main job runs it (its output is what a wrong pin
    # must not cost)
    aiter_id = "pypi-amd-aiter-0.1.7.post2.dev18"
    done = run(work, f"resources/aiter/{aiter_id}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "resources" / "aiter" / aiter_id / "f4gemm").is_dir()
    results = work / "results" / aiter_id
    results.mkdir(parents=True, exist_ok=True)
    (results / "verify.parquet").write_bytes(b"an earlier run's table")
    return work


@pytest.mark.parametrize("case", list(MISTAKES))
def test_a_config_mistake_is_one_line_and_exit_2(earlier_run: Path, case: str) -> None:
    text, says = MISTAKES[case]
    before = tree_digest(earlier_run / "resources", earlier_run / "results")
    config = earlier_run / "config" / "config.yaml"
    good = config.read_text()
    config.write_text(text)
    try:
        proc = run(earlier_run, "-n", "all")
    finally:
        config.write_text(good)
    output = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2, output
    assert len(output.splitlines()) == 1, output
    assert re.match(rf"f4pipe: error: {says}", output), output
    assert tree_digest(earlier_run / "resources", earlier_run / "results") == before


def test_a_wrong_wheel_pin_fails_its_first_job_and_keeps_the_fetched_tree(
    earlier_run: Path,
) -> None:
    wrong = "a" * 64
    before = tree_digest(earlier_run / "resources", earlier_run / "results")
    override = earlier_run / "pin.yaml"
    override.write_text(yaml.safe_dump({"aiter": {**DEFAULT["aiter"], "sha256": wrong}}))
    proc = run(earlier_run, "all", "--configfile", str(override))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output
    last = output.strip().splitlines()[-1]
    assert last.startswith("f4pipe: job aiter_id failed: f4pipe aiter-id: error: ")
    assert (
        f"expected sha256 {wrong} (the source's pin), actual {DEFAULT['aiter']['sha256']}" in last
    )
    assert tree_digest(earlier_run / "resources", earlier_run / "results") == before


def test_a_configfile_that_sets_aiter_replaces_the_source(earlier_run, f4gemm_dir) -> None:
    """`--configfile` with a local source: not merged with the default's pypi keys."""
    local = make_local_aiter(f4gemm_dir, earlier_run / "local-aiter", KERNELS)
    override = earlier_run / "local.yaml"
    override.write_text(yaml.safe_dump({"aiter": {"kind": "local", "path": str(local)}}))
    proc = run(earlier_run, "-n", "-p", "all", "--configfile", str(override))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the planned aiter-id job asks for the local source alone, none of the default's pypi keys
    (planned,) = [line for line in proc.stdout.splitlines() if "f4pipe aiter-id" in line]
    assert "--source local" in planned and "--package" not in planned and "--sha256" not in planned


# --- a re-run with a mistaken config after a real good run -------------------------------------


def fuzz_config(config: dict) -> dict:
    """.test/config-pipeline.yaml, reduced to what a config mistake can cost: the fact jobs,
    the round trip, verify (with the edit) and the config; no splitk, bench, safety, audit."""
    for stage in ("splitk", "bench", "safety", "audit_tuned"):
        config[stage]["activate"] = False
    return config


@pytest.fixture(scope="module")
def good_run(f4gemm_dir: Path, toolchain, tmp_path_factory) -> Path:
    """A working directory after a real good main job (a local aiter of two kernels, an edit)."""
    work = tmp_path_factory.mktemp("good")
    config = fuzz_config(use_config(work))
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    write_nop_edit(f4gemm_dir, work / config["edits"][0]["asm"], toolchain)
    make_local_aiter(f4gemm_dir, work / "aiter", KERNELS)
    (work / "a-file").write_text("not a directory")
    (work / "no-llvm").mkdir()
    done = snakemake(work, "all")
    assert done.returncode == 0, done.stderr[-3000:]
    return work


def append_copy(key: str) -> Callable[[dict], None]:
    return lambda config: config[key].append(dict(config[key][0]))


#: (the config edit, what the last line must say): each caught before any job writes into a
#: result set, while the Snakefile is parsed or by a fact job of its own
RERUN_MISTAKES: dict[str, tuple[Callable[[dict], None], str]] = {
    "results_dir a file": (
        set_key("results_dir", "a-file"),
        r"f4pipe: error: \S+config\.yaml: results_dir a-file: is a file, not a directory",
    ),
    # as root nothing is read-only by its mode: a directory that cannot be made is the case
    "results_dir not writable": (
        set_key("results_dir", "a-file/results"),
        r"f4pipe: error: \S+config\.yaml: results_dir a-file/results: a-file is not a directory",
    ),
    "resources_dir a file": (
        set_key("resources_dir", "a-file"),
        r"f4pipe: error: \S+config\.yaml: resources_dir a-file: is a file, not a directory",
    ),
    "store a file": (
        set_key("reuse", {"activate": True, "store": "a-file"}),
        r"f4pipe: error: \S+config\.yaml: reuse\.store a-file: is a file, not a directory",
    ),
    "toolchain missing": (
        set_key("toolchain.bin_dir", "no/such/llvm"),
        r"f4pipe: error: \S+config\.yaml: toolchain\.bin_dir: no/such/llvm is not a directory",
    ),
    "toolchain not an LLVM": (
        set_key("toolchain.bin_dir", "no-llvm"),
        r"f4pipe: job toolchain failed: f4pipe toolchain: error: configured toolchain "
        r"unusable: no-llvm: missing llvm-objdump",
    ),
    "edit file missing": (
        set_key("edits", [{"name": "nop", "kernel": KERNELS[0], "asm": "edits/no.s"}]),
        r"f4pipe: error: edits\[0\]\.asm: edits/no\.s is not a file",
    ),
    "edit name twice": (
        append_copy("edits"),
        r"f4pipe: error: edits\[1\]\.name 'nop' is used twice",
    ),
    "edit kernel unknown": (
        set_key("edits", [{"name": "nop", "kernel": "f4gemm_no", "asm": "edits/nop.s"}]),
        r"f4pipe: job config_check failed: f4pipe config-check: error: edits\[0\]\.kernel: "
        r"no kernel named 'f4gemm_no'",
    ),
    "tuned table unknown": (
        set_key("audit_tuned", {"activate": False, "tables": ["no_tuned_gemm.csv"]}),
        r"f4pipe: job config_check failed: f4pipe config-check: error: audit_tuned\.tables: "
        r"--table \['no_tuned_gemm\.csv'\]",
    ),
    "architecture not fetched": (
        set_key("architectures", ["gfx1250"]),
        r"f4pipe: job config_check failed: f4pipe config-check: error: architectures: .* "
        r"holds no gfx1250 f4gemm directory",
    ),
    "unknown key": (
        rename_key("device", "devise"),
        r"f4pipe: error: \S+config\.yaml: unknown key 'devise' \(did you mean 'device'\?\)",
    ),
    # found by the aiter id's fact job: the fetch job's output (the aiter id of the content)
    # is the earlier run's fetched tree
    "wrong pin": (
        set_key("aiter.sha256", "a" * 64),
        r"f4pipe: job aiter_id failed: f4pipe aiter-id: error: local aiter directory .*, but "
        r"the source pins a{64}",
    ),
}


def test_the_rerun_fuzz_set_has_13_kinds() -> None:
    assert len(RERUN_MISTAKES) == 13


@pytest.mark.parametrize("case", list(RERUN_MISTAKES))
def test_a_rerun_with_a_config_mistake_keeps_the_good_set(good_run: Path, case: str) -> None:
    """The last line names the key or the value, exit 2, no traceback, and every file the good
    run wrote (result set, facts, store, fetched aiter) keeps its bytes."""
    edit, says = RERUN_MISTAKES[case]
    before = tree_digest(good_run / "results", good_run / "resources")
    config_file = good_run / "config.yaml"
    good = config_file.read_text()
    config = yaml.safe_load(good)
    edit(config)
    config_file.write_text(yaml.safe_dump(config))
    try:
        proc = snakemake(good_run, "all")
    finally:
        config_file.write_text(good)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    last = output.strip().splitlines()[-1]
    assert re.match(says, last), last
    assert tree_digest(good_run / "results", good_run / "resources") == before
