"""Located policy errors: every issue names the file, the line and the field."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Issue:
    file: str
    line: int | None  # 1-based; None when the problem has no single place
    path: str  # field path such as "node_groups[0].gpus[1].mode"
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        field = f" {self.path}:" if self.path else ""
        return f"{where}:{field} {self.message}"


class PolicyError(ValueError):
    """The policy is invalid; ``issues`` lists every problem found, in file order."""

    def __init__(self, issues: Sequence[Issue]) -> None:
        self.issues = sorted(issues, key=lambda i: (i.line or 0, i.path))
        n = len(self.issues)
        head = f"{n} problem{'s' if n != 1 else ''} in policy"
        super().__init__(head + ":\n" + "\n".join(f"  {i}" for i in self.issues))
