#!/usr/bin/env python3
"""dfc/optimize — quantise a HAR with the Hailo Dataflow Compiler, inside the DFC image, on the GPU.

Documented/public API (docs/hailo-toolchain.md §1.4, §1.5, §2, §3): ClientRunner(hw_arch, har=...);
load_model_script(text) with
    quantization_param({*}, precision_mode=<precision>)
    model_optimization_flavor(optimization_level=<level>, compression_level=<compression>)
    model_optimization_config(calibration, batch_size=<b>, calibset_size=<n>)
then optimize(calib) with calib = {HN input-layer name: float32 NHWC (N, H, W, C)} — names and per-sample shape read
from the runner's HN, not from the ONNX — then save_har.

The DFC silently drops to optimisation level 0 without a usable GPU or with too little calibration data. This
stage captures everything the SDK prints during optimize() (file-descriptor level, so the SDK's own log handlers
are caught), parses the level actually used ("Using default optimization level of N", "Reducing optimization level
to N ...") and the calibration entry count ("Using dataset with N entries for calibration"), records both in its
report, and FAILS (class DegradedOptimization) when the level used is not the level asked for — so a degraded
quantisation is never cached under the requested level. An exception inside the SDK is recorded with its class and
message in $HEDDLE_ERROR_FILE. Untested against the real DFC until someone runs it there.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import traceback


class DegradedOptimization(RuntimeError):
    pass


def record_error(exc):
    path = os.environ.get("HEDDLE_ERROR_FILE")
    if path:
        with open(path, "w") as f:
            json.dump({"class": type(exc).__name__, "message": str(exc)}, f)


class CaptureFds:
    """Redirect fds 1 and 2 to a file for the duration; replay the text to stderr afterwards."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.f = tempfile.TemporaryFile(mode="w+b")
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.f.fileno(), 1)
        os.dup2(self.f.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        self.f.seek(0)
        self.text = self.f.read().decode("utf-8", "replace")
        self.f.close()
        sys.stderr.write(self.text)
        sys.stderr.flush()
        return False


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


def parse_sdk_log(text, requested):
    """-> dict(level_used, level_evidence, calib_entries, lines). Level used = the last reduction line if any,
    else the default-level line if any, else the requested level (no reduction reported)."""
    lines = [ln for ln in text.splitlines() if re.search(r"optimization level|entries for calibration|GPU", ln, re.I)]
    used, evidence = requested, "no 'Reducing optimization level' line in the SDK log"
    m = re.findall(r"Using default optimization level of (-?\d+)", text)
    if m:
        used, evidence = int(m[-1]), f"Using default optimization level of {m[-1]}"
    m = re.findall(r"Reducing optimization level to (-?\d+)[^\n]*", text)
    if m:
        used = int(m[-1])
        evidence = re.findall(r"[^\n]*Reducing optimization level to -?\d+[^\n]*", text)[-1].strip()
    m = re.findall(r"Using dataset with (\d+) entries for calibration", text)
    entries = int(m[-1]) if m else None
    return {"level_used": used, "level_evidence": evidence, "calib_entries": entries, "log_lines": lines}


def model_script(precision, level, compression, batch_size, calibset_size):
    return "\n".join([
        f"quantization_param({{*}}, precision_mode={precision})",
        f"model_optimization_flavor(optimization_level={level}, compression_level={compression})",
        f"model_optimization_config(calibration, batch_size={batch_size}, calibset_size={calibset_size})",
    ]) + "\n"


def optimize(har, calib_path, hw_arch, precision, level, compression, batch_size, calibset_size, out_har):
    import numpy as np
    ensure_writable_home()
    from hailo_sdk_client import ClientRunner
    runner = ClientRunner(hw_arch=hw_arch, har=har)
    script = model_script(precision, level, compression, batch_size, calibset_size)
    runner.load_model_script(script)
    hn = runner.get_hn_dict()
    names = [k for k, v in hn["layers"].items() if v.get("type") == "input_layer"]
    if len(names) != 1:
        raise ValueError(f"expected one HN input layer, found {names}")
    want = list(hn["layers"][names[0]]["input_shapes"][0][1:])
    calib = np.load(calib_path)
    if calib.dtype != np.float32:
        calib = calib.astype(np.float32)
    if list(calib.shape[1:]) != want:
        raise ValueError(f"calibration per-sample shape {list(calib.shape[1:])} != HN input shape {want} (NHWC)")
    with CaptureFds() as cap:
        runner.optimize({names[0]: calib})
    info = parse_sdk_log(cap.text, level)
    report = {"sdk": sdk_identity(), "hw_arch": hw_arch, "precision": precision, "optimization_level_requested": level,
              "optimization_level_used": info["level_used"], "level_evidence": info["level_evidence"],
              "calibration_entries": info["calib_entries"], "calibration_given": int(calib.shape[0]),
              "calibration_layout": "float32 NHWC keyed by HN input name", "hn_input_layer": names[0],
              "compression_level": compression, "model_script": script, "sdk_log_lines": info["log_lines"]}
    if info["level_used"] != level:
        raise DegradedOptimization(
            f"optimisation level {info['level_used']} used, {level} asked ({info['level_evidence']}); "
            f"calibration entries {info['calib_entries']}")
    runner.save_har(out_har)
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--har", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--precision", required=True)
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--compression", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--calibset-size", type=int, default=1024)
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    try:
        rep = optimize(a.har, a.calib, a.hw_arch, a.precision, a.level, a.compression, a.batch_size,
                       a.calibset_size, a.out_har)
    except Exception as e:
        record_error(e)
        traceback.print_exc()
        sys.exit(1)
    with open(a.out_report, "w") as f:
        json.dump(rep, f, indent=2)
    print(json.dumps({k: rep[k] for k in ("precision", "optimization_level_requested", "optimization_level_used",
                                          "calibration_entries")}), file=sys.stderr)


if __name__ == "__main__":
    main()
