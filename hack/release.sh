#!/usr/bin/env bash
# `make release VERSION=x.y.z`: a release's artefacts, written to dist/VERSION/ (git-ignored):
#   polsched-image-VERSION.tar   the image (hack/image.sh), an OCI archive, named IMAGE_REPO:VERSION
#   polsched.yaml                the whole install in one file (`polsched render operator`)
#   polsched-VERSION.tgz         the Helm chart (`helm package`, helm from hack/helm.sh)
#   polsched-VERSION.cdx.json    a CycloneDX SBOM of the image's Python environment
#   CHANGELOG.md, SHA256SUMS
# The version is stamped into a copy of the tree (pyproject.toml, polsched.__version__,
# the chart's version, appVersion and image), never into the checkout.
#
#   hack/release.sh VERSION      # progress on stderr, the dist directory on stdout
#   IMAGE_REPO=registry.example.com/polsched hack/release.sh VERSION
#   RELEASE_DIST=DIR             # write DIR/VERSION/ instead of dist/VERSION/
#   RELEASE_SKIP_IMAGE=1         # everything but the image (a machine without root)
#   hack/release.sh tools        # install the SBOM generator (make does, before tests)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
VERSION=${1:-}
# Where the image is published. A placeholder until the first publication (README.md).
IMAGE_REPO=${IMAGE_REPO:-ghcr.io/polsched/polsched}
# The SBOM generator, pinned like every other tool here: cyclonedx-bom (cyclonedx-py) reads
# the installed distributions of a Python environment, which is what the image ships
# (hack/image/requirements.txt and the polsched wheel); syft would need a Go build of its
# own and reads the same metadata.
CYCLONEDX=cyclonedx-bom==7.5.0

tools="$root/.build/release-tools/${CYCLONEDX/==/-}"

log() { printf '[hack/release %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }

# The SBOM generator in a virtualenv of its own (its dependencies are not polsched's and
# must not move the project's pins), under .build/, made once per pin.
install_tools() {
  [[ -f "$tools/.installed" ]] && return
  log "installing $CYCLONEDX into $tools"
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/pip" install -q "$CYCLONEDX" >&2
  touch "$tools/.installed"
}

if [[ $VERSION == tools ]]; then
  install_tools
  echo "$tools"
  exit 0
fi

# SemVer 2, as Helm requires of a chart version (and a v-less image tag).
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] \
  || die "VERSION '${VERSION}' is not x.y.z[-pre]: make release VERSION=1.2.3"
py=${PY:-$root/.venv/bin/python}
[[ -x "$py" ]] || die "$py: run make venv first"
# ... and a Python version too (PEP 440), as pip records it: 1.2.3-rc.1 is both, 1.2.3-foo
# is not.
"$py" -c 'import sys; from packaging.version import Version; Version(sys.argv[1])' "$VERSION" \
  2>/dev/null || die "VERSION '$VERSION' is not a Python (PEP 440) version: use x.y.z or x.y.z-rc.N, -alpha.N, -beta.N, -dev"
helm=$("$here/helm.sh")
start=$(date +%s)

dist="${RELEASE_DIST:-$root/dist}/$VERSION"
rm -rf "$dist" && mkdir -p "$dist"
work=$(mktemp -d /tmp/polsched-release.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The tree as checked out (tracked and new files, uncommitted edits included; nothing
# ignored), with the version stamped.
stage="$work/src"
mkdir -p "$stage"
(cd "$root" && git ls-files -z --cached --others --exclude-standard \
   | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$stage"
sed -i -E "0,/^version = \".*\"/s//version = \"$VERSION\"/" "$stage/pyproject.toml"
sed -i -E "s/^__version__ = \".*\"/__version__ = \"$VERSION\"/" "$stage/operator/polsched/__init__.py"
sed -i -E "s|^  repository: .*|  repository: $IMAGE_REPO|" "$stage/charts/polsched/values.yaml"
grep -q "^version = \"$VERSION\"" "$stage/pyproject.toml" || die "could not stamp pyproject.toml"
grep -q "^__version__ = \"$VERSION\"" "$stage/operator/polsched/__init__.py" \
  || die "could not stamp operator/polsched/__init__.py"
log "release $VERSION of $(cd "$root" && git describe --always --dirty) into $dist"

image="$IMAGE_REPO:$VERSION"
if [[ -n "${RELEASE_SKIP_IMAGE:-}" ]]; then
  log "RELEASE_SKIP_IMAGE: no image archive"
else
  log "image $image (hack/image.sh)"
  IMAGE=$image "$stage/hack/image.sh" build "$dist/polsched-image-$VERSION.tar" >/dev/null
fi

log "polsched.yaml: polsched render operator --image $image"
{
  printf '# polsched %s: the whole install (Namespace, RBAC, CRD, operator, webhook).\n' "$VERSION"
  printf '# kubectl apply --server-side -f polsched.yaml\n'
  # The checkout's polsched: render's output depends on the version only through the
  # image, named here.
  "$(dirname "$py")/polsched" render operator --image "$image"
} > "$dist/polsched.yaml"

log "chart: helm lint and helm package"
"$helm" lint --strict "$stage/charts/polsched" >&2
"$helm" package "$stage/charts/polsched" --version "$VERSION" --app-version "$VERSION" \
  -d "$dist" >&2

log "SBOM: $CYCLONEDX over the image's Python environment"
install_tools
python3 -m venv "$work/env"
"$work/env/bin/pip" install -q --no-compile --no-deps --require-hashes --only-binary=:all: \
  -r "$stage/hack/image/requirements.txt" >&2
"$work/env/bin/pip" install -q --no-compile --no-deps "$stage" >&2
"$tools/bin/cyclonedx-py" environment --pyproject "$stage/pyproject.toml" --output-reproducible \
  --of JSON -o "$dist/polsched-$VERSION.cdx.json" "$work/env/bin/python" >&2

cp "$root/CHANGELOG.md" "$dist/CHANGELOG.md"
grep -q "^## \[$VERSION\]" "$root/CHANGELOG.md" \
  || log "warning: CHANGELOG.md has no section '## [$VERSION]': write it before publishing"
(cd "$dist" && sha256sum -- * > SHA256SUMS)
log "done in $(( $(date +%s) - start ))s:"
ls -l "$dist" >&2
echo "$dist"
