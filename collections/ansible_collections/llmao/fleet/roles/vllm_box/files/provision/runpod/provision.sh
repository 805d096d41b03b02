#!/usr/bin/env bash
# Entrypoint of the llmao RunPod image.
#
# The pod template carries only FLEET_KEY and LLMAO_URL; RunPod sets
# RUNPOD_POD_ID, which is the box's name in llmao's fleet.hosts. The script
# writes the Supervisor programs with install_set.py (no handover: supervisord
# is not running yet) and then becomes supervisord, which starts them and
# restarts them when they die. If the fetch fails the container exits with
# install_set.py's status and RunPod starts it again, which fetches again.
#
# Environment:
#   FLEET_KEY, LLMAO_URL   required (from the template); the key is never printed
#   LLMAO_BOOTSTRAP_TOKEN  optional: the one-time token an admin (or an llmao pool)
#                          minted for this pod (fleet.binding: enrolled). Given to
#                          install_set.py alone, which presents it once; never
#                          printed, and taken out of the environment first, so
#                          supervisord and the programs it runs never hold it
#   RUNPOD_POD_ID          required (RunPod sets it); becomes LLMAO_HOST
#   LLMAO_POOL_BOX         set by llmao on a pod a pool rented: the name llmao gave it,
#                          which becomes LLMAO_HOST instead (docs/pools.md)
#   LLMAO_INSTALL_SET      path of install_set.py (default: beside this script)
#   SUPERVISORD_CONF       supervisord's configuration (default
#                          /etc/supervisor/supervisord.conf)
#   DATA_DIRECTORY, SUPERVISOR_CONF_DIR, VLLM_BIN, SSL_CERT_FILE: passed on to
#                          install_set.py unchanged
set -euo pipefail

say() { printf 'llmao provision (runpod): %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

require() {
  local name=$1 hint=$2
  [[ -n "${!name:-}" ]] || die "$name is not set: $hint"
}

main() {
  # The bootstrap token leaves the environment here and reaches the box program alone
  # (in its environment, never on a command line).
  local bootstrap=${LLMAO_BOOTSTRAP_TOKEN:-}
  unset LLMAO_BOOTSTRAP_TOKEN
  require FLEET_KEY "put llmao's fleet.key in the pod template's environment"
  require LLMAO_URL "put llmao's base URL (https://...) in the pod template's environment"
  if [[ -n "${LLMAO_POOL_BOX:-}" ]]; then
    # A pool's box: llmao named it before renting it (its bootstrap token is for that name).
    export LLMAO_HOST="$LLMAO_POOL_BOX"
  else
    require RUNPOD_POD_ID "RunPod sets it in every pod; elsewhere, set it to the box's name in fleet.hosts"
    export LLMAO_HOST="${RUNPOD_POD_ID:?}"
  fi
  local here installer
  here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
  installer=${LLMAO_INSTALL_SET:-$here/install_set.py}
  [[ -f "$installer" ]] || die "install_set.py not found at $installer"
  say "applying the assignment of $LLMAO_HOST from ${LLMAO_URL:?}"
  LLMAO_BOOTSTRAP_TOKEN=$bootstrap python3 "$installer" --no-handover "$@"
  exec supervisord -n -c "${SUPERVISORD_CONF:-/etc/supervisor/supervisord.conf}"
}

main "$@"
