#!/usr/bin/env bash
# The Windows suite: heddle cross-built for x86_64-pc-windows-gnu and run under Wine, against
# real cmd.exe stages, a real cache, lock files, run records and Job objects.
#   bash tests/windows.sh
# Skips (exit 0) only when wine or the mingw compiler is missing and HEDDLE_REQUIRE_WINE is not
# set. Safe to rerun: the build, the Wine prefix and the helper programs are kept in
# target/windows/, the test project is made anew each time.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

for tool in wine x86_64-w64-mingw32-gcc; do
  if ! command -v "$tool" >/dev/null; then
    if [[ -n "${HEDDLE_REQUIRE_WINE:-}" ]]; then
      echo "error: HEDDLE_REQUIRE_WINE is set but $tool is not installed (apt-get install wine wine64 gcc-mingw-w64-x86-64)" >&2
      exit 1
    fi
    echo "SKIPPED tests/windows.sh: $tool is not installed (apt-get install wine wine64 gcc-mingw-w64-x86-64)"
    exit 0
  fi
done

target=x86_64-pc-windows-gnu
tdir="$root/target/windows"
bin="$tdir/bin"
mkdir -p "$bin"

echo "== cargo build --target $target (target dir $tdir)"
if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "$target"; then
  rustup target add "$target"
fi
# --workspace: every crate, not only what heddle.exe links; this build is CI's Windows compile check.
cargo build --release --target "$target" --target-dir "$tdir" --workspace
cp "$tdir/$target/release/heddle.exe" "$bin/heddle.exe"

# Helper programs (tests/windows/*.c). bcryptprimitives.dll sits beside heddle.exe: Wine 8.0
# lacks the DLL that Rust's std takes ProcessPrng from.
cc=x86_64-w64-mingw32-gcc
build_c() { # OUT SRC [LIBS...]
  local out="$1" src="$2"
  shift 2
  if [[ ! -f "$bin/$out" || "$src" -nt "$bin/$out" ]]; then
    "$cc" -O2 -Wall -o "$bin/$out" "$src" "$@"
  fi
}
build_c bcryptprimitives.dll tests/windows/bcryptprimitives.c -shared -ladvapi32
build_c spawn.exe tests/windows/spawn.c
build_c python.exe tests/windows/python-bridge.c

export WINEPREFIX="$tdir/wineprefix" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
export WINEARCH=win64
if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
  echo "== wineboot (new prefix $WINEPREFIX)"
  wineboot --init >/dev/null 2>&1
fi
winpath() { wine winepath.exe -w "$1" 2>/dev/null | tr -d '\r'; }
# The helper programs on the Windows PATH of every process in the prefix.
export WINEPATH="$(winpath "$bin")"
# The Windows build must find no Docker engine and no Unix variables that change its defaults.
unset DOCKER_HOST HEDDLE_CACHE_DIR XDG_CACHE_HOME

# A project whose path holds a space, so every path heddle renders does.
suite="$tdir/suite"
rm -rf "$suite"
proj="$suite/win project"
mkdir -p "$proj/pipelines" "$proj/data" "$proj/.heddle"
cache_w="$(winpath "$suite/cache dir")"
export HEDDLE_CACHE_DIR="$cache_w"
cd "$proj"

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok    $1"; }
fail() { failed=$((failed + 1)); echo "FAIL  $1" >&2; }
check() { # NAME COMMAND...: pass when COMMAND succeeds
  local name="$1"
  shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}

# heddle.exe under Wine; stdout and stderr kept in $out / $err, exit code in $rc.
heddle() {
  rc=0
  wine "$bin/heddle.exe" "$@" >"$suite/stdout" 2>"$suite/stderr" || rc=$?
  out="$(tr -d '\r' <"$suite/stdout")"
  err="$(tr -d '\r' <"$suite/stderr")"
}
show_last() { printf '%s\n%s\n' "$out" "$err" | sed 's/^/    | /' >&2; }
expect_rc() { # WANT WHAT
  if [[ $rc -eq $1 ]]; then pass "$2 (exit $rc)"; else fail "$2: exit $rc, want $1"; show_last; fi
}
contains() { [[ "$1" == *"$2"* ]]; }
# The file's text without carriage returns.
text() { tr -d '\r' <"$1"; }

# The newest run record, read through heddle.exe (a record may refer to a base record for its
# cache hits): `LABEL STATUS cached|ran` per instance.
record() {
  wine "$bin/heddle.exe" show last --json 2>/dev/null | tr -d '\r' | python3 -c '
import json, sys
rec = json.load(sys.stdin)
print("run", rec["status"])
for label, r in rec["instances"]:
    print(label, r["status"]["status"], "cached" if r.get("cached") else "ran")
'
}
in_record() { grep -qx "$1" <<<"$(record)"; }

echo "== Windows suite under $(wine --version) in $proj"

# ---------------------------------------------------------------- cmd stages, cache, cone
printf 'first\n' >"data/my input.txt"
cat >pipelines/chain.toml <<'EOF'
[pipeline]
name = "chain"

[params]
greeting = "hello"

[stages.make]
run = "echo {{ params.greeting }}> {{ out.text }}"
outputs = { text = "greeting.txt" }

[stages.double]
inputs = { text = "make.text" }
run = "type {{ in.text }} > {{ out.lines }} && type {{ in.text }} >> {{ out.lines }}"
outputs = { lines = "lines.txt" }

# A repo input written with a backslash, a file name and an output name with spaces.
[stages.copy]
inputs = { src = { path = 'data\my input.txt' } }
run = "copy /b {{ in.src }} {{ out.copy }} > nul"
outputs = { copy = "copy of input.txt" }

# Exec form: arguments reach cmd through the C runtime's quoting.
[stages.append]
inputs = { c = "copy.copy" }
run = ["cmd", "/c", "type", "{{ in.c }}", ">", "{{ out.both }}"]
outputs = { both = "both.txt" }
EOF

heddle run pipelines/chain.toml
expect_rc 0 "cmd stages run"
check "echo wrote the param" [ "$(text out/chain/make/greeting.txt)" = "hello" ]
check "type twice: two lines" [ "$(text out/chain/double/lines.txt)" = $'hello\nhello' ]
check "copy through a path with spaces and a backslash" [ "$(text "out/chain/copy/copy of input.txt")" = "first" ]
check "exec form with spaces" [ "$(text out/chain/append/both.txt)" = "first" ]
check "run record: all ran" [ "$(record | grep -c ' ok ran$')" = 4 ]
check "run record: completed" in_record "run completed"
check "lock file written" [ -f pipelines/chain.lock ]
lock1="$(cat pipelines/chain.lock)"

heddle run pipelines/chain.toml
expect_rc 0 "rerun"
check "rerun: every instance a cache hit" [ "$(record | grep -c ' ok cached$')" = 4 ]
check "rerun says 0 ran" contains "$out$err" "0 ran, 4 cached"
check "rerun: lock file unchanged" [ "$(cat pipelines/chain.lock)" = "$lock1" ]

heddle status pipelines/chain.toml --check
expect_rc 0 "status --check against the lock"
check "status: all same" contains "$out" "4 as locked, 0 changed"

printf 'second\n' >"data/my input.txt"
heddle status pipelines/chain.toml --check
expect_rc 1 "status --check after an input edit"
check "status names the edited input's stage" grep -q "^changed  copy .*input src" <<<"$out"
check "status keeps the other branch" grep -q "^same     make" <<<"$out"

heddle run pipelines/chain.toml
expect_rc 0 "run after the edit"
check "edited cone reran: copy" in_record "copy ok ran"
check "edited cone reran: append" in_record "append ok ran"
check "outside the cone: make cached" in_record "make ok cached"
check "outside the cone: double cached" in_record "double ok cached"
check "new content downstream" [ "$(text out/chain/append/both.txt)" = "second" ]
check "lock file rewritten" [ "$(cat pipelines/chain.lock)" != "$lock1" ]

heddle run pipelines/chain.toml --set greeting=hi
expect_rc 0 "--set reruns the param's cone"
check "--set: make and double ran" [ "$(record | grep -c '^\(make\|double\) ok ran$')" -eq 2 ]
check "--set: copy cached" in_record "copy ok cached"
check "--set: new value" [ "$(text out/chain/double/lines.txt)" = $'hi\nhi' ]

heddle cache verify
expect_rc 0 "cache verify"

# ---------------------------------------------------------------- locks held by a live run
# While one heddle runs `slow`, `heddle status` names the host unit it holds (LockFileEx), and a
# second heddle on the same pipeline waits for the first's hold on out/slow.
export HEDDLE_HOST_LOCK_DIR="$(winpath "$suite/host locks")"
cat >pipelines/slow.toml <<'EOF'
[pipeline]
name = "slow"

[resources]
device = { units = 1, scope = "host" }

[stages.wait]
run = "ping -n 4 127.0.0.1 > nul & echo done> {{ out.x }}"
outputs = { x = "x.txt" }
resources = { device = 1 }
cache = false
EOF
heddle run pipelines/slow.toml
expect_rc 0 "a host-pool stage"
wine "$bin/heddle.exe" run pipelines/slow.toml >"$suite/slow1" 2>&1 &
first=$!
held=""
for _ in $(seq 40); do
  heddle status pipelines/slow.toml
  if grep -q "^held     device#0 by pid" <<<"$out"; then held=1; break; fi
  sleep 0.1
done
check "status names the host unit a live run holds" [ -n "$held" ]
heddle run pipelines/slow.toml
wait "$first" && rc1=0 || rc1=$?
expect_rc 0 "second run of a pipeline being run"
check "first run ok" [ "$rc1" -eq 0 ]
check "second run waited for the first's out/ lock" contains "$out$err" "waiting for another run of \`slow\`"
heddle status pipelines/slow.toml
check "status: no unit held after both runs" [ -z "$(grep '^held' <<<"$out")" ]

# ---------------------------------------------------------------- Job objects
# pipelines/NAME.toml: a stage `hang` whose grandchild (spawn.exe tree) writes MARKER.started at
# once and MARKER.survived after MS milliseconds, unless its Job object ends it first; standard
# input is appended (more keys of `hang`, more stages).
hang_pipeline() { # NAME MARKER_W MS
  {
    printf '[pipeline]\nname = "%s"\n\n[stages.hang]\n' "$1"
    printf 'run = ["spawn.exe", "tree", '"'%s'"', "%s", "wait"]\noutputs = { x = "x.txt" }\n' "$2" "$3"
    cat
  } >"pipelines/$1.toml"
}
marker_w="$(winpath "$suite")\\tree"
leave_w="$(winpath "$suite")\\leave"
# The stage outlives its timeout; its grandchild would write tree.survived after 6 s.
hang_pipeline tree "$marker_w" 6000 <<EOF
timeout = "3s"

# The stage ends at once and leaves a grandchild that would write leave.survived after 5 s.
[stages.leave]
run = "spawn.exe tree {{ params.marker }} 5000 leave && echo done> {{ out.x }}"
outputs = { x = "x.txt" }

[params]
marker = '$leave_w'
EOF
heddle run pipelines/tree.toml -j 2 --keep-going
expect_rc 1 "a timed-out stage fails the run"
check "timeout recorded" in_record "hang failed ran"
check "timeout named in the output" contains "$out$err" "timed out"
check "a stage whose leader exits is ok" in_record "leave ok ran"
check "the timed-out stage's grandchild had started" [ -f "$suite/tree.started" ]
check "the leaving stage's grandchild had started" [ -f "$suite/leave.started" ]
sleep 4 # past both grandchildren's delays: anything still alive has written its marker
check "timeout killed the grandchild (Job object)" [ ! -f "$suite/tree.survived" ]
check "the leader's exit killed the grandchild (Job object)" [ ! -f "$suite/leave.survived" ]

# heddle killed outright (kill -9 of the Wine process): the Job is made to kill its processes
# when heddle's handle to it closes, so the stage's tree goes with heddle.
hang_pipeline orphan "$(winpath "$suite")\\orphan" 5000 </dev/null
wine "$bin/heddle.exe" run pipelines/orphan.toml >"$suite/orphan.log" 2>&1 &
victim=$!
for _ in $(seq 200); do [[ -f "$suite/orphan.started" ]] && break; sleep 0.1; done
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
check "the killed heddle's grandchild had started" [ -f "$suite/orphan.started" ]
sleep 6 # past the grandchild's delay
check "heddle's death killed its stage's tree (Job object)" [ ! -f "$suite/orphan.survived" ]

# ---------------------------------------------------------------- device-host stage, the platform's python
# hailo/deploy's `python` defaults to {{ host.python }}: `python` on Windows (there is no python3.exe). No Windows
# CPython is installable from a registry here, so python.exe is tests/windows/python-bridge.c: heddle.exe finds it on
# PATH as it would python.org's, and it runs the stage script itself (deploy.py, with its real arguments, paths
# translated) under the host's Linux python3 through Wine, against the hailortcli test double.
printf '{"kind": "HEF", "test_double": "TEST DOUBLE", "hw_arch": "hailo10h", "net_name": "mezo", "sdk_version": "5.3.0"}' >data/model.hef
printf '{"sdk": {"module": "hailo_sdk_client", "version": "5.3.0+testdouble", "test_double": "TEST DOUBLE"}}' >data/compile.json
cli_w="$(winpath "$root/tests/images/dfc-double/bin/hailortcli")"
cat >pipelines/device.toml <<EOF
[pipeline]
name = "device"

[stages.deploy]
uses = "hailo/deploy"
inputs = { hef = { path = "data/model.hef" }, compile_report = { path = "data/compile.json" } }
with = { hailortcli = '$cli_w', seconds = 1, repeats = 2 }
EOF
heddle run pipelines/device.toml
expect_rc 0 "hailo/deploy with its default python (python on Windows)"
deploy_field() { python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1]))[sys.argv[2]]))' out/device/deploy/deploy.json "$1"; }
check "deploy.py ran: two throughput runs, each with FPS" [ "$(deploy_field fps_runs | python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')" = 2 ]
check "deploy.py ran: latency from its own run2" [ "$(deploy_field hw_latency_ms)" = 2.27 ]
check "deploy.py ran: parse-hef read in the 5.2 format" [ "$(deploy_field hef | python3 -c 'import json, sys; print(json.load(sys.stdin)["compiler_version"])')" = 5.3.0 ]
check "run record: deploy ok" in_record "deploy ok ran"

# ---------------------------------------------------------------- containers: the named pipe
cat >pipelines/container.toml <<'EOF'
[pipeline]
name = "container"

[stages.boxed]
image = "busybox:latest"
run = "true"
outputs = { x = "x.txt" }
EOF
heddle run pipelines/container.toml
expect_rc 2 "a container stage with no Docker engine"
check "the message names the named pipe" contains "$err" "cannot reach the Docker Engine at npipe:////./pipe/docker_engine"

wineserver -k 2>/dev/null || true
echo "windows: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
