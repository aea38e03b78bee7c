"""Shell completion, on click's machinery: `completion bash|zsh|fish` prints the script a shell sources, and
CobraComplete answers kubectl's plugin completion (kubectl_complete-statusvault) in cobra's format."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar
from urllib.parse import urlparse

import click
from click.shell_completion import CompletionItem, ShellComplete, get_completion_class

from statusvault.cli.app import App
from statusvault.cli.flags import pass_args
from statusvault.errors import StatusVaultError
from statusvault.storage import open_store
from statusvault.store.backups import BackupStore

COMPLETE_VAR = "_STATUSVAULT_COMPLETE"  # the shell scripts' variable, whatever the program is called
SHELLS = ("bash", "zsh", "fish")

# cobra's ShellCompDirective bits, which kubectl reads from a plugin's last line (`:<directive>`)
DIRECTIVE_DEFAULT = 0  # the shell completes file names
DIRECTIVE_NO_FILE_COMP = 4
DIRECTIVE_FILTER_DIRS = 16  # with no directory given: directory names only


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompletionArgs:
    shell: str


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@pass_args(CompletionArgs)
def completion(app: App, args: CompletionArgs) -> None:
    """Print the shell completion script for statusvault: commands, options, choices and file names complete on
    TAB. Load it in the shell's start-up file, e.g. `source <(statusvault completion bash)` in ~/.bashrc,
    `source <(statusvault completion zsh)` in ~/.zshrc (after compinit), or
    `statusvault completion fish > ~/.config/fish/completions/statusvault.fish`."""
    script = get_completion_class(args.shell)
    assert script is not None  # click registers every shell of SHELLS
    root = click.get_current_context().find_root().command
    click.echo(script(root, {}, "statusvault", COMPLETE_VAR).source())


def complete_backup(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem[str]]:
    """The complete backups in the command's storage (--storage, $STATUSVAULT_STORAGE or the default directory)
    whose names start with `incomplete`. None from S3: listing a bucket on every TAB press would be slow and need
    credentials the shell may not have."""
    url = ctx.params.get("storage")
    if urlparse(url or "").scheme == "s3":
        return []
    try:
        stored = BackupStore(open_store(url)).stored()
    except (StatusVaultError, OSError):
        return []
    return [CompletionItem(s.name) for s in stored if s.complete and s.name.startswith(incomplete)]


class CobraComplete(ShellComplete):
    """click's completions as cobra's `__complete` prints them, for kubectl 1.26+'s plugin completion: kubectl runs
    `kubectl_complete-statusvault WORD... INCOMPLETE` and reads a candidate a line (`value<TAB>description`), then
    `:<directive>`."""

    name: ClassVar[str] = "cobra"
    source_template: ClassVar[str] = ""  # kubectl's own completion script calls it

    def __init__(self, cli: click.Command, words: list[str], prog_name: str) -> None:
        super().__init__(cli, {}, prog_name, COMPLETE_VAR)
        self.words = words

    def get_completion_args(self) -> tuple[list[str], str]:
        return self.words[:-1], self.words[-1] if self.words else ""

    def format_completion(self, item: CompletionItem[Any]) -> str:
        description = " ".join(str(item.help or "").split())  # one line, no tab
        return f"{item.value}\t{description}" if description else str(item.value)

    def complete(self) -> str:
        """File and directory completions are left to the shell, as cobra's directives ask; candidates otherwise."""
        args, incomplete = self.get_completion_args()
        items = self.get_completions(args, incomplete)
        kinds = {item.type for item in items}
        if "file" in kinds:
            return f":{DIRECTIVE_DEFAULT}"
        if "dir" in kinds:
            return f":{DIRECTIVE_FILTER_DIRS}"
        return "\n".join([*map(self.format_completion, items), f":{DIRECTIVE_NO_FILE_COMP}"])


COMMANDS = (completion,)
