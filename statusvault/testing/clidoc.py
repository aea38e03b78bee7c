"""Generate docs/cli.md from the commands' --help (`make docs`); a test keeps the two in step."""

from __future__ import annotations

import click

from statusvault.cli.declared import command_options
from statusvault.cli.main import cli
from statusvault.errors import ExitStatus
from statusvault.flagtable import markdown

MEANING = {
    ExitStatus.PARTIAL_FAILURE: "partial failure: the run ended short of what was asked; its last line names each "
    "shortfall (failed objects, objects without their saved status, objects not paused or still paused, gates "
    "that timed out, and with `--strict` what the server changed), as `-o json`'s `verdict` does",
}

HEADER = """# CLI reference

Generated from `statusvault --help` by `make docs`; a test fails when it is out of date.

`--dry-run` has one shape in every command that has one, kubectl's: `--dry-run=none|client|server` (the modes the
command has; `client` changes nothing, `server` sends every write with dryRun=All). A bare `--dry-run`, the old
spelling of prune and controller install, still means `client` and says it is deprecated.

## Exit codes

| code | meaning |
|---|---|
""" + "".join(f"| {s.value} | {MEANING.get(s, s.name.lower().replace('_', ' '))} |\n" for s in ExitStatus)


def help_text(command: click.Command, path: str) -> str:
    settings = {"help_option_names": ["-h", "--help"], "terminal_width": 100, "max_content_width": 100}
    with click.Context(command, info_name=path, **settings) as ctx:  # type: ignore[arg-type]
        return command.get_help(ctx)


def sections(command: click.Command, path: str) -> list[str]:
    """This command's help, then each subcommand's, depth first."""
    out = [f"\n## {path}\n\n```\n{help_text(command, path)}\n```\n"]
    if isinstance(command, click.Group):
        with click.Context(command, info_name=path) as ctx:
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, f"{path} lists {name} but has no such command"
                out += sections(sub, f"{path} {name}")
    return out


def render() -> str:
    return HEADER + "\n" + markdown(command_options()) + "".join(sections(cli, "statusvault"))


if __name__ == "__main__":
    print(render(), end="")
