"""version: this statusvault's release, the archive formats it writes and reads, its Python, and the server's
version (kubectl version's shape: the client part first, so it prints even when the server cannot be reached)."""

from __future__ import annotations

import dataclasses
import platform
from typing import Any

import click

from statusvault import VERSION
from statusvault.archive.format import ENVELOPE_FORMAT_VERSION, FORMAT_VERSION, SUPPORTED_MAJOR
from statusvault.cli.app import App
from statusvault.cli.flags import output_option, pass_args
from statusvault.cli.output import OutputFormat, emit
from statusvault.errors import StatusVaultError
from statusvault.velero import backups as velero


@dataclasses.dataclass(frozen=True, kw_only=True)
class VersionArgs:
    client: bool
    output: OutputFormat


def client_version() -> dict[str, Any]:
    """What this statusvault is and reads, from the constants its writers and readers use."""
    return {
        "version": VERSION,
        "archiveFormat": {
            "writes": FORMAT_VERSION,
            "writesEncrypted": ENVELOPE_FORMAT_VERSION,
            "reads": f"{SUPPORTED_MAJOR}.x",
        },
        "veleroFormat": {"reads": f"{velero.SUPPORTED_MAJOR}.x"},
        "python": platform.python_version(),
    }


def client_text(client: dict[str, Any]) -> str:
    archive, velero_format = client["archiveFormat"], client["veleroFormat"]
    return (
        f"Client Version: {client['version']}\n"
        f"Archive Format: writes {archive['writes']} (encrypted: {archive['writesEncrypted']}), "
        f"reads {archive['reads']}\n"
        f"Velero Format:  reads {velero_format['reads']}\n"
        f"Python Version: {client['python']}"
    )


@click.command("version")
@click.option("--client", is_flag=True, help="Only this statusvault's versions: the server is not asked.")
@output_option
@pass_args(VersionArgs)
def version(app: App, args: VersionArgs) -> None:
    """Show statusvault's version, the archive formats it writes and reads, its Python version, and the API
    server's version (GET /version). When the server cannot be reached, the client part is shown and the command
    fails naming the server."""
    client = client_version()
    if args.client:
        emit({"clientVersion": client}, args.output, client_text(client))
        return
    try:
        kube = app.client()
        server = {"server": kube.transport.host, **kube.server_version()}
    except StatusVaultError:
        emit({"clientVersion": client}, args.output, client_text(client))
        raise
    text = f"{client_text(client)}\nServer:         {server['server']}\nServer Version: {server.get('gitVersion')}"
    emit({"clientVersion": client, "serverVersion": server}, args.output, text)


COMMANDS = (version,)
