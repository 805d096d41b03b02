# Copyright: llmao fleet contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""LiteLLM's proxy admin routes that reconcile uses: read, register, delete.

Every failure becomes a :class:`LiteLLMError` whose message says which of three
things happened, because the operator's next step differs: the proxy is not
reachable, it refused the master key, or it refused the request itself. A
database-less LiteLLM answers a wrong key with 400 ``no_db_connection`` rather
than 401, so that counts as a refused key too.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from .bearer import is_placeholder
from .config_file import Settings
from .http_json import HttpCallError, JsonService
from .litellm_routes import Route, parse_model_info

KEY_REFUSED_STATUSES = (401, 403)
KEY_REFUSED_KINDS = ("no_db_connection",)
UNKNOWN_ID_TEXT = "not found"


class LiteLLMError(RuntimeError):
    """A LiteLLM call failed; ``unreachable`` and ``key_refused`` say how. No secret inside."""

    def __init__(self, message: str, *, unreachable: bool = False, key_refused: bool = False):
        super().__init__(message)
        self.unreachable = unreachable
        self.key_refused = key_refused


class LiteLLM(JsonService):
    """The proxy at ``url``, administered with its master key (the bearer).

    ``LiteLLM(url, master_key, timeout)``.
    """

    @classmethod
    def from_settings(cls, settings: Settings, timeout: float = 15.0) -> LiteLLM:
        """The proxy ``config.yaml`` names in ``litellm.url`` with ``litellm.master_key``."""
        if not settings.litellm.url:
            raise LiteLLMError("config.yaml: litellm.url is not set")
        if is_placeholder(settings.litellm.master_key):
            raise LiteLLMError("config.yaml: litellm.master_key is missing or CHANGE_ME",
                               key_refused=True)
        return cls(settings.litellm.url, settings.litellm.master_key or "", timeout)

    def routes(self) -> list[Route]:
        """Every deployment LiteLLM serves; a misread answer raises, never reads as empty."""
        return self._routes("/model/info", "reading its deployments")

    def route(self, deployment_id: str) -> Route | None:
        """The deployment with this ``model_info.id``, or None when LiteLLM has none."""
        query = urllib.parse.urlencode({"litellm_model_id": deployment_id})
        try:
            routes = self._routes(f"/model/info?{query}", f"reading deployment {deployment_id}")
        except LiteLLMError as exc:
            if isinstance(exc.__cause__, HttpCallError) and _unknown_id(exc.__cause__):
                return None
            raise
        return next((route for route in routes if route.id == deployment_id), None)

    def register(self, body: dict[str, Any]) -> None:
        deployment_id = (body.get("model_info") or {}).get("id")
        self._call("POST", "/model/new", body, f"registering deployment {deployment_id}")

    def delete(self, deployment_id: str) -> None:
        self._call("POST", "/model/delete", {"id": deployment_id},
                   f"deleting deployment {deployment_id}")

    def _routes(self, path: str, doing: str) -> list[Route]:
        document = self._call("GET", path, None, doing)
        try:
            return parse_model_info(document)
        except ValueError as exc:
            raise LiteLLMError(f"LiteLLM at {self.url}: {doing}: {exc}") from None

    def _call(self, method: str, path: str, body: Any, doing: str) -> Any:
        try:
            return self.call(method, path, body)
        except HttpCallError as exc:
            raise self._failure(exc, doing) from exc

    def _failure(self, exc: HttpCallError, doing: str) -> LiteLLMError:
        if exc.status is None:
            return LiteLLMError(f"LiteLLM at {self.url} {exc.reason} while {doing}",
                                unreachable=True)
        if exc.status in KEY_REFUSED_STATUSES or exc.kind in KEY_REFUSED_KINDS:
            return LiteLLMError(f"LiteLLM at {self.url} refused the master key "
                                f"(HTTP {exc.status}) while {doing}: check litellm.master_key",
                                key_refused=True)
        return LiteLLMError(f"LiteLLM at {self.url}: {doing} failed: {exc}")


def _unknown_id(exc: HttpCallError) -> bool:
    """LiteLLM's 400 for an id it does not know (its shape differs from a refused key's)."""
    return exc.status == 400 and exc.kind is None and UNKNOWN_ID_TEXT in str(exc)
