#!/usr/bin/env bash
# The test command (README): installs what the tests need, builds the test images, runs every
# test. Safe to rerun; each step is skipped when already done.
#   bash tests/all.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
source tests/support/setup.sh

need_apt=()
command -v busybox >/dev/null || [[ -x /bin/busybox ]] || need_apt+=(busybox-static)
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v wine >/dev/null || need_apt+=(wine wine64)
command -v x86_64-w64-mingw32-gcc >/dev/null || need_apt+=(gcc-mingw-w64-x86-64)
if ((${#need_apt[@]})); then
  apt_install "test tools" "${need_apt[@]}" || true
fi

# Python for the stage-script tests: the same pinned set the pipelines provision.
venv="$root/target/pytest-venv"
python_venv "$venv" pytest "stage tests" -r stages/requirements-ort.txt pytest

# Bring-your-own-model test (tests/byom.rs): a real ONNX model and real images that PyPI packages ship in their
# wheels. Only their files are used, so no dependencies are installed with them.
if ! ls "$venv"/lib/python*/site-packages/rapidocr_onnxruntime/models >/dev/null 2>&1 \
   || ! ls "$venv"/lib/python*/site-packages/skimage/data >/dev/null 2>&1; then
  echo "== foreign model and images for tests/byom.rs"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps rapidocr-onnxruntime==1.4.4 scikit-image==0.26.0
fi
export HEDDLE_REQUIRE_BYOM=1

# The model corpus (tests/corpus.rs, tests/corpus/make_corpus.py): real ONNX models that PyPI packages ship in their
# wheels (besides onnx's light/ models, onnxruntime's datasets/ and the PP-OCR models above). Only their files.
if ! ls "$venv"/lib/python*/site-packages/nudenet/320n.onnx >/dev/null 2>&1 \
   || ! ls "$venv"/lib/python*/site-packages/magika/models >/dev/null 2>&1 \
   || ! ls "$venv"/lib/python*/site-packages/silero_vad/data >/dev/null 2>&1; then
  echo "== model corpus for tests/corpus.rs"
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps nudenet==3.4.2 magika==1.0.3 silero-vad==6.2.3
fi
export HEDDLE_REQUIRE_CORPUS=1

# The JSON Schemas editors read (schemas/*.schema.json), checked by a validator that is not
# heddle: every pipeline and stage definition in the repository validates, and a misspelt key
# does not. tests/schema.rs runs the same checks under cargo test (required from here on).
if [[ ! -x "$venv/bin/check-jsonschema" ]]; then
  echo "== check-jsonschema for the schema tests"
  "$venv/bin/pip" install -q --disable-pip-version-check check-jsonschema==0.39.0
fi
export HEDDLE_REQUIRE_SCHEMA_CHECK=1
echo "== JSON Schemas: every pipeline and stage.toml validates, a misspelt key does not"
"$venv/bin/check-jsonschema" --schemafile schemas/pipeline.schema.json pipelines/*.toml
find stages -name stage.toml -print0 | xargs -0 "$venv/bin/check-jsonschema" --schemafile schemas/stage.schema.json
misspelt="$(mktemp -d)/stage.toml"
printf '[stage]\nrun = "true"\ntimout = "1m"\n' > "$misspelt"
if "$venv/bin/check-jsonschema" --schemafile schemas/stage.schema.json "$misspelt" >/dev/null; then
  echo "schemas/stage.schema.json accepts a misspelt key (timout = \"1m\")" >&2
  exit 1
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
command -v wine >/dev/null && command -v x86_64-w64-mingw32-gcc >/dev/null && export HEDDLE_REQUIRE_WINE=1
# As root the full-disk tests mount their own tmpfs; a failure to do so is then a failure.
[[ $(id -u) -eq 0 ]] && export HEDDLE_REQUIRE_ROOT=1

# A real single-node SLURM for tests/cluster_slurm.rs (root only: its daemons run as root in a
# temp folder, tests/support/slurm.sh). Required from here on once it starts.
if [[ $(id -u) -eq 0 ]]; then
  command -v slurmctld >/dev/null && command -v munged >/dev/null \
    || apt_install "SLURM (cluster tests)" slurmctld slurmd slurm-client munge || true
  slurm_probe="$(mktemp -d)"
  if bash tests/support/slurm.sh start "$slurm_probe" 16890 >/dev/null 2>&1; then
    export HEDDLE_REQUIRE_SLURM=1
  else
    echo "warning: SLURM does not start here; the cluster tests will say they skipped" >&2
  fi
  bash tests/support/slurm.sh stop "$slurm_probe" >/dev/null 2>&1 || true
  rm -rf "$slurm_probe"
fi

# S3 (moto) and WebDAV (nginx) servers the remote cache tests start on 127.0.0.1.
bash remote/tests/servers.sh && export HEDDLE_REQUIRE_REMOTE_SERVERS=1

# The integration tests are two binaries (tests/suite.rs, tests/docker/). The SLURM tests are in
# the suite but run on their own, after the rest, as they did when they were a binary of their
# own: their daemons and jobs want both cores. Both runs happen even when the first fails.
echo "== cargo test"
status=0
cargo test --workspace --release --no-fail-fast -- --skip cluster_slurm:: 2>&1 | tee target/cargo-test.log || status=1
echo "== cargo test: the SLURM cluster tests, alone"
# --workspace as above: the same feature set, so the suite binary built above is reused (without
# it cargo unifies features for the root package alone and rebuilds every crate that differs).
cargo test --workspace --release --no-fail-fast --test suite cluster_slurm:: 2>&1 | tee -a target/cargo-test.log || status=1
((status == 0))
[[ -f target/corpus.md ]] && cat target/corpus.md
echo "== pytest (stage scripts)"
"$venv/bin/pytest" -q tests/python

# The logbook's entries must reproduce, every number to the digits the entry printed (or within
# the tolerance a block states). An entry whose pipeline needs an image this machine does not have
# (the DFC) cannot be rerun here: verify says so and exits 2; that is reported, not hidden.
echo "== logbook entries"
for entry in logbook/*.md; do
  log="target/logbook-verify-$(basename "$entry" .md).log"
  rc=0
  ./target/release/heddle logbook verify "$entry" > "$log" 2> "$log.err" || rc=$?
  if [[ $rc -eq 2 ]] && grep -q "is not present in the Docker Engine" "$log.err"; then
    echo "$entry: NOT VERIFIED here: $(grep -o 'image [^ ]* is not present in the Docker Engine' "$log.err" | head -n 1)"
    continue
  fi
  tail -n 3 "$log"
  cat "$log.err" >&2
  [[ $rc -eq 0 ]] || { echo "$entry does not reproduce (exit $rc); see $log" >&2; exit 1; }
done

# heddle.exe under Wine: cmd stages, cache, lock, status, Job objects, paths with spaces.
echo "== Windows suite (Wine)"
bash tests/windows.sh
