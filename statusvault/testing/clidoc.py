"""Generate docs/cli.md from the commands' --help (`make docs`); a test keeps the two in step."""

from __future__ import annotations

import click

from statusvault.cli.main import cli
from statusvault.errors import ExitStatus

HEADER = """# CLI reference

Generated from `statusvault --help` by `make docs`; a test fails when it is out of date.

## Exit codes

| code | meaning |
|---|---|
""" + "".join(f"| {s.value} | {s.name.lower().replace('_', ' ')} |\n" for s in ExitStatus)


def help_text(name: str | None) -> str:
    command = cli if name is None else cli.commands[name]
    info = ["statusvault"] if name is None else ["statusvault", name]
    settings = {"help_option_names": ["-h", "--help"], "terminal_width": 100, "max_content_width": 100}
    with click.Context(command, info_name=" ".join(info), **settings) as ctx:  # type: ignore[arg-type]
        return command.get_help(ctx)


def render() -> str:
    parts = [HEADER, "\n## statusvault\n\n```\n" + help_text(None) + "\n```\n"]
    for name in sorted(cli.commands):
        parts.append(f"\n## statusvault {name}\n\n```\n{help_text(name)}\n```\n")
    return "".join(parts)


if __name__ == "__main__":
    print(render(), end="")
