#!/usr/bin/env python3
"""dfc/translate — ONNX -> HAR with the Hailo Dataflow Compiler, inside the DFC image.

Follows the documented/public API (docs/hailo-toolchain.md §1.1, §1.3): ClientRunner(hw_arch=...),
translate_onnx_model(path, net_name, start_node_names=[s], end_node_names=[e], net_input_shapes={s: NCHW}),
save_har. The start name and the key of net_input_shapes are ONE name — the graph input (every public example:
start_node_names=["images"], net_input_shapes={"images": [1, 3, 640, 640]}); they come from the author's meta.json
(no onnx import needed in the image). Untested against the real DFC until someone runs it there; exercised here
against a test double that rejects a mismatch. An SDK exception is written as {class, message} to
$HEDDLE_ERROR_FILE and the stage exits 1.
"""
import argparse
import json


def translate_args(meta):
    """The names translate_onnx_model gets: the start node and the shape's key are the same name."""
    start = meta["start_node"]
    return {"start_node_names": [start], "end_node_names": [meta["end_node"]],
            "net_input_shapes": {start: list(meta["input_shape_nchw"])}}


def translate(hs, model, meta_path, hw_arch, net_name, out_har):
    with open(meta_path) as f:
        names = translate_args(json.load(f))
    hs.ensure_writable_home()
    from hailo_sdk_client import ClientRunner
    runner = ClientRunner(hw_arch=hw_arch)
    runner.translate_onnx_model(model, net_name, **names)
    runner.save_har(out_har)
    hn = runner.get_hn_dict()
    inputs = {k: v["input_shapes"][0] for k, v in hn["layers"].items() if v.get("type") == "input_layer"}
    outputs = {k: v["output_shapes"][0] for k, v in hn["layers"].items() if v.get("type") == "output_layer"}
    return {"sdk": hs.sdk_identity(), "hw_arch": hw_arch, "net_name": net_name, "hn_input_layers": inputs,
            "hn_output_layers": outputs, **names}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--net-name", default="mezo")
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    rep = hs.run(lambda: translate(hs, a.model, a.meta, a.hw_arch, a.net_name, a.out_har))
    hs.write_report(a.out_report, rep)


if __name__ == "__main__":
    main()
