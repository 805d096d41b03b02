"""What `make demo` prints once the fleet is up: where to look and what to try, no secret.

Each secret a command needs is read from a 0600 file (`curl -H @file`), so the commands can be
pasted into a shell, a ticket or a CI log as they are. The admin token is not printed either,
only the file it is in: the output stays shareable, and `cat` is one command away.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .paths import shown

CHAT_QUESTION = "Who answers?"


@dataclass(frozen=True)
class Summary:
    mode: str
    boxes: int
    servers: int
    every_s: float
    answered_by: str
    model: str
    llmao_url: str
    litellm_url: str
    ca_file: Path
    admin_token_file: Path
    litellm_headers: Path
    box_headers: Path
    inventory: Path
    logs: Path
    models_file: Path
    llmao_pid: int
    follow_s: float
    prometheus_config: Path
    # Where the printed Prometheus listens: its usual port when free at the demo's start.
    prometheus_listen: str
    metrics_token_file: Path
    # The inventory source that reaches the container boxes; None for local boxes.
    reach_inventory: Path | None
    # Box TLS: the fleet CA that signs every box's certificate.
    fleet_ca: Path

    def playbook(self, name: str, *inventories: Path) -> str:
        sources = " ".join(f"-i {shown(path)}" for path in inventories)
        # Absolute: Ansible runs each module from a folder of its own, where a relative
        # path names nothing (and the certificate check fails with no hint).
        return (f"SSL_CERT_FILE={self.ca_file.resolve()} .venv/bin/ansible-playbook "
                f"playbooks/{name} {sources}")

    def chat_command(self) -> str:
        body = json.dumps({"model": self.model,
                           "messages": [{"role": "user", "content": CHAT_QUESTION}]})
        return (f"curl -sS {self.litellm_url}/v1/chat/completions "
                f"-H @{shown(self.litellm_headers)} -H 'Content-Type: application/json' "
                f"-d '{body}'")

    def assignment_command(self) -> str:
        return (f"curl -sS --cacert {shown(self.ca_file)} -H @{shown(self.box_headers)} "
                f"{self.llmao_url}/vllm/config")

    def reconcile_command(self) -> str:
        return self.playbook("reconcile.yml", self.inventory)

    def roll_lines(self) -> list[str]:
        """How a change rolls: the file to edit, the reload, what the boxes then do."""
        return [
            f"  roll         edit {shown(self.models_file)} (say, a model's max_model_len), then",
            f"               kill -HUP {self.llmao_pid}   (llmao-server reads its files again)",
            f"               the boxes see the new revision within {self.follow_s:g} s and "
            "take turns: drained,",
            "               restarted, routed again after a reconcile pass; watch the "
            "dashboard's Rollout",
        ]

    def push_lines(self) -> list[str]:
        """The push path, provision.yml, over an inventory that reaches the boxes."""
        if self.reach_inventory is None:
            return ["  push         provision.yml reaches container boxes "
                    "(LLMAO_DEMO_BOXES=container make demo);",
                    "               local boxes share one machine's ports: they follow "
                    "instead (the roll above)"]
        push = self.playbook("provision.yml", self.inventory, self.reach_inventory)
        return [f"  push         {push}",
                "               box by box, each in its turn; a pushed box is the push "
                "path's: it stops following"]

    def prometheus_command(self) -> str:
        """Debian's Prometheus on the demo's config, its data kept in the demo's folder (by
        default it would write data/ wherever it is started)."""
        folder = self.prometheus_config.parent
        return (f"prometheus --config.file={shown(self.prometheus_config)} "
                f"--storage.tsdb.path={shown(folder / 'prometheus-data')} "
                f"--web.listen-address={self.prometheus_listen}")

    def metrics_lines(self) -> list[str]:
        return [f"  prometheus   {self.prometheus_command()}",
                f"               (scrapes {self.llmao_url}/metrics with the token in "
                f"{shown(self.metrics_token_file)},",
                "               and every vLLM server it lists at /metrics/targets; "
                "docs/grafana/ reads both)"]

    def text(self) -> str:
        kind = "container boxes" if self.mode == "container" else "local boxes"
        return "\n".join([
            "",
            f"llmao demo is up: {self.boxes} {kind}, {self.servers} vLLM servers, "
            f"llmao-server, LiteLLM, reconcile every {self.every_s:g} s",
            f"chat answered by {self.answered_by}",
            "",
            f"  dashboard    {self.llmao_url}/fleet",
            f"               log in with the admin token in {shown(self.admin_token_file)} "
            "(this run's, mode 0600);",
            f"               the certificate is signed by the demo's CA, {shown(self.ca_file)}",
            "  box TLS      every box serves HTTPS with a certificate llmao signed; LiteLLM and",
            f"               reconcile verify it against the fleet CA, {shown(self.fleet_ca)}",
            f"  chat         {self.chat_command()}",
            f"  assignment   {self.assignment_command()}",
            f"  reconcile    {self.reconcile_command()}",
            *self.roll_lines(),
            *self.push_lines(),
            *self.metrics_lines(),
            f"  logs         {shown(self.logs)}/",
            "  stop         make demo-stop",
            "",
        ])
