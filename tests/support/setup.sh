# Sourced by tests/all.sh and remote/tests/servers.sh: the two ways they install what the tests
# need, each step skipped when already done.

# As root, apt-get install PACKAGES (WHY says what for); otherwise a warning, and status 1.
apt_install() { # WHY PACKAGES...
  local why="$1"
  shift
  if [[ $(id -u) -ne 0 ]]; then
    echo "warning: not root; install $* yourself ($why)" >&2
    return 1
  fi
  echo "== apt-get install $* ($why)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# A Python venv at DIR with PIP_ARGS installed, unless DIR/bin/PROBE is there and was made from
# the same PIP_ARGS and requirement files (a stamp of both): target/ may be reused across CI runs
# (.ci/run), and a changed pin must not leave a stale venv behind.
python_venv() { # DIR PROBE WHY PIP_ARGS...
  local dir probe="$2" why="$3"
  # The real path: a venv's scripts name it, and target/ may be a link that moves (.ci/run).
  dir="$(realpath -m "$1")"
  shift 3
  local stamp arg prev=""
  stamp="$(
    printf '%s\n' "$dir" "$@"
    for arg in "$@"; do
      [[ "$prev" == -r && -f "$arg" ]] && cat "$arg"
      prev="$arg"
    done
  )"
  stamp="$(printf '%s' "$stamp" | sha256sum | cut -c1-16)"
  if [[ -x "$dir/bin/$probe" && "$(cat "$dir/.heddle-stamp" 2>/dev/null)" == "$stamp" ]]; then
    return 0
  fi
  echo "== python venv for $why ($dir)"
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  echo "$stamp" >"$dir/.heddle-stamp"
}
