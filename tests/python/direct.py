"""Run a stage definition directly, the way heddle would render it (for tests and by-hand runs before the engine
exists): read stages/<uses>/stage.toml, merge param defaults with `with`, render the exec-form `run` with
{{ params.x }}, {{ in.x }}, {{ in.x.dir }}, {{ out.x }}, {{ stage.dir }}, run it with HEDDLE_ERROR_FILE and
HEDDLE_INSTANCE set, and return a status record shaped like docs/design.md's.

Also `gather(dir, members)` lays out a gathered input folder: one sub-folder per member named k1=v1,k2=v2 with
matrix.json, status.json and (when ok) the member's output file.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGES = os.path.join(ROOT, "stages")


def text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def render(tmpl, env):
    def sub(m):
        path = m.group(1).strip()
        if path not in env:
            raise KeyError(f"unbound template variable {path}")
        return text(env[path])
    return re.sub(r"\{\{(.*?)\}\}", sub, tmpl)


def run_stage(uses, label, outdir, inputs=None, with_=None, python=None, extra_env=None, timeout=1800):
    """inputs: name -> path (or for a gather: name -> folder, exposed as in.name.dir)."""
    d = os.path.join(STAGES, uses)
    with open(os.path.join(d, "stage.toml"), "rb") as f:
        spec = tomllib.load(f)
    params = {k: v.get("default") for k, v in spec.get("params", {}).items()}
    params.update(with_ or {})
    missing = [k for k, v in params.items() if v is None]
    if missing:
        raise ValueError(f"{uses}: params without value: {missing}")
    os.makedirs(outdir, exist_ok=True)
    inputs = dict(inputs or {})
    # heddle copies a definition's `include` files beside its scripts; here their folders go on PYTHONPATH.
    include_dirs = [os.path.dirname(os.path.normpath(os.path.join(d, i))) for i in spec["stage"].get("include", [])]
    env = {"stage.dir": d}
    env.update({f"params.{k}": v for k, v in params.items()})
    for k, v in inputs.items():
        env[f"in.{k}"] = v
        env[f"in.{k}.dir"] = v
    for k, decl in spec.get("inputs", {}).items():
        if decl.get("optional") and k not in inputs:
            env[f"in.{k}"] = ""  # heddle renders an unbound optional input as nothing
            env[f"in.{k}.dir"] = ""  # heddle: a folder that does not exist
    outs = {}
    for k, v in spec.get("outputs", {}).items():
        outs[k] = os.path.join(outdir, v)
        env[f"out.{k}"] = outs[k]
    argv = [render(a, env) for a in spec["stage"]["run"]]
    if python and argv[0] in ("python3", "python"):
        argv[0] = python
    err_file = os.path.join(outdir, ".error.json")
    if os.path.exists(err_file):
        os.remove(err_file)
    penv = dict(os.environ, HEDDLE_ERROR_FILE=err_file, HEDDLE_INSTANCE=label, **(extra_env or {}))
    if include_dirs:
        penv["PYTHONPATH"] = os.pathsep.join(include_dirs + [penv.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    p = subprocess.run(argv, env=penv, capture_output=True, text=True, timeout=timeout)
    status = {"label": label, "status": "ok" if p.returncode == 0 else "failed", "exit_code": p.returncode,
              "stderr_tail": p.stderr[-2000:]}
    if p.returncode != 0:
        cls = msg = None
        if os.path.exists(err_file):
            e = json.load(open(err_file))
            cls, msg = e.get("class"), e.get("message")
        else:
            for line in reversed(p.stderr.strip().splitlines()):
                m = re.match(r"^([A-Za-z_][\w.]*): (.*)$", line)
                if m:
                    cls, msg = m.group(1).split(".")[-1], m.group(2)
                    break
        status["error_class"] = cls
        status["error"] = f"{cls}: {msg}" if cls else f"exit {p.returncode}"
    return status, outs, p


def skipped(label, cause):
    return {"label": label, "status": "skipped", "cause": {"label": cause["label"], "error": cause.get("error")}}


def gather(folder, members):
    """members: list of (matrix dict, status dict, output path or None)."""
    os.makedirs(folder, exist_ok=True)
    for matrix, status, out in members:
        sub = os.path.join(folder, ",".join(f"{k}={v}" for k, v in sorted(matrix.items())))
        os.makedirs(sub, exist_ok=True)
        json.dump(matrix, open(os.path.join(sub, "matrix.json"), "w"))
        json.dump(status, open(os.path.join(sub, "status.json"), "w"))
        if out and status["status"] == "ok":
            shutil.copy(out, os.path.join(sub, os.path.basename(out)))
    return folder


if __name__ == "__main__":
    sys.exit("import this module; see run_pipeline_ort.py / run_pipeline_dfc_double.py")
