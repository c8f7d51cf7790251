"""Fetch aiter's f4gemm code objects from a pinned source into `resources/aiter/<aiter-id>/`.

Sources (a dict, as in config/config.yaml):
  {"kind": "pypi", "package": "amd-aiter", "version": "0.1.7.post2.dev18", "sha256": optional}
  {"kind": "git", "url": "...", "rev": "branch | tag | full 40-hex commit"}
  {"kind": "local", "path": "...", "sha256": optional}

What lands in `resources/aiter/<aiter-id>/`: `f4gemm/` with the manifest CSV and exactly the .co
files it lists (other files of the source directory, e.g. aiter's codegen.py or an unlisted .co,
are not copied but named in the provenance under "skipped"; a listed .co that is missing is a
ManifestError), `configs/` with every a4w4 tuned GEMM table of the source (aiter's
`aiter/configs/**/*a4w4*tuned*gemm*.csv`, model_configs included, at their paths below
`aiter/configs/`: the tables the tuned-table audit reads), and `provenance.json` (source,
directories used, sha256 + size per file and per table, f4pipe version, time). The directory
appears whole or not at all (fsio.atomic_dir).

aiter ids name the bytes: `pypi-<package>-<version>`, `git-<12 hex of the commit>`, and
`local-<12 hex of the content digest>`, the content digest being the sha256 over the sorted
"name<TAB>sha256" lines of the copied files, tables named `configs/<path>` (recorded for every
kind as `content_sha256`).

Pinning: once `<aiter-id>/provenance.json` exists, a fetch re-hashes the copies and returns without
touching the network (`fetched=False`). Bytes that differ from the record are a ChecksumError,
never a silent refetch: a modified copy, a pypi `sha256` pin that disagrees with the recorded
wheel, a cached wheel that no longer matches the digest taken when it was downloaded. A local
directory's id is its content, so changed bytes give a *new* id (the old one stays valid); to pin
a local directory, put its `content_sha256` in the source as `sha256`, and a change becomes a
ChecksumError naming the changed files. A git commit pins its tree by construction; only a branch
or tag needs the network on a re-run (to learn which commit it names now).

A fetch made before tables were fetched (its provenance has no "tables") is completed once, by
the next fetch of its source: the tables of the same wheel or commit are added and the record
rewritten; nothing else changes. Reading such a directory (f4pipe.aiter.aiterdir) never
completes it.

The parts: `sources` (the config's source, checked, and the id it names offline), `record`
(provenance.json and the locked atomic copy), `process` (pip and git failures as FetchErrors)
and `wheel` (the PyPI wheel cache and extraction); this module fetches each kind of source and
names the aiter id a source gives. What a fetched directory holds, its id and the re-hash against
its record are f4pipe.aiter.aiterdir's, which this package writes and never reads around.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from f4pipe.aiter.aiterdir import (
    OTHER_ARCHITECTURES,
    AiterDir,
    configs_beside,
    content_files,
    local_id,
    named_content,
    other_arch_dirs,
)
from f4pipe.aiter.manifest import MANIFEST_NAME
from f4pipe.aiter.tables import CONFIGS_PATH
from f4pipe.core.errors import ChecksumError, FetchError, ManifestError
from f4pipe.core.layout import (
    F4GEMM_DIR,
    PROVENANCE_JSON,
    aiter_dir,
)
from f4pipe.fetch.process import run_fetch_tool
from f4pipe.fetch.record import FetchResult, complete_tables, fetch_into, fetch_result, locked
from f4pipe.fetch.sources import (
    DEFAULT_PACKAGE,
    DEFAULT_VERSION,
    HEX40,
    AiterSource,
    GitSource,
    LocalSource,
    PypiSource,
    git_id,
    offline_id,
    parse_source,
    pypi_id,
)
from f4pipe.fetch.wheel import (
    TREE_MARKER_NAME,
    WHEEL_F4GEMM_PREFIX,
    ensure_wheel,
    extract_prefix,
    extract_tables,
    extract_wheel_file,
    extract_wheel_tree,
    wheel_cache_dir,
)

#: The public API; the parts live in sources, record, process and wheel.
__all__ = [
    "DEFAULT_PACKAGE",
    "DEFAULT_VERSION",
    "GIT_F4GEMM_PATH",
    "TREE_MARKER_NAME",
    "WHEEL_F4GEMM_PREFIX",
    "AiterSource",
    "FetchResult",
    "GitSource",
    "LocalSource",
    "PypiSource",
    "aiter_id_for",
    "check_local_pin",
    "ensure_wheel",
    "extract_wheel_file",
    "extract_wheel_tree",
    "fetch_aiter",
    "parse_source",
    "wheel_cache_dir",
]

GIT_F4GEMM_PATH = "hsa/gfx950/f4gemm"
#: Where aiter keeps every architecture's code objects: hsa/<arch>/f4gemm/.
GIT_HSA_PATH = "hsa"


# ---------------------------------------------------------------------------------------------
# The three sources


def fetch_aiter(
    source: Mapping[str, Any] | AiterSource, resources_dir: Path, *, cache_dir: Path | None = None
) -> FetchResult:
    """Fetch the f4gemm directory of `source` into `resources_dir/aiter/<aiter-id>/`.

    Returns at once (no network, `fetched=False`) when that directory exists and verifies.
    `cache_dir` overrides the wheel cache (default <cache_root>/wheels).
    """
    src = parse_source(source)
    resources_dir = Path(resources_dir)
    if isinstance(src, PypiSource):
        return _fetch_pypi(src, resources_dir, cache_dir)
    if isinstance(src, GitSource):
        return _fetch_git(src, resources_dir)
    return _fetch_local(src, resources_dir)


def aiter_id_for(source: Mapping[str, Any] | AiterSource) -> str:
    """The aiter id a fetch of `source` produces: sources.offline_id, else (a git branch or
    tag) the commit it names now, resolved by a shallow, blob-less fetch."""
    src = parse_source(source)
    known = offline_id(src)
    if known is not None:
        return known
    assert isinstance(src, GitSource)  # only a git branch or tag needs the server
    with tempfile.TemporaryDirectory(prefix="f4pipe-git-") as tmp:
        return git_id(_git_fetch_commit(src, Path(tmp)))


def _lock_for(resources_dir: Path, aiter_id: str) -> Path:
    return aiter_dir(resources_dir, f".{aiter_id}.lock")


def _fetch_pypi(src: PypiSource, resources_dir: Path, cache_dir: Path | None) -> FetchResult:
    aiter_id = pypi_id(src)
    target = aiter_dir(resources_dir, aiter_id)
    with locked(_lock_for(resources_dir, aiter_id)):
        if target.exists():
            record = AiterDir(target).verify()
            recorded = record["source"].get("wheel_sha256")
            if src.sha256 is not None and src.sha256 != recorded:
                raise ChecksumError(
                    f"{src.package}=={src.version}: expected wheel sha256 {src.sha256} (the "
                    f"source's pin), but {target / PROVENANCE_JSON} records {recorded} for "
                    f"{record['source'].get('wheel')}; fix the pin, or if the release really "
                    f"changed, delete {target} and the cached wheel and fetch again"
                )
            if "tables" not in record:
                wheel, _ = ensure_wheel(src, cache_dir=cache_dir)
                with tempfile.TemporaryDirectory(prefix="f4pipe-wheel-") as tmp:
                    configs = extract_tables(wheel, Path(tmp))
                    complete_tables(target, configs, f"{wheel.name}:{CONFIGS_PATH}")
            return fetch_result(target, fetched=False)
        wheel, wheel_sha = ensure_wheel(src, cache_dir=cache_dir)
        with tempfile.TemporaryDirectory(prefix="f4pipe-wheel-") as tmp:
            extract_prefix(wheel, WHEEL_F4GEMM_PREFIX, Path(tmp) / F4GEMM_DIR)
            configs = extract_tables(wheel, Path(tmp) / "configs")
            provenance = {
                "kind": "pypi",
                "package": src.package,
                "version": src.version,
                "wheel": wheel.name,
                "wheel_sha256": wheel_sha,
                "wheel_size": wheel.stat().st_size,
                "f4gemm_dir": f"{wheel.name}:{WHEEL_F4GEMM_PREFIX}",
                "tables_dir": f"{wheel.name}:{CONFIGS_PATH}",
            }
            where = provenance["f4gemm_dir"]
            return fetch_into(
                resources_dir, aiter_id, Path(tmp) / F4GEMM_DIR, provenance, where, configs
            )


def _git_fetch_commit(src: GitSource, repo: Path) -> str:
    """Shallow, blob-less fetch of `src.rev` into a new repository; the commit sha.

    Blobs come later, only for the f4gemm directory and the tuned tables (sparse checkout); a
    server without partial-clone support (a plain file:// repository) sends them all, which is
    merely slower.
    """
    run_fetch_tool(
        ["git", "init", "-q", str(repo)], action="git init", default_hint="check git works"
    )
    run_fetch_tool(
        ["git", "fetch", "-q", "--depth", "1", "--filter=blob:none", src.url, src.rev],
        cwd=repo,
        action=f"git fetch {src.url} {src.rev}",
        hints={
            "couldn't find remote ref": f"{src.url} has no branch or tag {src.rev!r}",
            "not our ref": f"{src.url} has no commit {src.rev} (or refuses to serve commits "
            "that no branch names: give a branch or tag)",
            "unadvertised object": f"{src.url} has no commit {src.rev} (or refuses to serve "
            "commits that no branch names: give a branch or tag)",
            "does not appear to be a git repository": f"{src.url} is not a git repository",
            "unable to access": f"cannot reach {src.url} (network failure?)",
            "Could not resolve host": f"cannot reach {src.url} (network failure?)",
        },
        default_hint=f"check the url {src.url!r} and rev {src.rev!r}",
    )
    commit = run_fetch_tool(
        ["git", "rev-parse", "--verify", "FETCH_HEAD^{commit}"],
        cwd=repo,
        action=f"resolving {src.rev} of {src.url}",
        default_hint=f"{src.rev!r} does not name a commit",
    ).strip()
    if HEX40.match(src.rev) and commit != src.rev:
        raise FetchError(f"git fetch {src.url} {src.rev} returned commit {commit}")
    return commit


def _git_checkout_f4gemm(src: GitSource, repo: Path, commit: str) -> Path:
    """Check out only GIT_F4GEMM_PATH and the a4w4 tables under CONFIGS_PATH of `commit`; the
    f4gemm directory in the work tree (the tables are at repo/CONFIGS_PATH)."""
    listed = run_fetch_tool(
        ["git", "ls-tree", "--name-only", commit, "--", f"{GIT_F4GEMM_PATH}/{MANIFEST_NAME}"],
        cwd=repo,
        action=f"listing {GIT_F4GEMM_PATH} at {commit}",
        default_hint="the fetched repository is damaged; retry",
    )
    if not listed.strip():
        raise ManifestError(
            f"commit {commit} of {src.url} has no {GIT_F4GEMM_PATH}/{MANIFEST_NAME}; "
            "is this aiter, and does that commit have the f4gemm kernels?"
        )
    git_steps = [
        [
            "git",
            "sparse-checkout",
            "set",
            "--no-cone",
            f"/{GIT_HSA_PATH}/*/{F4GEMM_DIR}/",
            f"/{CONFIGS_PATH}/**/*a4w4*",
        ],
        ["git", "-c", "advice.detachedHead=false", "checkout", "-q", commit],
    ]
    for cmd in git_steps:
        run_fetch_tool(
            cmd,
            cwd=repo,
            action=f"checking out {GIT_F4GEMM_PATH} of {commit} from {src.url}",
            default_hint="retry; if it persists, fetch into an empty resources directory",
        )
    return repo / GIT_F4GEMM_PATH


def _fetch_git(src: GitSource, resources_dir: Path) -> FetchResult:
    if HEX40.match(src.rev):  # a commit pins its tree: no network when already fetched
        aiter_id = git_id(src.rev)
        target = aiter_dir(resources_dir, aiter_id)
        with locked(_lock_for(resources_dir, aiter_id)):
            if target.exists() and "tables" in AiterDir(target).provenance():
                return _reuse_git(target, src.rev)
    with tempfile.TemporaryDirectory(prefix="f4pipe-git-") as tmp:
        repo = Path(tmp) / "repo"
        commit = _git_fetch_commit(src, repo)
        aiter_id = git_id(commit)
        target = aiter_dir(resources_dir, aiter_id)
        with locked(_lock_for(resources_dir, aiter_id)):
            if target.exists() and "tables" in AiterDir(target).provenance():
                return _reuse_git(target, commit)
            f4gemm = _git_checkout_f4gemm(src, repo, commit)
            if target.exists():  # fetched before tables were: add them
                _reuse_git(target, commit)
                complete_tables(target, repo / CONFIGS_PATH, CONFIGS_PATH)
                return fetch_result(target, fetched=False)
            provenance = {
                "kind": "git",
                "url": src.url,
                "rev": src.rev,
                "commit": commit,
                "f4gemm_dir": GIT_F4GEMM_PATH,
                "tables_dir": CONFIGS_PATH,
            }
            where = f"{GIT_F4GEMM_PATH} of commit {commit} of {src.url}"
            others = other_architectures(repo, f"commit {commit} of {src.url}")
            return fetch_into(
                resources_dir, aiter_id, f4gemm, provenance, where, repo / CONFIGS_PATH, others
            )


def other_architectures(root: Path, where: str) -> dict[str, tuple[Path, str]]:
    """arch -> (its f4gemm directory, where it is) for every hsa/<arch>/f4gemm/ below `root`
    other than gfx950's that holds a code object."""
    return {
        arch: (directory, f"{GIT_HSA_PATH}/{arch}/{F4GEMM_DIR} of {where}")
        for arch, directory in other_arch_dirs(root / GIT_HSA_PATH).items()
    }


def _reuse_git(target: Path, commit: str) -> FetchResult:
    record = AiterDir(target).verify()
    if record["source"].get("commit") != commit:
        raise ChecksumError(
            f"{target} records commit {record['source'].get('commit')}, not {commit} (a 12-hex "
            f"id collision?); move {target} away and fetch again"
        )
    return fetch_result(target, fetched=False)


def _fetch_local(src: LocalSource, resources_dir: Path) -> FetchResult:
    content = content_files(src.path)
    directory, digest = content.directory, content.digest()
    if src.sha256 is not None and src.sha256 != digest:
        raise ChecksumError(
            _local_pin_message(src, directory, digest, content.named(), resources_dir)
        )
    aiter_id = local_id(digest)
    target = aiter_dir(resources_dir, aiter_id)
    with locked(_lock_for(resources_dir, aiter_id)):
        if target.exists():
            AiterDir(target).verify()
            return fetch_result(target, fetched=False)
        configs = configs_beside(directory)
        provenance = {
            "kind": "local",
            "path": str(src.path),
            "f4gemm_dir": str(directory.resolve()),
            "tables_dir": str(configs) if configs is not None else "",
        }
        others = {arch: (d, str(d)) for arch, (d, _) in content.others.items()}
        result = fetch_into(
            resources_dir, aiter_id, directory, provenance, str(directory), configs, others
        )
        copied = AiterDir(target).provenance()["content_sha256"]
        if copied != digest:
            shutil.rmtree(target)
            raise FetchError(f"{directory} changed while it was being copied; fetch again")
        return result


def recorded_files(record: dict[str, Any]) -> dict[str, Any]:
    """A fetch record's files by the names its content digest gives them."""
    others = {arch: info["files"] for arch, info in record.get(OTHER_ARCHITECTURES, {}).items()}
    return named_content(record["files"], record.get("tables", {}), others)


def check_local_pin(source: Mapping[str, Any] | AiterSource) -> None:
    """A pinned local source's content against its pin, before any fetch: the aiter-id fact
    job's check (the fetch job's output keeps its path, the aiter id of the content, when only
    the pin changes, and Snakemake clears it before the job runs)."""
    src = parse_source(source)
    if not isinstance(src, LocalSource) or src.sha256 is None:
        return
    content = content_files(src.path)
    digest = content.digest()
    if digest != src.sha256:
        raise ChecksumError(_local_pin_message(src, content.directory, digest, {}, None))


def _local_pin_message(
    src: LocalSource, directory: Path, digest: str, files: dict, resources_dir: Path | None
) -> str:
    """Name the changed files when an earlier fetch of the pinned content is on disk."""
    assert src.sha256 is not None
    message = (
        f"local aiter directory {directory}: content sha256 {digest}, but the source pins "
        f"{src.sha256}"
    )
    pinned = None if resources_dir is None else AiterDir.at(resources_dir, local_id(src.sha256))
    if pinned is not None and pinned.is_fetched():
        record = pinned.provenance()
        recorded = recorded_files(record)
        changed = [
            f"{name}: expected sha256 {recorded[name]['sha256'] if name in recorded else None}, "
            f"actual {files[name]['sha256'] if name in files else None}"
            for name in sorted(recorded.keys() | files.keys())
            if recorded.get(name, {}).get("sha256") != files.get(name, {}).get("sha256")
        ]
        message += f" (recorded in {pinned.provenance_json}); changed: " + "; ".join(changed)
    return message + (
        "; restore the pinned files, or, if the change is intended, set the pin to the new "
        "content sha256 (or drop it)"
    )
