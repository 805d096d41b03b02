# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a rolling change stands, per model: which boxes wait, drain, restart, are done.

Pure: the fleet, the stored turns, each box's applied revision and each
server's state come in; one row per model under way goes out. Reconcile prints
the rows as lines and the dashboard draws them as its rollout panel, so both
say the same thing about the same fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .fleet import Fleet
from .intent import BoxAssignment
from .lifecycle import State
from .rollout import ACTIVE, Phase, Turn, paused_models


class Stage(StrEnum):
    """Where one box stands in the rollout of one of its models."""

    WAITING = "waiting"          # behind its intended revision, its turn not granted yet
    DRAINING = "draining"        # its turn is on: the model's routes on it are being removed
    RESTARTING = "restarting"    # drained: applying, or applied and not Healthy yet
    HEALTHY = "healthy"          # on the intended revision, the model's servers Healthy


# How a stage reads in a line (the dashboard has its own headings).
STAGE_TEXT = {Stage.WAITING: "waiting", Stage.DRAINING: "draining",
              Stage.RESTARTING: "restarting", Stage.HEALTHY: "healthy on the new revision"}


@dataclass(frozen=True)
class ModelRollout:
    """One model under way: its boxes by stage, and the failed turn pausing it, if any."""

    model: str
    stages: Mapping[Stage, tuple[str, ...]] = field(default_factory=dict)
    paused: Turn | None = None

    def boxes(self, stage: Stage) -> tuple[str, ...]:
        return self.stages.get(stage, ())

    @property
    def under_way(self) -> bool:
        """A box is behind or changing, or the rollout is paused (all Healthy: nothing to say)."""
        return self.paused is not None or any(
            self.boxes(stage) for stage in Stage if stage is not Stage.HEALTHY)

    def record(self) -> dict[str, Any]:
        """The row as JSON: boxes per stage, and the pausing turn's box, revision and why."""
        paused = self.paused
        return {"model": self.model, **{stage.value: list(self.boxes(stage)) for stage in Stage},
                "paused": {"box": paused.box, "revision": paused.revision, "why": paused.why}
                if paused else None}

    def line(self) -> str:
        """``gemma: draining 203.0.113.11; waiting 203.0.113.12`` and why it is paused."""
        parts = [f"{STAGE_TEXT[stage]} {', '.join(self.boxes(stage))}"
                 for stage in Stage if self.boxes(stage)]
        if self.paused is not None:
            parts.append(f"PAUSED at {self.paused.box} (rev {self.paused.revision}): "
                         f"{self.paused.why or 'its turn failed'}; the other servers keep "
                         "their revision, a fixed config (a new revision) resumes it")
        return f"{self.model}: " + "; ".join(parts)


def box_stage(assignment: BoxAssignment, model: str, turn: Turn | None,
              applied: str | None, states: Mapping[str, str]) -> Stage | None:
    """The stage of ``model`` on this box; None when the box is not part of a rollout (it never
    reported a revision) or its failed turn is what pauses the model (the pause names it)."""
    ids = {s.id for s in assignment.servers if s.model_name == model}
    current = turn is not None and turn.revision == assignment.revision \
        and bool(ids & set(turn.servers))
    if current and turn.phase is Phase.DRAINING:
        return Stage.DRAINING
    if current and turn.phase in ACTIVE:
        return Stage.RESTARTING
    if current and turn.phase is Phase.FAILED:
        return None
    if applied is None:
        return None
    if applied != assignment.revision:
        return Stage.WAITING
    if all(states.get(server_id) == State.HEALTHY for server_id in ids):
        return Stage.HEALTHY
    return Stage.RESTARTING


def rollout_rows(fleet: Fleet, turns: Iterable[Turn], applied: Mapping[str, str | None],
                 states: Mapping[str, str]) -> tuple[ModelRollout, ...]:
    """Each model under way, by name: ``turns`` as stored (the latest per box), ``applied``
    box to revision, ``states`` deployment id to its state in the last pass."""
    turns = tuple(turns)
    latest = {turn.box: turn for turn in turns}
    paused = paused_models(fleet, turns)
    stages: dict[str, dict[Stage, list[str]]] = {}
    for box, assignment in fleet.assignments.items():
        for model in dict.fromkeys(server.model_name for server in assignment.servers):
            stage = box_stage(assignment, model, latest.get(box), applied.get(box), states)
            by_stage = stages.setdefault(model, {})
            if stage is not None:
                by_stage.setdefault(stage, []).append(box)
    rows = (ModelRollout(model, {stage: tuple(boxes) for stage, boxes in by_stage.items()},
                         paused.get(model))
            for model, by_stage in sorted(stages.items()))
    return tuple(row for row in rows if row.under_way)
