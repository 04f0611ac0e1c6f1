#!/usr/bin/env python3
"""dfc/compile — quantised HAR -> HEF with the Hailo Dataflow Compiler, inside the DFC image (CPU is enough).

Documented/public API (docs/hailo-toolchain.md §1.6): ClientRunner(hw_arch, har=...); hef = runner.compile()
(bytes); write the .hef; save_har (compiled HAR). Untested against the real DFC until someone runs it there.
An SDK exception is written as {class, message} to $HEDDLE_ERROR_FILE.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import traceback


def ensure_writable_home():
    """Containers run as the invoking uid, whose HOME (often /root or /) may not be writable, and heddle drops a
    stage's HOME var inside containers; SDKs that write under ~ would fail. Point HOME at a private temp folder
    when it is not writable (before the SDK is imported)."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if not (os.path.isdir(home) and os.access(home, os.W_OK)):
        os.environ["HOME"] = tempfile.mkdtemp(prefix="home-")


def sdk_identity():
    """Which hailo_sdk_client ran: version, and the TEST DOUBLE marker when it is tests/images/dfc-double's fake
    (the real SDK has no such attribute). Goes into the report, so an output made with the double says so."""
    import hailo_sdk_client as sdk
    ident = {"module": "hailo_sdk_client", "version": getattr(sdk, "__version__", None),
             "test_double": getattr(sdk, "TEST_DOUBLE", None)}
    if ident["test_double"]:
        print(f"[heddle] {ident['test_double']}: hailo_sdk_client is the TEST DOUBLE (tests/images/dfc-double); "
              "outputs check the call sequence only", file=sys.stderr)
    return ident


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--har", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--out-hef", required=True)
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    try:
        ensure_writable_home()
        from hailo_sdk_client import ClientRunner
        runner = ClientRunner(hw_arch=a.hw_arch, har=a.har)
        hef = runner.compile()
        with open(a.out_hef, "wb") as f:
            f.write(hef)
        runner.save_har(a.out_har)
    except Exception as e:
        path = os.environ.get("HEDDLE_ERROR_FILE")
        if path:
            with open(path, "w") as f:
                json.dump({"class": type(e).__name__, "message": str(e)}, f)
        traceback.print_exc()
        sys.exit(1)
    rep = {"sdk": sdk_identity(), "hw_arch": a.hw_arch, "hef_bytes": len(hef),
           "hef_sha256": hashlib.sha256(hef).hexdigest()}
    with open(a.out_report, "w") as f:
        json.dump(rep, f, indent=2)
    print(json.dumps(rep), file=sys.stderr)


if __name__ == "__main__":
    main()
