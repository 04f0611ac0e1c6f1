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

# A Python venv at DIR with PIP_ARGS installed, unless DIR/bin/PROBE is already there.
python_venv() { # DIR PROBE WHY PIP_ARGS...
  local dir="$1" probe="$2" why="$3"
  shift 3
  [[ -x "$dir/bin/$probe" ]] && return 0
  echo "== python venv for $why ($dir)"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
}
