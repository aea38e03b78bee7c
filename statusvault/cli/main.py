"""The `statusvault` command group and the one error boundary that maps failures to exit codes."""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys

import click

from statusvault import installed_version
from statusvault.cli.app import App
from statusvault.cli.completion import COMPLETE_VAR, CobraComplete
from statusvault.cli.flags import output_option
from statusvault.cli.output import OutputFormat, emit, table
from statusvault.errors import ExitStatus, StatusVaultError
from statusvault.runtime.logs import setup_logging
from statusvault.runtime.throttle import SERVER_WAIT_ENV, SERVER_WAIT_SECONDS

log = logging.getLogger("statusvault")


# Each command's module, imported when the command runs (or help lists it): a restore does not pay for
# importing the controller, the watcher and their libraries. tests/unit/test_cli_lazy.py keeps this complete.
COMMAND_MODULES = {
    **dict.fromkeys(("backup", "list", "describe", "verify", "download", "delete", "import-velero"), "backups"),
    **dict.fromkeys(("restore", "unpause"), "restore"),
    "move": "move",
    **dict.fromkeys(("schedule", "prune"), "schedule"),
    "controller": "controller",
    "watch": "watch",
    **dict.fromkeys(("hold", "keys"), "keys"),
    "version": "version",
    "completion": "completion",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMAND_MODULES:
            load_commands(COMMAND_MODULES[name])
        return self.commands.get(name)


def _show_version(ctx: click.Context, value: bool) -> None:
    """--version, as click's version_option prints it; the version is read only when asked for."""
    if value and not ctx.resilient_parsing:
        click.echo(f"statusvault, version {installed_version()}")
        ctx.exit()


@click.group(
    cls=_LazyGroup,
    context_settings={
        "help_option_names": ["-h", "--help"],
        "max_content_width": 100,
        "auto_envvar_prefix": "STATUSVAULT",
    },
)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=lambda ctx, _param, value: _show_version(ctx, value),
    help="Show the version and exit.",
)
@click.option(
    "--kubeconfig",
    envvar="STATUSVAULT_KUBECONFIG",
    type=click.Path(dir_okay=False),
    help="Kubeconfig file. [default: $KUBECONFIG, ~/.kube/config, or in-cluster]",
)
@click.option("--context", envvar="STATUSVAULT_CONTEXT", help="Kubeconfig context.")
@click.option("--debug", is_flag=True, envvar="STATUSVAULT_DEBUG", help="Debug logs and tracebacks.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    envvar="STATUSVAULT_LOG_FORMAT",
    show_default=True,
    help="Log line format (stderr).",
)
@click.option(
    "--server-wait-seconds",
    type=click.FloatRange(0, 3600),
    default=SERVER_WAIT_SECONDS,
    envvar=SERVER_WAIT_ENV,
    show_default=True,
    help="How long an unavailable API server (restarting, failing over) is waited out before a request fails.",
)
@click.pass_context
def cli(
    ctx: click.Context,
    kubeconfig: str | None,
    context: str | None,
    debug: bool,
    log_format: str,
    server_wait_seconds: float,
) -> None:
    """Back up Kubernetes custom resources with their status; restore them in two passes."""
    os.environ[SERVER_WAIT_ENV] = str(server_wait_seconds)  # every client of this process, and its workers
    setup_logging(log_format, debug)
    ctx.obj = App(kubeconfig, context, debug, log_format)
    ctx.call_on_close(ctx.obj.close)


@cli.command("cluster-info")
@output_option
@click.pass_obj
def cluster_info(app: App, output: OutputFormat) -> None:
    """Show the server version and which served resources have a /status subresource."""
    version = app.client().server_version()
    resources = sorted(app.discovery().preferred, key=lambda r: r.qualified)
    data = {
        "server": app.client().transport.host,
        "version": version.get("gitVersion"),
        "resources": [
            {
                "name": r.qualified,
                "version": r.version,
                "kind": r.kind,
                "namespaced": r.namespaced,
                "statusSubresource": r.has_status,
                "custom": r.custom,
            }
            for r in resources
        ],
    }
    rows = [
        (
            r.qualified,
            r.version,
            r.kind,
            "yes" if r.namespaced else "no",
            "yes" if r.has_status else "no",
            "yes" if r.custom else "no",
        )
        for r in resources
    ]
    text = f"Server:  {data['server']}\nVersion: {data['version']}\n\n" + table(
        ["RESOURCE", "VERSION", "KIND", "NAMESPACED", "STATUS-SUBRESOURCE", "CUSTOM"], rows
    )
    emit(data, output, text)


def load_commands(module: str) -> list[click.Command]:
    """Import one command module and add its commands to the group."""
    loaded = importlib.import_module(f"statusvault.cli.{module}")
    commands: list[click.Command] = list(loaded.COMMANDS)
    for command in commands:
        cli.add_command(command)
    return commands


def main(argv: list[str] | None = None, prog_name: str = "statusvault") -> int:
    """Run the CLI; every failure becomes one line on stderr and an ExitStatus. `prog_name` is what usage lines
    and help call it (`kubectl statusvault` when kubectl runs it as a plugin)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:]) or os.environ.get("STATUSVAULT_DEBUG", "") in (
        "1",
        "true",
        "yes",
    )
    try:
        cli.main(args=argv, prog_name=prog_name, complete_var=COMPLETE_VAR, standalone_mode=False)
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.UsageError as e:
        click.echo(f"error: {e.format_message()}", err=True)
        return ExitStatus.USAGE
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        return ExitStatus.INTERRUPTED
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)
        return ExitStatus.ERROR
    except StatusVaultError as e:
        if debug:
            log.exception("failed")
        click.echo(f"error: {e}", err=True)
        return e.exit_status
    except Exception as e:
        if debug:
            log.exception("unexpected error")
        click.echo(f"error: unexpected {type(e).__name__}: {e} (run with --debug for a traceback)", err=True)
        return ExitStatus.ERROR
    return ExitStatus.SUCCESS


def entry() -> None:
    _settled_heap()
    sys.exit(main())


def _settled_heap() -> None:
    """A command run as its own process: what importing the CLI made (modules, classes, functions) lives as long as
    the process, so the cyclic garbage collector stops walking it (gc.freeze): its full collections, which a
    restore's JSON makes several of, walk only what the command made since."""
    gc.freeze()


KUBECTL_PROG_NAME = "kubectl statusvault"


def kubectl_entry() -> None:
    """kubectl-statusvault: the CLI as a kubectl plugin (`kubectl statusvault ...`), its help naming it so."""
    _settled_heap()
    sys.exit(main(prog_name=KUBECTL_PROG_NAME))


def kubectl_complete_entry() -> None:
    """kubectl_complete-statusvault: kubectl 1.26+ runs it to complete `kubectl statusvault ...`."""
    click.echo(CobraComplete(cli, sys.argv[1:], KUBECTL_PROG_NAME).complete())
