# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LiteLLM's proxy admin routes that reconcile uses: read, register, delete."""

from __future__ import annotations

from typing import Any

from .http_json import call_json
from .litellm_routes import Route, parse_model_info


class LiteLLM:
    """The proxy at ``url``, administered with its master key."""

    def __init__(self, url: str, master_key: str, timeout: float = 15.0):
        self.url = url.rstrip("/")
        self._master_key = master_key
        self.timeout = timeout

    def routes(self) -> list[Route]:
        return parse_model_info(call_json("GET", f"{self.url}/model/info", self._master_key,
                                          timeout=self.timeout))

    def register(self, body: dict[str, Any]) -> None:
        call_json("POST", f"{self.url}/model/new", self._master_key, body, self.timeout)

    def delete(self, deployment_id: str) -> None:
        call_json("POST", f"{self.url}/model/delete", self._master_key, {"id": deployment_id},
                  self.timeout)
