#!/usr/bin/env bash
# Installs the servers the heddle-remote tests start on 127.0.0.1: moto (S3) in a venv,
# nginx (WebDAV) from Debian's packages and BuildGrid (REAPI) in a second venv. Idempotent:
# each step is skipped when done.
#   bash remote/tests/servers.sh        (tests/all.sh calls it)
# The tests find moto at target/remote-venv/bin/moto_server, nginx on PATH or /usr/sbin and
# BuildGrid at target/reapi-venv/bin/bgd.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"

# nginx's own dav module has no PROPFIND, which WebDAV clients (OpenDAL too) use to stat a
# file: the dav-ext module adds it.
dav_ext=/usr/lib/nginx/modules/ngx_http_dav_ext_module.so
if ! { command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]]; } || [[ ! -f $dav_ext ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    echo "== apt-get install nginx-light libnginx-mod-http-dav-ext (WebDAV test server)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light libnginx-mod-http-dav-ext >/dev/null
    # Debian starts the packaged service; the tests run their own instance.
    (systemctl disable --now nginx 2>/dev/null || service nginx stop 2>/dev/null || true) >/dev/null
  else
    echo "warning: not root; install nginx yourself" >&2
  fi
fi

venv="$root/target/remote-venv"
if [[ ! -x "$venv/bin/moto_server" ]]; then
  echo "== python venv for the S3 test server ($venv)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'moto[server]==5.1.*' boto3
fi

# The REAPI test server: BuildGrid 0.4.4 (CAS, ByteStream, ActionCache) in a venv of its own.
reapi_venv="$root/target/reapi-venv"
if [[ ! -x "$reapi_venv/bin/bgd" ]]; then
  echo "== python venv for the REAPI test server ($reapi_venv)"
  python3 -m venv "$reapi_venv"
  "$reapi_venv/bin/pip" install -q --disable-pip-version-check 'buildgrid==0.4.4'
fi
