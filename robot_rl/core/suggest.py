""""Did you mean" hints for a name a user mistyped (a command, an option, a node or launch parameter)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The choice most like `name` (difflib's ratio, at least 0.6), or None when none is close."""
    matches = difflib.get_close_matches(name, list(choices), n=1)
    return matches[0] if matches else None
