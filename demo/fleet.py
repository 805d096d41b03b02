"""The demo's own fleet files, made from the committed local fleet (`inventories/local/`).

The committed files are the example an operator copies; the demo runs the very same fleet with
what must differ per run filled in: fresh random secrets, the ports it found free, where its
state lives, and (for container boxes) box names and the local engine's listing. Everything is
written under `.demo/`, each file 0600 because config.yaml holds every secret of the fleet.
The secrets a person needs (admin token, LiteLLM master key, fleet key, metrics token) go into
files of their own, so the printed commands read them (`curl -H @file`) and no secret is ever
printed.

What the demo adds to the committed fleet, to show the whole job: boxes follow their assignment
(`rollout:`, a short period, so a change rolls in seconds), a price per box (`cost_per_hour`, so
the cost figures show), a metrics token with a ready `prometheus.yml`, and box TLS (`box_tls:`,
a fleet CA of the demo's own under `.demo/fleet-ca/`: every box serves HTTPS with a certificate
llmao signed, docs/box-tls.md).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from llmao_server.fleet_ca_cli import init as init_fleet_ca
from rig import REPO_ROOT
from rig.fleet_files import FleetFolder, FleetSecrets, write_fleet, write_private

TEMPLATE = REPO_ROOT / "inventories" / "local"
# Boxes re-check their assignment this often, and wait this long for requests in flight.
ROLLOUT = {"follow_s": 5, "drain_s": 2}
# $ per hour of box i (the last price for any box after it): the local boxes have no listing.
BOX_PRICES = (0.45, 0.25, 0.25)
ALERT_RULES = REPO_ROOT / "docs" / "alerts" / "llmao-rules.yml"


def template_config() -> dict[str, Any]:
    return yaml.safe_load((TEMPLATE / "config.yaml").read_text())


def template_boxes() -> list[str]:
    """The box names of the committed local fleet (loopback addresses), in file order."""
    return list(template_config()["fleet"]["hosts"])


def template_port(section: str) -> int:
    """The port the committed fleet gives llmao (`server`) or LiteLLM (`litellm`)."""
    return urlsplit(template_config()[section]["url"]).port or 443


@dataclass(frozen=True)
class DemoFleet(FleetFolder):
    """Where the demo's fleet files are, and the loaded fleet they describe."""

    folder: Path
    boxes: tuple[str, ...]
    secrets: FleetSecrets = field(repr=False)
    metrics_token: str = field(repr=False)

    def listen_ports(self) -> dict[str, list[int]]:
        """Each box's listen ports, in row order."""
        ports: dict[str, list[int]] = {box: [] for box in self.boxes}
        for server in self.load().servers():
            ports[server.box].append(server.listen_port)
        return ports


def demo_config(boxes: list[str], keys: FleetSecrets, *, server_url: str, litellm_url: str,
                state: Path, providers: dict[str, Any] | None, metrics_token: str,
                box_tls: dict[str, str] | None = None) -> dict[str, Any]:
    """The committed config with this run's values; box i of the template becomes boxes[i]."""
    config = template_config()
    rows = list(config["fleet"]["hosts"].values())
    if len(boxes) != len(rows):
        raise ValueError(f"the local fleet has {len(rows)} boxes, {len(boxes)} names given")
    prices = {box: BOX_PRICES[min(index, len(BOX_PRICES) - 1)]
              for index, box in enumerate(boxes)}
    config["fleet"].update(key=keys.fleet_key, vllm_api_salt=keys.salt,
                           hosts=dict(zip(boxes, rows, strict=True)), cost_per_hour=prices)
    config["litellm"] = {"url": litellm_url, "master_key": keys.master_key}
    config["server"] = {"url": server_url, "state": str(state)}
    config["admin"] = {"token": keys.admin_token}
    config["metrics"] = {"token": metrics_token}
    config["rollout"] = dict(ROLLOUT)
    if providers:
        config["providers"] = providers
    if box_tls:
        config["box_tls"] = dict(box_tls)
    return config


def make_fleet_ca(folder: Path) -> dict[str, str]:
    """The demo's fleet CA (`llmao-fleet-ca init`'s own code): config.yaml's ``box_tls``."""
    ca_cert, ca_key = init_fleet_ca(str(folder), "llmao demo fleet CA")
    return {"ca_cert": ca_cert, "ca_key": ca_key}


def write_demo_fleet(folder: Path, boxes: list[str], *, server_url: str, litellm_url: str,
                     state: Path, providers: dict[str, Any] | None = None,
                     box_tls: dict[str, str] | None = None) -> DemoFleet:
    """Write config.yaml, models.yaml and the inventory source, and check they load."""
    keys = FleetSecrets()
    metrics_token = "metrics-" + secrets.token_urlsafe(32)
    config = demo_config(boxes, keys, server_url=server_url, litellm_url=litellm_url,
                         state=state, providers=providers, metrics_token=metrics_token,
                         box_tls=box_tls)
    write_fleet(folder, config, (TEMPLATE / "models.yaml").read_text(), private=True,
                inventory=True)
    fleet = DemoFleet(folder, tuple(boxes), keys, metrics_token)
    fleet.load()  # a template that does not load stops the demo here, with the core's message
    return fleet


@dataclass(frozen=True)
class CredentialFiles:
    """The files the printed commands read a secret from (all 0600)."""

    admin_token: Path
    litellm_headers: Path
    box_headers: Path
    metrics_token: Path


def add_box_token(files: CredentialFiles, token: str) -> None:
    """The box's headers with its box token, once it booted: its name is bound to it."""
    headers = files.box_headers.read_text()
    write_private(files.box_headers, f"{headers}X-LLMAO-Box-Token: {token}\n")


def write_credential_files(folder: Path, fleet: DemoFleet, box: str) -> CredentialFiles:
    """The admin token, LiteLLM's and one box's request headers, for `curl -H @file`, and the
    metrics token for Prometheus's ``credentials_file``."""
    files = CredentialFiles(folder / "admin-token", folder / "litellm.headers",
                            folder / "box.headers", folder / "metrics-token")
    write_private(files.admin_token, fleet.secrets.admin_token + "\n")
    write_private(files.metrics_token, fleet.metrics_token + "\n")
    write_private(files.litellm_headers,
                  f"Authorization: Bearer {fleet.secrets.master_key}\n")
    write_private(files.box_headers,
                  f"Authorization: Bearer {fleet.secrets.fleet_key}\nX-LLMAO-Host: {box}\n")
    return files


def write_prometheus_config(path: Path, llmao_url: str, ca_file: Path,
                            token_file: Path, fleet_ca: Path) -> Path:
    """A ``prometheus.yml`` that scrapes this run's llmao-server (HTTPS, the demo's CA, the
    metrics token read from its file) and, found through its ``/metrics/targets``, every
    vLLM server (HTTPS under box TLS: verified against the fleet CA), with llmao's alert
    rules; the Grafana dashboard (docs/grafana/) reads both. Absolute paths: it works from
    any folder."""
    target = urlsplit(llmao_url).netloc
    token = str(token_file.resolve())
    config = {
        "global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": [{
            "job_name": "llmao",
            "scheme": "https",
            "tls_config": {"ca_file": str(ca_file.resolve())},
            "authorization": {"credentials_file": token},
            "static_configs": [{"targets": [target]}],
        }, {
            "job_name": "vllm",
            # Each target group says __scheme__ https; the boxes' certificates are the
            # fleet CA's, not the one llmao-server's certificate comes from.
            "tls_config": {"ca_file": str(fleet_ca.resolve())},
            "http_sd_configs": [{
                "url": f"{llmao_url}/metrics/targets",
                "refresh_interval": "15s",
                "tls_config": {"ca_file": str(ca_file.resolve())},
                # Prometheus's HTTP discovery does not default the type to Bearer.
                "authorization": {"type": "Bearer", "credentials_file": token},
            }],
        }],
    }
    path.write_text("# Prometheus for the llmao demo: `make demo` prints the command\n"
                    + yaml.safe_dump(config, sort_keys=False))
    return path
