#!/usr/bin/env bash
# Installs the servers the heddle-remote tests start on 127.0.0.1: moto (S3) in a venv,
# nginx (WebDAV, also over https with client certificates) from Debian's packages, openssl to
# make the tests' certificates and BuildGrid (REAPI) in a second venv. Idempotent:
# each step is skipped when done.
#   bash remote/tests/servers.sh        (tests/all.sh calls it)
# The tests find moto at target/remote-venv/bin/moto_server, nginx on PATH or /usr/sbin and
# BuildGrid at target/reapi-venv/bin/bgd.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
source tests/support/setup.sh

# nginx's own dav module has no PROPFIND, which WebDAV clients (OpenDAL too) use to stat a
# file: the dav-ext module adds it.
dav_ext=/usr/lib/nginx/modules/ngx_http_dav_ext_module.so
if ! { command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]]; } || [[ ! -f $dav_ext ]]; then
  if apt_install "WebDAV test server" nginx-light libnginx-mod-http-dav-ext; then
    # Debian starts the packaged service; the tests run their own instance.
    (systemctl disable --now nginx 2>/dev/null || service nginx stop 2>/dev/null || true) >/dev/null
  fi
fi

# The TLS tests (https.rs, and reapi.rs's grpcs ones) make a CA and certificates with openssl.
if ! command -v openssl >/dev/null; then
  apt_install "the test CA's certificate maker" openssl || true
fi

python_venv "$root/target/remote-venv" moto_server "the S3 test server" 'moto[server]==5.1.*' boto3

# The REAPI test server: BuildGrid 0.4.4 (CAS, ByteStream, ActionCache) in a venv of its own.
python_venv "$root/target/reapi-venv" bgd "the REAPI test server" 'buildgrid==0.4.4'
