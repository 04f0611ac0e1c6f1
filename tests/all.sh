#!/usr/bin/env bash
# The test command (README): installs what the tests need, builds the test images, runs every
# test. Safe to rerun; each step is skipped when already done.
#   bash tests/all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

need_apt=()
command -v busybox >/dev/null || [[ -x /bin/busybox ]] || need_apt+=(busybox-static)
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
command -v chromium >/dev/null || need_apt+=(chromium)
if ((${#need_apt[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "== apt-get install ${need_apt[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "warning: not root; install ${need_apt[*]} yourself" >&2
  fi
fi

# Python for the stage-script tests: the same pinned set the pipelines provision.
venv="$root/target/pytest-venv"
if [[ ! -x "$venv/bin/pytest" ]]; then
  echo "== python venv for stage tests ($venv)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r stages/requirements-ort.txt pytest
fi

if docker info >/dev/null 2>&1; then
  echo "== test images"
  bash tests/images/build-busybox.sh
  bash tests/images/dfc-double/build.sh
  export HEDDLE_REQUIRE_DOCKER=1
else
  echo "warning: no Docker Engine reachable; container tests will say they skipped" >&2
fi

command -v chromium >/dev/null && export HEDDLE_REQUIRE_CHROMIUM=1

# S3 (moto) and WebDAV (nginx) servers the remote cache tests start on 127.0.0.1.
bash remote/tests/servers.sh && export HEDDLE_REQUIRE_REMOTE_SERVERS=1

echo "== cargo test"
cargo test --workspace --release 2>&1 | tee target/cargo-test.log
echo "== pytest (stage scripts)"
"$venv/bin/pytest" -q tests/python

# The logbook's entries must reproduce. Tolerances match the tables' printed precision.
echo "== logbook entries"
for entry in logbook/*.md; do
  ./target/release/heddle logbook verify "$entry" --rtol 1e-3 --atol 1e-3 > target/logbook-verify.log
  tail -n 3 target/logbook-verify.log
done
