#!/usr/bin/env python3
"""ort/optimize — onnxruntime static quantisation (QDQ format) against the author's calibration set.

precision -> (activation type, weight type):
  a8_w8   -> QUInt8 activations, QInt8 weights
  a16_w16 -> QUInt16 activations, QInt16 weights   (16-bit Q/DQ needs opset 21)
  a16_w4  -> QUInt16 activations, QInt4 weights    (int4 weights for Conv in QDQ form)
Activations unsigned, weights signed and symmetric, per-tensor, MinMax calibration — the same scheme family the
Hailo docs describe (unsigned activations with zero point, signed weights). The calibration set is float32 NHWC
and is transposed to NCHW for the ONNX model unless meta.json says its input is NHWC. A model below the opset the
precision needs (13; 21 for 16-bit and int4) is upgraded with the onnx version converter first: onnxruntime itself
would only relabel the opset. Any exception is recorded as {class, message} in $HEDDLE_ERROR_FILE.
"""
import argparse
import json
import os
import shutil
import tempfile

import numpy as np

PRECISIONS = {"a8_w8": ("QUInt8", "QInt8"), "a16_w16": ("QUInt16", "QInt16"), "a16_w4": ("QUInt16", "QInt4")}


def feed_input(m, meta):
    """The graph input calibration feeds: meta.json's `input_name` when bound, else the only input that is not
    an initializer (IR 3 lists weights as inputs too)."""
    inits = {i.name for i in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in inits]
    if meta:
        found = [i for i in m.graph.input if i.name == meta["input_name"]]
        if not found:
            raise ValueError(f"meta.json names input {meta['input_name']!r}, which the model does not have")
        return found[0]
    if len(inputs) != 1:
        raise ValueError(f"the model has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); "
                         "bind `meta` (onnx/import) to name the one calibration feeds")
    return inputs[0]


def quantize(model, calib_path, out, precision, samples, batch, per_channel, method, reduce_range=False,
             meta=None):
    import onnx
    import onnxruntime
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    act, wt = PRECISIONS[precision]
    # Only 8-bit weights go through the saturating u8s8 kernels; onnxruntime would narrow 16-bit
    # weights too, which changes those precisions for no gain.
    reduce_range = bool(reduce_range) and wt == "QInt8"
    calib = np.load(calib_path, mmap_mode="r")
    n = calib.shape[0] if samples <= 0 else min(samples, calib.shape[0])
    m = onnx.load(model, load_external_data=False)
    graph_input = feed_input(m, meta)
    input_name = graph_input.name
    # calib is NHWC (calib/images); an NCHW model (the usual) takes it transposed
    nhwc = bool(meta) and meta.get("input_layout") == "NHWC"
    # A model authored with a fixed batch (the logbook entry's x is [1, 256, 1, 1]) takes that many rows per call.
    first = graph_input.type.tensor_type.shape.dim[0]
    if first.HasField("dim_value") and first.dim_value > 0:
        batch = int(first.dim_value)
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)
    need = 21 if act.endswith("16") or wt in ("QInt16", "QInt4") else 13
    upgraded = None
    if opset < need:
        # onnxruntime would only relabel the opset (and warn "Please verify the quantized model"): ops whose
        # form changed since (ReduceMean's axes, opset 18) then no longer load. Convert properly first.
        from onnx import version_converter
        upgraded = os.path.join(tempfile.mkdtemp(prefix="heddle-opset-"), f"opset{need}.onnx")
        onnx.save(version_converter.convert_version(onnx.load(model), need), upgraded)
        model = upgraded

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.i = 0

        def get_next(self):
            if self.i >= n:
                return None
            x = calib[self.i:min(self.i + batch, n)]
            x = np.ascontiguousarray(x if nhwc else x.transpose(0, 3, 1, 2), dtype=np.float32)
            self.i += batch
            return {input_name: x}

    quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=getattr(QuantType, act), weight_type=getattr(QuantType, wt),
                    per_channel=per_channel, reduce_range=reduce_range,
                    calibrate_method=getattr(CalibrationMethod, method))
    if upgraded:
        shutil.rmtree(os.path.dirname(upgraded), ignore_errors=True)
    q = onnx.load(out)
    ops = [nd.op_type for nd in q.graph.node]
    types = sorted({onnx.TensorProto.DataType.Name(i.data_type) for i in q.graph.initializer})
    return {"precision": precision, "activation_type": act, "weight_type": wt, "format": "QDQ",
            "per_channel": per_channel, "reduce_range": reduce_range, "calibrate_method": method, "calibration_entries": int(n), "calibration_batch": int(batch),
            "calibration_layout": "NHWC float32" + ("" if nhwc else " (transposed to NCHW for ONNX)"),
            "input": input_name, "opset_in": opset, "opset_upgraded_to": need if upgraded else None,
            "opset": [o.version for o in q.opset_import if o.domain in ("", "ai.onnx")],
            "ops": ops, "initializer_types": types, "onnxruntime": onnxruntime.__version__}


def read_meta(path):
    if not path:
        return None
    with open(path) as f:
        return json.load(f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--precision", required=True)
    ap.add_argument("--samples", type=int, default=0, help="calibration entries to use (0 = all)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--per-channel", default="false")
    ap.add_argument("--method", default="MinMax")
    ap.add_argument("--reduce-range", default="false", help="8-bit weights in 7 bits (see stage.toml)")
    ap.add_argument("--meta", default="", help="the model's meta.json (input name, layout); '' = unbound")
    ap.add_argument("--out-model", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    rep = hs.run(lambda: quantize(a.model, a.calib, a.out_model, a.precision, a.samples, a.batch,
                                  a.per_channel.lower() in ("1", "true", "yes"), a.method,
                                  a.reduce_range.lower() in ("1", "true", "yes"), read_meta(a.meta)))
    hs.write_report(a.out_report, rep, ("precision", "activation_type", "weight_type", "calibration_entries"))


if __name__ == "__main__":
    main()
