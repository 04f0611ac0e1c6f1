"""dfc/optimize's level guard on log lines as public DFC logs print them (quoted in public code; see
stages/dfc/optimize/level_guard.py): per level, the algorithm the merged script asks for and its evidence."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "stages", "dfc", "optimize"))
import level_guard as lg  # noqa: E402

# A DFC 5.x log at level 2 with QAFT, as public code quotes it (timings are the quoted ones).
LEVEL2 = """[info] Using default optimization level of 2
[info] Finetune encoding skipped
[info] Bias Correction skipped
[info] Adaround skipped
[info] Starting Quantization-Aware Fine-Tuning
[info] Using dataset with 1024 entries for finetune
[info] Model Optimization Algorithm Quantization-Aware Fine-Tuning is done (completion time is 00:09:16.74)
[info] Model Optimization is done
"""
# Level 0 (no GPU), every algorithm skipped.
LEVEL0 = """[info] Bias Correction skipped
[info] Adaround skipped
[info] Quantization-Aware Fine-Tuning skipped
[info] Layer Noise Analysis skipped
"""
# An older release's names ("Fine Tune").
OLD = "[info] Bias Correction skipped\n[info] Adaround skipped\n[info] Starting Fine Tune\n[info] Fine Tune skipped\n"


def test_expected_algorithm_per_level_and_policy():
    assert [lg.expected(level, {}) for level in range(5)] == [
        [], ["bias_correction"], ["finetune"], ["adaround"], ["adaround"]]
    assert lg.expected(2, {"finetune": "disabled"}) == []
    assert lg.expected(0, {"finetune": "enabled"}) == ["finetune"]
    assert lg.expected(4, {"adaround": "enabled", "bias_correction": "enabled"}) == ["bias_correction", "adaround"]


def test_level_2_with_qaft_done_passes():
    algos, why, warnings = lg.judge(LEVEL2, 2, {}, "a8_w8")
    assert why is None and warnings == []
    assert algos == {"finetune": {"verdict": "ran", "line": "Model Optimization Algorithm Quantization-Aware "
                                                            "Fine-Tuning is done (completion time is 00:09:16.74)"}}


def test_the_same_log_at_level_4_fails_on_the_adaround_skip_line():
    algos, why, warnings = lg.judge(LEVEL2, 4, {}, "a8_w8")
    assert why == "Adaround skipped at optimisation level 4, which asks for it"


def test_a_skipped_qaft_fails_below_16_bit_and_warns_at_a16_w16():
    assert lg.judge(LEVEL0, 2, {}, "a8_w8")[1] == ("Quantization-Aware Fine-Tuning skipped at optimisation level 2, "
                                                   "which asks for it")
    algos, why, warnings = lg.judge(LEVEL0, 2, {}, "a16_w16")
    assert why is None and len(warnings) == 1 and "not publicly documented" in warnings[0]
    assert lg.judge(OLD, 2, {}, "a8_w8")[1] == "Fine Tune skipped at optimisation level 2, which asks for it"


def test_silence_fails_where_the_done_line_is_on_record_and_warns_where_it_is_not():
    assert lg.judge("", 2, {}, "a8_w8")[1] == ("no 'finetune ... is done' line in the SDK log at optimisation level 2, "
                                               "which asks for it")
    assert lg.judge("", 1, {}, "a8_w8")[1].startswith("no 'bias_correction ... is done' line")
    algos, why, warnings = lg.judge("", 3, {}, "a8_w8")
    assert why is None and algos == {"adaround": {"verdict": "unconfirmed", "line": None}} and len(warnings) == 1
