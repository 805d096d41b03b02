# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LiteLLM deployments: the body llmao registers, how it knows its own, what differs.

LiteLLM stores ``litellm_params`` encrypted and never gives ``api_key`` back,
so ownership and matching rest on ``model_info``: a deterministic ``id`` per
box, listen port and server name, and a plaintext copy of the public base.
Deployments without llmao's marks are never touched, only reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .intent import ID_PREFIX, IntendedServer
from .listings import Endpoint

PUBLIC_BASE_KEY = "llmao_public_base"
# model_info's copy of the CA file an https deployment verifies its box against
# (litellm_params.ssl_verify), so that a pass sees when it is no longer the one to use.
CA_PATH_KEY = "llmao_ca_path"


def deployment_body(server: IntendedServer, endpoint: Endpoint,
                    ca_path: str | None = None) -> dict[str, Any]:
    """The ``/model/new`` body: the models.yaml entry plus this server's base and bearer.

    An ``https`` base verifies the box against the fleet CA at ``ca_path`` (a path on the
    LiteLLM proxy's machine): LiteLLM honours ``ssl_verify`` per deployment for
    ``hosted_vllm/`` models, the only kind a self-hosted model may be (docs/box-tls.md).
    """
    params = dict(server.entry.litellm_params)
    params.update(api_base=endpoint.base_url, api_key=server.api_key)
    info = dict(server.entry.model_info)
    info.update({
        "id": server.id,
        PUBLIC_BASE_KEY: endpoint.base_url,
        "llmao_box": server.box,
        "llmao_listen_port": server.listen_port,
        "llmao_server": server.name,
    })
    if endpoint.scheme == "https" and ca_path:
        params["ssl_verify"] = info[CA_PATH_KEY] = ca_path
    return {"model_name": server.model_name, "litellm_params": params, "model_info": info}


@dataclass(frozen=True)
class Route:
    """One deployment as ``/model/info`` shows it (never with a key)."""

    id: str
    model_name: str
    api_base: str | None
    public_base: str | None
    # The CA file it verifies its box against (None: plain HTTP, or registered without it).
    ca_path: str | None = None

    @property
    def owned(self) -> bool:
        return self.id.startswith(ID_PREFIX) and self.public_base is not None


def parse_model_info(document: Any) -> list[Route]:
    """``{"data": [{"model_name", "litellm_params", "model_info"}]}`` → routes.

    Raises ValueError on another shape: a misread listing must not look empty,
    or every deployment would seem missing and be registered again.
    """
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise ValueError("LiteLLM /model/info did not answer a 'data' list")
    routes = []
    for entry in document["data"]:
        info = entry.get("model_info") or {}
        params = entry.get("litellm_params") or {}
        routes.append(Route(str(info.get("id") or ""), str(entry.get("model_name") or ""),
                            params.get("api_base"), info.get(PUBLIC_BASE_KEY),
                            info.get(CA_PATH_KEY)))
    return routes


def route_differs(route: Route, server: IntendedServer, endpoint: Endpoint,
                  ca_path: str | None = None) -> str | None:
    """Why an owned route no longer fits its server (a re-registration fixes it), or None.
    ``ca_path``: the CA file an https deployment must verify its box against now (a new
    ``box_tls.litellm_ca_path``, before the CA is rotated: docs/box-tls.md)."""
    if route.model_name != server.model_name:
        return f"LiteLLM has model {route.model_name!r}, config says {server.model_name!r}"
    if route.public_base != endpoint.base_url:
        return f"public address moved from {route.public_base} to {endpoint.base_url}"
    if endpoint.scheme == "https" and ca_path and route.ca_path != ca_path:
        return (f"LiteLLM verifies the box against {route.ca_path or 'no CA llmao named'}, "
                f"config says {ca_path}")
    return None
