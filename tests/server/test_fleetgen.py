"""bench.fleetgen writes a fleet the core loads whole, of the size asked for."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import load_fleet
from bench.fleetgen import write_fleet


def test_a_generated_fleet_loads_with_every_box_and_fresh_secrets(tmp_path: Path) -> None:
    first = write_fleet(tmp_path / "a", 25)
    second = write_fleet(tmp_path / "b", 25)
    fleet = load_fleet(*first.paths())
    assert list(fleet.assignments) == list(first.boxes)
    assert len(set(first.boxes)) == 25
    assert {len(a.servers) for a in fleet.assignments.values()} == {1, 2, 3}
    assert fleet.settings.fleet.key == first.fleet_key
    assert fleet.warnings == ()
    assert first.fleet_key != second.fleet_key
