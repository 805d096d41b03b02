"""A synthetic fleet of any size: ``config.yaml`` + ``models.yaml`` in one folder.

Benchmarks need fleets far larger than any example (10,000 boxes) with the
same shape as a real one: addresses as box names, one to three rows per box on
the listen ports, a few self-hosted recipes and one commercial route. The
secrets are fresh random values on every call, so nothing a benchmark writes
can be mistaken for a real key.

    python -m bench.fleetgen FOLDER --boxes 10000
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.arguments import bench_parser
from rig.fleet_files import FleetFolder, FleetSecrets, fleet_section, recipe, route
from rig.fleet_files import write_fleet as write_files

FIRST_ADDRESS = ipaddress.IPv4Address("10.0.0.1")
LISTEN_PORTS = (8001, 8002, 8003)
MODEL_NAMES = ("gemma4-26b", "qwen3-8b", "llama3-70b")


@dataclass(frozen=True)
class GeneratedFleet(FleetFolder):
    """Where the files are, the fleet's secrets, and its box names in file order."""

    folder: Path
    keys: FleetSecrets = field(repr=False)
    boxes: tuple[str, ...]

    @property
    def fleet_key(self) -> str:
        return self.keys.fleet_key


def box_names(count: int) -> Iterator[str]:
    """``count`` distinct IPv4 addresses from 10.0.0.1 up (a private range: never dialled)."""
    for offset in range(count):
        yield str(FIRST_ADDRESS + offset)


def box_rows(index: int) -> list[list[object]]:
    """One, two or three rows, cycling, so payload sizes vary the way a real fleet's do."""
    count = index % len(LISTEN_PORTS) + 1
    return [[MODEL_NAMES[(index + row) % len(MODEL_NAMES)], LISTEN_PORTS[row]]
            for row in range(count)]


def models_document() -> dict[str, object]:
    recipes = [recipe(name, f"example/{name}", args=["--max-num-seqs", "64"],
                      max_model_len=16384 * (position + 1), vram_gb=8 * (position + 1),
                      disk_gb=20 * (position + 1))
               for position, name in enumerate(MODEL_NAMES)]
    return {"models": [*recipes, route("gpt-4o-mini", "openai/gpt-4o-mini")]}


def config_document(boxes: tuple[str, ...], keys: FleetSecrets,
                    rollout: dict[str, object] | None = None,
                    binding: str = "off") -> dict[str, object]:
    hosts = {name: box_rows(index) for index, name in enumerate(boxes)}
    document = {"fleet": {**fleet_section(keys, hosts), "binding": binding},
                "server": {"state": "llmao-state.sqlite3"}, "admin": {"token": keys.admin_token}}
    return document if rollout is None else {**document, "rollout": rollout}


def write_fleet(folder: Path, boxes: int, rollout: dict[str, object] | None = None,
                binding: str = "off") -> GeneratedFleet:
    """Write a ``boxes``-box fleet into ``folder`` (created if needed), with config.yaml's
    ``rollout`` section when given (a fleet whose boxes follow and ask for turns).

    ``fleet.binding`` is ``off`` unless asked: the benchmarks' boxes present no box
    token (the seed's protocol), and under ``first_fetch`` every fetch of such a box
    would bind its name anew. bench_config_endpoint binds and confirms its boxes.
    """
    names = tuple(box_names(boxes))
    keys = FleetSecrets()
    write_files(folder, config_document(names, keys, rollout, binding), models_document(),
                compact=True)
    return GeneratedFleet(folder, keys, names)


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser("fleetgen", __doc__, [("--boxes", 10_000, "how many boxes (10000)")])
    parser.add_argument("folder", type=Path, help="where config.yaml and models.yaml go")
    args = parser.parse_args(argv)
    fleet = write_fleet(args.folder, args.boxes)
    print(f"wrote {len(fleet.boxes)} boxes: {fleet.config_path} and {fleet.models_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
