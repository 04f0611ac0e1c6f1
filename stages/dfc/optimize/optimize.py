#!/usr/bin/env python3
"""dfc/optimize — quantise a HAR with the Hailo Dataflow Compiler, inside the DFC image, on the GPU.

Documented/public API (docs/hailo-toolchain.md §1.4, §1.5, §2, §3): ClientRunner(hw_arch, har=...);
load_model_script(text) with
    quantization_param({*}, precision_mode=<precision>)
    model_optimization_flavor(optimization_level=<level>, compression_level=<compression>)
    model_optimization_config(calibration, batch_size=<b>, calibset_size=<n>)
then optimize(calib) with calib = {HN input-layer name: float32 NHWC (N, H, W, C)} — names and per-sample shape read
from the runner's HN, not from the ONNX — then save_har.

The model script is either "full" (the three lines above) or "precision-only" (quantization_param alone, as the
logbook entry ran it: the DFC then picks its default level and calibration size and says which in its log). An
optional model-script input (--alls, the user's .alls file) is merged with those lines by model_script.merge: on the
same command and target the user's keywords win (each override is printed and reported), every other user line is
kept, and the level the merged script asks for is the level the degradation guard checks.

The DFC silently drops to optimisation level 0 without a usable GPU or with too little calibration data, and the
optimiser picks a GPU only while it uses under about 5 % of its memory unless CUDA_VISIBLE_DEVICES is set — so this
stage sets CUDA_VISIBLE_DEVICES explicitly (param cuda_devices) before the SDK is imported. It captures everything the
SDK prints during optimize() (file-descriptor level, so the SDK's own log handlers are caught) and reads:
  * the level actually used ("Using default optimization level of N", "Reducing optimization level to N ...");
  * the calibration entry count ("Using dataset with N entries for calibration");
  * every "... skipped" line and the GPU fallback ("No GPU chosen and no suitable GPU found, falling back to CPU");
  * per algorithm the merged script asks for at the level used (level_guard.py: bias correction at 1, QAFT at 2,
    AdaRound at 3-4, as overridden by post_quantization_optimization(ALGORITHM, policy=...)), its done or skipped
    line — the absence of a reduction line is not evidence that the level ran.
It records all of it in its report and FAILS (class DegradedOptimization) when the level used is not the level asked
for, or when an algorithm the script asks for did not run where the public record says what the DFC prints (a
skipped line; no done line for QAFT or bias correction) — so a degraded quantisation is never cached under the
requested level. Where no public evidence says what the DFC prints (AdaRound's done line; whether QAFT runs
when every layer is 16-bit) it warns instead (stderr and the report's guard_warnings) and does not fail on a
guess. An exception inside the SDK is recorded with its class and message in $HEDDLE_ERROR_FILE. Untested against
the real DFC until someone runs it there.
"""
import argparse
import os
import re
import sys
import tempfile

import level_guard  # beside this script: which algorithms a level asks for, and the log's evidence of each
import model_script as ms  # beside this script: the stage's lines and their merge with a user's .alls


class DegradedOptimization(RuntimeError):
    pass


class CaptureFds:
    """Redirect fds 1 and 2 to a file for the duration; replay the text to stderr afterwards."""

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.f = tempfile.TemporaryFile(mode="w+b")
        self.saved = (os.dup(1), os.dup(2))
        os.dup2(self.f.fileno(), 1)
        os.dup2(self.f.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        self.f.seek(0)
        self.text = self.f.read().decode("utf-8", "replace")
        self.f.close()
        sys.stderr.write(self.text)
        sys.stderr.flush()
        return False


QAFT = "Quantization-Aware Fine-Tuning"


def parse_sdk_log(text, requested):
    """-> dict(level_used, level_evidence, calib_entries, qaft_done, skipped, gpu_fallback, log_lines). Level used =
    the last reduction line if any, else the default-level line if any, else the requested level (no reduction
    reported); `requested` None means the script set no level (the DFC's default applies)."""
    lines = [ln for ln in text.splitlines()
             if re.search(r"optimization level|entries for|GPU|skipped|Fine-Tuning|is done", ln, re.I)]
    used, evidence = requested, "no 'Reducing optimization level' line in the SDK log"
    m = re.findall(r"Using default optimization level of (-?\d+)", text)
    if m:
        used, evidence = int(m[-1]), f"Using default optimization level of {m[-1]}"
    m = re.findall(r"Reducing optimization level to (-?\d+)[^\n]*", text)
    if m:
        used = int(m[-1])
        evidence = re.findall(r"[^\n]*Reducing optimization level to -?\d+[^\n]*", text)[-1].strip()
    m = re.findall(r"Using dataset with (\d+) entries for calibration", text)
    entries = int(m[-1]) if m else None
    skipped = [re.sub(r"^\[\w+\]\s*", "", ln).strip() for ln in text.splitlines() if re.search(r"\bskipped\b", ln)]
    gpu = [ln.strip() for ln in text.splitlines() if re.search(r"No GPU chosen.*falling back to CPU", ln)]
    qaft_done = bool(re.search(QAFT + r"[^\n]*\bdone\b", text))
    return {"level_used": used, "level_evidence": evidence, "calib_entries": entries, "qaft_done": qaft_done,
            "skipped": skipped, "gpu_fallback": gpu[-1] if gpu else None, "log_lines": lines, "text": text}


def degraded(info, requested, asked):
    """(why the quantisation is not what was asked for, or None; the algorithms judged; warnings)."""
    gpu = f"; {info['gpu_fallback']}" if info["gpu_fallback"] else ""
    if requested is not None and info["level_used"] != requested:
        return (f"optimisation level {info['level_used']} used, {requested} asked ({info['level_evidence']}); "
                f"calibration entries {info['calib_entries']}" + gpu), {}, []
    algos, why, warnings = level_guard.judge(info["text"], info["level_used"], asked["post_quantization"],
                                             asked["precision"])
    return ((f"optimisation level {info['level_used']}: {why}" + gpu) if why else None), algos, warnings


def model_script(precision, level, compression, batch_size, calibset_size, mode="full", user_text=""):
    """-> (script text, overrides): the stage's lines, merged with the user's .alls text when there is one
    (model_script.merge: the user's keywords win on the same command and target)."""
    ours = ms.generated(precision, level, compression, batch_size, calibset_size, mode)
    if not user_text.strip():
        return ours, []
    return ms.merge(ours, user_text)


def optimize(hs, har, calib_path, hw_arch, precision, level, compression, batch_size, calibset_size, out_har,
             mode="full", cuda_devices="0", alls_path=""):
    import numpy as np
    # The optimiser passes over a GPU that already uses ~5 % of its memory unless this is set; set it explicitly
    # (before the SDK is imported), and record what it was.
    cuda_before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cuda_devices != "":
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_devices
    hs.ensure_writable_home()
    from hailo_sdk_client import ClientRunner
    runner = ClientRunner(hw_arch=hw_arch, har=har)
    user_text = ""
    if alls_path:
        with open(alls_path, encoding="utf-8") as f:
            user_text = f.read()
    script, overrides = model_script(precision, level, compression, batch_size, calibset_size, mode, user_text)
    for o in overrides:
        print(f"dfc/optimize: the model script input sets {o['command']}({o['target']}) {o['keyword']}={o['user']} "
              f"(the stage's value: {o['stage']})", file=sys.stderr)
    asked = ms.effective(script)
    runner.load_model_script(script)
    hn = runner.get_hn_dict()
    names = [k for k, v in hn["layers"].items() if v.get("type") == "input_layer"]
    if len(names) != 1:
        raise ValueError(f"expected one HN input layer, found {names}")
    want = list(hn["layers"][names[0]]["input_shapes"][0][1:])
    calib = np.load(calib_path)
    if calib.dtype != np.float32:
        calib = calib.astype(np.float32)
    if list(calib.shape[1:]) != want:
        raise ValueError(f"calibration per-sample shape {list(calib.shape[1:])} != HN input shape {want} (NHWC)")
    with CaptureFds() as cap:
        runner.optimize({names[0]: calib})
    # The level the merged script asks for; a script that sets none asks for the DFC's default, which must turn out
    # to be `level` (the entry's "full optimisation level" is 2).
    requested = level if asked["optimization_level"] is None else asked["optimization_level"]
    info = parse_sdk_log(cap.text, requested)
    report = {"sdk": hs.sdk_identity(), "hw_arch": hw_arch, "precision": precision,
              "precision_effective": asked["precision"], "model_script_mode": mode,
              "optimization_level_requested": requested, "optimization_level_used": info["level_used"],
              "level_evidence": info["level_evidence"], "qaft_done": info["qaft_done"],
              "skipped": info["skipped"], "gpu_fallback": info["gpu_fallback"],
              "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "cuda_visible_devices_before": cuda_before,
              "calibration_entries": info["calib_entries"], "calibration_given": int(calib.shape[0]),
              "calibration_layout": "float32 NHWC keyed by HN input name", "hn_input_layer": names[0],
              "compression_level": asked["compression_level"], "model_script": script,
              "model_script_input": user_text or None, "model_script_overrides": overrides,
              "sdk_log_lines": info["log_lines"]}
    why, algos, warnings = degraded(info, requested, asked)
    report["post_quantization_algorithms"] = algos
    report["guard_warnings"] = warnings
    for w in warnings:
        print(f"dfc/optimize: warning: {w}", file=sys.stderr)
    if why:
        raise DegradedOptimization(why)
    runner.save_har(out_har)
    return report


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--har", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--precision", required=True)
    ap.add_argument("--level", type=int, default=2)
    ap.add_argument("--compression", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--calibset-size", type=int, default=1024)
    ap.add_argument("--model-script", default="full", choices=["full", "precision-only"])
    ap.add_argument("--alls", default="", help="a model script (.alls) merged with the stage's lines; '' = none")
    ap.add_argument("--cuda-visible-devices", default="0", help="set before the SDK loads; '' leaves it as it is")
    ap.add_argument("--out-har", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    rep = hs.run(lambda: optimize(hs, a.har, a.calib, a.hw_arch, a.precision, a.level, a.compression, a.batch_size,
                                  a.calibset_size, a.out_har, a.model_script, a.cuda_visible_devices, a.alls))
    hs.write_report(a.out_report, rep, ("precision", "optimization_level_requested", "optimization_level_used",
                                        "qaft_done", "calibration_entries"))


if __name__ == "__main__":
    main()
