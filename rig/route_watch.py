"""Sample which of llmao's routes of a model LiteLLM holds, in the background, during a change.

Why: "never fewer than two of three servers routed" is a claim about every moment of a rolling
change, and only LiteLLM's own listing says what it routes. The watch reads `/model/info` with
the fleet's LiteLLM client every ``interval_s`` seconds and keeps each sample (the time, the
route ids of the model that llmao owns); a listing that cannot be read is kept as an error, not
as an empty sample, so it can never pass for a gap nor hide one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import (
    LiteLLM,
    LiteLLMError,
)
from rig.background import Background


@dataclass(frozen=True)
class Sample:
    at: float                  # monotonic clock
    routes: frozenset[str]     # llmao's deployment ids of the model


class RouteWatch(Background):
    """``with RouteWatch(client, model) as watch: ...``, then ``watch.fewest()``."""

    def __init__(self, client: LiteLLM, model: str, interval_s: float = 0.5) -> None:
        super().__init__("route-watch", interval_s)
        self.client = client
        self.model = model
        self.samples: list[Sample] = []
        self.errors: list[str] = []

    def step(self) -> None:
        self.sample()

    def sample(self) -> None:
        """Read the listing once and keep what it says."""
        try:
            routes = self.client.routes()
        except LiteLLMError as exc:
            self.errors.append(str(exc))
            return
        self.samples.append(Sample(time.monotonic(), frozenset(
            route.id for route in routes if route.owned and route.model_name == self.model)))

    def fewest(self) -> int:
        """The fewest routes any sample saw (raises when there was no sample at all)."""
        if not self.samples:
            raise ValueError(f"no sample of LiteLLM's routes of {self.model} was read")
        return min(len(sample.routes) for sample in self.samples)

    def summary(self) -> str:
        counts = [len(sample.routes) for sample in self.samples]
        changes = [(round(b.at - self.samples[0].at, 1), len(b.routes))
                   for a, b in zip(self.samples, self.samples[1:], strict=False)
                   if a.routes != b.routes]
        return (f"{len(counts)} sample(s) of {self.model}'s routes, fewest "
                f"{min(counts, default=0)}, most {max(counts, default=0)}, "
                f"{len(self.errors)} unreadable; changes (s, routes) {changes}")
