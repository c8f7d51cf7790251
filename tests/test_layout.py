"""One definition per fact: the workflow, the config schema and the code take the
result-set layout, the stages, the variants, the edit-name rule, the device kinds and the shape
matrices from f4pipe.core.layout and f4pipe.host.matrices; these tests fail when one of them
drifts."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from f4pipe.core import layout
from f4pipe.core.schemas import TABLE_SCHEMAS
from f4pipe.host.benchprotocol import BENCH_ITERS, COLD_ROTATE_BYTES, Protocol
from f4pipe.host.matrices import MATRICES, STAGE_DEFAULT_MATRIX
from f4pipe.pipeline.stages import STAGES

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
RULES = ROOT / "workflow" / "rules"


def test_schema_enums_are_the_code_s() -> None:
    props = SCHEMA["properties"]
    assert props["device"]["enum"] == list(layout.DEVICE_KINDS)
    assert props["jobs_per"]["enum"] == list(layout.JOBS_PER)
    assert SCHEMA["$defs"]["stage"]["properties"]["matrix"]["enum"] == list(MATRICES)
    edit_name = props["edits"]["items"]["properties"]["name"]["pattern"]
    assert edit_name == layout.EDIT_NAME.pattern
    assert all(stage in SCHEMA["required"] for stage in layout.GEMM_STAGES)


#: The bench protocol's defaults as config keys (f4pipe.host.benchprotocol is their home).
BENCH_DEFAULTS = {
    "repeats": Protocol.repeats,
    "warmup": Protocol.warmup,
    "warmup_ms": Protocol.warmup_ms,
    "cold": Protocol.cold,
    "rotate_mib": COLD_ROTATE_BYTES >> 20,
}


def test_the_schema_and_the_config_state_the_bench_protocol_s_defaults() -> None:
    """The schema's descriptions say each default ("(default 5)"), config/config.yaml sets it
    and the user guide's config table names it: all must be the protocol's, which the command
    line uses too."""
    props = SCHEMA["$defs"]["stage"]["properties"]
    stated = {
        key: yaml.safe_load(re.search(r"\(default (\S+?)\)", props[key]["description"])[1])
        for key in BENCH_DEFAULTS
    }
    assert stated == BENCH_DEFAULTS
    bench = yaml.safe_load((ROOT / "config/config.yaml").read_text())["bench"]
    assert {key: bench[key] for key in BENCH_DEFAULTS} == BENCH_DEFAULTS
    assert bench["iters"] == BENCH_ITERS
    guide = (ROOT / "docs/user-guide.md").read_text()
    stated_in_guide = (
        f"`iters` (timed launches per case, default {BENCH_ITERS}), `repeats` "
        f"({Protocol.repeats}), `warmup` ({Protocol.warmup} launches), `warmup_ms` "
        f"({Protocol.warmup_ms:g}), `cold` (true: rotate `rotate_mib`, {COLD_ROTATE_BYTES >> 20},"
    )
    assert stated_in_guide in guide


def test_every_table_has_one_schema_and_every_gemm_stage_one_runner() -> None:
    assert list(TABLE_SCHEMAS) == list(layout.TABLES)
    assert list(STAGES) == list(layout.GEMM_STAGES)


def test_the_workflow_spells_no_table_or_fetched_directory_of_its_own() -> None:
    """A table's file is `table_file(name)` in the rules too: the only `.parquet` names a rule
    spells are per-kernel or per-variant row files (a wildcard in them) and the GEMM stage
    tables by their `{stage}` wildcard; `f4gemm` appears only through F4GEMM_DIR."""
    for smk in sorted(RULES.glob("*.smk")):
        text = smk.read_text()
        for name in re.findall(r'"([A-Za-z0-9_./{}]+)\.parquet"', text):
            assert "{" in name, f"{smk.name}: {name}.parquet: use table_file()"
        assert "/f4gemm" not in text and '"f4gemm"' not in text, smk.name


def test_edit_names_follow_one_rule() -> None:
    for good in ("nop-pad", "a_b", "x1-y2-z3"):
        assert layout.EDIT_NAME.match(good)
    for bad in ("-x", "x-", "a--b", "a b", "a/b", ""):
        assert not layout.EDIT_NAME.match(bad)
    assert layout.edit_name_of(layout.edit_variant("nop-pad")) == "nop-pad"
    assert layout.edit_name_of("rebuilt") is None


def test_an_unknown_matrix_fails_at_config_validation(tmp_path: Path) -> None:
    """Before any job runs: snakemake's schema validation names the value."""
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    config["splitk"]["matrix"] = "no-such-matrix"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "no-such-matrix" in out.stdout + out.stderr


@pytest.mark.parametrize(
    "path", sorted((ROOT / ".test").glob("config-*.yaml")), ids=lambda p: p.name
)
def test_test_configs_are_valid_configs(path: Path) -> None:
    """The .test/ configs the pipeline tests run pass the schema like config/config.yaml."""
    from snakemake.utils import validate

    validate(yaml.safe_load(path.read_text()), str(ROOT / "workflow/schemas/config.schema.yaml"))


def test_the_default_config_is_valid() -> None:
    from snakemake.utils import validate

    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    validate(config, str(ROOT / "workflow/schemas/config.schema.yaml"))


def test_the_commands_default_matrices_are_the_configs() -> None:
    """`f4pipe verify` with no --matrix runs what `snakemake all` runs by default."""
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    assert set(STAGE_DEFAULT_MATRIX) == set(layout.GEMM_STAGES)
    assert {s: config[s]["matrix"] for s in layout.GEMM_STAGES} == STAGE_DEFAULT_MATRIX


def test_the_rules_spell_no_result_set_path_of_their_own() -> None:
    """Every directory and file name of a result set that f4pipe.core.layout defines reaches the
    rules through it (common.smk's TOOLCHAIN, REPORT, ROUNDTRIP, VARIANT_DIRS, ...), never
    as a string of its own."""
    names = {
        layout.TOOLCHAIN_JSON,
        layout.CHANGES_JSON,
        layout.REPORT_DIR,
        layout.ROUNDTRIP_DIR,
        layout.VARIANTS_DIR,
        layout.EDITS_DIR,
        layout.ARCHIVES_DIR,
        layout.STORE_DIR,
        layout.PROVENANCE_JSON,
        layout.F4GEMM_DIR,
        *layout.BASE_VARIANTS,
    }
    found = []
    for path in [*RULES.glob("*.smk"), ROOT / "Snakefile"]:
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            code = line.split("#", 1)[0]
            # table names (table_file("roundtrip")) and config keys (.get("store")) are other
            # facts that happen to share a spelling
            code = re.sub(r'(table_file\(|\.get\(|\[)"[^"]*"', "", code)
            for literal in re.findall(r'"([^"{}]*)"', code):
                if literal in names or literal.startswith(layout.EDIT_VARIANT_PREFIX):
                    found.append(f"{path.name}:{n}: {literal!r}")
    assert found == []
