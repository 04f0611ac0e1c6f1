#!/usr/bin/env python3
"""dfc/compile — quantised HAR -> HEF with the Hailo Dataflow Compiler, inside the DFC image (CPU is enough).

Documented/public API (docs/hailo-toolchain.md §1.6): ClientRunner(hw_arch, har=...); hef = runner.compile()
(bytes); write the .hef; save_har (compiled HAR). Untested against the real DFC until someone runs it there.
An SDK exception is written as {class, message} to $HEDDLE_ERROR_FILE.
"""
import argparse
import hashlib
import json
import sys
import traceback


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--har", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--out-hef", required=True)
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    try:
        hs.ensure_writable_home()
        from hailo_sdk_client import ClientRunner
        runner = ClientRunner(hw_arch=a.hw_arch, har=a.har)
        hef = runner.compile()
        with open(a.out_hef, "wb") as f:
            f.write(hef)
        runner.save_har(a.out_har)
    except Exception as e:
        hs.record_error(e)
        traceback.print_exc()
        sys.exit(1)
    rep = {"sdk": hs.sdk_identity(), "hw_arch": a.hw_arch, "hef_bytes": len(hef),
           "hef_sha256": hashlib.sha256(hef).hexdigest()}
    with open(a.out_report, "w") as f:
        json.dump(rep, f, indent=2)
    print(json.dumps(rep), file=sys.stderr)


if __name__ == "__main__":
    main()
