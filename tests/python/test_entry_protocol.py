"""The 2026 logbook entry's own graph and probe protocol (onnx/author graph=entry-000, mezo/probe protocol=entry)."""
import json
import sys

import numpy as np
import pytest

from direct import run_stage

PY = sys.executable


@pytest.fixture(scope="module")
def entry_graph(tmp_path_factory):
    d = tmp_path_factory.mktemp("entry")
    st, a, p = run_stage("onnx/author", "author", str(d / "a"),
                         with_={"graph": "entry-000", "seed": 1171, "samples": 1024, "height": 1, "width": 1},
                         python=PY)
    assert st["status"] == "ok", p.stderr
    return d, a


def test_entry_graph_is_the_entrys(entry_graph):
    import onnx
    from onnx import numpy_helper
    d, a = entry_graph
    m = onnx.load(a["onnx"])
    onnx.checker.check_model(m, full_check=True)
    assert m.ir_version == 9 and [o.version for o in m.opset_import] == [17]
    assert [n.op_type for n in m.graph.node] == ["Conv", "Relu", "Conv"]
    assert all(len(n.input) == 2 for n in m.graph.node if n.op_type == "Conv")  # no bias
    dims = lambda vi: [x.dim_value for x in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert (m.graph.input[0].name, dims(m.graph.input[0])) == ("x", [1, 256, 1, 1])
    assert (m.graph.output[0].name, dims(m.graph.output[0])) == ("y", [1, 64, 1, 1])
    # The legacy global stream, as the entry's scripts drew it: weights, then the calibration set.
    np.random.seed(1171)
    w1 = (np.random.randn(256, 256, 1, 1) * 0.05).astype(np.float32)
    w2 = (np.random.randn(64, 256, 1, 1) * 0.05).astype(np.float32)
    calib = np.random.randn(1024, 1, 1, 256).astype(np.float32)
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    np.testing.assert_array_equal(inits["W1"], w1)
    np.testing.assert_array_equal(inits["W2"], w2)
    np.testing.assert_array_equal(np.load(a["calib"]), calib)
    meta = json.load(open(a["meta"]))
    assert (meta["start_node"], meta["end_node"], meta["input_shape_nchw"]) == ("x", "y", [1, 256, 1, 1])


def test_entry_protocol_start_loss_is_the_entrys_by_construction(entry_graph):
    """Any context's start loss is the mean square of the shared noise: the entry's 1.7700e-03 from the float path.
    The float model as its own context: every estimate agrees exactly."""
    d, a = entry_graph
    st, pr, p = run_stage("mezo/probe", "probe", str(d / "p"),
                          inputs={"quant": a["onnx"], "float": a["onnx"], "weights": a["weights"], "calib": a["calib"]},
                          with_={"backend": "ort", "context": "ORT_FLOAT", "protocol": "entry", "seed": 99,
                                 "draws": 6},
                          python=PY)
    assert st["status"] == "ok", p.stderr
    r = json.load(open(pr["result"]))
    assert f"{r['start_loss']:.4e}" == "1.7700e-03" and r["start_loss"] == r["start_loss_float"]
    assert r["start_loss_by_construction"] is True and r["params"]["protocol"] == "entry"
    assert r["start_output_max_abs_diff_vs_float"] == 0.0
    assert r["context_info"]["fixed_batch"] == 1  # x is [1, 256, 1, 1]: run frame by frame, as authored
    assert all(row["sign"] == 1.0 and row["ratio"] == 1.0 and len(row["g"]) == 6 for row in r["rows"])


def test_entry_protocol_draws_unit_norm_z_after_the_noise():
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "stages", "mezo", "probe"))
    import entry_protocol
    plan = entry_protocol.EntryPlan((1, 1, 4), samples=3, draws=5, eps=[0.1], seed=7, noise_scale=0.1)
    y = np.arange(6, dtype=np.float32).reshape(3, 1, 1, 2)
    plan.draw_noise_then_z(y)
    np.random.seed(7)
    x = np.random.randn(3, 1, 1, 4).astype(np.float32)
    noise = np.random.randn(3, 1, 1, 2) * float(np.std(y)) * 0.1
    z = np.random.randn(5, 3, 1, 1, 4)
    np.testing.assert_array_equal(plan.x, x)
    np.testing.assert_allclose(plan.noise, noise)
    np.testing.assert_allclose(np.linalg.norm(plan.z.reshape(5, -1), axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(plan.z[0], (z[0] / np.linalg.norm(z[0])).astype(np.float32))
    both = plan.both_signs(0.1)
    assert both.shape == (30, 1, 1, 4)
    np.testing.assert_allclose(both[:3], x + np.float32(0.1) * plan.z[0])
    np.testing.assert_allclose(both[3:6], x - np.float32(0.1) * plan.z[0])
