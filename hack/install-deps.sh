#!/usr/bin/env bash
# Installs the Debian packages that `make image` and `make cluster REAL_NODE=1` need:
# containerd + runc + the CNI plugins (+ busybox-static for its test image) for a real node, buildah + mmdebstrap for the image
# (no Docker, nothing pulled from a registry), lua5.4 for the Argo CD health check test.
# Idempotent: packages already present are skipped. Runs apt-get, so root (as CI is).
#
#   hack/install-deps.sh node|image|lua|all
set -euo pipefail
log() { printf '[hack/install-deps %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

want=()
case "${1:-all}" in
  node)  want=(containerd runc containernetworking-plugins iptables busybox-static buildah) ;;
  image) want=(buildah mmdebstrap) ;;
  lua)   want=(lua5.4) ;;
  all)   want=(containerd runc containernetworking-plugins iptables busybox-static buildah mmdebstrap lua5.4) ;;
  *) echo "usage: $0 node|image|lua|all" >&2; exit 2 ;;
esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  log "missing Debian packages: ${missing[*]}; install them as root: apt-get install ${missing[*]}"
  exit 1
fi
start=$(date +%s)
log "installing ${missing[*]} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
# A cold machine has no package lists yet; a warm one skips the update when they are fresh.
if [[ -z $(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1) ]]; then
  apt-get update -q 2>&1 | sed 's/^/  /' >&2
fi
apt-get install -y -q --no-install-recommends "${missing[@]}" 2>&1 \
  | grep -E '^(Setting up|E:|Err)' | sed 's/^/  /' >&2
for p in "${missing[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || { log "$p did not install"; exit 1; }
done
log "installed in $(( $(date +%s) - start ))s"
