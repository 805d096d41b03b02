"""Which cards each server runs on, on a box of several cards.

The search is deterministic (only card totals count), so a box places an assignment
the same way on every run; it refuses exactly when no placement holds, and says
where the preferred one stopped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .assignment import Server
from .cards import Card, gib
from .errors import DoesNotFit
from .memory import divide_memory

# Given with CUDA_VISIBLE_DEVICES: CUDA numbers cards as nvidia-smi does.
CUDA_DEVICE_ORDER = "PCI_BUS_ID"


def place_servers(servers: tuple[Server, ...], cards: tuple[Card, ...] | None
                  ) -> dict[str, tuple[int, ...]]:
    """Each server's cards (indices, ascending), or {} when the cards are unknown.

    Servers that span more cards are placed first, then in row order; each takes
    ``gpus`` distinct cards on which the memory division still holds with the
    servers already there, preferring cards that hold fewer servers, then lower
    indices. When that first choice leads nowhere the other choices are tried
    too, so a box is refused exactly when no placement holds. On one card there
    is nothing to choose: the division itself judges it, as it always has. Only
    card totals count (not free memory, which our own running servers change), so
    the same assignment on the same cards is placed the same way on every run.
    """
    if cards is None:
        return {}
    for server in servers:
        if server.gpus > len(cards):
            raise DoesNotFit(f"{server.name} needs {server.gpus} cards (gpus), this box has "
                             f"{len(cards)}: {card_list(cards)}; nothing written")
    if len(cards) == 1:
        return {server.name: (cards[0].index,) for server in servers}
    order = tuple(sorted(servers, key=lambda server: -server.gpus))
    empty: dict[int, tuple[Server, ...]] = {card.index: () for card in cards}
    found = search_placement(order, cards, empty, fit_profiles(order, cards))
    if found is None:
        raise DoesNotFit(no_placement(order, cards))
    return {server.name: found[server.name] for server in servers}


def fit_profiles(servers: tuple[Server, ...], cards: tuple[Card, ...]
                 ) -> dict[int, tuple[bool, ...]]:
    """Per card, which groups of these servers it can hold: its part in any placement.

    Two cards with the same profile and the same servers on them are interchangeable,
    whatever their sizes, so the search tries only the lowest indices of each kind: a
    few kinds at most (holding more is monotone in a card's size), not every card.
    """
    groups = [group for size in range(1, len(servers) + 1)
              for group in itertools.combinations(servers, size)]
    return {card.index: tuple(card_problem(group, card) is None for group in groups)
            for card in cards}


@dataclass(frozen=True)
class Placement:
    """The box's cards (None: unknown) and each server's cards on them."""

    cards: tuple[Card, ...] | None = None
    servers: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def devices(self, name: str) -> tuple[int, ...]:
        """CUDA_VISIBLE_DEVICES of a server: on a box of several cards only."""
        return self.servers.get(name, ()) if self.cards and len(self.cards) > 1 else ()

    def record(self, with_uuid: bool = False) -> dict[str, Any]:
        """The cards and the placement as the report (and, with UUIDs, the record) carry them."""
        if self.cards is None:
            return {}
        return {"cards": [card.report(with_uuid) for card in self.cards],
                "placement": {name: list(indices) for name, indices in self.servers.items()}}

    def notes(self) -> list[str]:
        """One line per server, on a box of several cards."""
        return [f"placement: {name} on {', '.join(f'GPU {i}' for i in indices)}"
                for name, indices in self.servers.items() if self.devices(name)]


# Nothing placed: the cards are unknown (the default of what records and reports a placement).
NO_PLACEMENT = Placement()


def card_list(cards: Iterable[Card]) -> str:
    return ", ".join(f"{card.label} {gib(card.total_gb)} GiB" for card in cards)


def card_problem(servers: tuple[Server, ...], card: Card) -> str | None:
    """Why these servers cannot share this card (the division's refusal), or None."""
    try:
        divide_memory(servers, card.total_gb)
    except DoesNotFit as refusal:
        return str(refusal)
    return None


def card_choices(server: Server, cards: tuple[Card, ...],
                 occupants: Mapping[int, tuple[Server, ...]],
                 profiles: Mapping[int, tuple[bool, ...]]) -> Iterable[tuple[int, ...]]:
    """Every set of ``server.gpus`` cards it fits on, the preferred first.

    Cards alike (same profile, same servers on them) are interchangeable: of each
    kind only the lowest indices are tried, which keeps the search small.
    """
    kinds: dict[tuple[tuple[bool, ...], tuple[Server, ...]], list[int]] = {}
    for card in cards:
        if card_problem(occupants[card.index] + (server,), card) is None:
            kinds.setdefault((profiles[card.index], occupants[card.index]),
                             []).append(card.index)
    groups = sorted(kinds.items(), key=lambda kind: (len(kind[0][1]), kind[1][0]))
    choices = [indexes for kind, indexes in groups]
    return (tuple(sorted(chosen)) for chosen in pick_cards(choices, server.gpus))


def pick_cards(groups: list[list[int]], need: int) -> Iterable[tuple[int, ...]]:
    """Ways to take ``need`` cards from the groups, as many from the first group as it has."""
    if need == 0:
        yield ()
        return
    if not groups:
        return
    first, rest = groups[0], groups[1:]
    for take in range(min(need, len(first)), -1, -1):
        for tail in pick_cards(rest, need - take):
            yield tuple(first[:take]) + tail


def search_placement(order: tuple[Server, ...], cards: tuple[Card, ...],
                     occupants: Mapping[int, tuple[Server, ...]],
                     profiles: Mapping[int, tuple[bool, ...]]
                     ) -> dict[str, tuple[int, ...]] | None:
    """The first placement of ``order`` that holds, depth first; None when none does."""
    if not order:
        return {}
    server, rest = order[0], order[1:]
    for chosen in card_choices(server, cards, occupants, profiles):
        placed = {index: servers + (server,) if index in chosen else servers
                  for index, servers in occupants.items()}
        below = search_placement(rest, cards, placed, profiles)
        if below is not None:
            return {server.name: chosen, **below}
    return None


def no_placement(order: tuple[Server, ...], cards: tuple[Card, ...]) -> str:
    """The refusal: where the preferred path stopped, naming the server, cards and numbers."""
    occupants: dict[int, tuple[Server, ...]] = {card.index: () for card in cards}
    profiles = fit_profiles(order, cards)
    lines = []
    for server in order:
        chosen = next(iter(card_choices(server, cards, occupants, profiles)), None)
        if chosen is None:
            size = f", vram_gb {server.vram_gb:f} GiB per card" if server.vram_gb else ""
            lines.append(f"{server.name} needs {server.gpus} card(s){size}; it cannot join:")
            for card in cards:
                problem = card_problem(occupants[card.index] + (server,), card)
                beside = ", ".join(s.name for s in occupants[card.index]) or "no other server"
                lines.append(f"  {card.label} ({gib(card.total_gb)} GiB, with {beside}): "
                             + (problem or "fits"))
            break
        lines.append(f"{server.name} would take {', '.join(f'GPU {i}' for i in chosen)}")
        occupants = {index: servers + (server,) if index in chosen else servers
                     for index, servers in occupants.items()}
    return ("no placement of the servers on this box's cards holds the memory division "
            "(every arrangement was tried); nothing written:\n  " + "\n  ".join(lines))
