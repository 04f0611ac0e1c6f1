#!/usr/bin/env python3
"""ort/deploy — CPU benchmark of the compiled ORT model, in the same JSON shape as hailo/deploy.

device: architecture = the CPU (platform.machine + model name from /proc/cpuinfo), firmware = null.
fps: frames per second over --seconds of back-to-back single-frame runs (after warm-up).
hw_latency_ms: median time inside session.run for one frame (the compute, like the NN-core latency).
overall_latency_ms: median time for one frame including making the input and copying the output out.
temperature_c / power_w: null with a reason (not measured on the host CPU); power_supported = false.
Timings are host-dependent, so this stage should not be cached as a measurement (cache = false).
"""
import argparse
import os
import platform
import statistics
import time

import numpy as np


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def bench(model, seconds, threads, warmup=20):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    inp = s.get_inputs()[0]
    shape = [1 if not isinstance(d, int) else d for d in inp.shape]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    for _ in range(warmup):
        s.run(None, {inp.name: x})
    hw, overall = [], []
    frames = 0
    t_end = time.perf_counter() + seconds
    t_start = time.perf_counter()
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        xi = rng.standard_normal(shape).astype(np.float32)
        t1 = time.perf_counter()
        y = s.run(None, {inp.name: xi})[0]
        t2 = time.perf_counter()
        _ = np.array(y, copy=True)
        t3 = time.perf_counter()
        hw.append((t2 - t1) * 1e3)
        overall.append((t3 - t0) * 1e3)
        frames += 1
    dur = time.perf_counter() - t_start
    return {"frames": frames, "duration_s": dur, "fps": frames / dur,
            "hw_latency_ms": statistics.median(hw), "overall_latency_ms": statistics.median(overall),
            "onnxruntime": ort.__version__, "threads": threads, "input_shape": shape}



def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    b = hs.run(lambda: bench(a.model, a.seconds, a.threads))
    out = {
        "kind": "deploy-benchmark", "backend": "ort-cpu", "instance": os.environ.get("HEDDLE_INSTANCE", ""),
        "device": {"architecture": f"{platform.machine()} CPU ({cpu_name()})", "firmware": None,
                   "identify": {"cpu_count": os.cpu_count()}},
        "fps": b["fps"], "hw_latency_ms": b["hw_latency_ms"], "overall_latency_ms": b["overall_latency_ms"],
        "temperature_c": None, "temperature_note": "not measured on the host CPU",
        "power_supported": False, "power_w": None, "power_note": "not measured on the host CPU",
        "details": b,
    }
    hs.write_report(a.out, out, ("fps", "hw_latency_ms", "overall_latency_ms"))


if __name__ == "__main__":
    main()
