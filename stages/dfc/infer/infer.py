#!/usr/bin/env python3
"""dfc/infer — run held-out images through one DFC emulation context, inside the DFC image, and save the outputs.

Why a stage of its own: eval/compare runs on onnxruntime on the host, and the DFC's contexts exist only inside the DFC
image, so this stage produces each context's outputs there and eval/compare compares the files.

Documented/public API (docs/hailo-toolchain.md §1.7, §3): ClientRunner(hw_arch, har=...); the HN's one input layer
(name and per-sample shape [H, W, C] from get_hn_dict()); `with runner.infer_context(InferenceContext.<context>) as
ctx: runner.infer(ctx, {input layer: x}, batch_size=b)` with x float32 NHWC. The outputs are saved as the SDK returns
them (channels-last); eval/compare brings them to the float model's layout. A model with several outputs is an error
(eval/compare compares one). An SDK exception is written as {class, message} to $HEDDLE_ERROR_FILE. Untested against
the real DFC until someone runs it there.
"""
import argparse


def hn_input(runner):
    """(name, [H, W, C]) of the HN's one input layer."""
    hn = runner.get_hn_dict()
    names = [k for k, v in hn["layers"].items() if v.get("type") == "input_layer"]
    if len(names) != 1:
        raise ValueError(f"expected one HN input layer, found {names}")
    return names[0], list(hn["layers"][names[0]]["input_shapes"][0][1:])


def infer(hs, har, heldout, context, hw_arch, batch_size, out_outputs):
    """Runs the held-out set through `context`, saves the outputs at `out_outputs` and returns the report."""
    import numpy as np
    hs.ensure_writable_home()
    from hailo_sdk_client import ClientRunner, InferenceContext
    runner = ClientRunner(hw_arch=hw_arch, har=har)
    name, want = hn_input(runner)
    x = np.load(heldout).astype(np.float32)
    if list(x.shape[1:]) != want:
        raise ValueError(f"held-out per-sample shape {list(x.shape[1:])} != HN input shape {want} (NHWC)")
    with runner.infer_context(getattr(InferenceContext, context)) as ctx:
        y = runner.infer(ctx, {name: np.ascontiguousarray(x)}, batch_size=batch_size)
    if isinstance(y, (list, tuple)):
        if len(y) != 1:
            raise ValueError(f"the model has {len(y)} outputs; eval/compare compares one")
        y = y[0]
    y = np.asarray(y, dtype=np.float32)
    np.save(out_outputs, y)
    return {"sdk": hs.sdk_identity(), "hw_arch": hw_arch, "context": context, "hn_input_layer": name,
            "input_shape_nhwc": list(x.shape), "output_shape": list(y.shape), "layout": "as the SDK returns it (NHWC)"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--har", required=True)
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--context", required=True)
    ap.add_argument("--hw-arch", default="hailo10h")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out-outputs", required=True)
    ap.add_argument("--out-report", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    rep = hs.run(lambda: infer(hs, a.har, a.heldout, a.context, a.hw_arch, a.batch_size, a.out_outputs))
    hs.write_report(a.out_report, rep)


if __name__ == "__main__":
    main()
