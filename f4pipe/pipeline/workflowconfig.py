"""The workflow's configuration as a user means it, checked with one line per mistake.

The Snakefile's base is `config/config.yaml` (relative to the working directory, as Snakemake
reads it); each `--configfile` and `--config` goes on top, key by key, except that a command
line that sets `aiter` replaces the source whole: `--configfile` with `aiter: {kind: local,
path: ...}` is a local source, not a local source with the default's pypi keys. The result is
held against `workflow/schemas/config.schema.yaml`, and the first mistake becomes one line
that names the file and the key (`config/config.yaml: unknown key 'devise' (did you mean
'device'?)`) instead of Snakemake's exception and the schema dump. A local source's path is
checked too: a directory without an f4gemm manifest is named here, by its key, before any job
runs. So are the directories the run writes (`results_dir`, `resources_dir`, `reuse.store`: a
file, a path under a file, a read-only directory) and a `toolchain.bin_dir` that is no
directory. Nothing is hashed, fetched or run: the Snakefile's parse stays cheap.

Why here: Snakemake deletes a job's outputs before it runs and again when it fails, and a job
whose parameters changed runs again, so a mistake that a job finds costs that job's outputs of
the earlier good result set. What this module cannot check cheaply (does the LLVM at
`toolchain.bin_dir` know gfx950) a fact job finds, writing a file of its own under
`results/facts/` before any job writes into a result set (workflow/rules/codeobj.smk).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from f4pipe.aiter.manifest import MANIFEST_NAME, find_f4gemm_dir
from f4pipe.core.errors import ConfigError, InputError, ManifestError
from f4pipe.core.fsio import check_writable_dir, read_input_text
from f4pipe.fetch.sources import parse_source

DEFAULT_CONFIG = Path("config/config.yaml")
#: A config file is a few kB.
MAX_CONFIG_BYTES = 1 << 20


def read_config_file(path: Path) -> dict[str, Any]:
    """A YAML mapping, or a ConfigError naming the file and the line that does not parse."""
    try:
        text = read_input_text(path, "config file", MAX_CONFIG_BYTES)
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{where}: not valid YAML: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file is a mapping of keys, not {type(data).__name__}")
    return data


def merged(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """`top` over `base`, nested mappings key by key, `aiter` whole."""
    out = dict(base)
    for key, value in top.items():
        if key != "aiter" and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def load(
    command_line: Mapping[str, Any], configfiles: Sequence[str | Path], schema: dict[str, Any]
) -> dict[str, Any]:
    """The configuration: config/config.yaml (when it exists; with `--configfile` it may not),
    then what the command line gave (`command_line`: Snakemake's merged `--configfile` and
    `--config` values), checked; raises ConfigError."""
    files = [Path(f) for f in configfiles]
    base = read_config_file(DEFAULT_CONFIG) if DEFAULT_CONFIG.exists() or not files else {}
    # Snakemake has read them; read again for a line number on bad YAML, and for which file
    # set each key
    given = [(path, read_config_file(path)) for path in files]
    config = merged(base, command_line)
    check(config, schema, lambda key: origin(key, given))
    check_source(config["aiter"], origin("aiter", given))
    check_paths(config, lambda key: origin(key, given))
    return config


def origin(key: str, given: Sequence[tuple[Path, Mapping[str, Any]]]) -> Path:
    """The file a top-level key was set in: the last --configfile that sets it, else the base."""
    for path, data in reversed(given):
        if key in data:
            return path
    return DEFAULT_CONFIG


def check(config: Mapping[str, Any], schema: dict[str, Any], where) -> None:
    """Raise the first schema violation as one line: file, key path, what is wrong."""
    import jsonschema

    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(config))
    # a misspelt key is also a missing one: name the misspelling, with what it may have meant
    unknown = [e for e in errors if e.validator == "additionalProperties"]
    error = jsonschema.exceptions.best_match(unknown or errors)
    if error is None:
        return
    path = [str(p) for p in error.absolute_path]
    key = ".".join(path)
    file = where(path[0]) if path else DEFAULT_CONFIG
    raise ConfigError(f"{file}: {describe(error, key, schema)}")


def describe(error: Any, key: str, schema: dict[str, Any]) -> str:
    """What is wrong at `key`, in words a user acts on."""
    at = f"{key}: " if key else ""
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(known))
        hints = [difflib.get_close_matches(u, known, n=1) for u in unknown]
        said = ", ".join(
            f"{u!r}" + (f" (did you mean {h[0]!r}?)" if h else "")
            for u, h in zip(unknown, hints, strict=True)
        )
        return f"{at}unknown key{'s' * (len(unknown) > 1)} {said}; known: {', '.join(known)}"
    if error.validator == "enum":
        allowed = ", ".join(str(v) for v in error.validator_value)
        return f"{at}{error.instance!r} is not one of {allowed}"
    if error.validator == "type":
        return f"{at}{error.instance!r} is not {article(error.validator_value)}"
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return f"{key + '.' if key else ''}{missing}: missing (a required key)"
    if error.validator in ("anyOf", "oneOf"):  # the schema's title says what it takes
        return f"{at}{error.instance!r} is not {error.schema.get('title', 'valid here')}"
    if error.validator == "pattern":
        return f"{at}{error.instance!r} does not match {error.validator_value}"
    return f"{at}{error.message}"


def article(kind: str | list[str]) -> str:
    names = {"boolean": "true or false", "integer": "a whole number", "string": "a string"}
    kinds = [kind] if isinstance(kind, str) else kind
    return " or ".join(names.get(k, f"a {k}") for k in kinds)


def check_source(aiter: Mapping[str, Any], file: Path) -> None:
    """The source's keys are its kind's (f4pipe.fetch.sources, the one place that knows them),
    and a local source is a directory that holds an f4gemm manifest (either meaning of
    AITER_ASM_DIR): say so by key, before the DAG asks for its kernels."""
    try:
        parse_source(aiter)
    except ConfigError as exc:
        raise ConfigError(f"{file}: aiter: {exc}") from None
    if aiter.get("kind") != "local":
        return
    path = Path(aiter["path"]).expanduser()
    if not path.exists():
        raise ConfigError(f"{file}: aiter.path: {path} does not exist")
    try:
        find_f4gemm_dir(path)
    except ManifestError:
        raise ConfigError(
            f"{file}: aiter.path: no f4gemm manifest ({MANIFEST_NAME}) in {path}, its f4gemm/ "
            "or its gfx950/f4gemm/: give aiter's hsa/gfx950/f4gemm directory, or the hsa/ or "
            "gfx950/ above it"
        ) from None


def check_paths(config: Mapping[str, Any], where) -> None:
    """The directories the run writes can be written, and a configured LLVM directory is one:
    say so by key before any job starts (a job that found it would lose the earlier set's
    outputs it was to replace)."""
    written = [("results_dir", config["results_dir"]), ("resources_dir", config["resources_dir"])]
    if store := config.get("reuse", {}).get("store"):
        written.append(("reuse.store", store))
    for key, value in written:
        try:
            check_writable_dir(value, key)
        except InputError as exc:
            raise ConfigError(f"{where(key.split('.')[0])}: {exc}") from None
    bin_dir = config["toolchain"]["bin_dir"]
    if bin_dir and not Path(bin_dir).expanduser().is_dir():
        raise ConfigError(
            f"{where('toolchain')}: toolchain.bin_dir: {bin_dir} is not a directory: give "
            'LLVM\'s bin directory, or "" to search and provision one'
        )
