#!/usr/bin/env bash
# Fuzz smoke: every cargo-fuzz target for a bounded time (default 30 s each), starting from the
# committed seed corpus. A crash (panic, sanitizer report, timeout) fails the script, and
# libFuzzer leaves the input in fuzz/artifacts/<target>/.
#
#   bash fuzz/smoke.sh [SECONDS] [TARGET...]
#
# Installs the nightly toolchain and cargo-fuzz when missing. New inputs libFuzzer finds go to
# a scratch copy of the corpus, so a smoke run leaves the committed corpus as it was.
set -euo pipefail
cd "$(dirname "$0")"
secs="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(pipeline stage_def lock_file run_record logbook_entry tree_manifest)
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# Its own target dir: sanitizer builds must not mix with the workspace's release builds.
export CARGO_TARGET_DIR="${FUZZ_TARGET_DIR:-$PWD/target}"
cargo +nightly fuzz build --release
scratch="$(mktemp -d "${TMPDIR:-/tmp}/heddle-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
status=0
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t" "artifacts/$t"
  cp corpus/"$t"/* "$scratch/$t/"
  echo "== fuzz $t for ${secs}s"
  if ! cargo +nightly fuzz run --release "$t" "$scratch/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -artifact_prefix="artifacts/$t/" -print_final_stats=1 2>"$scratch/$t.log"; then
    echo "FAILED: fuzz target $t crashed; input in fuzz/artifacts/$t/" >&2
    tail -40 "$scratch/$t.log" >&2
    status=1
  fi
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$scratch/$t.log" | tr '\n' ' '
  echo
done
exit $status
