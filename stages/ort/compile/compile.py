#!/usr/bin/env python3
"""ort/compile — the ORT analogue of a HEF: the quantised model after onnxruntime's graph optimisations
(ORT_ENABLE_EXTENDED, which fuses DQ/Conv/Q into QLinearConv where an integer kernel exists and stays free of
machine-specific NCHWc layout ops), saved as an ONNX file, plus a report of the op types it runs."""
import argparse


def compile_model(model, out_model):
    """Saves `model` after onnxruntime's extended graph optimisations at `out_model`; returns the report."""
    import onnx
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = out_model
    so.log_severity_level = 3
    ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(out_model).graph.node]
    return {"optimization_level": "ORT_ENABLE_EXTENDED", "ops": ops,
            "integer_kernels": sorted({o for o in ops if o.startswith("QLinear")}), "onnxruntime": ort.__version__}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out-model", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    rep = hs.run(lambda: compile_model(a.model, a.out_model))
    hs.write_report(a.out_report, rep)


if __name__ == "__main__":
    main()
