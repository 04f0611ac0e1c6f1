"""dfc/* stages, the dfc probe contexts and hailo/infer against the TEST DOUBLE of hailo_sdk_client/hailo_platform
(tests/images/dfc-double, run in-process via PYTHONPATH — not the Hailo SDK). Checks the documented call order,
parameter pass-through, the degraded-level guard, and that SDK exceptions reach the compare table as FAILED rows."""
import json
import os
import sys

import pytest

from dfc_double import DOUBLE, authored_and_translated, contexts_to_run, double_env
from direct import gather, run_stage

PY = sys.executable


HAILORTCLI = os.path.join(DOUBLE, "bin", "hailortcli")


env = double_env


def calls(har):
    return [t["call"] for t in json.load(open(har))["trace"]]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    t = tmp_path_factory.mktemp("dfc")
    a, tr = authored_and_translated(t)
    return t, a, tr


def test_translate_call_order_and_params(chain):
    t, a, tr = chain
    h = json.load(open(tr["har"]))
    assert h["test_double"].startswith("TEST DOUBLE")
    assert calls(tr["har"])[:3] == ["ClientRunner", "translate_onnx_model", "save_har"]
    call = h["trace"][1]
    assert h["trace"][0]["kwargs"]["hw_arch"] == "hailo10h"
    # the model as heddle binds it: the input's own file in the stage's sandbox
    assert [p.replace(os.sep, "/").rsplit("/", 3)[1:] for p in call["args"]] == [["in", "model", "model.onnx"]]
    # One name for the start node and the shape's key: the graph input.
    assert call["kwargs"] == {"net_name": "mezo", "start_node_names": ["input"], "end_node_names": ["conv2"],
                              "net_input_shapes": {"input": [1, 256, 16, 16]}}


def test_the_double_rejects_a_start_node_its_shape_does_not_name(chain, monkeypatch):
    """The call the stage made before: start node `conv1`, shape keyed by the tensor `input`."""
    t, a, tr = chain
    monkeypatch.syspath_prepend(DOUBLE)
    from hailo_sdk_client import ClientRunner
    with pytest.raises(ValueError, match=r"net_input_shapes keys \['input'\] are not the start node names \['conv1'\]"):
        ClientRunner(hw_arch="hailo10h").translate_onnx_model(
            a["onnx"], "mezo", start_node_names=["conv1"], end_node_names=["conv2"],
            net_input_shapes={"input": [1, 256, 16, 16]})


def test_entry_graph_translates_with_x_and_y(tmp_path):
    st, a, p = run_stage("onnx/author", "author", str(tmp_path / "a"),
                         with_={"graph": "entry-000", "seed": 1171, "samples": 8, "height": 1, "width": 1}, python=PY)
    assert st["status"] == "ok", p.stderr
    st, tr, p = run_stage("dfc/translate", "translate", str(tmp_path / "t"),
                          inputs={"model": a["onnx"], "meta": a["meta"]}, python=PY, extra_env=env(tmp_path))
    assert st["status"] == "ok", p.stderr
    rep = json.load(open(tr["report"]))
    assert rep["start_node_names"] == ["x"] and rep["end_node_names"] == ["y"]
    assert rep["net_input_shapes"] == {"x": [1, 256, 1, 1]}


def test_dfc_pipeline_failed_rows(chain, tmp_path):
    t, a, tr = chain
    members = []
    for prec in ["a16_w16", "a16_w4", "a8_w8"]:
        st_o, opt, p = run_stage("dfc/optimize", f"optimize[precision={prec}]", str(tmp_path / f"opt-{prec}"),
                                 inputs={"har": tr["har"], "calib": a["calib"]},
                                 with_={"precision": prec, "calibset_size": 16, "level": 2}, python=PY,
                                 extra_env=env(tmp_path))
        if prec == "a16_w4":
            assert st_o["status"] == "failed"
            assert st_o["error"] == "AttributeError: 'function' object has no attribute 'set_wraparound_loss'"
        else:
            assert st_o["status"] == "ok", p.stderr
            rep = json.load(open(opt["report"]))
            assert rep["optimization_level_used"] == 2 and rep["calibration_entries"] == 16
            assert rep["qaft_done"] is True and rep["cuda_visible_devices"] == "0"
            assert "Bias Correction skipped" in rep["skipped"] and rep["gpu_fallback"] is None
            c = calls(opt["har"])
            i = c.index("load_model_script")
            assert c[i:].index("optimize") < c[i:].index("save_har")
            script = json.load(open(opt["har"]))["model_script"]
            assert f"quantization_param({{*}}, precision_mode={prec})" in script
            assert "model_optimization_flavor(optimization_level=2, compression_level=0)" in script
            assert "calibset_size=16" in script
            opt_call = [x for x in json.load(open(opt["har"]))["trace"] if x["call"] == "optimize"][0]
            assert opt_call["args"] == [{"mezo/input_layer1": {"ndarray": [16, 16, 16, 256], "dtype": "float32"}}]
            st_c, comp, p = run_stage("dfc/compile", f"compile[precision={prec}]", str(tmp_path / f"c-{prec}"),
                                      inputs={"har": opt["har"]}, python=PY, extra_env=env(tmp_path))
            assert st_c["status"] == "ok", p.stderr
            assert calls(comp["har"])[-3:] == ["ClientRunner", "compile", "save_har"]
            assert b"TEST DOUBLE" in open(comp["hef"], "rb").read()
        for label, ctx in contexts_to_run(members, "probe", prec, st_o):
            st_p, pr, p = run_stage("mezo/probe", label, str(tmp_path / f"p-{prec}-{ctx}"),
                                    inputs={"quant": opt["har"], "float": a["onnx"], "weights": a["weights"],
                                            "calib": a["calib"]},
                                    with_={"backend": "dfc", "context": ctx, "draws": 3, "batch": 2}, python=PY,
                                    extra_env=env(tmp_path))
            if prec == "a8_w8" and ctx == "SDK_BIT_EXACT":
                assert st_p["status"] == "failed"
                assert st_p["error"] == "InferenceError: graph execution error at conv2_1/act_op_1/pow"
            else:
                assert st_p["status"] == "ok", p.stderr
                assert json.load(open(pr["result"]))["float_ref"] == "SDK_NATIVE"
            members.append(({"precision": prec, "context": ctx}, st_p, pr["result"]))
    # the probe's context calls, in order: SDK_NATIVE first (float reference), then the context under test
    trace = [json.loads(x) for x in open(tmp_path / "trace.jsonl")]
    ctxs = [x["args"][0] for x in trace if x["call"] == "infer_context"]
    assert ctxs[:2] == ["SDK_NATIVE", "SDK_QUANTIZED"]
    infers = [x for x in trace if x["call"] == "infer"]
    assert all(list(x["args"][1].keys()) == ["mezo/input_layer1"] for x in infers)
    g = gather(str(tmp_path / "gather"), members)
    st, outs, p = run_stage("mezo/compare", "compare", str(tmp_path / "cmp"),
                            inputs={"probes": g, "device": str(tmp_path / "none")}, python=PY)
    assert st["status"] == "ok", p.stderr
    md = open(outs["table"]).read()
    assert ("- a16_w4 FAILED AttributeError: 'function' object has no attribute "
            "'set_wraparound_loss' (in optimize[precision=a16_w4]; skipped: SDK_BIT_EXACT, SDK_QUANTIZED)") in md
    assert "a8_w8 × SDK_BIT_EXACT FAILED InferenceError: graph execution error at conv2_1/act_op_1/pow" in md
    assert "## a16_w16" in md and "SDK_BIT_EXACT sign" in md


def test_optimize_fails_when_level_degraded(chain, tmp_path):
    t, a, tr = chain
    st, opt, p = run_stage("dfc/optimize", "optimize[precision=a16_w16]", str(tmp_path / "o"),
                           inputs={"har": tr["har"], "calib": a["calib"]}, with_={"precision": "a16_w16"},
                           python=PY, extra_env=env(tmp_path, gpu="0"))
    assert st["status"] == "failed"
    assert st["error_class"] == "DegradedOptimization"
    assert "level 0 used, 2 asked" in st["error"] and "calibration entries 16" in st["error"]
    assert not os.path.exists(opt["har"])  # nothing to cache under the requested level


def test_optimize_sets_cuda_visible_devices_or_the_busy_gpu_is_passed_over(chain, tmp_path):
    """The old stage left CUDA_VISIBLE_DEVICES unset: on a GPU that drives a display the optimiser falls back to
    the CPU. cuda_devices = "" reproduces that and must fail, naming the fallback line."""
    t, a, tr = chain
    st, opt, p = run_stage("dfc/optimize", "o", str(tmp_path / "o"), inputs={"har": tr["har"], "calib": a["calib"]},
                           with_={"precision": "a16_w16", "calibset_size": 16, "cuda_devices": ""}, python=PY,
                           extra_env=env(tmp_path))
    assert st["status"] == "failed" and st["error_class"] == "DegradedOptimization", p.stderr
    assert st["error"].endswith("No GPU chosen and no suitable GPU found, falling back to CPU"), st["error"]


def test_optimize_requires_qaft_done_at_level_2(chain, tmp_path):
    """A level line alone is not evidence: level 2 without a finished Quantization-Aware Fine-Tuning fails."""
    t, a, tr = chain
    st, opt, p = run_stage("dfc/optimize", "o", str(tmp_path / "o"), inputs={"har": tr["har"], "calib": a["calib"]},
                           with_={"precision": "a16_w16", "calibset_size": 16}, python=PY,
                           extra_env=env(tmp_path, HAILO_DOUBLE_SKIP_QAFT="1"))
    assert st["status"] == "failed" and st["error_class"] == "DegradedOptimization", p.stderr
    assert st["error"] == ("DegradedOptimization: optimisation level 2 reported but Quantization-Aware Fine-Tuning "
                           "did not run (Quantization-Aware Fine-Tuning skipped)")


def test_optimize_precision_only_script_as_the_entry_ran_it(chain, tmp_path):
    t, a, tr = chain
    st, opt, p = run_stage("dfc/optimize", "o", str(tmp_path / "o"), inputs={"har": tr["har"], "calib": a["calib"]},
                           with_={"precision": "a16_w16", "model_script": "precision-only"}, python=PY,
                           extra_env=env(tmp_path))
    assert st["status"] == "ok", p.stderr
    rep = json.load(open(opt["report"]))
    assert rep["model_script"] == "quantization_param({*}, precision_mode=a16_w16)\n"
    assert rep["level_evidence"] == "Using default optimization level of 2" and rep["qaft_done"] is True
    assert rep["calibration_entries"] == 16  # min(DFC default 64, given 16)


def test_the_double_rejects_unknown_model_script_commands(monkeypatch, chain):
    t, a, tr = chain
    monkeypatch.syspath_prepend(DOUBLE)
    from hailo_sdk_client import ClientRunner
    r = ClientRunner(hw_arch="hailo10h", har=tr["har"])
    r.load_model_script("quantization_param({*}, precision_mode=a8_w8)\nperformance_param(fps=30)\n")
    with pytest.raises(ValueError, match="unknown model script command 'model_optimisation_flavour'"):
        r.load_model_script("model_optimisation_flavour(optimization_level=2)\n")


def compiled(chain, tmp_path):
    t, a, tr = chain
    st, opt, p = run_stage("dfc/optimize", "o", str(tmp_path / "o"), inputs={"har": tr["har"], "calib": a["calib"]},
                           with_={"precision": "a16_w16", "calibset_size": 16}, python=PY, extra_env=env(tmp_path))
    assert st["status"] == "ok", p.stderr
    st, comp, p = run_stage("dfc/compile", "c", str(tmp_path / "c"), inputs={"har": opt["har"]}, python=PY,
                            extra_env=env(tmp_path))
    assert st["status"] == "ok", p.stderr
    os.remove(tmp_path / "trace.jsonl")
    return a, comp


def test_hailo_infer_inference_model_order(chain, tmp_path):
    a, comp = compiled(chain, tmp_path)
    st, pr, p = run_stage("hailo/infer", "hwprobe[precision=a16_w16]", str(tmp_path / "hw"),
                          inputs={"hef": comp["hef"], "weights": a["weights"], "calib": a["calib"]},
                          with_={"draws": 2, "batch": 2, "python": PY, "hailortcli": HAILORTCLI},
                          extra_env=env(tmp_path))
    assert st["status"] == "ok", p.stderr
    trace = [json.loads(x)["call"] for x in open(tmp_path / "trace.jsonl")]
    assert trace[:6] == ["VDevice", "create_infer_model", "set_format_type", "set_format_type", "configure",
                         "get_async_queue_size"]
    # every run_async comes right after a wait_for_async_ready; the blocking run() is not used
    runs = [i for i, c in enumerate(trace) if c == "run_async"]
    assert runs and all(trace[i - 1] == "wait_for_async_ready" for i in runs) and "run" not in trace
    assert trace[-1] == "release"
    d = json.load(open(pr["result"]))
    assert d["context"] == "SDK_HAILO_HW" and d["float_ref"] == "NUMPY_FLOAT"
    info = d["context_info"]
    assert info["async_queue_size"] == 2 and info["max_in_flight"] == 2
    assert info["platform"]["version"] == "5.2.0" and info["platform"]["hailortcli_version"].startswith(
        "HailoRT-CLI version 5.2.0")


def test_the_double_refuses_more_frames_than_its_queue(chain, tmp_path, monkeypatch):
    """What the stage did before: one run() over every frame. The local runner answers HAILO_QUEUE_IS_FULL."""
    a, comp = compiled(chain, tmp_path)
    monkeypatch.syspath_prepend(DOUBLE)
    import numpy as np
    from hailo_platform import FormatType, HailoRTException, VDevice
    m = VDevice().create_infer_model(comp["hef"])
    m.input().set_format_type(FormatType.FLOAT32)
    m.output().set_format_type(FormatType.FLOAT32)
    with m.configure() as cim:
        bindings = []
        for _ in range(3):
            b = cim.create_bindings(output_buffers={m.output_names[0]: np.empty(m.output().shape, np.float32)})
            b.input().set_buffer(np.zeros(m.input().shape, np.float32))
            bindings.append(b)
        with pytest.raises(HailoRTException, match="HAILO_QUEUE_IS_FULL"):
            cim.run(bindings, 1000)


def test_hailo_infer_fails_first_without_a_matching_hailo_platform(chain, tmp_path):
    a, comp = compiled(chain, tmp_path)
    inputs = {"hef": comp["hef"], "weights": a["weights"], "calib": a["calib"]}
    missing = dict(env(tmp_path), PYTHONPATH=str(tmp_path / "nothing"))
    st, pr, p = run_stage("hailo/infer", "hw", str(tmp_path / "hw1"), inputs=inputs,
                          with_={"draws": 2, "batch": 2, "python": PY, "hailortcli": HAILORTCLI}, extra_env=missing)
    assert st["status"] == "failed" and st["error_class"] == "HailoPlatformError"
    assert "hailo_platform is not importable by" in st["error"] and "not on PyPI" in st["error"]
    old = env(tmp_path, HAILO_DOUBLE_PLATFORM_VERSION="4.23.0")
    st, pr, p = run_stage("hailo/infer", "hw", str(tmp_path / "hw2"), inputs=inputs,
                          with_={"draws": 2, "batch": 2, "python": PY, "hailortcli": HAILORTCLI}, extra_env=old)
    assert st["status"] == "failed" and st["error_class"] == "HailoPlatformError", p.stderr
    assert "hailo_platform 4.23.0 does not match HailoRT ('HailoRT-CLI version 5.2.0 (TEST DOUBLE)')" in st["error"]


def deploy(chain, tmp_path, **more):
    a, comp = compiled(chain, tmp_path)
    st, out, p = run_stage("hailo/deploy", "deploy", str(tmp_path / "d"),
                           inputs={"hef": comp["hef"], "compile_report": comp["report"]},
                           with_={"seconds": 1, "repeats": 3, "python": PY, "hailortcli": HAILORTCLI},
                           extra_env=env(tmp_path, **more))
    assert st["status"] == "ok", p.stderr
    return json.load(open(out["benchmark"]))


def test_hailo_deploy_repeats_and_reports_spread_transfer_and_versions(chain, tmp_path):
    d = deploy(chain, tmp_path)
    assert d["repeats"] == 3 and len(d["fps_runs"]) == 3
    assert d["fps_spread"] == pytest.approx((max(d["fps_runs"]) - min(d["fps_runs"])) / d["fps"])
    assert d["transfer_ms"] == pytest.approx(1.68) and d["transfer_share"] == pytest.approx(1.68 / 3.95)
    assert d["hailortcli_version"] == "HailoRT-CLI version 5.2.0 (TEST DOUBLE)"
    assert d["hef"]["compatible_for"] == ["HAILO10H"]
    assert d["hef"]["compiled_by"]["test_double"].startswith("TEST DOUBLE")
    assert d["temperature_supported"] is True and d["temperature_c"]["max"] == 41.7
    assert d["power_supported"] and d["current_supported"] and d["current_ma"]["average"] == 250.0


def test_hailo_deploy_retries_without_temperature_and_records_unsupported_power(chain, tmp_path):
    """Before: --measure-temp on a device that cannot measure it failed the whole stage."""
    d = deploy(chain, tmp_path, HAILO_DOUBLE_NO_TEMP="1", HAILO_DOUBLE_NO_POWER="1")
    assert d["temperature_supported"] is False and d["temperature_c"] is None
    assert d["temperature_note"].startswith("run2 --measure-temp exit 1: [HailoRT] [error] TEST DOUBLE: Failed to get "
                                            "chip temperature")
    assert len(d["fps_runs"]) == 3
    assert d["power_supported"] is False and d["current_supported"] is False
    assert "HAILO_NOT_SUPPORTED" in d["current_note"]
