#!/usr/bin/env python3
"""By-hand run of pipelines/mezo-ort.toml stage by stage, each stage a one-stage heddle run (tests/python/direct.py;
needs target/release/heddle or $HEDDLE_BIN):
    python tests/python/run_pipeline_ort.py OUTDIR [--samples N] [--draws D] [--seed S]
Uses the current python (which must have stages/requirements-ort.txt installed). Prints the compare table."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from direct import gather, run_stage, skipped  # noqa: E402

PRECISIONS = ["a16_w16", "a16_w4", "a8_w8"]
CONTEXTS = ["ORT_QDQ_EMULATED", "ORT_INTEGER"]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--draws", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--deploy-seconds", type=float, default=2.0)
    a = ap.parse_args(argv)
    py = sys.executable
    o = a.outdir

    def must(st, p):
        if st["status"] != "ok":
            sys.exit(f"{st['label']} failed: {st.get('error')}\n{p.stderr}")

    st, author, p = run_stage("onnx/author", "author", f"{o}/author", with_={"seed": a.seed, "samples": a.samples},
                              python=py)
    must(st, p)
    members = []
    for prec in PRECISIONS:
        st_o, opt, p = run_stage("ort/optimize", f"optimize[precision={prec}]", f"{o}/optimize/{prec}",
                                 inputs={"model": author["onnx"], "calib": author["calib"]},
                                 with_={"precision": prec}, python=py)
        print(f"{st_o['label']}: {st_o['status']} {st_o.get('error') or ''}", file=sys.stderr)
        if st_o["status"] == "ok":
            st_c, comp, _ = run_stage("ort/compile", f"compile[precision={prec}]", f"{o}/compile/{prec}",
                                      inputs={"model": opt["model"]}, python=py)
            if st_c["status"] == "ok":
                st_d, dep, _ = run_stage("ort/deploy", f"deploy[precision={prec}]", f"{o}/deploy/{prec}",
                                         inputs={"model": comp["model"]}, with_={"seconds": a.deploy_seconds},
                                         python=py)
                print(f"{st_d['label']}: {st_d['status']} -> {dep['benchmark']}", file=sys.stderr)
        for ctx in CONTEXTS:
            label = f"probe[context={ctx},precision={prec}]"
            if st_o["status"] != "ok":
                members.append(({"context": ctx, "precision": prec}, skipped(label, st_o), None))
                continue
            st_p, pr, p = run_stage("mezo/probe", label, f"{o}/probe/{prec}-{ctx}",
                                    inputs={"quant": opt["model"], "float": author["onnx"],
                                            "weights": author["weights"], "calib": author["calib"]},
                                    with_={"backend": "ort", "context": ctx, "seed": a.seed, "draws": a.draws},
                                    python=py)
            print(f"{label}: {st_p['status']} {st_p.get('error') or ''}", file=sys.stderr)
            members.append(({"context": ctx, "precision": prec}, st_p, pr["result"]))
    g = gather(f"{o}/gather-probes", members)
    st, cmp_, p = run_stage("mezo/compare", "compare", f"{o}/compare", inputs={"probes": g},
                            with_={"title": f"mezo-ort: MeZO estimates, onnxruntime contexts vs float (seed {a.seed})"},
                            python=py)
    must(st, p)
    print(open(cmp_["table"]).read())


if __name__ == "__main__":
    main()
