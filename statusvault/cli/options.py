"""Option groups shared by several commands (storage, selection, output)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from statusvault.archive.crypto import Key
from statusvault.archive.envelope import FileKek, Kek, Keyring
from statusvault.cli.output import FORMATS
from statusvault.errors import ConfigError
from statusvault.retention import parse_duration
from statusvault.schedule import DEFAULT_IMAGE
from statusvault.storage import S3Options
from statusvault.storage.base import ObjectLock

F = TypeVar("F", bound=Callable[..., Any])


def _apply(f: F, decorators: list[Callable[[F], F]]) -> F:
    for d in reversed(decorators):
        f = d(f)
    return f


def split_csv(values: tuple[str, ...]) -> tuple[str, ...]:
    """`--x a,b --x c` -> (a, b, c)."""
    return tuple(v.strip() for raw in values for v in raw.split(",") if v.strip())


def default_state_dir() -> str:
    return str(Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "statusvault")


def state_dir_option(f: F) -> F:
    return click.option(
        "--state-dir",
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
        "prunes it, a mutating webhook) or answered a write with a Warning; both are reported either way.",
    )(f)


def manifest_options(f: F) -> F:
    """What `schedule render` and `controller render` share: the pod's image and Secrets, and --apply."""
    return _apply(
        f,
        [
            click.option("--image", default=DEFAULT_IMAGE, show_default=True, help="statusvault container image."),
            click.option(
                "--credentials-secret", default="", help="Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY."
            ),
            click.option(
                "--encryption-key-secret", default="", help="Secret whose 'key' is the backups' encryption key."
            ),
            click.option(
                "--apply", "apply_", is_flag=True, help="Apply the manifests (server-side apply) instead of printing."
            ),
            click.option(
                "--dry-run",
                type=click.Choice(["none", "server"]),
                default="none",
                show_default=True,
                help="With --apply: server sends every write with dryRun=All.",
            ),
        ],
    )


def encryption_option(f: F) -> F:
    return click.option(
        "--encryption-key-file",
        type=click.Path(dir_okay=False),
        envvar="STATUSVAULT_ENCRYPTION_KEY_FILE",
        help="Client-side encryption: a file with a base64 32-byte key (`head -c 32 /dev/urandom | base64`).",
    )(f)


def encryption_key(kw: dict[str, Any]) -> Key | None:
    """Pop --encryption-key-file out of a command's kwargs and read the key."""
    path = kw.pop("encryption_key_file", None)
    return Key.from_file(path) if path else None


def keys_options(f: F) -> F:
    """Keys that wrap (backup) or may unwrap (restore, verify) each backup's data key: key files and KMS keys."""
    return _apply(
        f,
        [
            click.option(
                "--encryption-key-file",
                type=click.Path(dir_okay=False),
                multiple=True,
                envvar="STATUSVAULT_ENCRYPTION_KEY_FILE",
                help="Client-side encryption: a file with a base64 32-byte key (`head -c 32 /dev/urandom | base64`). "
                "Repeatable: a backup's data key is wrapped by each; a restore uses whichever unwraps it.",
            ),
            click.option(
                "--kms-key-id",
                multiple=True,
                envvar="STATUSVAULT_KMS_KEY_ID",
                help="An AWS KMS key (ID, ARN or alias/NAME) that wraps or unwraps the data key, as a key file does "
                "(repeatable; AWS_REGION or the ARN's region; AWS_ENDPOINT_URL_KMS for another endpoint).",
            ),
        ],
    )


def keyring(kw: dict[str, Any]) -> Keyring:
    """Pop --encryption-key-file and --kms-key-id out of a command's kwargs: the keys, in the order given."""
    files = [FileKek.from_file(p) for p in kw.pop("encryption_key_file", None) or ()]
    kms = [kek_of(f"kms:{k}") for k in kw.pop("kms_key_id", None) or ()]
    return Keyring((*files, *kms))


def kek_of(text: str) -> Kek:
    """A key as --from/--to name it: `kms:ID|ARN|alias/NAME`, else the path of a key file."""
    if text.startswith("kms:"):
        from statusvault.kms import KmsKek  # only KMS users pay for boto3's import

        return KmsKek(text.removeprefix("kms:"))
    return FileKek.from_file(text)


def lock_options(f: F) -> F:
    return _apply(
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


def object_lock(kw: dict[str, Any], now: dt.datetime) -> ObjectLock | None:
    """Pop the lock options: the Object Lock a backup starting `now` is written with, or None."""
    mode, duration, hold = kw.pop("lock_mode", None), kw.pop("lock_for", None), kw.pop("legal_hold", False)
    until = (now + parse_duration(duration)).replace(microsecond=0) if mode and duration else None
    if until is not None and until <= now:
        raise ConfigError("--lock-for must be longer than zero")
    if until is None and not hold:
        return None
    return ObjectLock(mode.upper() if until is not None else "", until, hold)


def output_option(f: F) -> F:
    return click.option(
        "-o",
        "--output",
        "output",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="Output format.",
    )(f)


def storage_options(f: F) -> F:
    return _apply(
        f,
        [
            click.option(
                "--storage",
                envvar="STATUSVAULT_STORAGE",
                metavar="URL",
                help="Directory, file://PATH or s3://bucket/prefix. [default: $XDG_DATA_HOME/statusvault]",
            ),
            click.option(
                "--s3-endpoint-url",
                envvar=["STATUSVAULT_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"],
                help="S3 endpoint for MinIO, Ceph, ... (env AWS_ENDPOINT_URL).",
            ),
            click.option(
                "--s3-region",
                envvar=["STATUSVAULT_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"],
                help="Bucket region.",
            ),
            click.option(
                "--s3-addressing-style",
                envvar="STATUSVAULT_S3_ADDRESSING_STYLE",
                default="auto",
                type=click.Choice(["auto", "path", "virtual"]),
                show_default=True,
            ),
            click.option(
                "--s3-ca-bundle",
                envvar="STATUSVAULT_S3_CA_BUNDLE",
                type=click.Path(dir_okay=False),
                help="CA bundle for the S3 endpoint's TLS certificate.",
            ),
            click.option(
                "--s3-insecure-skip-tls-verify",
                envvar="STATUSVAULT_S3_INSECURE_SKIP_TLS_VERIFY",
                is_flag=True,
                help="Do not verify the S3 endpoint's certificate.",
            ),
            click.option(
                "--s3-sse",
                envvar="STATUSVAULT_S3_SSE",
                type=click.Choice(["AES256", "aws:kms"]),
                help="Server-side encryption.",
            ),
            click.option("--s3-kms-key-id", envvar="STATUSVAULT_S3_KMS_KEY_ID", help="KMS key for --s3-sse aws:kms."),
            click.option(
                "--s3-checksum",
                envvar="STATUSVAULT_S3_CHECKSUM",
                default="when_supported",
                type=click.Choice(["when_supported", "when_required"]),
                show_default=True,
                help="Request checksums; non-AWS stores need when_required.",
            ),
            click.option("--s3-profile", envvar=["STATUSVAULT_S3_PROFILE", "AWS_PROFILE"], help="AWS profile."),
        ],
    )


def s3_options(kw: dict[str, Any]) -> S3Options:
    """Pop the --s3-* options out of a command's kwargs."""
    return S3Options(
        endpoint_url=kw.pop("s3_endpoint_url"),
        region=kw.pop("s3_region"),
        addressing_style=kw.pop("s3_addressing_style"),
        ca_bundle=kw.pop("s3_ca_bundle"),
        insecure_skip_tls_verify=kw.pop("s3_insecure_skip_tls_verify"),
        sse=kw.pop("s3_sse"),
        kms_key_id=kw.pop("s3_kms_key_id"),
        checksum=kw.pop("s3_checksum"),
        profile=kw.pop("s3_profile"),
    )


def selection_options(f: F) -> F:
    return _apply(
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
    return _apply(
        f,
        [
            click.option(
                "--metrics-textfile",
                type=click.Path(dir_okay=False),
                envvar="STATUSVAULT_METRICS_TEXTFILE",
                help="Write run metrics to this file (node-exporter textfile collector).",
            ),
            click.option(
                "--metrics-pushgateway",
                metavar="URL",
                envvar="STATUSVAULT_METRICS_PUSHGATEWAY",
                help="Push run metrics to this Prometheus Pushgateway (add semantics).",
            ),
        ],
    )


def cluster_resources_option(f: F) -> F:
    return click.option(
        "--include-cluster-resources/--no-include-cluster-resources",
        default=None,
        help="Cluster-scoped custom resources. [default: on unless -n is given; a type named in --include-resources "
        "is taken]",
    )(f)
