#!/usr/bin/env bash
# polsched's OCI image, built without Docker and without pulling from any registry:
#   1. a minimal Debian bookworm root filesystem with Python 3.11 (mmdebstrap, cached under
#      ~/.cache/polsched by its package list);
#   2. the dependencies of hack/image/requirements.txt (exact versions, hashes checked)
#      and the polsched wheel of this checkout, under /opt/polsched/lib;
#   3. buildah (vfs storage in a throwaway directory: no daemon, no mounts left) puts
#      them in one layer FROM scratch: user 10001, nothing writable but /tmp, entrypoint
#      `polsched`, command `run` (the Dockerfile builds the same thing with Docker);
#   4. an OCI archive at OUT (default .build/polsched-image.tar).
#
#   hack/image.sh build [OUT]   # prints the archive's path; progress on stderr
#   hack/image.sh lock          # regenerate hack/image/requirements.txt from pyproject.toml
#
# IMAGE (default local/polsched:VERSION) names the image inside the archive.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
version=$(python3 -c 'import tomllib,sys; print(tomllib.load(open(sys.argv[1],"rb"))["project"]["version"])' "$root/pyproject.toml")
IMAGE=${IMAGE:-local/polsched:$version}
SUITE=bookworm
# Debian packages of the root filesystem: python3-minimal + its standard library, CA
# certificates, and libstdc++ (google-re2's extension, cel/regex.py, links against it; the
# essential variant does not carry it). No openssl command: the webhook's certificates are
# made in-process (controller/webhook/certificates.py, the cryptography package); see
# rootfs_hook.
PACKAGES=python3-minimal,libpython3.11-stdlib,ca-certificates,libstdc++6

log() { printf '[hack/image %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

cache_root=${POLSCHED_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polsched}

lock() {
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  python3 -m venv "$work/venv"
  python3 -c 'import tomllib,sys; print("\n".join(tomllib.load(open(sys.argv[1],"rb"))["project"]["dependencies"]))' \
    "$root/pyproject.toml" > "$work/direct.txt"
  "$work/venv/bin/pip" install -q --dry-run --ignore-installed --only-binary=:all: \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 --python-version 3.11 \
    --implementation cp --abi cp311 --target "$work/t" --report "$work/report.json" -r "$work/direct.txt"
  python3 - "$work/report.json" > "$here/image/requirements.txt" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print("# The image's Python dependencies: pyproject.toml's pins and everything they pull in,")
print("# each at one version with its wheel's hash (pip install --require-hashes), for CPython 3.11")
print("# on x86_64 manylinux (Debian bookworm's python3). hack/image.sh and the Dockerfile install")
print("# exactly these. Regenerate after changing pyproject.toml's dependencies: hack/image.sh lock")
print()
for i in sorted(r["install"], key=lambda i: i["metadata"]["name"].lower()):
    h = i["download_info"]["archive_info"]["hashes"]["sha256"]
    print(f"{i['metadata']['name']}=={i['metadata']['version']} \\\n    --hash=sha256:{h}")
EOF
  log "wrote $here/image/requirements.txt"
}

# The root filesystem as a tarball, cached by suite and package list.
rootfs() {
  local key tar
  key=$(printf '%s\n' "$SUITE" "$PACKAGES" "$(sed -n '/^rootfs_hook()/,/^}/p' "$0")" | sha256sum | cut -c1-16)
  tar="$cache_root/image-rootfs-$key.tar"
  if [[ -f $tar ]]; then echo "$tar"; return 0; fi
  mkdir -p "$cache_root"
  log "mmdebstrap: Debian $SUITE with $PACKAGES (a cold build downloads ~40 MB, 1-3 min)"
  local hook
  hook=$(declare -f rootfs_hook)
  mmdebstrap --variant=essential --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --customize-hook="$hook; rootfs_hook \"\$1\"" \
    --format=tar "$SUITE" "$tar.tmp" 2>&1 | sed -u 's/^/  /' >&2
  [[ ${PIPESTATUS[0]} -eq 0 && -s $tar.tmp ]] || die "mmdebstrap failed"
  mv "$tar.tmp" "$tar"
  echo "$tar"
}

# Runs inside mmdebstrap on the finished tree ($1): the polsched user, and nothing
# writable by it but /tmp.
rootfs_hook() {
  local r=$1
  echo 'polsched:x:10001:10001:polsched:/nonexistent:/usr/sbin/nologin' >> "$r/etc/passwd"
  echo 'polsched:x:10001:' >> "$r/etc/group"
  echo 'polsched:!:19000::::::' >> "$r/etc/shadow"
  rm -rf "$r"/var/cache/* "$r"/var/log/* "$r"/var/lib/apt/lists/*
  # Pulled in for package scripts that have run (perl's modules, debconf's), and glibc's
  # iconv modules (Python brings its own codecs): 40 MB nothing in the image uses.
  rm -rf "$r"/usr/share/perl "$r"/usr/lib/x86_64-linux-gnu/perl "$r"/usr/lib/x86_64-linux-gnu/libperl.so* \
    "$r"/usr/lib/x86_64-linux-gnu/gconv "$r"/usr/share/zoneinfo/right "$r"/usr/share/common-licenses
  # ca-certificates depends on the openssl package (its scripts rehash /etc/ssl/certs, done
  # by now): its commands go, nothing in the image runs them; libssl's openssl.cnf stays.
  rm -f "$r"/usr/bin/openssl "$r"/usr/bin/c_rehash
  find "$r" -xdev -type d -perm -0002 ! -path "$r/tmp" -exec chmod o-w {} +
  chmod 1777 "$r/tmp"
}

build() {
  local out=${1:-$root/.build/polsched-image.tar} start tar pyver c size
  start=$(date +%s)
  "$here/install-deps.sh" image
  mkdir -p "$(dirname "$out")"
  out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
  work=$(mktemp -d /tmp/polsched-image.XXXXXX)
  trap 'rm -rf "$work"' EXIT  # $work is global: the trap runs after build() returned
  tar=$(rootfs)
  log "root filesystem ready ($(( $(date +%s) - start ))s): $tar"

  # Python packages with this machine's python3, which must be the image's (3.11).
  pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  [[ $pyver == 3.11 ]] || die "python3 here is $pyver; the image's is 3.11 (bytecode would not match)"
  python3 -m venv "$work/venv"
  log "the polsched wheel and hack/image/requirements.txt"
  "$work/venv/bin/pip" wheel -q --no-deps -w "$work/wheel" "$root" 2>&1 | sed 's/^/  /' >&2
  "$work/venv/bin/pip" install -q --no-compile --no-deps --require-hashes --only-binary=:all: \
    --target "$work/opt/polsched/lib" -r "$here/image/requirements.txt" 2>&1 | sed 's/^/  /' >&2
  "$work/venv/bin/pip" install -q --no-compile --no-deps --upgrade --target "$work/opt/polsched/lib" \
    "$work"/wheel/polsched-*.whl 2>&1 | sed 's/^/  /' >&2
  # Not used by polsched, and half the image: the kubernetes client's asyncio twin
  # (kubernetes.aio, 68 MB with bytecode; polsched talks to the API with its own aiohttp
  # client and takes only kubeconfig loading from `kubernetes`), and test suites.
  rm -rf "$work/opt/polsched/lib/bin" "$work/opt/polsched/lib/kubernetes/aio"
  find "$work/opt/polsched/lib" -depth -type d \( -name tests -o -name test \) -exec rm -rf {} +
  # Bytecode checked by hash, not mtime: valid whatever times the layer gives the files,
  # and the read-only root never needs a rewrite.
  python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash "$work/opt/polsched/lib" >/dev/null
  mkdir -p "$work/opt/polsched/manifests" "$work/usr/local/bin"
  cp -r "$root/manifests/templates" "$work/opt/polsched/manifests/"
  install -m 0755 "$here/image/polsched" "$work/usr/local/bin/polsched"
  chmod -R go-w "$work/opt" "$work/usr"
  # Smoke test: the image's own python3 imports every module of the package, native
  # extensions included (a wheel whose shared library the root filesystem lacks, as
  # google-re2's libstdc++ once was, fails here rather than in a CrashLoopBackOff).
  # chroot needs root, as the build's install-deps does; elsewhere it is skipped, said so.
  if [[ $(id -u) == 0 ]]; then
    mkdir "$work/smoke"
    tar -C "$work/smoke" -xf "$tar"
    cp -a "$work/opt" "$work/smoke/"
    chroot "$work/smoke" /usr/bin/python3 -s -c '
import importlib, pkgutil, sys
sys.path.insert(0, "/opt/polsched/lib")
import polsched
for m in pkgutil.walk_packages(polsched.__path__, "polsched."):
    importlib.import_module(m.name)
' || die "the image's python3 cannot import polsched (a missing shared library? see above)"
    rm -rf "$work/smoke"
    log "smoke test: the image's python3 imports every polsched module"
  else
    log "smoke test skipped: chroot needs root"
  fi

  log "buildah: one layer from scratch"
  local b="buildah --storage-driver vfs --root $work/storage --runroot $work/run"
  c=$($b from scratch)
  $b add "$c" "$tar" / >/dev/null
  $b copy "$c" "$work/opt" /opt >/dev/null
  $b copy "$c" "$work/usr/local/bin/polsched" /usr/local/bin/polsched >/dev/null
  $b config --user 10001:10001 --workingdir /tmp \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
    --env POLSCHED_TEMPLATES=/opt/polsched/manifests/templates \
    --entrypoint '["/usr/local/bin/polsched"]' --cmd run \
    --label "org.opencontainers.image.title=polsched" \
    --label "org.opencontainers.image.version=$version" "$c"
  rm -f "$out"
  $b commit --quiet --format oci --disable-compression=false "$c" "oci-archive:$out:$IMAGE" >/dev/null
  $b rm "$c" >/dev/null
  size=$(python3 - "$out" <<'EOF'
import gzip, json, sys, tarfile
t = tarfile.open(sys.argv[1])
index = json.load(t.extractfile("index.json"))
def path(d): return "blobs/" + d["digest"].replace(":", "/")
manifest = json.load(t.extractfile(path(index["manifests"][0])))
packed = sum(l["size"] for l in manifest["layers"])
unpacked = 0
for layer in manifest["layers"]:
    with gzip.open(t.extractfile(path(layer))) as f:
        while chunk := f.read(1 << 20):
            unpacked += len(chunk)
print(f"{unpacked / 1e6:.0f} MB unpacked, {packed / 1e6:.0f} MB compressed")
EOF
)
  log "image $IMAGE: $out ($size) built in $(( $(date +%s) - start ))s"
  echo "$out"
}

case "${1:-build}" in
  build) build "${2:-}" ;;
  lock) lock ;;
  *) echo "usage: $0 build [OUT] | lock" >&2; exit 2 ;;
esac
