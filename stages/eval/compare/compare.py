#!/usr/bin/env python3
"""eval/compare — the float model vs each quantised context on held-out images, on onnxruntime (CPU).

A context is NAME=FOLDER, FOLDER a gathered input laid out by heddle: one sub-folder per member named k=v,...
holding matrix.json, status.json and (when the member ran) either its model (.onnx, run here on onnxruntime) or its
outputs on the held-out images (.npy, e.g. from dfc/infer, whose contexts run only inside the DFC image). A member
whose matrix has a `context` key (dfc/infer's) names its row's context by it. The float reference is the `--float`
ONNX model run here, or `--reference`, a .npy of outputs (dfc/infer with SDK_NATIVE). Output .npy files are
channels-last as the DFC returns them: 4-D ones are brought to NCHW, and a file with the reference's sample count and
size is reshaped to its shape (the DFC's [N, 1, 1, C] for an ONNX [N, C]). Per member and held-out sample: the float
and the quantised output (an ONNX model runs one batch per call, as its fixed batch takes it); then
  top-1 agreement  share of samples whose argmax over --top1-axis (default 1, the channel / class axis; -1 for a
                   sequence model's [N, T, classes]) is the same at every other position,
  max abs diff     max over samples and elements of |q - f|,
  mean abs diff    mean of |q - f|,
  cosine           mean over samples of the cosine similarity of the flattened outputs,
  rel. error       ||q - f|| / ||f|| over the whole set.
Writes a Markdown table (one row per precision x context, failed and skipped members included with their error), a
JSON summary, and heddle plots ({"plots": [...]}).
"""
import argparse
import json
import os
import sys

import numpy as np


def members(hs, folder):
    """(matrix, status, model path or None) per member of a gathered folder, in name order."""
    out = []
    for _name, sub, matrix, status in hs.gathered(folder):
        files = sorted(os.listdir(sub))
        models = [f for f in files if f.endswith(".onnx")] or [f for f in files if f.endswith(".npy")]
        out.append((matrix or {}, status or {}, os.path.join(sub, models[0]) if models else None))
    return out


def session(path):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # deterministic reductions; the held-out set is small
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def outputs(path, meta, x):
    """The model's `output_name` on each sample of x (in the model's own layout), one fixed batch per call."""
    sess = session(path)
    name_in, name_out = meta["input_name"], meta["output_name"]
    batch = int(meta["input_shape_nchw"][0])
    ys = []
    for i in range(0, len(x), batch):
        chunk = x[i:i + batch]
        if len(chunk) < batch:  # a fixed batch larger than what is left: pad, keep the real rows
            chunk = np.concatenate([chunk, np.zeros((batch - len(chunk),) + chunk.shape[1:], chunk.dtype)])
        ys.append(sess.run([name_out], {name_in: chunk})[0][:min(batch, len(x) - i)])
    return np.concatenate(ys).astype(np.float64)


def saved_outputs(path, like=None):
    """Outputs saved channels-last (.npy from dfc/infer), in the reference's layout: NCHW when 4-D, then reshaped to
    `like`'s shape when only the axes differ."""
    y = np.load(path).astype(np.float64)
    if y.ndim == 4:
        y = y.transpose(0, 3, 1, 2)
    if like is not None and y.shape != like.shape:
        if y.shape[0] != like.shape[0] or y.size != like.size:
            raise ValueError(f"{os.path.basename(path)}: outputs of shape {list(y.shape)} (NCHW) do not match the "
                             f"reference's {list(like.shape)}")
        y = y.reshape(like.shape)
    return y


def member_outputs(path, meta, x, ref):
    return saved_outputs(path, ref) if path.endswith(".npy") else outputs(path, meta, x)


def metrics(f, q, axis=1):
    f2, q2 = f.reshape(len(f), -1), q.reshape(len(q), -1)
    if f.ndim > 1 and not (0 < axis % f.ndim):
        raise ValueError(f"top-1 axis {axis} is the sample axis of outputs shaped {list(f.shape)}")
    top1 = f.argmax(axis=axis) if f.ndim > 1 else f
    top1q = q.argmax(axis=axis) if q.ndim > 1 else q
    agree = (top1.reshape(len(f), -1) == top1q.reshape(len(q), -1)).all(axis=1)
    nf, nq = np.linalg.norm(f2, axis=1), np.linalg.norm(q2, axis=1)
    cos = np.where(nf * nq > 0, (f2 * q2).sum(axis=1) / np.maximum(nf * nq, 1e-300), float(np.all(f2 == q2)))
    d = np.abs(q2 - f2)
    return {"samples": int(len(f)), "top1_agreement": float(agree.mean()), "max_abs_diff": float(d.max()),
            "mean_abs_diff": float(d.mean()), "cosine": float(cos.mean()), "cosine_min": float(cos.min()),
            "rel_error": float(np.linalg.norm(q2 - f2) / max(np.linalg.norm(f2), 1e-300))}


def error_of(status):
    if status.get("status") == "skipped" and status.get("cause"):
        c = status["cause"]
        return f"skipped: {c.get('label', 'upstream')} failed: {c.get('error', '')}"
    return status.get("error") or f"exit {status.get('exit_code')}"


def bits(precision):
    """a16_w4 -> 4 (weight bits), for the plots' x axis."""
    try:
        return int(str(precision).split("_w")[-1])
    except ValueError:
        return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--float", default="", help="the float ONNX model, run here as the reference ('' = unbound)")
    ap.add_argument("--reference", default="", help="the float reference's outputs, .npy ('' = run --float)")
    ap.add_argument("--reference-label", default="SDK_NATIVE (DFC emulator, fp32)")
    ap.add_argument("--meta", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--context", action="append", default=[], help="NAME=FOLDER (a gathered input; empty = unbound)")
    ap.add_argument("--title", default="Float vs quantised contexts on held-out images")
    ap.add_argument("--top1-axis", type=int, default=1, help="the output's class axis for top-1 agreement")
    ap.add_argument("--out-md", required=True)
    ap.add_argument("--out-json", required=True)
    ap.add_argument("--out-plots", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    meta, x, rows = hs.run(lambda: evaluate(hs, a))
    write(a, meta, x, rows)


def evaluate(hs, a):
    """(meta, held-out images in the model's layout, one row per member of each context); sets a.reference_label when the reference
    is --float."""
    with open(a.meta) as f:
        meta = json.load(f)
    x = np.load(a.heldout).astype(np.float32)  # NHWC (calib/images)
    if meta.get("input_layout", "NCHW") == "NCHW":  # onnx/author's meta has no layout: NCHW
        x = x.transpose(0, 3, 1, 2)
    if bool(a.float) == bool(a.reference):
        raise ValueError("bind exactly one float reference: `float` (an ONNX model) or `reference` (outputs .npy)")
    ref = saved_outputs(a.reference) if a.reference else outputs(a.float, meta, x)
    a.reference_label = a.reference_label if a.reference else "onnxruntime CPU, fp32"
    rows = []
    for spec in a.context:
        name, _, folder = spec.partition("=")
        for matrix, status, model in members(hs, folder):
            # a member's own `context` (dfc/infer's matrix) names its row; NAME otherwise
            row = {"context": name, **{k: str(v) for k, v in matrix.items()}}
            st = status.get("status", "ok" if model else "failed")
            if st == "ok" and model:
                row.update(status="ok", **metrics(ref, member_outputs(model, meta, x, ref), a.top1_axis))
            else:
                row.update(status=st, error=error_of(status))
            rows.append(row)
    if not rows:
        raise ValueError("no quantised context to compare: the `quant` gather is empty")
    return meta, x, rows


def write(a, meta, x, rows):
    keys = sorted({k for r in rows for k in r} - {"context", "status", "error", "samples", "top1_agreement",
                                                  "max_abs_diff", "mean_abs_diff", "cosine", "cosine_min", "rel_error"})
    lines = [f"## {a.title}", "",
             f"Model input `{meta['input_name']}` {meta['input_shape_nchw']} -> `{meta['output_name']}` "
             f"{meta['output_shape_nchw']}; {len(x)} held-out images; float reference: {a.reference_label}.", "",
             "| " + " | ".join(keys + ["context", "top-1 agree", "max abs diff", "mean abs diff", "cosine",
                                       "rel. error"]) + " |",
             "|" + " --- |" * (len(keys) + 6)]
    for r in sorted(rows, key=lambda r: ([r.get(k, "") for k in keys], r["context"])):
        head = [r.get(k, "") for k in keys] + [r["context"]]
        if r["status"] == "ok":
            cells = [f"{r['top1_agreement'] * 100:.1f}%", f"{r['max_abs_diff']:.4e}", f"{r['mean_abs_diff']:.4e}",
                     f"{r['cosine']:.6f}", f"{r['rel_error']:.4e}"]
        else:
            cells = [f"{r['status']}: {r['error'].splitlines()[0][:160] if r['error'] else ''}", "", "", "", ""]
        lines.append("| " + " | ".join(head + cells) + " |")
    with open(a.out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out_json, "w") as f:
        json.dump({"kind": "eval-compare", "heldout": int(len(x)), "meta": meta, "reference": a.reference_label,
                   "rows": rows}, f, indent=2, sort_keys=True)
    series = {}
    for r in rows:
        b = bits(r.get("precision"))
        if r["status"] == "ok" and b is not None:
            series.setdefault(r["context"], []).append((b, r))
    plots = {"plots": [
        {"title": f"{what} vs weight bits (held-out images)", "x_label": "weight bits", "y_label": what,
         "x_log": False, "y_log": log,
         "series": [{"name": c, "points": [[b, r[key]] for b, r in sorted(pts, key=lambda p: p[0])]}
                    for c, pts in sorted(series.items())]}
        for what, key, log in (("mean abs diff", "mean_abs_diff", True), ("cosine", "cosine", False),
                               ("top-1 agreement", "top1_agreement", False))]}
    with open(a.out_plots, "w") as f:
        json.dump(plots, f, indent=2, sort_keys=True)
    print("\n".join(lines), file=sys.stderr)


if __name__ == "__main__":
    main()
