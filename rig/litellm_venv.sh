#!/usr/bin/env bash
# Create the LiteLLM proxy's own virtual environment, once.
#
# LiteLLM's proxy extra pulls in about 750 MB of packages that nothing else in
# llmao needs, so it lives apart from .venv and is built only when missing or
# when the pinned version changes (a stamp file records what was installed).
#
# Usage: rig/litellm_venv.sh [DIR]   (default: .venv-litellm at the repo root)
set -euo pipefail

LITELLM_VERSION="1.108.7"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-$repo_root/.venv-litellm}"
stamp="$venv_dir/.llmao-litellm-stamp"
# prisma is the Python client only (LiteLLM's error handling imports it); no engine is fetched.
wanted="litellm[proxy]==$LITELLM_VERSION prisma>=0.11,<1 uvicorn"

if [[ -x "$venv_dir/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    echo "litellm venv: $venv_dir is up to date (litellm $LITELLM_VERSION)"
    exit 0
fi

echo "litellm venv: installing litellm $LITELLM_VERSION into $venv_dir (about a minute, 750 MB)"
rm -f "$stamp"
"${PYTHON:-python3}" -m venv "$venv_dir"
# pip's chatter goes to a log inside the venv; it is shown only when the install fails.
log="$venv_dir/.llmao-install.log"
# shellcheck disable=SC2086  # $wanted is a list of requirement words
if ! "$venv_dir/bin/python" -m pip install --disable-pip-version-check $wanted >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "litellm venv: install failed (full log: $log)" >&2
    exit 1
fi
echo "$wanted" > "$stamp"
