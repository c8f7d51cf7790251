"""Edits named in the pipeline config (`edits: [{name, kernel, asm}]`), checked; the workflow
reads them at DAG time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from f4pipe.core.errors import ConfigError
from f4pipe.core.layout import EDIT_NAME, edit_variant

# ---------------------------------------------------------------------------------------------
# Edits named in the pipeline config


@dataclass(frozen=True)
class EditSpec:
    """One configured edit: `edits: [{name, kernel, asm}]`; its variant is `edit-<name>`."""

    name: str
    kernel: str  # symbol, .co name or stem
    asm: Path

    @property
    def variant(self) -> str:
        return edit_variant(self.name)


def parse_edit_specs(items: list[dict[str, Any]] | None) -> list[EditSpec]:
    """The config's `edits` list, checked: names usable as a variant and unique."""
    specs: list[EditSpec] = []
    for i, item in enumerate(items or []):
        try:
            name, kernel, asm = str(item["name"]), str(item["kernel"]), str(item["asm"])
        except (KeyError, TypeError):
            raise ConfigError(f"edits[{i}] = {item!r}: needs name, kernel and asm") from None
        if not EDIT_NAME.match(name):
            raise ConfigError(
                f"edits[{i}].name {name!r}: use letters, digits, _ and single dashes "
                "(it becomes the variant edit-<name>)"
            )
        if any(s.name == name for s in specs):
            raise ConfigError(f"edits[{i}].name {name!r} is used twice; names must be unique")
        specs.append(EditSpec(name=name, kernel=kernel, asm=Path(asm)))
    return specs


def check_edit_files(specs: list[EditSpec]) -> list[EditSpec]:
    """Each edit's assembly file exists (relative to the working directory), named by its key
    before any job starts: Snakemake would otherwise stop on a missing input in its own words."""
    for i, spec in enumerate(specs):
        if not spec.asm.is_file():
            raise ConfigError(
                f"edits[{i}].asm: {spec.asm} is not a file: give the edited .s, relative to the "
                "working directory"
            )
    return specs
