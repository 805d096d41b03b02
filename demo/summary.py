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
        return (f"SSL_CERT_FILE={shown(self.ca_file)} .venv/bin/ansible-playbook "
                f"playbooks/reconcile.yml -i {shown(self.inventory)}")

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
            f"  chat         {self.chat_command()}",
            f"  assignment   {self.assignment_command()}",
            f"  reconcile    {self.reconcile_command()}",
            f"  logs         {shown(self.logs)}/",
            "  stop         make demo-stop",
            "",
        ])
