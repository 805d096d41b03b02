# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""When a box's binding outlives its box (docs/box-identity.md).

A box name is bound to the box that first fetched it, and the box reports its
provider instance id (Vast ``CONTAINER_ID``, RunPod ``RUNPOD_POD_ID``) with the
binding. When a provider listing now names that box name as another instance, the
bound box is gone and the name belongs to its replacement: reconcile releases the
binding so that the replacement can bind. A listing that cannot be read, an
ambiguous name or a binding without an instance id release nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .listings import Listings


@dataclass(frozen=True)
class ReplacedBinding:
    """A bound box name a listing now gives to another instance."""

    box: str
    bound_instance: str
    listed: str  # the listed instance, as ``vast 1234``
    # Its id, the one claimant the release names: a copy of the fleet key cannot take the name.
    listed_instance: str = ""

    @property
    def why(self) -> str:
        return (f"the listing names {self.box} as {self.listed} now; it was bound to instance "
                f"{self.bound_instance}")

    def record(self) -> dict[str, str]:
        return {"box": self.box, "bound_instance": self.bound_instance, "listed": self.listed}


def replaced_bindings(bound: Mapping[str, str | None],
                      listings: Listings) -> list[ReplacedBinding]:
    """Each bound box (name → the instance id it bound with) that a listing names as another
    instance, in name order."""
    replaced = []
    for box, instance in sorted(bound.items()):
        listed = listings.box(box)
        if instance and listed is not None and listed.names and listed.names[0] != instance:
            replaced.append(ReplacedBinding(box, instance, listed.label, listed.names[0]))
    return replaced
