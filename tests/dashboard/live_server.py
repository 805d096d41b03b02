"""The real ``llmao-server`` for the dashboard's browser and PostgreSQL tests, and a box's fetch.

Each server runs from the installed entry point (``tests.llmao_process``: two
gunicorn workers, a free loopback port, stopped by its PID) over the test
fleet, with its state where the test says: a SQLite file, or a PostgreSQL
database shared with another instance.
"""

from __future__ import annotations

import copy
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.llmao_process import LlmaoServer, start_llmao_server
from tests.server.fleet_pair import CONFIG, box_headers, write_pair


def start_server(folder: Path, name: str, config_document: dict[str, Any] | None,
                 state: str) -> LlmaoServer:
    """``llmao-server`` for this fleet (the test fleet by default) with ``server.state``."""
    document = copy.deepcopy(config_document or CONFIG)
    document.setdefault("server", {})["state"] = state
    config_path, models_path = write_pair(folder / name, document)
    return start_llmao_server(Path(config_path), Path(models_path), folder / name)


def fetch_config(server: LlmaoServer, host: str) -> tuple[int, bytes]:
    """``GET /vllm/config`` as a box claiming ``host`` makes it: (status, body)."""
    request = urllib.request.Request(f"{server.url}/vllm/config", headers=box_headers(host=host))
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read()
