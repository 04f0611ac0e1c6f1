#!/usr/bin/env python3
"""mezo/probe — the logbook entry's MeZO probe in one inference context.

For D draws z and each eps: g = [L(t+eps z) - L(t-eps z)] / (2 eps) in the context under test and in the float
reference on the same z (maths in mezo.py, contexts in contexts.py). Writes one JSON: start loss (context and
float), per eps sign agreement / Pearson r / ratio of median |g| (context over float) and the raw g arrays.
Deterministic for a fixed seed: nothing time- or host-dependent enters the JSON (timings go to stderr).

--protocol entry runs the logbook entry's own protocol instead (entry_protocol.py: perturbed inputs, each context's
target its own output plus one shared noise, per-sample unit-norm z, both signs in one call per eps, on either of the
entry's two random streams: --stream reseed / continue); the JSON has the same shape, with params.protocol and
params.stream saying which ran.

An exception anywhere (including inside a vendor SDK) is written as {"class", "message"} to $HEDDLE_ERROR_FILE
and re-raised, so the status record carries e.g. "InferenceError: graph execution error at ...".
"""
import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import mezo  # noqa: E402


def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def parse_eps(s):
    v = json.loads(s) if isinstance(s, str) else s
    if isinstance(v, (int, float)):
        v = [v]
    return [float(e) for e in v]


def common_args(ap):
    ap.add_argument("--calib", required=True, help="calibration set, float32 NHWC .npy")
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--draws", type=int, default=48)
    ap.add_argument("--eps", default="[0.03, 0.01, 0.001]", help="JSON list")
    ap.add_argument("--batch", type=int, default=8, help="calibration samples in the loss")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target-loss", type=float, default=2e-3, help="mean-square offset of the target")
    ap.add_argument("--chunk", type=int, default=8, help="parameter points per forward call")
    ap.add_argument("--protocol", default="lora", choices=["lora", "entry"])
    ap.add_argument("--samples", type=int, default=64, help="entry protocol: rows of X = randn(samples, H, W, C)")
    ap.add_argument("--noise", type=float, default=0.10, help="entry protocol: noise = randn * std(float y) * this")
    ap.add_argument("--stream", default="reseed", choices=["reseed", "continue"],
                    help="entry protocol: reseed = np.random.seed(seed) before X (the entry's SDK_BIT_EXACT probe); "
                         "continue = X, noise and z continue the author's stream after its weights and calibration "
                         "set (its SDK_QUANTIZED probe)")
    ap.add_argument("--author-seed", type=int, default=None, help="entry protocol, stream continue: onnx/author's seed")
    ap.add_argument("--out", required=True)


def run_entry_probe(args, ctx_factory, float_factory, meta, sample_shape):
    """The logbook entry's protocol (entry_protocol.py); same JSON shape as run_probe."""
    import entry_protocol
    t = time.monotonic()
    weights = np.load(args.weights) if args.stream == "continue" else None
    calib = np.load(args.calib) if args.stream == "continue" else None
    r = entry_protocol.run(ctx_factory, float_factory, sample_shape, args.samples, args.draws, parse_eps(args.eps),
                           args.seed, args.noise, args.stream, args.author_seed, weights, calib)
    print(f"[probe] entry protocol: {r['fctx'].name} and {r['ctx'].name} in {time.monotonic() - t:.1f}s",
          file=sys.stderr)
    y0, y0_float = r["y0"], r["y0_float"]
    result = {
        "kind": "mezo-probe",
        "instance": os.environ.get("HEDDLE_INSTANCE", ""),
        **meta,
        "context": r["ctx"].name,
        "float_ref": r["fctx"].name,
        "params": {"protocol": "entry", "draws": args.draws, "eps": parse_eps(args.eps), "samples": args.samples,
                   "seed": args.seed, "noise": args.noise, "stream": args.stream,
                   "author_seed": args.author_seed if args.stream == "continue" else None},
        "sample_shape": list(sample_shape),
        "outputs_per_sample": int(np.prod(y0.shape[1:])),
        # Each context's target is its own y0 plus the same noise: these two are equal by construction.
        "start_loss": float(r["start_loss"]),
        "start_loss_float": float(r["start_loss_float"]),
        "start_loss_by_construction": True,
        "float_output_std": r["float_output_std"],
        "noise_std": r["noise_std"],
        "start_output_max_abs_diff_vs_float": float(np.max(np.abs(y0.astype(np.float64) - y0_float))),
        "start_output_digest": _digest(y0),
        "context_info": r["ctx"].info,
        "float_ref_info": r["fctx"].info,
        "rows": r["rows"],
    }
    _write(args.out, result)
    return result


def _write(path, result):
    with open(path, "w") as f:
        json.dump(_clean(result), f, indent=1, sort_keys=True)
        f.write("\n")
    for r in result["rows"]:
        print(f"[probe] eps={r['eps']:.0e} sign={r['sign']:.1%} r={r['r']:+.3f} ratio={r['ratio']:.3g}x",
              file=sys.stderr)


def run_probe(args, ctx_factory, float_factory, meta):
    """ctx_factory/float_factory: zero-arg callables returning mezo.Context objects (constructed lazily)."""
    calib = np.load(args.calib, mmap_mode="r")
    if calib.ndim != 4:
        raise ValueError(f"calibration set must be (N,H,W,C) NHWC, got shape {calib.shape}")
    if getattr(args, "protocol", "lora") == "entry":
        return run_entry_probe(args, ctx_factory, float_factory, meta, tuple(calib.shape[1:]))
    plan = mezo.Plan(calib, args.batch, args.rank, args.draws, parse_eps(args.eps), args.seed)
    t = time.monotonic()
    fctx = float_factory()
    with fctx:
        f_outs = mezo.evaluate(fctx, plan, args.chunk)
    print(f"[probe] float reference {fctx.name}: {len(f_outs)} points in {time.monotonic() - t:.1f}s", file=sys.stderr)
    target = mezo.make_target(plan, f_outs, args.target_loss)
    f_loss = mezo.losses(f_outs, target)
    y0_float = f_outs[0]
    del f_outs

    t = time.monotonic()
    ctx = ctx_factory()
    with ctx:
        q_outs = mezo.evaluate(ctx, plan, args.chunk)
    print(f"[probe] context {ctx.name}: {len(q_outs)} points in {time.monotonic() - t:.1f}s", file=sys.stderr)
    if q_outs[0].shape != y0_float.shape:
        raise ValueError(f"context output shape {q_outs[0].shape} != float reference {y0_float.shape}")
    q_loss = mezo.losses(q_outs, target)
    y0 = q_outs[0]
    rows = mezo.summarise(plan, mezo.gradients(plan, q_loss), mezo.gradients(plan, f_loss))
    result = {
        "kind": "mezo-probe",
        "instance": os.environ.get("HEDDLE_INSTANCE", ""),
        **meta,
        "context": ctx.name,
        "float_ref": fctx.name,
        "params": {"protocol": "lora", "rank": args.rank, "draws": args.draws, "eps": plan.eps, "batch": args.batch,
                   "seed": args.seed, "target_loss": args.target_loss, "chunk": args.chunk},
        "sample_index": plan.sample_index,
        "outputs_per_sample": int(np.prod(y0.shape[1:])),
        "start_loss": float(q_loss[0]),
        "start_loss_float": float(f_loss[0]),
        "start_output_max_abs_diff_vs_float": float(np.max(np.abs(y0.astype(np.float64) - y0_float))),
        "start_output_digest": _digest(y0),
        "context_info": ctx.info,
        "float_ref_info": fctx.info,
        "rows": rows,
    }
    _write(args.out, result)
    return result


def _digest(y):
    import hashlib
    return hashlib.sha256(np.ascontiguousarray(y, dtype=np.float32).tobytes()).hexdigest()[:16]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", required=True, choices=["ort", "dfc"])
    ap.add_argument("--context", required=True)
    ap.add_argument("--float-ref", default="auto", help="auto | ORT_FLOAT | SDK_NATIVE | NUMPY_FLOAT | ...")
    ap.add_argument("--quant", help="quantised model: ORT .onnx or DFC quantised .har")
    ap.add_argument("--float-model", help="float ONNX (ort backend)")
    ap.add_argument("--weights", help="weights.npz from onnx/author (NUMPY_FLOAT)")
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--threads", type=int, default=1, help="ORT intra-op threads (1 keeps sums in one order)")
    common_args(ap)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    from contexts import make_context
    fref = a.float_ref
    if fref in ("", "auto"):
        fref = {"ort": "ORT_FLOAT", "dfc": "SDK_NATIVE"}[a.backend]
    kw = dict(quant=a.quant, float_model=a.float_model, weights=a.weights, hw_arch=a.hw_arch, threads=a.threads,
              helpers=hs)
    hs.run(lambda: run_probe(a, lambda: make_context(a.backend, a.context, **kw),
                             lambda: make_context(a.backend, fref, **kw), {"backend": a.backend}))


if __name__ == "__main__":
    main()
