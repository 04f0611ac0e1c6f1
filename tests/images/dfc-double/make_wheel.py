#!/usr/bin/env python3
"""TEST DOUBLE packaging — builds the wheel of the DFC test double, named as Hailo names the real one
(hailo_dataflow_compiler-<version>-py3-none-<platform>.whl, which installs the `hailo_sdk_client` package), so the
routes that take a DFC wheel (README "Bring your DFC", routes b and c) are tested with a wheel file as a user has one.

Usage: make_wheel.py OUTDIR    (prints the wheel's path)

Standard library only (no setuptools, no network): a wheel is a zip of the package plus a .dist-info folder with
METADATA, WHEEL and RECORD (PEP 427). The files' timestamps are fixed, so the same sources give the same bytes, and so
the same sha256 (route b keys its image by it). pyproject.toml beside this file says the same for `pip wheel`.
"""
import base64
import hashlib
import os
import sys
import zipfile

NAME = "hailo_dataflow_compiler"
VERSION = "0.0.0+testdouble"
PACKAGES = ["hailo_sdk_client"]
HERE = os.path.dirname(os.path.abspath(__file__))
EPOCH = (2020, 1, 1, 0, 0, 0)

METADATA = f"""Metadata-Version: 2.1
Name: {NAME}
Version: {VERSION}
Summary: TEST DOUBLE - not the Hailo Dataflow Compiler (heddle's numpy-only fake of hailo_sdk_client)
Requires-Python: >=3.8
Requires-Dist: numpy

TEST DOUBLE - not the Hailo SDK. Its numbers mean nothing; see heddle's tests/images/dfc-double.
"""
WHEEL = """Wheel-Version: 1.0
Generator: heddle tests/images/dfc-double/make_wheel.py
Root-Is-Purelib: true
Tag: py3-none-any
"""


def files():
    for pkg in PACKAGES:
        for dirpath, dirnames, names in os.walk(os.path.join(HERE, pkg)):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for n in sorted(names):
                if n.endswith(".pyc"):
                    continue
                full = os.path.join(dirpath, n)
                yield os.path.relpath(full, HERE).replace(os.sep, "/"), open(full, "rb").read()


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def main(outdir):
    os.makedirs(outdir, exist_ok=True)
    info = f"{NAME}-{VERSION}.dist-info"
    entries = list(files()) + [(f"{info}/METADATA", METADATA.encode()), (f"{info}/WHEEL", WHEEL.encode())]
    record = "\n".join(record_line(p, d) for p, d in entries) + f"\n{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode()))
    path = os.path.join(outdir, f"{NAME}-{VERSION}-py3-none-any.whl")
    tmp = path + ".partial"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in entries:
            zi = zipfile.ZipInfo(p, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, d)
    os.replace(tmp, path)
    print(path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
