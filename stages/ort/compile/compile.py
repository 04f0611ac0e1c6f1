#!/usr/bin/env python3
"""ort/compile — the ORT analogue of a HEF: the quantised model after onnxruntime's graph optimisations
(ORT_ENABLE_EXTENDED, which fuses DQ/Conv/Q into QLinearConv where an integer kernel exists and stays free of
machine-specific NCHWc layout ops), saved as an ONNX file, plus a report of the op types it runs."""
import argparse
import json
import sys
import traceback



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out-model", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    try:
        import onnx
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = a.out_model
        so.log_severity_level = 3
        ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
        ops = [n.op_type for n in onnx.load(a.out_model).graph.node]
    except Exception as e:
        hs.record_error(e)
        traceback.print_exc()
        sys.exit(1)
    rep = {"optimization_level": "ORT_ENABLE_EXTENDED", "ops": ops,
           "integer_kernels": sorted({o for o in ops if o.startswith("QLinear")}), "onnxruntime": ort.__version__}
    with open(a.out_report, "w") as f:
        json.dump(rep, f, indent=2)
    print(json.dumps(rep), file=sys.stderr)


if __name__ == "__main__":
    main()
