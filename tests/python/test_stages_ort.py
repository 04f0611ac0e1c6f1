"""onnx/author, ort/* and mezo/probe (ort backend), run the way heddle renders their stage.toml."""
import json
import os
import sys

import numpy as np
import pytest

from direct import run_stage

PY = sys.executable


@pytest.fixture(scope="module")
def author(tmp_path_factory):
    d = tmp_path_factory.mktemp("author")
    st, outs, p = run_stage("onnx/author", "author", str(d), with_={"samples": 32, "seed": 3}, python=PY)
    assert st["status"] == "ok", p.stderr
    return outs


def test_author_graph_checks_and_shapes(author):
    import onnx
    m = onnx.load(author["onnx"])
    onnx.checker.check_model(m, full_check=True)
    assert [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert [n.op_type for n in m.graph.node] == ["Conv", "Relu", "Conv"]
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    assert inits["conv1.weight"] == [256, 256, 1, 1] and inits["conv2.weight"] == [64, 256, 1, 1]
    dims = lambda vi: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(m.graph.input[0]) == ["N", 256, 16, 16]
    assert dims(m.graph.output[0]) == ["N", 64, 16, 16]
    calib = np.load(author["calib"])
    assert calib.shape == (32, 16, 16, 256) and calib.dtype == np.float32  # NHWC
    meta = json.load(open(author["meta"]))
    assert meta["outputs_per_sample"] == 16384 and meta["calib"]["layout"] == "NHWC"
    # the ONNX model and the numpy reference agree on the NHWC calibration data
    import onnxruntime as ort
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "stages", "mezo", "probe"))
    from mezo import NumpyFloatContext
    s = ort.InferenceSession(author["onnx"], providers=["CPUExecutionProvider"])
    y = s.run(None, {"input": calib[:2].transpose(0, 3, 1, 2).copy()})[0].transpose(0, 2, 3, 1)
    np.testing.assert_allclose(NumpyFloatContext(author["weights"]).forward(calib[:2]), y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("precision", ["a8_w8", "a16_w16", "a16_w4"])
def test_ort_optimize_compile(author, tmp_path, precision):
    st, opt, p = run_stage("ort/optimize", f"optimize[precision={precision}]", str(tmp_path / "o"),
                           inputs={"model": author["onnx"], "calib": author["calib"]},
                           with_={"precision": precision}, python=PY)
    assert st["status"] == "ok", p.stderr
    rep = json.load(open(opt["report"]))
    assert rep["calibration_entries"] == 32
    assert {"a8_w8": "INT8", "a16_w16": "INT16", "a16_w4": "INT4"}[precision] in rep["initializer_types"]
    st, comp, p = run_stage("ort/compile", "compile", str(tmp_path / "c"), inputs={"model": opt["model"]}, python=PY)
    assert st["status"] == "ok", p.stderr
    ops = json.load(open(comp["report"]))["ops"]
    if precision == "a8_w8":
        assert "QLinearConv" in ops


def test_probe_bit_for_bit_deterministic(author, tmp_path):
    st, opt, p = run_stage("ort/optimize", "optimize[precision=a8_w8]", str(tmp_path / "o"),
                           inputs={"model": author["onnx"], "calib": author["calib"]},
                           with_={"precision": "a8_w8"}, python=PY)
    assert st["status"] == "ok", p.stderr
    blobs = []
    for i in range(2):
        st, pr, p = run_stage("mezo/probe", "probe[context=ORT_INTEGER,precision=a8_w8]", str(tmp_path / f"p{i}"),
                              inputs={"quant": opt["model"], "float": author["onnx"], "weights": author["weights"],
                                      "calib": author["calib"]},
                              with_={"backend": "ort", "context": "ORT_INTEGER", "draws": 6, "batch": 2, "seed": 5},
                              python=PY)
        assert st["status"] == "ok", p.stderr
        blobs.append(open(pr["result"], "rb").read())
    assert blobs[0] == blobs[1]
    d = json.loads(blobs[0])
    assert d["context"] == "ORT_INTEGER" and d["float_ref"] == "ORT_FLOAT"
    assert len(d["rows"]) == 3 and all(len(r["g"]) == 6 and len(r["g_float"]) == 6 for r in d["rows"])
    assert 0 < d["start_loss_float"] < 1e-2  # low but nonzero target offset
    assert "QLinearConv" in d["context_info"]["executed_ops"]


def test_probe_seed_changes_draws(author, tmp_path):
    outs = []
    for seed in (0, 1):
        st, pr, p = run_stage("mezo/probe", "probe", str(tmp_path / f"s{seed}"),
                              inputs={"quant": author["onnx"], "float": author["onnx"], "weights": author["weights"],
                                      "calib": author["calib"]},
                              with_={"backend": "ort", "context": "ORT_FLOAT", "draws": 3, "batch": 1, "seed": seed},
                              python=PY)
        assert st["status"] == "ok", p.stderr
        outs.append(json.load(open(pr["result"])))
    assert outs[0]["rows"][0]["g"] != outs[1]["rows"][0]["g"]
    # the float model as its own context: every estimate agrees exactly
    assert all(r["sign"] == 1.0 and r["ratio"] == 1.0 for r in outs[0]["rows"])
