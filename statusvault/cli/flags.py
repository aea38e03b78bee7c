"""Flag groups shared by several commands (storage, selection, output), and how a command's callback gets its
values: as one typed dataclass (pass_args), whose shared parts are the groups' dataclasses here."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource
from click.shell_completion import CompletionItem

from statusvault.archive.crypto import Key
from statusvault.archive.envelope import FileKek, Kek, Keyring
from statusvault.archive.signing import FileSigner, PublicKey, Signer
from statusvault.cli.app import App
from statusvault.cli.declared import CONNECTION, CONTROLLERS, KEYS, PRIVILEGED, everywhere, option
from statusvault.cli.output import OutputFormat
from statusvault.errors import ConfigError
from statusvault.flagtable import check_options
from statusvault.model import DryRun, Selection
from statusvault.runtime.metrics import RunMetrics, recorded
from statusvault.schedule import DEFAULT_IMAGE, read_ca_bundle
from statusvault.storage import S3Options
from statusvault.storage.base import ObjectLock
from statusvault.store.retention import asked_lock

F = TypeVar("F", bound=Callable[..., Any])
A = TypeVar("A")


def pass_args(cls: type[A], check: bool = False) -> Callable[[Callable[[App, A], None]], Callable[..., None]]:
    """Call the command with the App and its values as one typed `cls` (click passes them by name, and `cls` has a
    field of each name); with `check`, the option table refuses conflicting options first."""

    def decorate(command: Callable[[App, A], None]) -> Callable[..., None]:
        @functools.wraps(command)
        def callback(app: App, /, **values: Any) -> None:
            if check:
                check_options(values)
            command(app, cls(**values))

        return click.pass_obj(callback)

    return decorate


def apply_options(f: F, decorators: list[Callable[[F], F]]) -> F:
    """`f` with `decorators` applied as if stacked above it in this order (click options show in it)."""
    for d in reversed(decorators):
        f = d(f)
    return f


def default_state_dir() -> str:
    return str(Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "statusvault")


def state_dir_option(f: F) -> F:
    return option(
        "--state-dir",
        left_out={"Restore": "journals live in the controller's --state-dir"},
        type=click.Path(file_okay=False),
        default=default_state_dir,
        show_default="$XDG_STATE_HOME/statusvault",
        envvar="STATUSVAULT_STATE_DIR",
        help="Where restore journals live; a restore that did not finish resumes from its journal when run again.",
    )(f)


def strict_option(f: F) -> F:
    return click.option(
        "--strict",
        is_flag=True,
        help="Exit 3 (partial failure) when the server dropped or changed a field the backup held (a schema that "
        "prunes it, a mutating webhook), read on the cluster so a re-run finds it too, or answered a write with a "
        "Warning; both are reported either way.",
    )(f)


def pod_options(f: F) -> F:
    """The pod's image and Secrets (manifest_options without --apply, for `controller install`)."""
    return apply_options(
        f,
        [
            click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="statusvault container image."),
            click.option(
                "--credentials-secret", default="", help="Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY."
            ),
            click.option(
                "--encryption-key-secret", default="", help="Secret whose 'key' is the backups' encryption key."
            ),
        ],
    )


def manifest_options(f: F) -> F:
    """What `schedule render` and `controller render` share: the pod's image and Secrets, and --apply."""
    return pod_options(
        apply_options(
            f,
            [
                click.option(
                    "--apply",
                    "apply_",
                    is_flag=True,
                    help="Apply the manifests (server-side apply) instead of printing.",
                ),
                dry_run_option(
                    "client: print the manifests, apply nothing (as without --apply); server: with --apply, send "
                    "every write with dryRun=All."
                ),
            ],
        )
    )


DRY_RUNS = tuple(str(mode) for mode in DryRun)  # kubectl's --dry-run values, the one shape every command's takes
_BARE = "\0bare"  # --dry-run given without a value


class DryRunMode(click.ParamType[DryRun]):
    """--dry-run=none|client|server as kubectl spells it (the modes a command has); a bare --dry-run, the old
    spelling, still means client, with a deprecation line."""

    name = "dry-run"

    def __init__(self, modes: tuple[str, ...]):
        self.modes = modes

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(self.modes) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> DryRun:
        if value == _BARE:
            if not (ctx and ctx.resilient_parsing):  # not on every TAB press of shell completion
                click.echo("warning: --dry-run without a value is deprecated: give --dry-run=client", err=True)
            value = DryRun.CLIENT
        if value not in self.modes:
            self.fail(f"{value!r} is not one of {', '.join(self.modes)}", param, ctx)
        return DryRun(value)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem[str]]:
        return [CompletionItem(mode) for mode in self.modes if mode.startswith(incomplete)]


def dry_run_option(help: str, modes: tuple[str, ...] = DRY_RUNS) -> Callable[[F], F]:
    """--dry-run, the same shape for every command that has one."""
    return option(
        "--dry-run",
        left_out={"Restore": "a Restore acts; preview with `statusvault restore --dry-run`"},
        type=DryRunMode(modes),
        is_flag=False,
        flag_value=_BARE,
        default="none",
        show_default=True,
        help=help,
    )


def encryption_option(f: F) -> F:
    return option(
        "--encryption-key-file",
        left_out=KEYS,
        type=click.Path(dir_okay=False),
        envvar="STATUSVAULT_ENCRYPTION_KEY_FILE",
        help="Client-side encryption: a file with a base64 32-byte key (`head -c 32 /dev/urandom | base64`).",
    )(f)


def keys_options(f: F) -> F:
    """Keys that wrap (backup) or may unwrap (restore, verify) each backup's data key: key files and KMS keys."""
    return apply_options(
        f,
        [
            option(
                "--encryption-key-file",
                left_out=KEYS,
                type=click.Path(dir_okay=False),
                multiple=True,
                envvar="STATUSVAULT_ENCRYPTION_KEY_FILE",
                help="Client-side encryption: a file with a base64 32-byte key (`head -c 32 /dev/urandom | base64`). "
                "Repeatable: a backup's data key is wrapped by each; a restore uses whichever unwraps it.",
            ),
            option(
                "--kms-key-id",
                left_out=KEYS,
                multiple=True,
                envvar="STATUSVAULT_KMS_KEY_ID",
                help="An AWS KMS key (ID, ARN or alias/NAME) that wraps or unwraps the data key, as a key file does "
                "(repeatable; AWS_REGION or the ARN's region; AWS_ENDPOINT_URL_KMS for another endpoint).",
            ),
        ],
    )


def signing_options(f: F) -> F:
    """The key a backup (or a watch's segments) is signed with."""
    return apply_options(
        f,
        [
            click.option(
                "--signing-key-file",
                type=click.Path(dir_okay=False),
                envvar="STATUSVAULT_SIGNING_KEY_FILE",
                help="Sign the backup with this private key (PEM, Ed25519: `statusvault keys generate-signing-key`), "
                "so a restore given its public key (--verify-key-file) refuses any backup it did not sign.",
            ),
            click.option(
                "--signing-kms-key-id",
                envvar="STATUSVAULT_SIGNING_KMS_KEY_ID",
                help="Sign with an asymmetric AWS KMS key (ECC_NIST_P256) instead: its private key never leaves KMS.",
            ),
        ],
    )


def verify_options(f: F) -> F:
    """The public keys a signed backup must be signed by (restore, verify, controller run)."""
    return apply_options(
        f,
        [
            click.option(
                "--verify-key-file",
                type=click.Path(dir_okay=False),
                multiple=True,
                envvar="STATUSVAULT_VERIFY_KEY_FILE",
                help="Take only backups signed by this key (a PEM public key; repeatable): an unsigned backup, or one "
                "signed by another key or changed since, is refused before anything is written. An encrypted backup "
                "a key given opens needs no signature.",
            ),
            click.option(
                "--verify-kms-key-id",
                multiple=True,
                envvar="STATUSVAULT_VERIFY_KMS_KEY_ID",
                help="As --verify-key-file, with the public key of an AWS KMS signing key (read once, GetPublicKey).",
            ),
        ],
    )


def kek_of(text: str) -> Kek:
    """A key as --from/--to name it: `kms:ID|ARN|alias/NAME`, else the path of a key file."""
    if text.startswith("kms:"):
        from statusvault.keys.kms import KmsKek  # only KMS users pay for boto3's import

        return KmsKek(text.removeprefix("kms:"))
    return FileKek.from_file(text)


def lock_options(f: F) -> F:
    return apply_options(
        f,
        [
            click.option(
                "--lock-mode",
                type=click.Choice(["governance", "compliance"]),
                envvar="STATUSVAULT_LOCK_MODE",
                help="S3 Object Lock retention of the backup's archive and manifest: governance (removable with "
                "s3:BypassGovernanceRetention) or compliance (by no one, until it ends). Needs a bucket created with "
                "Object Lock.",
            ),
            click.option(
                "--lock-for",
                metavar="DURATION",
                envvar="STATUSVAULT_LOCK_FOR",
                help="How long from the backup's start the lock holds (e.g. 30d, 720h).",
            ),
            click.option(
                "--legal-hold",
                is_flag=True,
                envvar="STATUSVAULT_LEGAL_HOLD",
                help="Also put a legal hold on the backup (held until `statusvault hold release`).",
            ),
        ],
    )


def dependency_options(f: F) -> F:
    return apply_options(
        f,
        [
            click.option(
                "--with-dependencies/--no-with-dependencies",
                default=None,
                envvar="STATUSVAULT_WITH_DEPENDENCIES",
                help="Also back up what the selected custom resources need: the objects they own (any depth), the "
                "Secrets and ConfigMaps their spec names (as their CRD's schema says), and what a project's rules tie "
                "to them (docs/dependencies.md), each recorded with the reference that brought it. [default: on for "
                "the Cluster API and CloudNativePG objects met, whose rules say so, leaving out what may not be listed "
                "or archived in clear with a warning; else off]",
            ),
            click.option(
                "--allow-plaintext-secrets",
                is_flag=True,
                envvar="STATUSVAULT_ALLOW_PLAINTEXT_SECRETS",
                help="Let an unencrypted backup hold Secret data (refused by default: whoever reads the store reads "
                "them).",
            ),
        ],
    )


def output_option(f: F) -> F:
    return option(
        "-o",
        "--output",
        "output",
        left_out={
            "Restore": "the outcome is the resource's status, Events and annotations",
            "Backup": "the outcome is the resource's status and Events",
        },
        type=click.Choice([f.value for f in OutputFormat]),
        default=OutputFormat.TEXT.value,
        show_default=True,
        callback=lambda _ctx, _param, value: OutputFormat(value),
        help="Output format.",
    )(f)


def storage_options(f: F) -> F:
    return apply_options(
        f,
        [
            click.option(
                "--storage",
                envvar="STATUSVAULT_STORAGE",
                metavar="URL",
                help="Directory, file://PATH or s3://bucket/prefix. [default: $XDG_DATA_HOME/statusvault]",
            ),
            option(
                "--s3-endpoint-url",
                left_out=everywhere(CONNECTION),
                envvar=["STATUSVAULT_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"],
                help="S3 endpoint for MinIO, Ceph, ... (env AWS_ENDPOINT_URL).",
            ),
            option(
                "--s3-region",
                left_out=everywhere(CONNECTION),
                envvar=["STATUSVAULT_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"],
                help="Bucket region.",
            ),
            option(
                "--s3-addressing-style",
                left_out=everywhere(CONNECTION),
                envvar="STATUSVAULT_S3_ADDRESSING_STYLE",
                default="auto",
                type=click.Choice(["auto", "path", "virtual"]),
                show_default=True,
            ),
            option(
                "--s3-ca-bundle",
                left_out=everywhere(CONNECTION),
                envvar="STATUSVAULT_S3_CA_BUNDLE",
                type=click.Path(dir_okay=False),
                help="CA bundle (PEM) for the S3 endpoint's TLS certificate. The commands that render in-cluster "
                "manifests carry it into the cluster: a ConfigMap whose ca.crt is mounted read-only into each pod.",
            ),
            option(
                "--s3-insecure-skip-tls-verify",
                left_out=everywhere(CONNECTION),
                envvar="STATUSVAULT_S3_INSECURE_SKIP_TLS_VERIFY",
                is_flag=True,
                help="Do not verify the S3 endpoint's certificate.",
            ),
            option(
                "--s3-sse",
                left_out=everywhere(CONNECTION),
                envvar="STATUSVAULT_S3_SSE",
                type=click.Choice(["AES256", "aws:kms"]),
                help="Server-side encryption.",
            ),
            option(
                "--s3-kms-key-id",
                left_out=everywhere(CONNECTION),
                envvar="STATUSVAULT_S3_KMS_KEY_ID",
                help="KMS key for --s3-sse aws:kms.",
            ),
            option(
                "--s3-checksum",
                left_out=everywhere(CONNECTION),
                envvar="STATUSVAULT_S3_CHECKSUM",
                default="when_supported",
                type=click.Choice(["when_supported", "when_required"]),
                show_default=True,
                help="Request checksums; non-AWS stores need when_required.",
            ),
            option(
                "--s3-profile",
                left_out=everywhere(CONNECTION),
                envvar=["STATUSVAULT_S3_PROFILE", "AWS_PROFILE"],
                help="AWS profile of this machine (refused by the commands that render in-cluster manifests: a pod "
                "gets credentials from --credentials-secret or its own identity).",
            ),
        ],
    )


def selection_options(f: F) -> F:
    return apply_options(
        f,
        [
            click.option(
                "-n",
                "--namespace",
                "namespaces",
                multiple=True,
                envvar="STATUSVAULT_NAMESPACE",
                help="Namespace to take (repeatable, or comma-separated).",
            ),
            click.option(
                "--include-resources",
                multiple=True,
                envvar="STATUSVAULT_INCLUDE_RESOURCES",
                help="resource.group names to take (comma-separated).",
            ),
            click.option(
                "--exclude-resources",
                multiple=True,
                envvar="STATUSVAULT_EXCLUDE_RESOURCES",
                help="resource.group names to leave out (comma-separated).",
            ),
            click.option("-l", "--selector", default="", envvar="STATUSVAULT_SELECTOR", help="Label selector."),
            click.option(
                "--name",
                "names",
                multiple=True,
                metavar="NAME|GLOB",
                envvar="STATUSVAULT_NAMES",
                help="Object names to take (repeatable or comma-separated; wildcards such as 'prod-*'). "
                "Not applied to CRDs and Namespaces.",
            ),
        ],
    )


def metrics_options(f: F) -> F:
    return apply_options(
        f,
        [
            option(
                "--metrics-textfile",
                left_out=everywhere(CONTROLLERS),
                type=click.Path(dir_okay=False),
                envvar="STATUSVAULT_METRICS_TEXTFILE",
                help="Write run metrics to this file (node-exporter textfile collector).",
            ),
            option(
                "--metrics-pushgateway",
                left_out=everywhere(CONTROLLERS),
                metavar="URL",
                envvar="STATUSVAULT_METRICS_PUSHGATEWAY",
                help="Push run metrics to this Prometheus Pushgateway (add semantics).",
            ),
        ],
    )


def allow_privileged_option(f: F) -> F:
    return option(
        "--allow-privileged-resources",
        left_out=PRIVILEGED,
        multiple=True,
        metavar="R,...|'*'",
        help="Privileged types (RBAC, admission, workloads and Pods, Secrets, ServiceAccounts, cluster-scoped "
        "built-ins; customresourcedefinitions to replace existing CRDs) the restore may write when named by "
        "--include-resources: a backup alone never brings them (docs/security.md).",
    )(f)


def cluster_resources_option(f: F) -> F:
    return click.option(
        "--include-cluster-resources/--no-include-cluster-resources",
        default=None,
        help="Cluster-scoped custom resources. [default: on unless -n is given; a type named in --include-resources "
        "is taken]",
    )(f)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StorageArgs:
    """--storage and the --s3-* options (storage_options)."""

    storage: str | None
    s3_endpoint_url: str | None
    s3_region: str | None
    s3_addressing_style: str
    s3_ca_bundle: str | None
    s3_insecure_skip_tls_verify: bool
    s3_sse: str | None
    s3_kms_key_id: str | None
    s3_checksum: str
    s3_profile: str | None

    def s3(self) -> S3Options:
        return S3Options(
            endpoint_url=self.s3_endpoint_url,
            region=self.s3_region,
            addressing_style=self.s3_addressing_style,
            ca_bundle=self.s3_ca_bundle,
            insecure_skip_tls_verify=self.s3_insecure_skip_tls_verify,
            sse=self.s3_sse,
            kms_key_id=self.s3_kms_key_id,
            checksum=self.s3_checksum,
            profile=self.s3_profile,
        )

    def check_in_cluster(self, what: str) -> None:
        """What runs in a pod stores in S3 (a pod's filesystem does not last) and has none of this machine's files:
        --s3-profile is refused (one only in the environment, such as $AWS_PROFILE, is left on this machine)."""
        if not str(self.storage or "").startswith("s3://"):
            raise ConfigError(f"{what} needs --storage s3://bucket/prefix: a pod's filesystem does not last")
        ctx = click.get_current_context(silent=True)
        from_environment = ctx is not None and ctx.get_parameter_source("s3_profile") == ParameterSource.ENVIRONMENT
        if self.s3_profile and not from_environment:
            raise ConfigError(
                f"{what} cannot use --s3-profile: a profile is a file on this machine; in a cluster, credentials "
                "come from --credentials-secret or the pod's identity"
            )

    def ca_pem(self) -> str:
        """The --s3-ca-bundle's certificates, read now to be carried into the cluster ("" without one)."""
        return read_ca_bundle(self.s3_ca_bundle) if self.s3_ca_bundle else ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SelectionArgs:
    """selection_options and --include-cluster-resources; -A and --include-crds where the command has them."""

    namespaces: tuple[str, ...]
    include_resources: tuple[str, ...]
    exclude_resources: tuple[str, ...]
    selector: str
    names: tuple[str, ...]
    include_cluster_resources: bool | None
    all_namespaces: bool = False  # backup, watch run
    include_crds: bool | None = True  # None (schedule render, watch render): on unless -n is given

    def selection(self) -> Selection:
        return Selection.from_options(
            namespaces=self.namespaces,
            include_resources=self.include_resources,
            exclude_resources=self.exclude_resources,
            selector=self.selector,
            names=self.names,
            include_cluster_resources=self.include_cluster_resources,
            include_crds=self.include_crds,
            all_namespaces=self.all_namespaces,
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class EncryptionArgs:
    """--encryption-key-file (encryption_option)."""

    encryption_key_file: str | None

    def key(self) -> Key | None:
        return Key.from_file(self.encryption_key_file) if self.encryption_key_file else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class KeysArgs:
    """Repeated --encryption-key-file and --kms-key-id (keys_options)."""

    encryption_key_file: tuple[str, ...]
    kms_key_id: tuple[str, ...]

    def keys(self) -> Keyring:
        """The keys, in the order given: key files first, then KMS keys."""
        files = [FileKek.from_file(p) for p in self.encryption_key_file]
        return Keyring((*files, *(kek_of(f"kms:{k}") for k in self.kms_key_id)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class SigningArgs:
    """--signing-key-file, --signing-kms-key-id (signing_options)."""

    signing_key_file: str | None
    signing_kms_key_id: str | None

    def signer(self) -> Signer | None:
        if self.signing_key_file and self.signing_kms_key_id:
            raise ConfigError("give --signing-key-file or --signing-kms-key-id, not both")
        if self.signing_kms_key_id:
            from statusvault.keys.kms import KmsSigner  # only KMS users pay for boto3's import

            return KmsSigner(self.signing_kms_key_id)
        return FileSigner.from_file(self.signing_key_file) if self.signing_key_file else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class VerifyKeysArgs:
    """Repeated --verify-key-file and --verify-kms-key-id (verify_options)."""

    verify_key_file: tuple[str, ...]
    verify_kms_key_id: tuple[str, ...]

    def verifiers(self) -> tuple[PublicKey, ...]:
        files = [PublicKey.from_file(p) for p in self.verify_key_file]
        if not self.verify_kms_key_id:
            return tuple(files)
        from statusvault.keys.kms import KmsKek

        return (*files, *(KmsKek(k).public_key() for k in self.verify_kms_key_id))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrustedKeysArgs(KeysArgs, VerifyKeysArgs):
    """The keys that open encrypted backups and those that check signed ones (restore, verify)."""

    def keys(self) -> Keyring:
        return dataclasses.replace(super().keys(), verifiers=self.verifiers())


@dataclasses.dataclass(frozen=True, kw_only=True)
class LockArgs:
    """--lock-mode, --lock-for and --legal-hold (lock_options)."""

    lock_mode: str | None
    lock_for: str | None
    legal_hold: bool

    def lock(self, now: dt.datetime) -> ObjectLock | None:
        """The Object Lock a backup starting `now` is written with, or None."""
        return asked_lock(self.lock_mode, self.lock_for, self.legal_hold, now)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DependencyArgs:
    """--with-dependencies and --allow-plaintext-secrets (dependency_options)."""

    with_dependencies: bool | None
    allow_plaintext_secrets: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetricsArgs:
    """--metrics-textfile and --metrics-pushgateway (metrics_options)."""

    metrics_textfile: str | None
    metrics_pushgateway: str | None

    def recorded(self, operation: str, schedule: str = "") -> AbstractContextManager[RunMetrics]:
        """The run's metrics, published when the block ends (a block that raises is a failed run)."""
        return recorded(operation, schedule, self.metrics_textfile, self.metrics_pushgateway)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ManifestArgs:
    """What `schedule render`, `watch render` and `controller render` share (manifest_options)."""

    image: str
    credentials_secret: str
    encryption_key_secret: str
    apply_: bool
    dry_run: DryRun
