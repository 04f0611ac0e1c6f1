#!/usr/bin/env bash
# TEST DOUBLE — not the Hailo SDK.
# Builds heddle-test/dfc-double:latest: a Debian bookworm root filesystem with python3 + python3-numpy, made by
# mmdebstrap from Debian's packages and imported with `docker import`, plus a layer that puts the test-double
# packages `hailo_sdk_client` / `hailo_platform` (numpy-only fakes that record every call) on PYTHONPATH.
# Usage: tests/images/dfc-double/build.sh [--force-rootfs]
# The rootfs tarball is cached under ${HEDDLE_TEST_CACHE:-/var/cache/heddle-test}/ so reruns take seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${HEDDLE_TEST_CACHE:-/var/cache/heddle-test}"
mkdir -p "$cache"
rootfs="$cache/dfc-double-rootfs-bookworm.tar"
base="heddle-test/dfc-double-base:bookworm"
image="${DFC_DOUBLE_IMAGE:-heddle-test/dfc-double:latest}"

if [[ "${1:-}" == "--force-rootfs" ]]; then rm -f "$rootfs"; fi
if [[ ! -s "$rootfs" ]]; then
  if ! command -v mmdebstrap >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap
  fi
  tmp="$rootfs.partial"
  rm -f "$tmp"
  mmdebstrap --variant=apt --format=tar --include=python3,python3-numpy \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tmp"
  mv "$tmp" "$rootfs"
fi

# Import the rootfs once per tarball content.
sum="$(sha256sum "$rootfs" | cut -c1-16)"
if [[ "$(docker image inspect -f '{{ index .Config.Labels "heddle.rootfs" }}' "$base" 2>/dev/null || true)" != "$sum" ]]; then
  docker import \
    --change "LABEL heddle.rootfs=$sum" \
    --change 'LABEL heddle.test-double="TEST DOUBLE - not the Hailo SDK"' \
    --change 'CMD ["python3"]' \
    "$rootfs" "$base"
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
cp -r "$here/hailo_sdk_client" "$here/hailo_platform" "$here/bin" "$ctx/"
find "$ctx" -name __pycache__ -prune -exec rm -rf {} +
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $base
LABEL heddle.test-double="TEST DOUBLE - not the Hailo SDK" org.opencontainers.image.title="dfc-double"
COPY hailo_sdk_client /opt/dfc-double/hailo_sdk_client
COPY hailo_platform /opt/dfc-double/hailo_platform
COPY bin /opt/dfc-double/bin
# A GPU that already drives a display: the optimiser passes over it unless CUDA_VISIBLE_DEVICES is set.
ENV PYTHONPATH=/opt/dfc-double PYTHONDONTWRITEBYTECODE=1 HAILO_DOUBLE_ASSUME_GPU=1 HAILO_DOUBLE_GPU_BUSY=1 \
    PATH=/opt/dfc-double/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN python3 -c "import hailo_sdk_client, numpy; print(hailo_sdk_client.__doc__.splitlines()[0], numpy.__version__)"
DOCKERFILE
docker build -q -t "$image" "$ctx"
echo "built $image (TEST DOUBLE — not the Hailo SDK)"
