#!/usr/bin/env bash
# Boot script of an llmao box on Vast.ai (the template's PROVISIONING_SCRIPT).
#
# Vast runs it once the container is up. The template carries only FLEET_KEY and
# LLMAO_URL; Vast sets PUBLIC_IPADDR, which is the box's name in llmao's
# fleet.hosts, or CONTAINER_ID (the instance id) when the template sets
# LLMAO_VAST_BOX_NAME=instance_id, for instances that share a public address.
# The script makes sure supervisord runs, then runs install_set.py,
# which fetches the assignment, writes the Supervisor programs and hands over.
# Running it again is safe: an unchanged assignment changes nothing.
#
# Environment:
#   FLEET_KEY, LLMAO_URL   required (from the template); the key is never printed
#   LLMAO_BOOTSTRAP_TOKEN  optional: the one-time token an admin minted for this
#                          box's name (fleet.binding: enrolled). Given to
#                          install_set.py alone, which presents it once; never
#                          printed, and taken out of the environment first, so a
#                          supervisord this script starts never holds it
#   LLMAO_VAST_BOX_NAME    which name the box sends: "address" (the default) or
#                          "instance_id"
#   PUBLIC_IPADDR          required by "address" (Vast sets it); becomes LLMAO_HOST
#   CONTAINER_ID           required by "instance_id" (Vast sets it); becomes LLMAO_HOST
#   LLMAO_POOL_BOX         set by llmao on a box a pool rented: the name llmao gave
#                          it, which becomes LLMAO_HOST (docs/pools.md)
#   INSTALL_SET_URL        https URL of install_set.py, used when it is not beside
#                          this script
#   LLMAO_INSTALL_SET      path of install_set.py, overrides both of the above
#   DATA_DIRECTORY, SUPERVISOR_CONF_DIR, VLLM_BIN, SSL_CERT_FILE: passed on to
#                          install_set.py unchanged
# Exit status: install_set.py's (see its --help), or 2 when this script is
# missing something.
set -euo pipefail

readonly SUPERVISORD_CONF=/etc/supervisor/supervisord.conf
readonly SUPERVISOR_WAIT_S=30

say() { printf 'llmao provision (vast): %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

require() {
  local name=$1 hint=$2
  [[ -n "${!name:-}" ]] || die "$name is not set: $hint"
}

# Print the path of install_set.py: the override, the copy beside this script,
# or a fresh download from INSTALL_SET_URL.
locate_installer() {
  local here
  here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
  if [[ -n "${LLMAO_INSTALL_SET:-}" ]]; then
    [[ -f "$LLMAO_INSTALL_SET" ]] || die "LLMAO_INSTALL_SET=$LLMAO_INSTALL_SET is not a file"
    printf '%s\n' "$LLMAO_INSTALL_SET"
  elif [[ -f "$here/install_set.py" ]]; then
    printf '%s\n' "$here/install_set.py"
  elif [[ -n "${INSTALL_SET_URL:-}" ]]; then
    download_installer "$INSTALL_SET_URL"
  else
    die "install_set.py is not beside this script and INSTALL_SET_URL is not set"
  fi
}

# Fetch install_set.py over https with Python's default TLS verification (the
# vLLM image always has python3; it may lack curl) and print where it went.
download_installer() {
  local url=$1 dest
  [[ "$url" == https://* ]] || die "INSTALL_SET_URL must be an https:// URL"
  dest="$(mktemp -d)/install_set.py"
  say "downloading install_set.py from $url"
  python3 - "$url" "$dest" <<'PY' || die "could not download install_set.py from $url"
import sys
import urllib.request

url, dest = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=60) as answer, open(dest, "wb") as out:
    out.write(answer.read())
PY
  printf '%s\n' "$dest"
}

supervisor_running() { supervisorctl pid >/dev/null 2>&1; }

# supervisord must be up for install_set.py's reread/update handover.
ensure_supervisor() {
  if ! command -v supervisord >/dev/null 2>&1; then
    say "installing supervisor"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends supervisor
  fi
  supervisor_running && return 0
  say "starting supervisord"
  supervisord -c "$SUPERVISORD_CONF"
  local waited=0
  until supervisor_running; do
    ((waited < SUPERVISOR_WAIT_S)) || die "supervisord did not answer within ${SUPERVISOR_WAIT_S} s"
    sleep 1
    waited=$((waited + 1))
  done
}

# Print the box's name in fleet.hosts: its public address by default, its Vast
# instance id when the template asks (two instances can share one address).
box_name() {
  # A pool's box: llmao named it before renting it (its bootstrap token is for that name).
  if [[ -n "${LLMAO_POOL_BOX:-}" ]]; then
    printf '%s\n' "$LLMAO_POOL_BOX"
    return
  fi
  case "${LLMAO_VAST_BOX_NAME:-address}" in
    address)
      require PUBLIC_IPADDR "Vast sets it on every instance; elsewhere, set it to the box's name in fleet.hosts"
      printf '%s\n' "$PUBLIC_IPADDR" ;;
    instance_id)
      require CONTAINER_ID "Vast sets it to the instance id on every instance; elsewhere, set it to the box's name in fleet.hosts"
      printf '%s\n' "$CONTAINER_ID" ;;
    *) die "LLMAO_VAST_BOX_NAME must be address or instance_id, not '${LLMAO_VAST_BOX_NAME}'" ;;
  esac
}

main() {
  # The bootstrap token leaves the environment here and reaches the box program alone
  # (in its environment, never on a command line).
  local bootstrap=${LLMAO_BOOTSTRAP_TOKEN:-}
  unset LLMAO_BOOTSTRAP_TOKEN
  require FLEET_KEY "put llmao's fleet.key in the template's environment"
  require LLMAO_URL "put llmao's base URL (https://...) in the template's environment"
  LLMAO_HOST=$(box_name)
  export LLMAO_HOST
  local installer
  installer=$(locate_installer)
  ensure_supervisor
  say "applying the assignment of $LLMAO_HOST from ${LLMAO_URL:?}"
  LLMAO_BOOTSTRAP_TOKEN=$bootstrap exec python3 "$installer" "$@"
}

main "$@"
