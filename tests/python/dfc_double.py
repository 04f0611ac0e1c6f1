"""What the DFC-double tests share: the double's environment and the author → translate chain they start from.

The double (tests/images/dfc-double) stands in for the vendor's hailo_sdk_client and says so everywhere; these
helpers only put it on PYTHONPATH and describe the machine it pretends to run on."""
import os
import sys

from direct import ROOT, run_stage, skipped

PY = sys.executable
DOUBLE = os.path.join(ROOT, "tests", "images", "dfc-double")


def double_env(tmp, gpu="1", **more):
    """The double's world: a GPU that already drives a display (>5 % memory used), as on the entry's desktop 3090."""
    e = {"PYTHONPATH": DOUBLE, "HAILO_DOUBLE_ASSUME_GPU": gpu, "HAILO_DOUBLE_GPU_BUSY": "1",
         "HAILO_DOUBLE_TRACE": str(tmp / "trace.jsonl")}
    e.update(more)
    return e


def authored_and_translated(t, samples=16):
    """Author the test model into `t`/author and translate it with the double into `t`/translate; returns the
    author's and translate's outputs (name -> path). Fails the test if either stage fails."""
    st, a, p = run_stage("onnx/author", "author", str(t / "author"), with_={"samples": samples}, python=PY)
    assert st["status"] == "ok", p.stderr
    st, tr, p = run_stage("dfc/translate", "translate", str(t / "translate"),
                          inputs={"model": a["onnx"], "meta": a["meta"]}, python=PY, extra_env=double_env(t))
    assert st["status"] == "ok", p.stderr
    return a, tr


def contexts_to_run(members, stage, prec, optimized):
    """(label, context) of each emulation context a `stage` instance runs in after optimize at `prec`:
    `stage[context=C,precision=P]`, C in SDK_QUANTIZED, SDK_BIT_EXACT. When that optimize failed (`optimized` is its
    status record) there is none to run: each is added to the gather `members` as skipped, optimize its cause."""
    for ctx in ["SDK_QUANTIZED", "SDK_BIT_EXACT"]:
        label = f"{stage}[context={ctx},precision={prec}]"
        if optimized["status"] == "ok":
            yield label, ctx
        else:
            members.append(({"precision": prec, "context": ctx}, skipped(label, optimized), None))
