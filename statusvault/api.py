"""The library face (docs/api.md): back up, restore, verify and list from Python, with the CLI's rules and verdict.

Two forms. `backup_with` / `restore_with` run a typed request (BackupRequest, RestoreRequest) on a client the
caller holds: the CLI, the controller and `move` run every backup and restore through them, so the verdict a
restore returns is the one all of them act on. The keyword forms (`backup`, `restore`) build that request from
options first. Each keyword call takes what the matching command takes, by the same names (a long option,
dashes as underscores), reads them with the same parsers (`Selection.from_options`, `restore_options`: a value is
a list or a comma-separated string, as in a restore intent), and returns the report with its verdict; what the CLI
refuses with one line raises the same `StatusVaultError` (`.exit_status` is the CLI's exit status). Nothing here
prints.

    from statusvault import api
    result = api.backup("nightly", storage="/var/backups", namespace="team-a", with_dependencies=True)
    restored = api.restore("nightly", storage="/var/backups", namespace_mapping="team-a:team-b")
    if not restored.succeeded:
        print(restored.verdict.findings)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statusvault.archive import VerifyReport
from statusvault.archive.envelope import FileKek, Keyring
from statusvault.archive.signing import FileSigner, PublicKey
from statusvault.backup import BackupEngine, BackupRequest, BackupResult, default_backup_name
from statusvault.catalog import BackupInfo, list_backups
from statusvault.catalog import verify as verify_backup
from statusvault.errors import ExitStatus
from statusvault.flagtable import COMMAND_OPTIONS, check_options, value_key
from statusvault.kube.api import KubeApi
from statusvault.kube.client import KubeClient
from statusvault.kube.discovery import Discovery, discover
from statusvault.kube.transport import load_transport
from statusvault.model import Selection, split_csv
from statusvault.restore.options import RestoreOptions, restore_options
from statusvault.restore.results.report import RestoreReport
from statusvault.restore.results.verdict import RunOutcome, Verdict, verdict
from statusvault.restore.runner import RestoreRequest, run_restore
from statusvault.storage import ObjectStore, open_store
from statusvault.storage.base import S3Options, validate_backup_name

__all__ = [
    "BackupRequest",
    "BackupResult",
    "Cluster",
    "RestoreOptions",
    "RestoreRequest",
    "RestoreResult",
    "Selection",
    "backup",
    "backup_with",
    "list_backups_in",
    "restore",
    "restore_with",
    "verify",
]

Strings = str | Iterable[str]
Discover = Callable[[bool], Discovery]  # discover(refresh): what the cluster serves, looked up again when asked


@dataclasses.dataclass(frozen=True)
class Cluster:
    """Which cluster: a kubeconfig file and context (None: $KUBECONFIG or ~/.kube/config, its current context; in
    a pod, its service account)."""

    kubeconfig: str | None = None
    context: str | None = None

    @contextmanager
    def connected(self, pool_size: int = 16) -> Iterator[tuple[KubeClient, Discover]]:
        """A client, and discover(refresh) as the engines take it; closed at the end."""
        transport = load_transport(self.kubeconfig, self.context, pool_size=pool_size)
        cache: dict[str, Discovery] = {}
        client = KubeClient(transport)

        def discovered(refresh: bool = False) -> Discovery:
            if refresh or "d" not in cache:
                cache["d"] = discover(client)
            return cache["d"]

        try:
            yield client, discovered
        finally:
            transport.close()


@dataclasses.dataclass(frozen=True)
class RestoreResult:
    """A restore's report and its one verdict (restore/results/verdict.py), as the CLI's exit status reads it."""

    report: RestoreReport
    verdict: Verdict

    @property
    def succeeded(self) -> bool:
        return self.verdict.outcome is RunOutcome.DONE

    @property
    def exit_status(self) -> ExitStatus:
        return self.verdict.exit_status


def backup_with(request: BackupRequest, *, client: KubeApi, discovery: Discovery) -> BackupResult:
    """Run a typed backup request against the cluster `client` talks to (`discovery`: what it serves)."""
    return BackupEngine(client, discovery, request).run()


def restore_with(
    request: RestoreRequest, *, client: KubeApi, discover: Discover, strict: bool = False
) -> RestoreResult:
    """Run a typed restore request and judge it: the report and its one verdict (`strict`: what the server changed
    or warned about makes the run partial, as `--strict` does)."""
    report = run_restore(client, discover, request)
    return RestoreResult(report, verdict(report, strict))


def _store(storage: str | None, s3: S3Options | None) -> ObjectStore:
    return open_store(storage, s3 or S3Options())


def _keys(encryption_key_file: Strings = (), verify_key_file: Strings = ()) -> Keyring:
    """Key files that open encrypted backups, and public keys that check signed ones."""
    files = [FileKek.from_file(p) for p in split_csv(encryption_key_file)]
    verifiers = tuple(PublicKey.from_file(p) for p in split_csv(verify_key_file))
    return Keyring(tuple(files), verifiers=verifiers)


def _values(command: str, options: dict[str, Any], taken: Iterable[str]) -> dict[str, Any]:
    """Keyword options by the command's long names (dashes as underscores) as its parsers read them; a name the
    command does not take is a TypeError, as for any function."""
    offered, out = COMMAND_OPTIONS[command], {}
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if flag not in offered or flag in taken:
            raise TypeError(f"{command}() got an unexpected option {name!r}")
        out[value_key(flag)] = value
    return out


SELECTION_FLAGS = ("--namespace", "--include-resources", "--exclude-resources", "--selector", "--name",
                   "--include-cluster-resources", "--include-crds", "--all-namespaces")  # fmt: skip
_BACKUP_OWN = ("--storage", "--encryption-key-file", "--signing-key-file", "--with-dependencies",
               "--allow-plaintext-secrets")  # fmt: skip


def backup(
    name: str | None = None,
    *,
    storage: str | None = None,
    cluster: Cluster = Cluster(),
    s3: S3Options | None = None,
    encryption_key_file: Strings = (),
    signing_key_file: str | None = None,
    with_dependencies: bool | None = None,
    allow_plaintext_secrets: bool = False,
    **selection: Any,
) -> BackupResult:
    """`statusvault backup`: the selection by the CLI's names (namespace, include_resources, exclude_resources,
    selector, name, include_cluster_resources, include_crds, all_namespaces); returns the result with its
    manifest (`.manifest`, `.objects`)."""
    values = _values("backup", selection, (*_BACKUP_OWN, *(f for f in COMMAND_OPTIONS["backup"]
                                                         if f not in SELECTION_FLAGS)))  # fmt: skip
    check_options("backup", values)
    chosen = Selection.from_values(values)
    keys = _keys(encryption_key_file)
    request = BackupRequest(
        store=_store(storage, s3),
        name=validate_backup_name(name or default_backup_name()),
        selection=chosen,
        key=keys if keys else None,
        signer=FileSigner.from_file(signing_key_file) if signing_key_file else None,
        with_dependencies=with_dependencies,
        allow_plaintext_secrets=allow_plaintext_secrets,
    )
    with cluster.connected() as (client, discovered):
        return backup_with(request, client=client, discovery=discovered(False))


def restore(
    name: str,
    *,
    storage: str | None = None,
    cluster: Cluster = Cluster(),
    s3: S3Options | None = None,
    encryption_key_file: Strings = (),
    verify_key_file: Strings = (),
    state_dir: str | Path | None = None,
    parallel: int = 8,
    strict: bool = False,
    **options: Any,
) -> RestoreResult:
    """`statusvault restore`: the restore options by the CLI's names (namespace, include_resources,
    namespace_mapping, status_include_resources, existing_resource_policy, dry_run, pause, order, modifiers, ...,
    read as a restore intent's are); returns the report and its verdict. state_dir: where the journal is kept
    (None: the restore cannot be resumed)."""
    own = ("--storage", "--encryption-key-file", "--verify-key-file", "--state-dir", "--parallel", "--strict")
    opts = restore_options(_values("restore", options, own))
    request = RestoreRequest(
        store=_store(storage, s3),
        backup=name,
        options=opts,
        state_dir=Path(state_dir) if state_dir is not None else None,
        key=_keys(encryption_key_file, verify_key_file),
        parallel=parallel,
    )
    with cluster.connected(pool_size=parallel * 2 + 4) as (client, discovered):
        return restore_with(request, client=client, discover=discovered, strict=strict)


def verify(
    name: str,
    *,
    storage: str | None = None,
    s3: S3Options | None = None,
    encryption_key_file: Strings = (),
    verify_key_file: Strings = (),
) -> VerifyReport:
    """`statusvault verify`: every file's checksum (and the signature, given a public key); `.ok` says."""
    return verify_backup(_store(storage, s3), name, _keys(encryption_key_file, verify_key_file))


def list_backups_in(storage: str | None = None, s3: S3Options | None = None) -> list[BackupInfo]:
    """`statusvault list`: every backup in the store, complete or not (`.phase`)."""
    return list_backups(_store(storage, s3))
