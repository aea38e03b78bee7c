"""The command line: a thin click layer over the engines."""

from statusvault.cli.main import cli, main

__all__ = ["cli", "main"]
