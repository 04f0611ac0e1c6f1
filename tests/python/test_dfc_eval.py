"""The DFC half of compile-onnx-dfc, stage by stage: dfc/infer runs held-out images through an emulation context of
the TEST DOUBLE of hailo_sdk_client (tests/images/dfc-double, in-process via PYTHONPATH — not the Hailo SDK; its
numbers mean nothing), and eval/compare compares the saved outputs against SDK_NATIVE's."""
import json
import os
import sys

import numpy as np
import pytest

from dfc_double import authored_and_translated, contexts_to_run, double_env
from direct import STAGES, gather, run_stage

PY = sys.executable

def _load(name, path):
    """A stage script as a module of its own name (mezo/compare's script is compare.py too)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


compare = _load("eval_compare", os.path.join(STAGES, "eval", "compare", "compare.py"))


env = double_env


def test_saved_outputs_come_to_the_reference_layout(tmp_path):
    y = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)  # NHWC
    np.save(tmp_path / "y.npy", y)
    assert np.array_equal(compare.saved_outputs(str(tmp_path / "y.npy")), y.transpose(0, 3, 1, 2))
    np.save(tmp_path / "c.npy", np.ones((2, 1, 1, 7), np.float32))  # the DFC's [N, 1, 1, C] for an ONNX [N, C]
    assert compare.saved_outputs(str(tmp_path / "c.npy"), np.zeros((2, 7))).shape == (2, 7)
    with pytest.raises(ValueError, match=r"outputs of shape \[2, 7, 1, 1\] \(NCHW\) do not match the reference's "
                                         r"\[2, 6\]"):
        compare.saved_outputs(str(tmp_path / "c.npy"), np.zeros((2, 6)))


def test_infer_and_eval_against_sdk_native(tmp_path):
    a, tr = authored_and_translated(tmp_path)
    e = env(tmp_path)
    heldout = a["calib"]  # 16 samples, float32 NHWC, as calib/images writes its held-out set
    st, native, p = run_stage("dfc/infer", "native", str(tmp_path / "native"),
                              inputs={"har": tr["har"], "heldout": heldout}, with_={"context": "SDK_NATIVE"},
                              python=PY, extra_env=e)
    assert st["status"] == "ok", p.stderr
    assert json.load(open(native["report"]))["output_shape"] == [16, 16, 16, 64]
    members = []
    for prec in ["a16_w16", "a16_w4", "a8_w8"]:
        st_o, opt, p = run_stage("dfc/optimize", f"optimize[precision={prec}]", str(tmp_path / f"o-{prec}"),
                                 inputs={"har": tr["har"], "calib": a["calib"]},
                                 with_={"precision": prec, "calibset_size": 16}, python=PY, extra_env=e)
        for label, ctx in contexts_to_run(members, "infer", prec, st_o):
            st, out, p = run_stage("dfc/infer", label, str(tmp_path / f"i-{prec}-{ctx}"),
                                   inputs={"har": opt["har"], "heldout": heldout}, with_={"context": ctx},
                                   python=PY, extra_env=e)
            members.append(({"precision": prec, "context": ctx}, st, out["outputs"]))
    calls = [json.loads(x) for x in open(tmp_path / "trace.jsonl")]
    infers = [c for c in calls if c["call"] == "infer"]
    assert infers[0]["args"][1] == {"mezo/input_layer1": {"ndarray": [16, 16, 16, 256], "dtype": "float32"}}
    assert infers[0]["kwargs"]["batch_size"] == 8
    st, outs, p = run_stage("eval/compare", "eval", str(tmp_path / "eval"),
                            inputs={"reference": native["outputs"], "meta": a["meta"], "heldout": heldout,
                                    "quant": gather(str(tmp_path / "g"), members)},
                            with_={"quant_context": "DFC"}, python=PY)
    assert st["status"] == "ok", p.stderr
    rows = {(r["precision"], r["context"]): r for r in json.load(open(outs["summary"]))["rows"]}
    assert sorted(rows) == [(p, c) for p in ["a16_w16", "a16_w4", "a8_w8"] for c in ["SDK_BIT_EXACT", "SDK_QUANTIZED"]]
    assert rows[("a8_w8", "SDK_BIT_EXACT")]["error"] == "InferenceError: graph execution error at conv2_1/act_op_1/pow"
    assert rows[("a16_w4", "SDK_QUANTIZED")]["status"] == "skipped"
    for key in [("a16_w16", "SDK_QUANTIZED"), ("a16_w16", "SDK_BIT_EXACT"), ("a8_w8", "SDK_QUANTIZED")]:
        r = rows[key]
        # the double's fake quantisation moved the outputs, a little
        assert r["status"] == "ok" and 0 < r["mean_abs_diff"] < 0.05 and r["cosine"] > 0.99, r
    md = open(outs["table"]).read()
    assert "float reference: SDK_NATIVE (DFC emulator, fp32)." in md
    assert "| a16_w16 | SDK_QUANTIZED | 100.0% |" in md


def test_eval_wants_exactly_one_reference(tmp_path):
    st, a, p = run_stage("onnx/author", "author", str(tmp_path / "author"), with_={"samples": 4}, python=PY)
    st, outs, p = run_stage("eval/compare", "eval", str(tmp_path / "eval"),
                            inputs={"float": a["onnx"], "reference": a["calib"], "meta": a["meta"],
                                    "heldout": a["calib"],
                                    "quant": gather(str(tmp_path / "g"),
                                                    [({"precision": "a8_w8"}, {"status": "ok"}, a["onnx"])])},
                            python=PY)
    assert st["status"] == "failed"
    assert st["error"] == ("ValueError: bind exactly one float reference: `float` (an ONNX model) or `reference` "
                           "(outputs .npy)")
