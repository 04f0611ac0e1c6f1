#!/usr/bin/env bash
# Build heddle's test images from Debian's busybox-static, without any registry:
#   heddle-test/busybox:latest  FROM scratch, /bin/busybox plus applet symlinks in /bin
#   heddle-test/busybox:moved   the same plus /moved.txt (a second image for "retag" tests)
# heddle-containers' tests build the same images through the Engine API when they are missing
# (see containers/src/test_images.rs); this script is for humans and benchmark harnesses.
set -euo pipefail

busybox=${BUSYBOX:-/bin/busybox}
if [[ ! -x $busybox ]]; then
    echo "error: $busybox not found; install it with: apt-get install -y busybox-static" >&2
    exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

cp "$busybox" "$ctx/busybox"
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/bin/busybox", "mkdir", "-p", "-m", "1777", "/tmp"]
LABEL org.opencontainers.image.title="heddle test busybox"
CMD ["/bin/sh"]
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t heddle-test/busybox:latest "$ctx" >/dev/null

rm -f "$ctx/busybox"
echo moved >"$ctx/moved.txt"
cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM heddle-test/busybox:latest
COPY moved.txt /moved.txt
DOCKERFILE
DOCKER_BUILDKIT=0 docker build -q -t heddle-test/busybox:moved "$ctx" >/dev/null

docker image ls heddle-test/busybox
