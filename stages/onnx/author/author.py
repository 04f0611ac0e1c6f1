#!/usr/bin/env python3
"""onnx/author — write the logbook entry's graph and its calibration set.

Graph: input x (N, C0, H, W) float32 -> Conv 1x1 (C0->C1) -> ReLU -> Conv 1x1 (C1->C2) -> y (N, C2, H, W).
Defaults C0=256, C1=256, C2=64, H=W=16, so one sample has 64*16*16 = 16,384 outputs. Opset 17, checked
with onnx.checker. The batch axis is symbolic ("N").

Calibration set layout: float32 NHWC, shape (samples, H, W, C0), saved with numpy.save. That is the layout the
Hailo DFC expects for calibration and emulator inputs (channels-last, keyed by HN input-layer name at use);
ONNX Runtime consumers transpose it to NCHW with (0, 3, 1, 2).

Also writes weights.npz (w1, b1, w2, b2 as in the ONNX initialisers) for a numpy float reference, and meta.json
(input/output tensor names, the start/end names to translate with, shapes, layouts) so SDK-side stages need not
import onnx.

--graph entry-000 writes the graph of the 2026 logbook entry (../shared/seeds/000_*), as its public probe scripts
built it: input x [1, C0, 1, 1] -> Conv(W1, no bias) -> Relu -> Conv(W2, no bias) -> y [1, C2, 1, 1], opset 17,
IR 9, fixed batch 1; weights from np.random.seed(seed) (the entry: 1171) as randn(C1, C0, 1, 1) * 0.05 then
randn(C2, C1, 1, 1) * 0.05, and the calibration set randn(samples, 1, 1, C0) (NHWC) drawn next from the same
stream. The legacy global-seed stream is reproduced with np.random.RandomState(seed), which draws the same numbers.
"""
import argparse
import json
import sys

import numpy as np


def build_entry000(widths, samples, seed):
    """The logbook entry's graph, weights and calibration set (see the module doc)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c0, c1, c2 = widths
    rs = np.random.RandomState(seed)  # == np.random.seed(seed) followed by np.random.randn(...)
    w1 = (rs.randn(c1, c0, 1, 1) * 0.05).astype(np.float32)
    w2 = (rs.randn(c2, c1, 1, 1) * 0.05).astype(np.float32)
    calib = rs.randn(samples, 1, 1, c0).astype(np.float32)  # NHWC, drawn after the weights
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c0, 1, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c2, 1, 1])
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["h"], name="conv1", kernel_shape=[1, 1]),
        helper.make_node("Relu", ["h"], ["h_relu"], name="relu1"),
        helper.make_node("Conv", ["h_relu", "W2"], ["y"], name="conv2", kernel_shape=[1, 1]),
    ]
    graph = helper.make_graph(nodes, "entry000", [x], [y],
                              initializer=[numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="heddle-onnx-author")
    model.ir_version = 9
    onnx.checker.check_model(model, full_check=True)
    return model, dict(w1=w1, w2=w2), calib


def build(widths, height, width, seed):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c0, c1, c2 = widths
    rng = np.random.default_rng(seed)
    # He-style init so activations keep an O(1) scale through the ReLU.
    w1 = (rng.standard_normal((c1, c0, 1, 1)) * np.sqrt(2.0 / c0)).astype(np.float32)
    b1 = (rng.standard_normal(c1) * 0.05).astype(np.float32)
    w2 = (rng.standard_normal((c2, c1, 1, 1)) * np.sqrt(1.0 / c1)).astype(np.float32)
    b2 = (rng.standard_normal(c2) * 0.05).astype(np.float32)

    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", c0, height, width])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", c2, height, width])
    nodes = [
        helper.make_node("Conv", ["input", "conv1.weight", "conv1.bias"], ["conv1_out"], name="conv1",
                         kernel_shape=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0]),
        helper.make_node("Relu", ["conv1_out"], ["relu1_out"], name="relu1"),
        helper.make_node("Conv", ["relu1_out", "conv2.weight", "conv2.bias"], ["output"], name="conv2",
                         kernel_shape=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0]),
    ]
    inits = [numpy_helper.from_array(w1, "conv1.weight"), numpy_helper.from_array(b1, "conv1.bias"),
             numpy_helper.from_array(w2, "conv2.weight"), numpy_helper.from_array(b2, "conv2.bias")]
    graph = helper.make_graph(nodes, "mezo_entry", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="heddle-onnx-author")
    model.ir_version = 8  # opset 17 pairs with IR 8; keeps older runtimes able to load it
    onnx.checker.check_model(model, full_check=True)
    return model, dict(w1=w1, b1=b1, w2=w2, b2=b2)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="[256, 256, 64]", help="JSON list of 3 channel widths")
    ap.add_argument("--height", type=int, default=16)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graph", default="heddle", choices=["heddle", "entry-000"])
    ap.add_argument("--out-onnx", required=True)
    ap.add_argument("--out-calib", required=True)
    ap.add_argument("--out-weights", required=True)
    ap.add_argument("--out-meta", required=True)
    a = ap.parse_args(argv)

    widths = json.loads(a.widths) if isinstance(a.widths, str) else a.widths
    if len(widths) != 3 or any(int(w) <= 0 for w in widths):
        raise SystemExit(f"ValueError: widths must be 3 positive ints, got {widths}")
    widths = [int(w) for w in widths]
    import onnx
    if a.graph == "entry-000":
        if (a.height, a.width) != (1, 1):
            raise SystemExit(f"ValueError: graph entry-000 is 1x1 spatially, got height {a.height} width {a.width}")
        model, weights, calib = build_entry000(widths, a.samples, a.seed)
        names = {"input_name": "x", "output_name": "y", "start_node": "x", "end_node": "y",
                 "input_shape_nchw": [1, widths[0], 1, 1], "output_shape_nchw": [1, widths[2], 1, 1],
                 "bias": False, "ir_version": 9, "batch": "fixed 1",
                 "weights_rng": f"np.random.seed({a.seed}); randn * 0.05", "calib_rng": "next draws of the same stream"}
    else:
        model, weights = build(widths, a.height, a.width, a.seed)
        # Calibration samples use their own stream so the weights do not depend on --samples.
        rng = np.random.default_rng([a.seed, 1])
        calib = rng.standard_normal((a.samples, a.height, a.width, widths[0])).astype(np.float32)  # NHWC
        # The DFC's start node is the graph input, and net_input_shapes is keyed by that same name (every public
        # example: start_node_names=["images"], net_input_shapes={"images": [...]}).
        names = {"input_name": "input", "output_name": "output", "start_node": "input", "end_node": "conv2",
                 "input_shape_nchw": [1, widths[0], a.height, a.width],
                 "output_shape_nchw": [1, widths[2], a.height, a.width], "bias": True, "ir_version": 8,
                 "batch": "symbolic N"}
    onnx.save(model, a.out_onnx)
    with open(a.out_calib, "wb") as f:
        np.save(f, calib)
    with open(a.out_weights, "wb") as f:
        np.savez(f, **weights)
    meta = {
        **names, "graph": a.graph,
        "widths": widths, "height": a.height, "width": a.width,
        "outputs_per_sample": widths[2] * a.height * a.width,
        "opset": 17, "seed": a.seed,
        "calib": {"layout": "NHWC", "dtype": "float32", "shape": list(calib.shape),
                  "distribution": "standard normal"},
    }
    with open(a.out_meta, "w") as f:
        json.dump(meta, f, indent=2)
    print(f"wrote graph {widths} {a.height}x{a.width}, calib {calib.shape} NHWC float32", file=sys.stderr)


if __name__ == "__main__":
    main()
