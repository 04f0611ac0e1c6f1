"""mezo/compare renders FAILED rows from status.json of failed and skipped members."""
import json
import sys

from direct import gather, run_stage


def probe_json(path, ctx, start=1.77e-3):
    rows = [{"eps": e, "sign": s, "r": r, "ratio": q, "median_abs_g": 1.0, "median_abs_g_float": 1.0,
             "max_abs_g": 1.0, "g": [1.0], "g_float": [1.0]}
            for e, s, r, q in [(3e-2, 0.958, 0.993, 1.0), (1e-2, 0.958, 0.988, 1.1), (1e-3, 0.792, 0.669, 1.2)]]
    json.dump({"kind": "mezo-probe", "context": ctx, "params": {"eps": [3e-2, 1e-2, 1e-3]}, "rows": rows,
               "start_loss": start, "start_loss_float": 1.85e-3, "start_output_max_abs_diff_vs_float": 0.01,
               "start_output_digest": "abc"}, open(path, "w"))
    return path


def test_compare_failed_and_skipped_rows(tmp_path):
    ok1 = probe_json(tmp_path / "a.json", "SDK_QUANTIZED")
    ok2 = probe_json(tmp_path / "b.json", "SDK_BIT_EXACT")
    opt_fail = {"label": "optimize[precision=a16_w4]", "status": "failed", "error_class": "AttributeError",
                "error": "AttributeError: 'function' object has no attribute 'set_wraparound_loss'"}
    members = [
        ({"precision": "a16_w16", "context": "SDK_QUANTIZED"}, {"label": "q", "status": "ok"}, str(ok1)),
        ({"precision": "a16_w16", "context": "SDK_BIT_EXACT"}, {"label": "b", "status": "ok"}, str(ok2)),
        ({"precision": "a16_w4", "context": "SDK_QUANTIZED"},
         {"label": "probe[context=SDK_QUANTIZED,precision=a16_w4]", "status": "skipped", "cause": opt_fail}, None),
        ({"precision": "a16_w4", "context": "SDK_BIT_EXACT"},
         {"label": "probe[context=SDK_BIT_EXACT,precision=a16_w4]", "status": "skipped", "cause": opt_fail}, None),
        ({"precision": "a8_w8", "context": "SDK_QUANTIZED"}, {"label": "q8", "status": "ok"}, str(ok1)),
        ({"precision": "a8_w8", "context": "SDK_BIT_EXACT"},
         {"label": "probe[context=SDK_BIT_EXACT,precision=a8_w8]", "status": "failed", "exit_code": 1,
          "error_class": "InferenceError", "error": "InferenceError: graph execution error at conv2_1/act_op_1/pow"},
         None),
    ]
    g = gather(str(tmp_path / "g"), members)
    st, outs, p = run_stage("mezo/compare", "compare", str(tmp_path / "out"),
                            inputs={"probes": g, "device": str(tmp_path / "absent")}, python=sys.executable)
    assert st["status"] == "ok", p.stderr
    md = open(outs["table"]).read()
    assert "| 3e-02 | 95.8% | +0.993 | 1.0x | 95.8% | +0.993 | 1.0x |" in md
    assert "Contexts agree on the start loss to five figures" in md
    assert ("- a16_w4 FAILED AttributeError: 'function' object has no attribute "
            "'set_wraparound_loss' (in optimize[precision=a16_w4]; skipped: SDK_BIT_EXACT, SDK_QUANTIZED)") in md
    assert "- a8_w8 × SDK_BIT_EXACT FAILED InferenceError: graph execution error at conv2_1/act_op_1/pow" in md
    csv_text = open(outs["csv"]).read()
    assert "a8_w8,SDK_BIT_EXACT,failed" in csv_text
    summary = json.load(open(outs["summary"]))
    assert summary["start_loss_agreement"]["a16_w16"]["agree_5_figures"] is True
    assert [f["line"].split(" FAILED ")[0] for f in summary["failures"]] == ["a16_w4", "a8_w8 × SDK_BIT_EXACT"]


def test_ratio_format():
    sys.path.insert(0, __import__("os").path.join(__import__("direct").STAGES, "mezo", "compare"))
    import compare
    assert compare.fmt_ratio(0.9999) == "1.00x"
    assert compare.fmt_ratio(0.95) == "0.95x"
    assert compare.fmt_ratio(1.04) == "1.0x"
    assert compare.fmt_ratio(16.04) == "16.0x"
    assert compare.fmt_ratio(1234.0) == "1,234x"
    assert compare.fmt_ratio(0.004) == "0.004x"


def test_entry_protocol_says_the_start_loss_is_equal_by_construction(tmp_path):
    members = []
    for ctx in ["SDK_BIT_EXACT", "SDK_QUANTIZED"]:
        path = probe_json(tmp_path / f"{ctx}.json", ctx)
        d = json.load(open(path))
        d["params"]["protocol"] = "entry"
        json.dump(d, open(path, "w"))
        members.append(({"precision": "a16_w16", "context": ctx}, {"label": ctx, "status": "ok"}, str(path)))
    g = gather(str(tmp_path / "g"), members)
    st, outs, p = run_stage("mezo/compare", "compare", str(tmp_path / "out"),
                            inputs={"probes": g, "device": str(tmp_path / "absent")},
                            with_={"context_order": ["SDK_QUANTIZED", "SDK_BIT_EXACT"]}, python=sys.executable)
    assert st["status"] == "ok", p.stderr
    md = open(outs["table"]).read()
    assert "every context's start loss is the same number by construction" in md
    assert "| eps | SDK_QUANTIZED sign | r | ratio | SDK_BIT_EXACT sign | r | ratio |" in md
    assert "Start loss equal in every context (by construction); unperturbed outputs bit-identical across contexts." in md
    assert "Contexts agree on the start loss" not in md
