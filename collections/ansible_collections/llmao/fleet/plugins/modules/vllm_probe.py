#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.vllm_probe``: probe the fleet's vLLM servers, all at once."""

from __future__ import annotations

DOCUMENTATION = r"""
module: vllm_probe
short_description: Probe the vLLM servers of an llmao fleet concurrently
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Probes every intended server of the fleet (or those of O(boxes)) at its public address, many
    at once in one call, and says for each whether it is serving its model and is ours.
  - "Two requests per server: C(GET /health) without a key (does something answer), then
    C(GET /v1/models) with the server's bearer (is it ours, and does it list its
    C(served_model_name)). A 401 to our bearer is kept apart from every other failure: it means
    something else answers at that address, not that the server is down."
  - "A server that answers C(/v1/models) with our bearer is also scraped, in the same worker:
    C(GET /metrics) at the server root (beside C(/v1)) with the bearer, read with the
    C(/v1/models) answer into its KV cache size and usage, running and waiting requests, token
    counters and served C(max_model_len) (see C(docs/metrics.md)). A figure that cannot be read
    is null (unknown), never 0, and never fails the probe."
  - "A box may answer anything: each request ends O(connect_timeout) + O(timeout) after it
    starts however slowly the box sends, so a server's probe ends within twice that; bodies are
    capped, every figure is bounded where it is read, and a reason drawn from what a box sent is
    cut to one short printable line."
  - The bearers are derived inside the module from O(config); they never pass through play
    variables and never appear in the result.
  - It only reads, so it reports C(changed=false) and runs the same in check mode.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.approved_boxes
  - llmao.fleet.controller
  - llmao.fleet.files_digest
  - llmao.fleet.reconcile
options:
  boxes:
    description:
      - The boxes (C(fleet.hosts) keys, or boxes O(approved) or O(pool_members) names) whose
        servers to probe. All of them when omitted.
    type: list
    elements: str
  listings:
    description:
      - The provider listings that give each server's public address, as
        M(llmao.fleet.fleet_observe) returns them in C(observations.listings).
      - When omitted, the module reads the listings C(config.yaml) configures itself.
    type: dict
  connect_timeout:
    description:
      - Seconds to wait for a connection. Defaults to C(fleet.probe_connect_timeout_s).
    type: float
  timeout:
    description:
      - Seconds to wait for each read of an answer. Defaults to C(fleet.probe_timeout_s).
      - A whole request (connect, status line, headers, body) ends O(connect_timeout) +
        O(timeout) after it starts.
    type: float
  concurrency:
    description:
      - How many servers are probed at the same time (fewer when the process may not open
        two sockets for each).
    type: int
    default: 512
  scrape:
    description:
      - Read each answering server's C(/metrics) too. C(false) probes only.
    type: bool
    default: true
  leaves:
    description:
      - What llmao issued each box, as M(llmao.fleet.fleet_observe) returns it in
        C(observations.leaves). Under box TLS, only a box llmao never issued a certificate to
        and never verified one from (see O(memories)) is still taken at its plain HTTP word,
        and only when it answered the TLS hello in HTTP, never on an EOF or a reset.
      - When omitted, every box must answer HTTPS (see C(docs/box-tls.md), "No downgrade").
    type: dict
  memories:
    description:
      - The lifecycle memory of every server, as M(llmao.fleet.fleet_observe) returns it in
        C(observations.memories); a server a probe once verified over TLS is never taken at
        its plain HTTP word again.
    type: dict
  ca_path:
    description:
      - The fleet CA certificate every box's certificate must chain to (C(box_tls) in
        C(config.yaml)). Defaults to C(box_tls.ca_cert).
      - While C(box_tls.previous_ca_cert) is set (the CA is rotated), that CA is trusted
        beside it.
      - "Under box TLS each probe and scrape verifies the chain and that the certificate names
        the address dialled; a box whose certificate does not verify is C(rejected), as a 401
        to our bearer is."
    type: path
"""

EXAMPLES = r"""
- name: Probe every server of the fleet
  llmao.fleet.vllm_probe:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    listings: "{{ observed.observations.listings }}"
    approved: "{{ observed.observations.approved }}"
    pool_members: "{{ observed.observations.pool_members }}"
  register: probed

- name: Probe the servers of two boxes
  llmao.fleet.vllm_probe:
    config: /etc/llmao/config.yaml
    models: /etc/llmao/models.yaml
    boxes: [203.0.113.10, 203.0.113.11]
  register: probed
"""

RETURN = r"""
probes:
  description: Server id (C(llmao:<box>:<listen port>:<name>)) to its probe.
  returned: success
  type: dict
  sample:
    "llmao:203.0.113.10:8001:gemma4-26b":
      box: 203.0.113.10
      name: gemma4-26b
      listen_port: 8001
      public: "203.0.113.10:41001"
      health_ok: true
      models: lists
      detail: ""
      metrics:
        kv_cache_tokens: 65536
        kv_cache_usage_ratio: 0.25
        requests_running: 2
        requests_waiting: 0
        prompt_tokens_total: 51234
        generation_tokens_total: 120345
        max_model_len: 32768
        scraped_at: 1764570000.0
  contains:
    health_ok:
      description: C(/health) answered 200.
      type: bool
    models:
      description:
        - The outcome of C(/v1/models) with the bearer. C(lists) (the served name is listed),
          C(other) (answers without it), C(rejected) (401 to our bearer), C(failed) (refused,
          timed out, another status), C(skipped) (not asked, C(/health) did not answer).
      type: str
    detail:
      description:
        - Why a probe failed, without any key; for a server that serves, why its figures are
          unknown, if they are. One printable line of at most 120 characters.
      type: str
    public:
      description: The address dialled, C(host:port), or null when none is known.
      type: str
    metrics:
      description:
        - What the server's C(/metrics) and C(/v1/models) said, each figure a number or null
          (unknown); null when it was not scraped (it did not answer with our bearer).
      type: dict
    latency:
      description:
        - vLLM's latency histograms (time to first token, end-to-end, inter-token) and
          preemption counter as scraped, cumulative since vLLM started; the plan reads the
          p50 and p95 of their deltas since the previous pass. Null when not scraped.
      type: dict
counts:
  description: How many servers were probed, and how many of each C(models) outcome.
  returned: success
  type: dict
  sample: {"servers": 3, "lists": 2, "skipped": 1}
files_changed:
  description:
    - The fleet files differ from those O(files_digest) names, so nothing was probed and
      C(probes) is empty.
  returned: success
  type: bool
"""

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    FILES_CHANGED,
    FILES_DIGEST_OPTION,
    files_changed,
    load_reconcile_fleet,
    module_args,
)
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Memory
from ansible_collections.llmao.fleet.plugins.module_utils.listings import Listings, read_listings
from ansible_collections.llmao.fleet.plugins.module_utils.llmao_admin import BoxLeaves
from ansible_collections.llmao.fleet.plugins.module_utils.probe import (
    DEFAULT_CONCURRENCY,
    probe_many,
)
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_plan import probe_targets
from ansible_collections.llmao.fleet.plugins.module_utils.reconcile_records import (
    RecordError,
    leaves_from_record,
    listings_from_record,
    probe_record,
)


def unknown_boxes(fleet: Fleet, boxes: Collection[str]) -> list[str]:
    return [box for box in boxes if fleet.assignment(box) is None]


def probe_fleet(fleet: Fleet, listings: Listings, boxes: Collection[str] | None,
                connect_timeout: float, timeout: float,
                concurrency: int = DEFAULT_CONCURRENCY,
                scrape: bool = True, leaves: Mapping[str, BoxLeaves] | None = None,
                memories: Mapping[str, Memory] | None = None,
                ca_path: str | None = None) -> dict[str, dict[str, Any]]:
    """Probe the chosen servers concurrently; server id → where it was dialled and what answered."""
    chosen = None if boxes is None else {fleet.assignment(box).box for box in boxes}
    targets = probe_targets(fleet, listings, leaves, memories, ca_path)
    pairs = [(server, target) for server, target in zip(fleet.servers(), targets, strict=True)
             if chosen is None or server.box in chosen]
    probes = probe_many([target for _server, target in pairs], connect_timeout, timeout,
                        concurrency, scrape)
    results = {}
    for server, target in pairs:
        endpoint = target.endpoint
        results[target.key] = {
            "box": server.box, "name": server.name, "listen_port": server.listen_port,
            "public": endpoint.address if endpoint else None,
            **probe_record(probes[target.key]),
        }
    return results


def tls_memory(leaves: Any, memories: Any) -> tuple[dict[str, BoxLeaves] | None,
                                                    dict[str, Memory]]:
    """What llmao issued each box and what the probes verified before, read from the
    observations: whether a box's plain HTTP answer may still be taken."""
    return (None if leaves is None else leaves_from_record(leaves),
            {str(key): Memory.from_record(value)
             for key, value in (memories or {}).items() if isinstance(value, Mapping)})


def probe_counts(probes: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {"servers": len(probes), **Counter(probe["models"] for probe in probes.values())}


def main() -> None:
    module = AnsibleModule(**module_args({
        "boxes": {"type": "list", "elements": "str"},
        "listings": {"type": "dict"},
        "connect_timeout": {"type": "float"},
        "timeout": {"type": "float"},
        "concurrency": {"type": "int", "default": DEFAULT_CONCURRENCY},
        "scrape": {"type": "bool", "default": True},
        "leaves": {"type": "dict"},
        "memories": {"type": "dict"},
        "ca_path": {"type": "path"},
        **FILES_DIGEST_OPTION,
    }, approved=True))
    fleet = load_reconcile_fleet(module)
    if files_changed(module, fleet):
        module.exit_json(changed=False, files_changed=True, msg=FILES_CHANGED, probes={},
                         counts=probe_counts({}))
    params = module.params
    knobs = fleet.settings.fleet.lifecycle
    boxes = params["boxes"]
    if boxes is not None and unknown_boxes(fleet, boxes):
        module.fail_json(msg=f"not fleet.hosts keys of {fleet.config_path}, approved boxes "
                             f"nor pool members: {', '.join(unknown_boxes(fleet, boxes))}")
    if params["concurrency"] < 1:
        module.fail_json(msg="concurrency must be at least 1")
    if params["listings"] is None:
        listings = read_listings(fleet.settings.providers, knobs.probe_timeout_s)
        for provider, reason in listings.failed.items():
            module.warn(f"the {provider} listing could not be read ({reason})")
        for warning in listings.warnings:
            module.warn(warning)
    else:
        try:
            listings = listings_from_record(params["listings"])
        except RecordError as exc:
            module.fail_json(msg=f"listings: {exc}")
    try:
        leaves, memories = tls_memory(params["leaves"], params["memories"])
    except RecordError as exc:
        module.fail_json(msg=str(exc))
    probes = probe_fleet(fleet, listings, boxes,
                         params["connect_timeout"] or knobs.probe_connect_timeout_s,
                         params["timeout"] or knobs.probe_timeout_s, params["concurrency"],
                         params["scrape"], leaves, memories, params["ca_path"])
    module.exit_json(changed=False, files_changed=False, probes=probes,
                     counts=probe_counts(probes))


if __name__ == "__main__":
    main()
