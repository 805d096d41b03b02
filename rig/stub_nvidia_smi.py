#!/usr/bin/env python3
"""A stand-in for `nvidia-smi` on test boxes, which have no GPU.

Why: the box program reads the card's memory to check that models fit and to divide the card
between servers; with this stub those paths run for real against chosen numbers. The cards come
from a JSON file (env STUB_NVIDIA_SMI, default /etc/llmao-stub/gpu.json; missing means one
24 GiB card), any number of them, each with its own memory:

    {"gpus": [{"total_mib": 24576, "free_mib": 24000, "name": "...", "uuid": "GPU-..."}]}

`name` and `uuid` are optional (a stub name; a UUID made from the card's index).

`{"gpus": []}` or `"absent": true` behaves like a machine without a driver: a message and exit 9.
Supported: `--query-gpu=FIELDS --format=csv[,noheader][,nounits]`, `-L`, and no arguments.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_FILE = "/etc/llmao-stub/gpu.json"
DEFAULT_NAME = "NVIDIA Stub GPU"
NO_DRIVER_EXIT = 9
BAD_ARGUMENTS_EXIT = 2
NO_DRIVER_MESSAGE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    total_mib: int
    free_mib: int
    uuid: str = ""

    def used_mib(self) -> int:
        return self.total_mib - self.free_mib


# field name -> (value, unit shown in headers and after values unless nounits)
FIELDS = {
    "index": (lambda gpu: gpu.index, None),
    "uuid": (lambda gpu: gpu.uuid, None),
    "name": (lambda gpu: gpu.name, None),
    "memory.total": (lambda gpu: gpu.total_mib, "MiB"),
    "memory.used": (lambda gpu: gpu.used_mib(), "MiB"),
    "memory.free": (lambda gpu: gpu.free_mib, "MiB"),
}


class StubError(Exception):
    """Ends the stub with a message and an exit status: on stdout as nvidia-smi prints its own
    errors, on stderr for mistakes in the stub's file, which the real tool cannot make."""

    def __init__(self, message: str, status: int, *, stub_config: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.stream = sys.stderr if stub_config else sys.stdout


def load_gpus(path: str) -> list[Gpu]:
    """The cards the file describes; raises StubError(9) when it says there is no driver."""
    try:
        config = json.loads(Path(path).read_text())
    except FileNotFoundError:
        config = {"gpus": [{"total_mib": 24576, "free_mib": 24000}]}
    except (OSError, ValueError) as exc:
        raise StubError(f"stub nvidia-smi: cannot read {path}: {exc}", 1, stub_config=True) from exc
    if config.get("absent") or not config.get("gpus"):
        raise StubError(NO_DRIVER_MESSAGE, NO_DRIVER_EXIT)
    try:
        return [
            Gpu(
                index,
                str(card.get("name", DEFAULT_NAME)),
                int(card["total_mib"]),
                int(card["free_mib"]),
                str(card.get("uuid", stub_uuid(index))),
            )
            for index, card in enumerate(config["gpus"])
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise StubError(
            f"stub nvidia-smi: {path}: each gpu needs total_mib and free_mib", 1, stub_config=True
        ) from exc


def stub_uuid(index: int) -> str:
    """A UUID in nvidia-smi's shape, the same for the same index on every run."""
    return f"GPU-5face000-0000-4000-8000-{index:012d}"


def query(gpus: list[Gpu], field_list: str, format_list: str) -> str:
    """`--query-gpu` output: one CSV line per card, with or without header and units."""
    names = [name.strip() for name in field_list.split(",") if name.strip()]
    for name in names:
        if name not in FIELDS:
            raise StubError(f'Field "{name}" is not a valid field to query.', BAD_ARGUMENTS_EXIT)
    options = {option.strip() for option in format_list.split(",")}
    if "csv" not in options or not options <= {"csv", "noheader", "nounits"}:
        raise StubError(f'"{format_list}" is not a valid format.', BAD_ARGUMENTS_EXIT)
    with_units = "nounits" not in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(_header(name, with_units) for name in names))
    for gpu in gpus:
        lines.append(", ".join(_cell(gpu, name, with_units) for name in names))
    return "\n".join(lines)


def _header(name: str, with_units: bool) -> str:
    unit = FIELDS[name][1]
    return f"{name} [{unit}]" if unit and with_units else name


def _cell(gpu: Gpu, name: str, with_units: bool) -> str:
    value, unit = FIELDS[name][0](gpu), FIELDS[name][1]
    return f"{value} {unit}" if unit and with_units else str(value)


def listing(gpus: list[Gpu]) -> str:
    """`nvidia-smi -L`."""
    return "\n".join(
        f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})" for gpu in gpus
    )


def table(gpus: list[Gpu]) -> str:
    """Plain `nvidia-smi`: a short table in the spirit of the real one."""
    rule = "+" + "-" * 58 + "+"
    rows = [
        rule,
        f"| {'NVIDIA-SMI stub':<56} |",
        rule,
        f"| {'GPU  Name':<30}{'Memory-Usage':>26} |",
    ]
    for gpu in gpus:
        usage = f"{gpu.used_mib()}MiB / {gpu.total_mib}MiB"
        rows.append(f"| {gpu.index:<4} {gpu.name:<25}{usage:>26} |")
    rows.append(rule)
    return "\n".join(rows)


def parse(argv: list[str]) -> tuple[str, dict[str, str]]:
    """Split the command line into an action ("table", "list", "query") and its options."""
    options: dict[str, str] = {}
    pending = list(argv)
    action = "table"
    while pending:
        arg = pending.pop(0)
        if arg in ("-L", "--list-gpus"):
            action = "list"
            continue
        name, has_value, value = arg.partition("=")
        if name not in ("--query-gpu", "--format"):
            raise StubError(
                f"Invalid combination of input arguments ({arg}). "
                "Please run 'nvidia-smi -h' for help.",
                BAD_ARGUMENTS_EXIT,
            )
        if not has_value:
            if not pending:
                raise StubError(f"{name} needs a value.", BAD_ARGUMENTS_EXIT)
            value = pending.pop(0)
        options[name] = value
    if "--query-gpu" in options:
        if "--format" not in options:
            raise StubError("--format must be given with --query-gpu.", BAD_ARGUMENTS_EXIT)
        action = "query"
    return action, options


def run(argv: list[str]) -> str:
    action, options = parse(argv)
    gpus = load_gpus(os.environ.get("STUB_NVIDIA_SMI", DEFAULT_FILE))
    if action == "query":
        return query(gpus, options["--query-gpu"], options["--format"])
    if action == "list":
        return listing(gpus)
    return table(gpus)


def main(argv: list[str]) -> int:
    try:
        print(run(argv))
    except StubError as exc:
        print(exc, file=exc.stream)
        return exc.status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
