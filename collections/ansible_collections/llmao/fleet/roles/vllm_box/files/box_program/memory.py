"""How one card's memory is divided between the servers on it (--gpu-memory-utilization).

Exact fractions throughout, so the same assignment on the same card renders the same
programs on every box and every run: a re-run changes nothing and restarts nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction

from .assignment import Server
from .cards import Card, gib
from .errors import DoesNotFit

MEMORY_CAP = Decimal("0.9")


def divide_memory(servers: tuple[Server, ...], card_total_gb: Decimal | None
                  ) -> dict[str, Decimal]:
    """Each server's --gpu-memory-utilization, never over-committing the card.

    Pinned servers keep their value. The others share ``0.9 - pinned``: each
    first gets its weights (``vram_gb / card``), then a share of what is left,
    weighted by ``max_model_len`` when every one of them has it, else equal.
    Values are rounded down to 0.001, so their sum stays within the budget.
    Exact fractions throughout: the same inputs give the same bytes everywhere.
    """
    result = {s.name: s.gpu_memory_utilization for s in servers
              if s.gpu_memory_utilization is not None}
    pinned = sum(result.values(), Decimal(0))
    if pinned > 1:
        raise DoesNotFit(f"pinned gpu_memory_utilization values add up to {pinned:f}, more "
                         "than the whole card")
    shared = [s for s in servers if s.gpu_memory_utilization is None]
    if not shared:
        return result
    names = ", ".join(s.name for s in shared)
    budget = Fraction(MEMORY_CAP - pinned)
    if budget <= 0:
        raise DoesNotFit(f"pinned servers take {pinned:f} of the card, leaving nothing of the "
                         f"{MEMORY_CAP} budget for {names}")
    weights = {s.name: weight_fraction(s, card_total_gb) for s in shared}
    rest = budget - sum(weights.values())
    if rest < 0:
        sizes = " + ".join(f"{s.name} {s.vram_gb:f} GiB" for s in shared if weights[s.name])
        raise DoesNotFit(f"the weights do not fit: {sizes} is {float(budget - rest):.3f} of "
                         f"the card ({gib(card_total_gb or Decimal(0))} GiB), the budget for "
                         f"{names} is {float(budget):.3f} (0.9 minus pinned {pinned:f})")
    if all(s.max_model_len for s in shared):
        total_len = sum(s.max_model_len or 0 for s in shared)
        shares = {s.name: Fraction(s.max_model_len or 0, total_len) for s in shared}
    else:
        shares = {s.name: Fraction(1, len(shared)) for s in shared}
    for server in shared:
        thousandths = math.floor((weights[server.name] + rest * shares[server.name]) * 1000)
        if thousandths <= 0:
            raise DoesNotFit(f"{server.name} would get no GPU memory: the weights of the "
                             "others fill the budget")
        result[server.name] = Decimal(thousandths) / 1000
    return result


def divide_cards(servers: tuple[Server, ...], cards: tuple[Card, ...] | None,
                 placement: Mapping[str, tuple[int, ...]]) -> dict[str, Decimal]:
    """Each server's --gpu-memory-utilization on a box of placed servers.

    Every card is divided between the servers placed on it, as one card is. vLLM
    takes one fraction for all the cards of a server, so a server that spans
    several gets the smallest of its shares: no card is ever over-committed.
    Unknown cards: the division of today, against an unknown total.
    """
    if cards is None or not placement:
        return divide_memory(servers, None)
    result: dict[str, Decimal] = {}
    for card in cards:
        on = tuple(s for s in servers if card.index in placement[s.name])
        for name, value in (divide_memory(on, card.total_gb) if on else {}).items():
            result[name] = min(value, result.get(name, value))
    return result


def weight_fraction(server: Server, card_total_gb: Decimal | None) -> Fraction:
    """The share of the card the weights take; 0 when either size is unknown."""
    if not server.vram_gb or not card_total_gb:
        return Fraction(0)
    return Fraction(server.vram_gb) / Fraction(card_total_gb)
