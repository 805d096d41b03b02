"""Which llmao this is: what ``llmao-server --version`` prints and ``llmao_build_info`` says."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "llmao-fleet"


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"
