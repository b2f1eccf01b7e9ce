#!/usr/bin/env bash
# Makes a local base image for deploy/Containerfile from Debian's own packages, for a machine that
# cannot pull from container registries (ADR 0028): mmdebstrap writes a minimal Debian root file
# system (python3 and its venv module, tini, CA certificates) as a tarball, and podman imports it
# as an image. The wheel's Python dependencies still come from PyPI, at image build time.
#   bash deploy/make-base.sh [IMAGE]      (default localhost/mcp-reconciler-base:bookworm)
# Needs mmdebstrap and podman (Debian packages); as root, or as a user with subuids (unshare mode).
set -euo pipefail
image="${1:-localhost/mcp-reconciler-base:bookworm}"
suite="${DEBIAN_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
for tool in mmdebstrap podman; do
    command -v "$tool" >/dev/null 2>&1 || { echo "make-base: $tool is missing (apt-get install $tool)" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,tini,ca-certificates \
    --aptopt='Acquire::Retries "3"' "$suite" "$tmp/base.tar" "$mirror"
# An imported tarball has no image config: give it the PATH and command a Debian image has.
podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    "$tmp/base.tar" "$image" >/dev/null
echo "make-base: $image ($suite, $(podman image inspect --format '{{.Size}}' "$image") bytes)"
