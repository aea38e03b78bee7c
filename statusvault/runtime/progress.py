"""How engines report progress; the CLI supplies a terminal bar or log lines."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def start(self, label: str, total: int | None = None) -> None: ...

    def advance(self, n: int = 1) -> None: ...

    def finish(self) -> None: ...


class NullProgress:
    def start(self, label: str, total: int | None = None) -> None:
        pass

    def advance(self, n: int = 1) -> None:
        pass

    def finish(self) -> None:
        pass
