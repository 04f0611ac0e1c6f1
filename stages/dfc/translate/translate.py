#!/usr/bin/env python3
"""dfc/translate — ONNX -> HAR with the Hailo Dataflow Compiler, inside the DFC image.

Follows the documented/public API (docs/hailo-toolchain.md §1.1, §1.3): ClientRunner(hw_arch=...),
translate_onnx_model(path, net_name, start_node_names=[...], end_node_names=[...], net_input_shapes={name: NCHW}),
save_har. Node names and shapes come from the author's meta.json (no onnx import needed in the image).
Untested against the real DFC until someone runs it there; exercised here against a test double.
An SDK exception is written as {class, message} to $HEDDLE_ERROR_FILE and the stage exits 1.
"""
import argparse
import json
import os
import sys
import tempfile
import traceback


def record_error(exc):
    path = os.environ.get("HEDDLE_ERROR_FILE")
    if path:
        with open(path, "w") as f:
            json.dump({"class": type(exc).__name__, "message": str(exc)}, f)


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


def translate(model, meta, hw_arch, net_name, out_har):
    ensure_writable_home()
    from hailo_sdk_client import ClientRunner
    runner = ClientRunner(hw_arch=hw_arch)
    runner.translate_onnx_model(model, net_name, start_node_names=[meta["start_node"]],
                                end_node_names=[meta["end_node"]],
                                net_input_shapes={meta["input_name"]: list(meta["input_shape_nchw"])})
    runner.save_har(out_har)
    hn = runner.get_hn_dict()
    inputs = {k: v["input_shapes"][0] for k, v in hn["layers"].items() if v.get("type") == "input_layer"}
    outputs = {k: v["output_shapes"][0] for k, v in hn["layers"].items() if v.get("type") == "output_layer"}
    return {"sdk": sdk_identity(), "hw_arch": hw_arch, "net_name": net_name, "hn_input_layers": inputs, "hn_output_layers": outputs,
            "start_node_names": [meta["start_node"]], "end_node_names": [meta["end_node"]],
            "net_input_shapes": {meta["input_name"]: meta["input_shape_nchw"]}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--net-name", default="mezo")
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    try:
        with open(a.meta) as f:
            meta = json.load(f)
        rep = translate(a.model, meta, a.hw_arch, a.net_name, a.out_har)
    except Exception as e:
        record_error(e)
        traceback.print_exc()
        sys.exit(1)
    with open(a.out_report, "w") as f:
        json.dump(rep, f, indent=2)
    print(json.dumps(rep), file=sys.stderr)


if __name__ == "__main__":
    main()
