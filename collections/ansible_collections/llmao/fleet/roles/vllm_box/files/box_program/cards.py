"""The box's cards as nvidia-smi names them, and the preflight against their memory.

The preflight runs before anything is written: a server that cannot fit the cards or
the disk is exit 1, nothing written, rather than a vLLM that fails at start.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from .answers import clean_text
from .assignment import Server
from .errors import DoesNotFit

# What the preflight asks nvidia-smi, one line per card.
CARD_QUERY = "index,uuid,name,memory.total,memory.free"
MAX_CARDS = 64
CARD_NUMBER_RE = re.compile(r"[0-9]{1,9}\Z")
CARD_UUID_RE = re.compile(r"[A-Za-z0-9-]{1,96}\Z")


@dataclass(frozen=True)
class Card:
    """One GPU as nvidia-smi numbers and names it; its memory in GiB."""

    index: int
    uuid: str
    name: str
    total_gb: Decimal
    free_gb: Decimal
    total_mib: int = 0

    @property
    def label(self) -> str:
        return f"GPU {self.index}"

    def report(self, with_uuid: bool = False) -> dict[str, Any]:
        """The card as the report carries it; the applied record adds the UUID, which names
        the physical card should the indices ever be renumbered."""
        entry = {"index": self.index, "name": self.name, "memory_total_mib": self.total_mib}
        return {**entry, "uuid": self.uuid} if with_uuid else entry


NO_NVIDIA_SMI = "no nvidia-smi: GPU memory unknown"
# What a box without the NVIDIA driver's tool is told, and what one without a GPU would need.
NO_GPU_BOX = ("no nvidia-smi on this box: its vLLM servers would run vLLM's CUDA build, which "
              "needs an NVIDIA GPU and its driver; nothing written. (A CPU-only box would need "
              "vLLM's CPU build as VLLM_BIN and each recipe's KV cache sized with "
              "--kv-cache-memory-bytes in its args, since on the CPU --gpu-memory-utilization "
              "is a share of the host's RAM: llmao does not run such boxes.)")


def query_cards(timeout_s: float = 30.0) -> tuple[tuple[Card, ...] | None, str]:
    """Ask nvidia-smi about every card; (None, why) when the hardware is unknown."""
    command = ["nvidia-smi", f"--query-gpu={CARD_QUERY}", "--format=csv,noheader,nounits"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except FileNotFoundError:
        return None, NO_NVIDIA_SMI
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"nvidia-smi did not run ({exc}): GPU memory unknown"
    if done.returncode != 0:
        return None, f"nvidia-smi failed (exit {done.returncode}): GPU memory unknown"
    return parse_cards(done.stdout)


def parse_cards(output: str) -> tuple[tuple[Card, ...] | None, str]:
    """Every line a card (``index, uuid, name, total MiB, free MiB``), sorted by index.

    One line that cannot be read, a repeated index or too many lines make the
    whole answer unknown: placing servers on a guess would be worse than not.
    """
    lines = [line for line in output.splitlines() if line.strip()]
    cards = [parse_card(line) for line in lines[:MAX_CARDS + 1]]
    if not lines or len(lines) > MAX_CARDS or None in cards \
            or len({card.index for card in cards}) != len(cards):
        return None, f"nvidia-smi said {clean_text(output)[:80]!r}: GPU memory unknown"
    ordered = tuple(sorted(cards, key=lambda card: card.index))
    return ordered, "\n".join(f"{card.label} ({card.name}): {gib(card.total_gb)} GiB total, "
                              f"{gib(card.free_gb)} GiB free" for card in ordered)


def parse_card(line: str) -> Card | None:
    """One line of the query; the name may hold commas, the other fields cannot."""
    head = line.split(",", 2)
    tail = head[-1].rsplit(",", 2)
    if len(head) != 3 or len(tail) != 3:
        return None
    index, uuid, (name, total, free) = head[0].strip(), head[1].strip(), \
        (part.strip() for part in tail)
    if not (CARD_NUMBER_RE.match(index) and CARD_UUID_RE.match(uuid)
            and CARD_NUMBER_RE.match(total) and CARD_NUMBER_RE.match(free)):
        return None
    return Card(index=int(index), uuid=uuid, name=clean_text(name)[:64] or "unnamed",
                total_gb=Decimal(int(total)) / 1024, free_gb=Decimal(int(free)) / 1024,
                total_mib=int(total))


def disk_free_gb(path: Path) -> Decimal | None:
    """Free space for the data directory, measured at its nearest existing ancestor."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        stat = os.statvfs(probe)
    except OSError:
        return None
    return Decimal(stat.f_bavail * stat.f_frsize) / 2**30


def gib(value: Decimal) -> str:
    return f"{value.quantize(Decimal('0.1')):f}"


def shortfall(servers: Iterable[Server], attr: str, free: Decimal, where: str) -> str | None:
    """Say what does not fit on one resource, naming every server that asks for it."""
    asks = [(server.name, getattr(server, attr)) for server in servers]
    needed = sum((size for name, size in asks), Decimal(0))
    if needed <= free:
        return None
    parts = " + ".join(f"{name} {size:f} GiB" for name, size in asks)
    return f"{where}: {parts} = {needed:f} GiB of {attr} needed, {gib(free)} GiB free"


def applied_models(record: Mapping[str, Any]) -> set[str]:
    servers = record.get("servers")
    return {entry.get("model") for entry in servers if isinstance(entry, dict)} \
        if isinstance(servers, list) else set()


def preflight(servers: tuple[Server, ...], cards: tuple[Card, ...] | None,
              placement: Mapping[str, tuple[int, ...]], disk_free: Decimal | None,
              data_dir: Path, applied: Mapping[str, Any] | None) -> list[str]:
    """Check vram_gb on every card and disk_gb on the disk; notes for the log, DoesNotFit if short.

    ``vram_gb`` is per card: each card must hold the servers placed on it. Free
    memory means something only on a box that runs none of our servers: once an
    assignment is applied, its vLLM processes hold the cards (until supervisorctl
    update restarts them) and the division alone checks the weights against each
    card's total. Their weights are on disk too, so disk_gb then counts only the
    models the applied record does not list.
    """
    unknown = "free memory unknown"
    disk_servers = servers
    if applied is not None:
        unknown = ("the applied servers hold its memory, the division checks the weights "
                   "against the card total instead")
        present = applied_models(applied)
        disk_servers = tuple(s for s in servers if s.model not in present)
    if cards is None or not placement:
        checks = [("vram_gb", servers, None, "GPU 0", "free memory unknown")]
    else:
        checks = [("vram_gb", tuple(s for s in servers if card.index in placement[s.name]),
                   card.free_gb if applied is None else None, card.label, unknown)
                  for card in cards]
    checks.append(("disk_gb", disk_servers, disk_free, f"disk {data_dir}", "free space unknown"))
    notes: list[str] = []
    problems: list[str] = []
    for attr, subset, free, where, why in checks:
        asking = [server for server in subset if getattr(server, attr) is not None]
        if not asking:
            notes.append(f"{where}: no {attr} to check")
        elif free is None:
            notes.append(f"{where}: {why}; {attr} not checked")
        else:
            problem = shortfall(asking, attr, free, where)
            if problem:
                problems.append(problem)
            else:
                notes.append(f"{where}: {attr} fits ({gib(free)} GiB free)")
    if problems:
        raise DoesNotFit("the assignment does not fit this box; nothing written:\n  "
                         + "\n  ".join(problems))
    return notes
