"""dfc/optimize's optional model-script input (`.alls`): the merge rule of stages/dfc/optimize/model_script.py, and the
stage run against the TEST DOUBLE of hailo_sdk_client (tests/images/dfc-double, in-process via PYTHONPATH — not the
Hailo SDK), which rejects model-script commands the DFC does not know."""
import json
import os
import sys

import pytest

from dfc_double import DOUBLE, authored_and_translated, double_env
from direct import STAGES, run_stage

PY = sys.executable
sys.path.insert(0, os.path.join(STAGES, "dfc", "optimize"))
import model_script as ms  # noqa: E402

OURS = ms.generated("a16_w16", 2, 0, 8, 1024)


def test_generated_lines_are_the_stage_s_own():
    assert OURS == ("quantization_param({*}, precision_mode=a16_w16)\n"
                    "model_optimization_flavor(optimization_level=2, compression_level=0)\n"
                    "model_optimization_config(calibration, batch_size=8, calibset_size=1024)\n")
    assert ms.generated("a8_w8", 2, 0, 8, 64, "precision-only") == "quantization_param({*}, precision_mode=a8_w8)\n"


def test_user_keywords_win_on_the_same_command_and_target_and_the_stage_s_others_stay():
    user = ("model_optimization_flavor(compression_level=1)\n"
            "model_optimization_config(calibration, calibset_size=64)\n")
    text, overrides = ms.merge(OURS, user)
    assert text == ("quantization_param({*}, precision_mode=a16_w16)\n"
                    "model_optimization_flavor(optimization_level=2, compression_level=1)\n"
                    "model_optimization_config(calibration, batch_size=8, calibset_size=64)\n")
    assert overrides == [
        {"command": "model_optimization_flavor", "target": "", "keyword": "compression_level", "stage": "0",
         "user": "1"},
        {"command": "model_optimization_config", "target": "calibration", "keyword": "calibset_size",
         "stage": "1024", "user": "64"}]
    assert ms.effective(text) == {"precision": "a16_w16", "optimization_level": 2, "compression_level": 1,
                                  "calibset_size": 64, "batch_size": 8, "post_quantization": {}}


def test_effective_reads_post_quantization_policies_last_one_winning():
    text = ("post_quantization_optimization(finetune, policy=enabled, learning_rate=0.0001,\n"
            "    epochs=8, dataset_size=2048)\n"
            "post_quantization_optimization(adaround, policy=enabled, epochs=100)\n"
            "post_quantization_optimization(finetune, policy=disabled)\n")
    assert ms.effective(text)["post_quantization"] == {"finetune": "disabled", "adaround": "enabled"}


def test_other_targets_are_not_the_same_thing():
    """A precision for named layers refines the stage's {*} line (it comes after it); `globals` is not
    `calibration`."""
    user = ("quantization_param([conv1, conv2], precision_mode=a8_w8)\n"
            "model_optimization_config(globals, multiproc_policy=disabled)\n")
    text, overrides = ms.merge(OURS, user)
    assert overrides == []
    assert text == OURS + user


def test_stage_lines_go_after_the_leading_graph_modifications_and_user_text_is_kept_verbatim():
    user = ("# my model\n"
            "normalization1 = normalization([123.675, 116.28, 103.53], [58.395, 57.12, 57.375])  # ImageNet\n"
            "input_conversion(bgr_to_rgb)\n"
            "performance_param(compiler_optimization_level=max)\n"
            "post_quantization_optimization(finetune, policy=enabled, learning_rate=0.0001,\n"
            "                               loss_types=[l2rel, ce], epochs=4)\n"
            "quantization_param({*}, precision_mode=a8_w8)\n")
    text, overrides = ms.merge(OURS, user)
    assert text.splitlines() == [
        "normalization1 = normalization([123.675, 116.28, 103.53], [58.395, 57.12, 57.375])",
        "input_conversion(bgr_to_rgb)",
        "model_optimization_flavor(optimization_level=2, compression_level=0)",
        "model_optimization_config(calibration, batch_size=8, calibset_size=1024)",
        "performance_param(compiler_optimization_level=max)",
        "post_quantization_optimization(finetune, policy=enabled, learning_rate=0.0001, "
        "loss_types=[l2rel, ce], epochs=4)",
        "quantization_param({*}, precision_mode=a8_w8)"]
    # the user's {*} precision wins over the sweep's value, and says so
    assert overrides == [{"command": "quantization_param", "target": "{*}", "keyword": "precision_mode",
                          "stage": "a16_w16", "user": "a8_w8"}]
    assert ms.effective(text)["precision"] == "a8_w8"


def test_an_unclosed_statement_names_its_line():
    with pytest.raises(ms.ModelScriptSyntaxError, match=r"line 2: statement never closes"):
        ms.merge(OURS, "performance_param(fps=30)\npost_quantization_optimization(finetune, policy=enabled,\n")
    with pytest.raises(ms.ModelScriptSyntaxError, match=r"line 1: not a model-script command"):
        ms.merge(OURS, "optimization_level = 4\n")


# ---- the stage against the double ------------------------------------------------------------------------------

env = double_env


@pytest.fixture(scope="module")
def translated(tmp_path_factory):
    return authored_and_translated(tmp_path_factory.mktemp("alls"))


def optimize(translated, tmp_path, alls_text, **with_):
    a, tr = translated
    alls = tmp_path / "model.alls"
    alls.write_text(alls_text)
    return run_stage("dfc/optimize", "optimize[precision=a16_w16]", str(tmp_path / "o"),
                     inputs={"har": tr["har"], "calib": a["calib"], "alls": str(alls)},
                     with_={"precision": "a16_w16", "calibset_size": 16, **with_}, python=PY, extra_env=env(tmp_path))


def test_optimize_loads_the_merged_script_and_reports_each_override(translated, tmp_path):
    user = ("normalization1 = normalization([0.0, 0.0, 0.0], [255.0, 255.0, 255.0])\n"
            "model_optimization_flavor(compression_level=1)\n"
            "quantization_param(conv1, precision_mode=a8_w8)\n"
            "post_quantization_optimization(finetune, policy=enabled,\n"
            "                               epochs=4, batch_size=2)\n")
    st, opt, p = optimize(translated, tmp_path, user)
    assert st["status"] == "ok", p.stderr
    rep = json.load(open(opt["report"]))
    loaded = [json.loads(x) for x in open(tmp_path / "trace.jsonl") if '"load_model_script"' in x]
    assert [x["args"][0] for x in loaded] == [rep["model_script"]]
    assert rep["model_script"] == (
        "normalization1 = normalization([0.0, 0.0, 0.0], [255.0, 255.0, 255.0])\n"
        "quantization_param({*}, precision_mode=a16_w16)\n"
        "model_optimization_config(calibration, batch_size=8, calibset_size=16)\n"
        "model_optimization_flavor(optimization_level=2, compression_level=1)\n"
        "quantization_param(conv1, precision_mode=a8_w8)\n"
        "post_quantization_optimization(finetune, policy=enabled, epochs=4, batch_size=2)\n")
    assert rep["model_script_input"] == user
    assert rep["model_script_overrides"] == [{"command": "model_optimization_flavor", "target": "",
                                              "keyword": "compression_level", "stage": "0", "user": "1"}]
    assert rep["compression_level"] == 1 and rep["precision_effective"] == "a16_w16"
    assert "the model script input sets model_optimization_flavor() compression_level=1 (the stage's value: 0)" \
        in p.stderr
    assert json.load(open(opt["har"]))["compression_level"] == 1  # the double read the merged flavor line


def test_the_guard_checks_the_level_the_user_s_script_asks_for(translated, tmp_path):
    """The user's optimization_level=0 wins over the stage's 2: the DFC then uses 0, which is what was asked."""
    st, opt, p = optimize(translated, tmp_path, "model_optimization_flavor(optimization_level=0)\n")
    assert st["status"] == "ok", p.stderr
    rep = json.load(open(opt["report"]))
    assert rep["optimization_level_requested"] == 0 and rep["optimization_level_used"] == 0
    assert rep["qaft_done"] is False and "Quantization-Aware Fine-Tuning skipped" in rep["skipped"]


def test_an_unknown_command_in_the_user_s_script_fails_in_the_dfc_s_parser(translated, tmp_path):
    st, opt, p = optimize(translated, tmp_path, "model_optimisation_flavour(optimization_level=2)\n")
    assert st["status"] == "failed" and st["error_class"] == "ModelScriptError", p.stderr
    assert "unknown model script command 'model_optimisation_flavour'" in st["error"]
    assert not os.path.exists(opt["har"])


def test_without_the_input_the_script_is_the_stage_s_alone(translated, tmp_path):
    a, tr = translated
    st, opt, p = run_stage("dfc/optimize", "o", str(tmp_path / "o"), inputs={"har": tr["har"], "calib": a["calib"]},
                           with_={"precision": "a16_w16", "calibset_size": 16}, python=PY, extra_env=env(tmp_path))
    assert st["status"] == "ok", p.stderr
    rep = json.load(open(opt["report"]))
    assert rep["model_script"] == ms.generated("a16_w16", 2, 0, 8, 16)
    assert rep["model_script_input"] is None and rep["model_script_overrides"] == []


def test_the_double_accepts_the_zoo_s_statement_forms_and_rejects_unknown_ones(monkeypatch):
    """Forms the model zoo's .alls files use (written here, not copied): multi-line statements, several names bound
    by one command, a context's place() method; and what the DFC would not know."""
    monkeypatch.syspath_prepend(DOUBLE)
    from hailo_sdk_client import ClientRunner
    from hailo_sdk_client import ModelScriptError
    r = ClientRunner(hw_arch="hailo10h")
    r.load_model_script("conv3_d0, conv3_d1, conv3_dc = defuse(conv3, 2)\n"
                        "ctx0 = context([input_layer1])\n"
                        "ctx0.place(0, [conv1, conv2])\n"
                        "quantization_param({*}, max_elementwise_feed_repeat=1)\n"
                        "post_quantization_optimization(finetune, policy=enabled,\n"
                        "    loss_layer_names=[conv1, conv2], loss_types=[l2rel, ce])  # two lines\n")
    for bad in ("ctx1.place(0, [conv1])\n", "model_optimization_flavour(optimization_level=2)\n",
                "quantize(conv1, bits=4)\n"):
        with pytest.raises(ModelScriptError, match="unknown model script command"):
            r.load_model_script(bad)
    with pytest.raises(ValueError, match="unknown precision_mode 'a4_w4'"):
        r.load_model_script("quantization_param(conv1, precision_mode=a4_w4)\n")
