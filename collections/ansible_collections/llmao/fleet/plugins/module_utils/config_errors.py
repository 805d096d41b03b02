# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one error type of config loading, and the collector that feeds it.

Loading reports every problem it finds at once, each as ``file: key.path[row]:
what``, so an operator fixes a file in one pass instead of one error per run.
No message ever quotes a secret's value.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """``config.yaml`` or ``models.yaml`` is unusable; ``problems`` lists each reason."""

    def __init__(self, problems: list[str]):
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class Problems:
    """Collects located problems while a file is read; :meth:`raise_if_any` ends loading."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, source: str, path: str, message: str) -> None:
        where = f"{source}: {path}" if path else source
        self.items.append(f"{where}: {message}")

    def raise_if_any(self) -> None:
        if self.items:
            raise ConfigError(self.items)


def key_path(*parts: object) -> str:
    """``fleet``, ``hosts``, ``203.0.113.10``, ``2`` → ``fleet.hosts.203.0.113.10[2]``."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text
