#!/usr/bin/python
# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module ``llmao.fleet.litellm_deployment``: one llmao deployment in LiteLLM."""

from __future__ import annotations

DOCUMENTATION = r"""
module: litellm_deployment
short_description: Make vLLM servers' LiteLLM deployments present or absent
version_added: 0.1.0
author:
  - llmao fleet contributors (!UNKNOWN)
description:
  - Registers (C(/model/new)) or deletes (C(/model/delete)) the LiteLLM deployment of one server
    of the fleet, found by its deterministic id C(llmao:<box>:<listen port>:<name>); or of every
    server O(deployments) lists, in one task.
  - "The deployment registered is the server's C(models.yaml) entry with C(api_base) on the
    server's public address and the server's bearer as C(api_key); its C(model_info) carries the
    id and a plaintext copy of the public base (C(llmao_public_base)), which is how llmao tells
    its own deployments apart, since LiteLLM stores C(litellm_params) encrypted."
  - "Idempotent: a deployment that already has the right model and public base is left alone. One
    with another model or address is replaced (deleted, then registered again: LiteLLM without a
    database has no update)."
  - Only deployments llmao owns are ever touched. A deployment with the same id but without the
    plaintext marker fails the task and is left as it is.
  - The bearer is derived inside the module from O(config); the master key comes from
    C(litellm.master_key). Neither appears in the result, the diff or the audit log.
  - Every change (not in check mode) appends one JSON line to O(audit_log) as soon as it is made.
extends_documentation_fragment:
  - llmao.fleet.fleet_files
  - llmao.fleet.approved_boxes
  - llmao.fleet.controller
  - llmao.fleet.files_digest
  - llmao.fleet.reconcile
  - llmao.fleet.audit_log
attributes:
  diff_mode:
    support: full
options:
  state:
    description:
      - C(present) registers the server's deployment, or replaces it if it no longer fits.
      - C(absent) deletes it.
      - Ignored with O(deployments), whose entries say it each.
    type: str
    choices: [present, absent]
    default: present
  box:
    description:
      - The box, a C(fleet.hosts) key or a box O(approved) or O(pool_members) names. With
        O(state=present) the server must be one of theirs.
      - Mutually exclusive with O(id) and O(deployments).
    type: str
  listen_port:
    description:
      - The server's listen port on O(box).
    type: int
    aliases: [port]
  name:
    description:
      - The server's name (the row's third element, else its model name).
      - Defaults to the name of the row on O(box) and O(listen_port) in C(config.yaml).
    type: str
  id:
    description:
      - The deployment id itself, for O(state=absent) only; for a deployment whose server is no
        longer in C(config.yaml).
      - It must be an llmao id (C(llmao:...)).
    type: str
  public_host:
    description:
      - The public address LiteLLM dials the server at.
      - With O(public_port); when both are omitted the module reads the provider listings (a
        fleet without providers dials the listen port on the box name).
    type: str
  public_port:
    description:
      - The public port LiteLLM dials the server at (the provider's mapping of the listen port).
    type: int
  public_scheme:
    description:
      - How LiteLLM dials the server. Defaults to C(https) when C(config.yaml) has C(box_tls)
        (the deployment then verifies the box against the fleet CA, see C(docs/box-tls.md)),
        else C(http).
    type: str
    choices: [http, https]
  reason:
    description:
      - Why the change is made; written to the audit log with it.
    type: str
    default: ""
  deployments:
    description:
      - Many deployments in one task, each described by the options above (O(state), O(box),
        O(listen_port), O(name), O(id), O(public_host), O(public_port), O(reason)), applied in
        order. M(llmao.fleet.fleet_plan) returns a pass's changes in this form as
        C(deployments).
      - One task for the whole plan keeps a pass over hundreds of servers fast; a loop would pay
        a module run per deployment. The entries are looked up in one listing of LiteLLM's
        deployments read at the start; an entry the listing shows as needing a change is read
        again alone before it is changed.
      - The first failure stops the task; the changes made before it are done and audited.
    type: list
    elements: dict
    suboptions:
      state:
        description: C(present) or C(absent).
        type: str
        choices: [present, absent]
        default: present
      box:
        description: The box, a C(fleet.hosts) key.
        type: str
      listen_port:
        description: The server's listen port on O(deployments[].box).
        type: int
        aliases: [port]
      name:
        description: The server's name; defaults to the row's.
        type: str
      id:
        description: The deployment id, for C(absent) only.
        type: str
      public_host:
        description: The public address LiteLLM dials.
        type: str
      public_port:
        description: The public port LiteLLM dials.
        type: int
      public_scheme:
        description: How LiteLLM dials (C(http) or C(https)).
        type: str
        choices: [http, https]
      reason:
        description: Why; written to the audit log.
        type: str
        default: ""
  timeout:
    description:
      - Seconds to wait for each LiteLLM answer.
    type: float
    default: 15
"""

EXAMPLES = r"""
- name: Apply a reconcile plan in one task
  llmao.fleet.litellm_deployment:
    config: "{{ llmao_config_file }}"
    models: "{{ llmao_models_file }}"
    deployments: "{{ plan.deployments }}"

- name: Register the server on port 8001 of one box, at the address its listing gives
  llmao.fleet.litellm_deployment:
    config: /etc/llmao/config.yaml
    models: /etc/llmao/models.yaml
    box: 203.0.113.10
    listen_port: 8001

- name: Remove the deployment of a server that left config.yaml
  llmao.fleet.litellm_deployment:
    config: /etc/llmao/config.yaml
    models: /etc/llmao/models.yaml
    id: "llmao:192.0.2.50:8001:gemma4-26b"
    state: absent
"""

RETURN = r"""
id:
  description: The deployment id.
  returned: without O(deployments)
  type: str
  sample: "llmao:203.0.113.10:8001:gemma4-26b"
action:
  description: What was done (or would be, in check mode), C(register), C(replace), C(delete) or
    C(none).
  returned: without O(deployments)
  type: str
deployment:
  description: The deployment after the task, as C(id), C(model_name), C(api_base),
    C(llmao_public_base) (the key masked), or an empty dict when absent.
  returned: without O(deployments)
  type: dict
results:
  description: One entry (C(id), C(action), C(deployment)) per entry of O(deployments), in order.
  returned: with O(deployments)
  type: list
  elements: dict
"""

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Optional

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmao.fleet.plugins.module_utils.audit_log import (
    AUDIT_LOG_OPTION,
    append_audit,
    audit_path,
    stamped,
)
from ansible_collections.llmao.fleet.plugins.module_utils.fleet import Fleet
from ansible_collections.llmao.fleet.plugins.module_utils.fleet_module import (
    FILES_DIGEST_OPTION,
    TIMEOUT_OPTION,
    load_reconcile_fleet,
    module_args,
    refuse_changed_files,
)
from ansible_collections.llmao.fleet.plugins.module_utils.hostnames import normalize_host
from ansible_collections.llmao.fleet.plugins.module_utils.intent import (
    ID_PREFIX,
    IntendedServer,
    deployment_id,
)
from ansible_collections.llmao.fleet.plugins.module_utils.lifecycle import Change
from ansible_collections.llmao.fleet.plugins.module_utils.listings import (
    Endpoint,
    Listings,
    read_listings,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_client import (
    LiteLLM,
    LiteLLMError,
)
from ansible_collections.llmao.fleet.plugins.module_utils.litellm_routes import (
    PUBLIC_BASE_KEY,
    Route,
    deployment_body,
    route_differs,
)

DEPLOYMENT_OPTIONS: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "box": {"type": "str"},
    "listen_port": {"type": "int", "aliases": ["port"]},
    "name": {"type": "str"},
    "id": {"type": "str"},
    "public_host": {"type": "str"},
    "public_port": {"type": "int"},
    "public_scheme": {"type": "str", "choices": ["http", "https"]},
    "reason": {"type": "str", "default": ""},
}
DEPLOYMENT_RULES: dict[str, Any] = {
    "mutually_exclusive": [("id", "box")],
    "required_one_of": [("id", "box")],
    "required_together": [("box", "listen_port"), ("public_host", "public_port")],
    "required_if": [("state", "present", ("box",))],
}
SINGLE_ONLY = ("box", "listen_port", "name", "id", "public_host", "public_port",
               "public_scheme")
OPTIONS: dict[str, dict[str, Any]] = {
    **DEPLOYMENT_OPTIONS,
    **FILES_DIGEST_OPTION,
    "deployments": {"type": "list", "elements": "dict", "options": DEPLOYMENT_OPTIONS,
                    **DEPLOYMENT_RULES},
    **AUDIT_LOG_OPTION,
    **TIMEOUT_OPTION,
}
ARGUMENT_RULES: dict[str, Any] = {
    "mutually_exclusive": [("id", "box"), *(("deployments", name) for name in SINGLE_ONLY)],
    "required_one_of": [("id", "box", "deployments")],
    "required_together": [("box", "listen_port"), ("public_host", "public_port")],
    "required_if": [("state", "present", ("box", "deployments"), True)],
}
MASKED = "********"
NONE = "none"  # the action of a task that changed nothing


class DeploymentError(RuntimeError):
    """The task cannot be done; the message says why and holds no secret."""


@dataclass(frozen=True)
class Outcome:
    """What a task did (or would do): the action, and the deployment before and after."""

    id: str
    action: str
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def changed(self) -> bool:
        return self.action != NONE


def route_view(route: Route | None) -> dict[str, Any]:
    """A deployment as the diff shows it: LiteLLM never gives the key back, so it is masked."""
    if route is None:
        return {}
    return {"id": route.id, "model_name": route.model_name, "api_base": route.api_base,
            PUBLIC_BASE_KEY: route.public_base, "api_key": MASKED}


def body_view(body: dict[str, Any]) -> dict[str, Any]:
    params, info = body["litellm_params"], body["model_info"]
    return {"id": info["id"], "model_name": body["model_name"], "api_base": params["api_base"],
            PUBLIC_BASE_KEY: info[PUBLIC_BASE_KEY], "api_key": MASKED}


def find_server(fleet: Fleet, box: str, listen_port: int, name: str | None) -> IntendedServer:
    assignment = fleet.assignment(box)
    servers = assignment.servers if assignment else ()
    for server in servers:
        if server.listen_port == listen_port and name in (None, server.name):
            return server
    named = f" named {name!r}" if name else ""
    raise DeploymentError(f"{box} has no server{named} on listen port {listen_port} in "
                          f"{fleet.config_path}: llmao registers only the servers it intends")


# How a deployment is looked up: LiteLLM asked for it alone, or a listing read once (apply_all).
RouteFinder = Callable[[str], Optional[Route]]  # noqa: UP045


def owned_route(litellm: LiteLLM, deployment: str,
                find: RouteFinder | None = None) -> Route | None:
    """LiteLLM's deployment with this id, refusing one that llmao did not register."""
    route = (find or litellm.route)(deployment)
    if route is not None and not route.owned:
        raise DeploymentError(f"LiteLLM's deployment {deployment} lacks llmao's "
                              f"{PUBLIC_BASE_KEY} marker: not llmao's, left alone")
    return route


def litellm_ca_path(fleet: Fleet) -> str | None:
    """Where the LiteLLM proxy reads the fleet CA (None without box TLS)."""
    tls = fleet.settings.box_tls
    return None if tls is None else tls.litellm_trust()


def ensure_present(litellm: LiteLLM, server: IntendedServer, endpoint: Endpoint,
                   check_mode: bool, ca_path: str | None = None,
                   find: RouteFinder | None = None) -> Outcome:
    body = deployment_body(server, endpoint, ca_path)
    deployment = body["model_info"]["id"]
    route = owned_route(litellm, deployment, find)
    if route is not None and find is not None \
            and route_differs(route, server, endpoint, ca_path) is not None:
        # A change rests on LiteLLM's own answer for this deployment, never on a listing.
        route = owned_route(litellm, deployment)
    if route is not None and route_differs(route, server, endpoint, ca_path) is None:
        return Outcome(deployment, NONE, route_view(route), route_view(route))
    action = Change.REPLACE if route is not None else Change.REGISTER
    if not check_mode:
        if route is not None:
            litellm.delete(deployment)
        try:
            litellm.register(body)
        except LiteLLMError as exc:
            if route is None:
                raise
            raise DeploymentError(f"{exc} (the old deployment was deleted; the next pass "
                                  "registers it again)") from None
    return Outcome(deployment, action, route_view(route), body_view(body))


def ensure_absent(litellm: LiteLLM, deployment: str, check_mode: bool,
                  find: RouteFinder | None = None) -> Outcome:
    route = owned_route(litellm, deployment, find)
    if route is None:
        return Outcome(deployment, NONE, {}, {})
    if not check_mode:
        litellm.delete(deployment)
    return Outcome(deployment, Change.DELETE, route_view(route), {})


def absent_id(fleet: Fleet, item: dict[str, Any]) -> str:
    """The id to delete: given, or built from box, port and name (the row's name if omitted)."""
    if item["id"] is not None:
        if not item["id"].startswith(ID_PREFIX):
            raise DeploymentError(f"{item['id']} is not an llmao deployment id "
                                  f"({ID_PREFIX}...): left alone")
        return item["id"]
    name = item["name"]
    if name is None:
        name = find_server(fleet, item["box"], item["listen_port"], None).name
    return deployment_id(normalize_host(item["box"]), item["listen_port"], name)


def public_endpoint(fleet: Fleet, server: IntendedServer, item: dict[str, Any],
                    listings: Callable[[], Listings]) -> Endpoint:
    """Where LiteLLM dials the server: as given, else from the listings; over HTTPS under
    box TLS unless told otherwise (a box that has not turned TLS on yet)."""
    host, port = item["public_host"], item["public_port"]
    if host is not None and port is not None:
        endpoint = Endpoint(host, port, "given")
    else:
        read = listings()
        endpoint = read.endpoint(server.box, server.listen_port, server.seed_public_port)
        if endpoint is None:
            failed = "; ".join(f"{kind}: {why}" for kind, why in read.failed.items())
            raise DeploymentError(f"no public address known for {server.box} port "
                                  f"{server.listen_port}" + (f" ({failed})" if failed else ""))
    scheme = item.get("public_scheme") or ("https" if fleet.settings.box_tls else "http")
    return replace(endpoint, scheme=scheme)


def apply_deployment(fleet: Fleet, litellm: LiteLLM, item: dict[str, Any], check_mode: bool,
                     listings: Callable[[], Listings],
                     find: RouteFinder | None = None) -> Outcome:
    """One entry: the single-deployment options, or one element of ``deployments``."""
    if item["state"] == "absent":
        return ensure_absent(litellm, absent_id(fleet, item), check_mode, find)
    server = find_server(fleet, item["box"], item["listen_port"], item["name"])
    endpoint = public_endpoint(fleet, server, item, listings)
    return ensure_present(litellm, server, endpoint, check_mode, litellm_ca_path(fleet), find)


class ApplyError(RuntimeError):
    """An entry failed; ``done`` holds what the entries before it did (and audited)."""

    def __init__(self, message: str, done: list[Outcome]):
        super().__init__(message)
        self.done = done


def apply_all(fleet: Fleet, items: list[dict[str, Any]], check_mode: bool, timeout: float,
              record: Callable[[Outcome, str], None] | None = None) -> list[Outcome]:
    """Every entry in order; ``record`` is told of each change as soon as it is made."""
    litellm = LiteLLM.from_settings(fleet.settings, timeout)
    listings = functools.cache(lambda: read_listings(fleet.settings.providers, timeout))
    done: list[Outcome] = []
    changed: set[str] = set()
    try:
        find = listed_routes(litellm, changed) if len(items) > 1 else None
    except LiteLLMError as exc:
        raise ApplyError(str(exc), done) from None
    for item in items:
        try:
            outcome = apply_deployment(fleet, litellm, item, check_mode, listings, find)
        except (DeploymentError, LiteLLMError) as exc:
            raise ApplyError(str(exc), done) from None
        done.append(outcome)
        if outcome.changed:
            changed.add(outcome.id)
        if outcome.changed and record is not None:
            try:
                record(outcome, item["reason"])
            except OSError as exc:
                raise ApplyError(f"{outcome.action} of {outcome.id} done, but the audit log "
                                 f"could not be written: {exc}", done) from None
    return done


def listed_routes(litellm: LiteLLM, changed: set[str]) -> RouteFinder:
    """Deployments looked up in one listing of LiteLLM's, read now: a first pass of 300
    servers asks LiteLLM once, not 300 times (bench P4). Each listed route is read whole
    (its ``model_info``, the CA file an https deployment verifies its box against
    included), as asking for it alone reads it. A deployment ``changed`` since (the apply
    adds each id it changes), or listed more than once, is asked for alone."""
    listing: dict[str, Route] = {}
    twice: set[str] = set()
    for route in litellm.routes():
        if listing.setdefault(route.id, route) is not route:
            twice.add(route.id)

    def find(deployment: str) -> Route | None:
        if deployment in changed or deployment in twice:
            return litellm.route(deployment)
        return listing.get(deployment)
    return find


def audit_entry(outcome: Outcome, reason: str, now: float) -> dict[str, Any]:
    shown = outcome.after or outcome.before
    return stamped({"action": outcome.action, "id": outcome.id,
                    "model_name": shown.get("model_name"), "api_base": shown.get("api_base"),
                    "reason": reason}, now)


def outcome_diff(outcome: Outcome) -> dict[str, Any]:
    header = f"LiteLLM deployment {outcome.id}"
    return {"before": outcome.before, "after": outcome.after, "before_header": header,
            "after_header": header}


def outcome_result(outcome: Outcome) -> dict[str, Any]:
    return {"id": outcome.id, "action": outcome.action, "deployment": outcome.after}


def main() -> None:
    module = AnsibleModule(**module_args(OPTIONS, approved=True, **ARGUMENT_RULES))
    fleet = load_reconcile_fleet(module)
    refuse_changed_files(module, fleet)
    params = module.params
    bulk = params["deployments"] is not None
    items = params["deployments"] if bulk else [params]
    path = audit_path(fleet, params["audit_log"])

    def record(outcome: Outcome, reason: str) -> None:
        if not module.check_mode:
            append_audit(path, audit_entry(outcome, reason, time.time()))

    try:
        outcomes = apply_all(fleet, items, module.check_mode, params["timeout"], record)
    except ApplyError as exc:
        module.fail_json(msg=str(exc), changed=any(o.changed for o in exc.done),
                         results=[outcome_result(o) for o in exc.done])
    changed = [outcome for outcome in outcomes if outcome.changed]
    result: dict[str, Any] = {"changed": bool(changed)}
    if bulk:
        result["results"] = [outcome_result(outcome) for outcome in outcomes]
    else:
        result.update(outcome_result(outcomes[0]))
    if module._diff:
        diffs = [outcome_diff(outcome) for outcome in changed]
        result["diff"] = diffs if bulk else outcome_diff(outcomes[0])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
