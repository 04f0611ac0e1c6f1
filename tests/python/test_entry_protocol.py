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


@pytest.mark.parametrize("stream,start", [("reseed", "1.7700e-03"), ("continue", "1.8482e-03")])
def test_entry_protocol_start_loss_on_each_of_the_entrys_streams(entry_graph, stream, start):
    """Any context's start loss is the mean square of the shared noise, from the float path alone: 1.7700e-03 on the
    stream the SDK_BIT_EXACT probe reseeded to 99, 1.8482e-03 (the entry's "1.85e-03") on the seed-1171 stream the
    SDK_QUANTIZED probe continued. The float model as its own context: every estimate agrees exactly."""
    d, a = entry_graph
    st, pr, p = run_stage("mezo/probe", "probe", str(d / f"p-{stream}"),
                          inputs={"quant": a["onnx"], "float": a["onnx"], "weights": a["weights"], "calib": a["calib"]},
                          with_={"backend": "ort", "context": "ORT_FLOAT", "protocol": "entry", "seed": 99,
                                 "stream": stream, "author_seed": 1171, "draws": 6},
                          python=PY)
    assert st["status"] == "ok", p.stderr
    r = json.load(open(pr["result"]))
    assert f"{r['start_loss']:.4e}" == start and r["start_loss"] == r["start_loss_float"]
    assert r["start_loss_by_construction"] is True and r["params"]["protocol"] == "entry"
    assert r["params"]["stream"] == stream
    assert r["start_output_max_abs_diff_vs_float"] == 0.0
    assert r["context_info"]["fixed_batch"] == 1  # x is [1, 256, 1, 1]: run frame by frame, as authored
    assert all(row["sign"] == 1.0 and row["ratio"] == 1.0 and len(row["g"]) == 6 for row in r["rows"])


def test_the_continue_stream_refuses_an_author_seed_that_did_not_draw_the_weights(entry_graph):
    d, a = entry_graph
    st, pr, p = run_stage("mezo/probe", "probe", str(d / "p-wrong"),
                          inputs={"quant": a["onnx"], "float": a["onnx"], "weights": a["weights"], "calib": a["calib"]},
                          with_={"backend": "ort", "context": "ORT_FLOAT", "protocol": "entry", "stream": "continue",
                                 "author_seed": 1172, "draws": 2},
                          python=PY)
    assert st["status"] == "failed"
    assert st["error"] == ("StreamMismatch: stream = continue: np.random.seed(1172) does not draw the weights' w1 "
                           "[256, 256, 1, 1]; set author_seed to onnx/author's seed (graph entry-000)")


def probe_script_draws(seed_or_state, samples, n, c, y):
    """What the entry's public probe scripts draw after X: the float32 noise, then Zs scaled per sample row
    (`Zs /= np.linalg.norm(Zs.reshape(N, B, -1), axis=2).reshape(N, B, 1, 1, 1)`), with the legacy global stream."""
    X = np.random.randn(samples, 1, 1, c).astype(np.float32)
    noise = (np.random.randn(*y.shape) * y.std() * 0.10).astype(np.float32)
    Zs = np.random.randn(n, *X.shape).astype(np.float32)
    Zs /= np.linalg.norm(Zs.reshape(n, samples, -1), axis=2).reshape(n, samples, 1, 1, 1)
    return X, noise, Zs


def test_entry_protocol_draws_as_the_public_probe_scripts_do():
    """Per-sample unit-norm z (both public probes), drawn after the noise; the continue stream replays the
    author's weights and calibration draws first. Before, the whole draw was scaled to unit norm, moving each input
    element about sqrt(samples) = 8x less at the entry's 64 rows."""
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "stages", "mezo", "probe"))
    import entry_protocol
    y = np.arange(6, dtype=np.float32).reshape(3, 2)
    plan = entry_protocol.EntryPlan((1, 1, 4), samples=3, draws=5, eps=[0.1], seed=7, noise_scale=0.1)
    plan.draw_noise_then_z(y)
    np.random.seed(7)
    X, noise, Zs = probe_script_draws(7, 3, 5, 4, y)
    np.testing.assert_array_equal(plan.x, X)
    np.testing.assert_array_equal(plan.noise, noise)
    np.testing.assert_array_equal(plan.z, Zs)
    np.testing.assert_allclose(np.linalg.norm(plan.z.reshape(5, 3, -1), axis=2), 1.0, rtol=1e-6)
    both = plan.both_signs(0.1)
    assert both.shape == (30, 1, 1, 4)
    np.testing.assert_array_equal(both[:3], X + 0.1 * Zs[0])
    np.testing.assert_array_equal(both[15:18], X - 0.1 * Zs[0])
    # The SDK_QUANTIZED probe's stream: seed 1171, W1, W2, calibration, then X, noise and z.
    np.random.seed(11)
    w1 = (np.random.randn(4, 4, 1, 1) * 0.05).astype(np.float32)
    w2 = (np.random.randn(2, 4, 1, 1) * 0.05).astype(np.float32)
    calib = np.random.randn(8, 1, 1, 4).astype(np.float32)
    X, noise, Zs = probe_script_draws(None, 3, 5, 4, y)
    plan = entry_protocol.EntryPlan((1, 1, 4), samples=3, draws=5, eps=[0.1], seed=99, noise_scale=0.1,
                                    stream="continue", author_seed=11, weights={"w1": w1, "w2": w2}, calib=calib)
    plan.draw_noise_then_z(y)
    np.testing.assert_array_equal(plan.x, X)
    np.testing.assert_array_equal(plan.noise, noise)
    np.testing.assert_array_equal(plan.z, Zs)
