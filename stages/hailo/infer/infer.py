#!/usr/bin/env python3
"""hailo/infer — the MeZO probe's SDK_HAILO_HW context: same maths, same plan and output JSON as mezo/probe, with the
frozen base evaluated on the Hailo device through HailoRT's InferModel API (hailo_context.py). The float reference
is NUMPY_FLOAT (the author's weights in numpy), since the device host need not have the DFC.

The MeZO code is mezo/probe's (mezo.py, probe.py, contexts.py, entry_protocol.py): the definition includes those
files, so heddle copies them beside this script and their bytes enter this stage's key. Documented API; untested on
real hardware.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import argparse  # noqa: E402

import probe  # noqa: E402
from hailo_context import HailoContext, check_platform  # noqa: E402
from mezo import NumpyFloatContext  # noqa: E402


def probe_on_device(a):
    # Fail before any work when hailo_platform is missing, old, or not HailoRT's version.
    platform = check_platform(a.hailortcli)
    print(f"[hailo/infer] {platform}", file=sys.stderr)
    probe.run_probe(a, lambda: HailoContext(a.hef, a.timeout_ms, a.hailortcli),
                    lambda: NumpyFloatContext(a.weights), {"backend": "hailo"})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hef", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--timeout-ms", type=int, default=10000)
    ap.add_argument("--hailortcli", default="hailortcli", help="to cross-check hailo_platform's version")
    probe.common_args(ap)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    hs.run(lambda: probe_on_device(a))


if __name__ == "__main__":
    main()
