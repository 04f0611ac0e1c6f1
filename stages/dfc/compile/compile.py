#!/usr/bin/env python3
"""dfc/compile — quantised HAR -> HEF with the Hailo Dataflow Compiler, inside the DFC image (CPU is enough).

Documented/public API (docs/hailo-toolchain.md §1.6): ClientRunner(hw_arch, har=...); hef = runner.compile()
(bytes); write the .hef; save_har (compiled HAR). Untested against the real DFC until someone runs it there.
An SDK exception is written as {class, message} to $HEDDLE_ERROR_FILE.
"""
import argparse
import hashlib


def compile_har(hs, har, hw_arch, out_hef, out_har):
    """Compiles `har`, writes the HEF and the compiled HAR, and returns the report."""
    hs.ensure_writable_home()
    from hailo_sdk_client import ClientRunner
    runner = ClientRunner(hw_arch=hw_arch, har=har)
    hef = runner.compile()
    with open(out_hef, "wb") as f:
        f.write(hef)
    runner.save_har(out_har)
    return {"sdk": hs.sdk_identity(), "hw_arch": hw_arch, "hef_bytes": len(hef),
            "hef_sha256": hashlib.sha256(hef).hexdigest()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--har", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--out-hef", required=True)
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    rep = hs.run(lambda: compile_har(hs, a.har, a.hw_arch, a.out_hef, a.out_har))
    hs.write_report(a.out_report, rep)


if __name__ == "__main__":
    main()
