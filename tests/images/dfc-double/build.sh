#!/usr/bin/env bash
# TEST DOUBLE — not the Hailo SDK.
# Builds, from a Debian bookworm root filesystem with python3, python3-numpy, python3-venv and python3-pip (made by
# mmdebstrap from Debian's packages and imported with `docker import`; no registry):
#   heddle-test/dfc-double:latest        the test-double packages `hailo_sdk_client` / `hailo_platform` (numpy-only
#                                        fakes that record every call) on PYTHONPATH;
#   hailo_ai_sw_suite_2025-10:testdouble the double's wheel (make_wheel.py) installed the way the AI Software Suite
#                                        image has the DFC: /local/workspace/hailo_virtualenv, user `hailo` (route a
#                                        of README "Bring your DFC"); a tag no real suite image has (they are `:1`);
#   heddle-test/dfc-wheel-base:bookworm  the bare rootfs, the base route b's recipe (stages/dfc/image/Dockerfile) is
#                                        built on in the tests instead of a CUDA image (no registry here).
# Usage: tests/images/dfc-double/build.sh [--force-rootfs]
# The rootfs tarball is cached under ${HEDDLE_TEST_CACHE:-/var/cache/heddle-test}/ so reruns take seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${HEDDLE_TEST_CACHE:-/var/cache/heddle-test}"
mkdir -p "$cache"
rootfs="$cache/dfc-double-rootfs-bookworm-venv.tar"
# Its own tag: an older build.sh (another checkout) tags its rootfs without venv/pip as :bookworm.
base="heddle-test/dfc-double-base:bookworm-venv"
image="${DFC_DOUBLE_IMAGE:-heddle-test/dfc-double:latest}"
suite="${DFC_DOUBLE_SUITE_IMAGE:-hailo_ai_sw_suite_2025-10:testdouble}"
wheel_base="heddle-test/dfc-wheel-base:bookworm"

if [[ "${1:-}" == "--force-rootfs" ]]; then rm -f "$rootfs"; fi
if [[ ! -s "$rootfs" ]]; then
  if ! command -v mmdebstrap >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap
  fi
  tmp="$rootfs.partial"
  rm -f "$tmp"
  mmdebstrap --variant=apt --format=tar --include=python3,python3-numpy,python3-venv,python3-pip \
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

docker tag "$base" "$wheel_base"

# The suite-like image: the double's wheel in /local/workspace/hailo_virtualenv, run as `hailo`, as the suite does.
rm -rf "${ctx:?}"/*
python3 "$here/make_wheel.py" "$ctx" >/dev/null
whl="$(cd "$ctx" && ls hailo_dataflow_compiler-*.whl)"
cp "$here/bin/hailortcli" "$ctx/hailortcli"
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $base
LABEL heddle.test-double="TEST DOUBLE - not the Hailo SDK" org.opencontainers.image.title="hailo_ai_sw_suite-double"
# The rootfs has no useradd (mmdebstrap's apt variant): the account is written as useradd would write it.
RUN echo 'hailo:x:1000:1000::/home/hailo:/bin/bash' >> /etc/passwd && echo 'hailo:x:1000:' >> /etc/group \
 && mkdir -p /home/hailo /local/workspace && chown 1000:1000 /home/hailo /local/workspace
COPY $whl /tmp/$whl
COPY hailortcli /usr/local/bin/hailortcli
USER hailo
WORKDIR /local/workspace
# --system-site-packages: Debian's numpy satisfies the wheel's one dependency with no index to reach.
RUN python3 -m venv --system-site-packages /local/workspace/hailo_virtualenv \
 && /local/workspace/hailo_virtualenv/bin/pip install --no-index --no-cache-dir /tmp/$whl \
 && /local/workspace/hailo_virtualenv/bin/python -c "import hailo_sdk_client"
ENV PYTHONDONTWRITEBYTECODE=1
DOCKERFILE
docker build -q -t "$suite" "$ctx"
echo "built $suite (TEST DOUBLE — not the Hailo AI Software Suite) and $wheel_base"
