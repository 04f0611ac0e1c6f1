"""Run one stage definition through the real heddle binary (for tests and by-hand runs).

`run_stage(uses, label, outdir, ...)` makes `outdir` a one-stage heddle project: `stages` (a link to this
repository's stages/, so the working tree's definitions run, not the library built into the binary) and
`heddle.toml`, whose only stage `uses` the definition with `with` params and each input bound as a
`{ path = "/abs/path" }` input. It runs `heddle run --no-cache` there and returns the instance's status record
(from `.heddle/runs/<run>.json`), its outputs (name -> path under `outdir/out/direct/<label>/`) and a
CompletedProcess whose stdout/stderr are the stage's own logs (`.heddle/logs/<run>/<label>.{out,err}`).
Nothing is rendered here: heddle renders the definition's `run`.

`gather(folder, members)` does not lay a folder out by hand: a `{ path }` input of a folder renders `{{ in.x.dir }}`
as the folder that *holds* it (`in/x/`, the folder itself at `in/x/<name>/`), so a hand-made gather cannot be
bound to a definition's gathered input. It returns a Gather that `run_stage` binds as `"member[*].<output>"`
of a `member` stage in the same pipeline whose instances (one per member, matrix = the members' keys) replay each
member's outcome: an ok member copies its file, a failed one names its error through $HEDDLE_ERROR_FILE and exits
with its exit code, a skipped one depends on a failing instance labelled as its cause. heddle itself then writes
the gathered folder (matrix.json, status.json, the file).
"""
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGES = os.path.join(ROOT, "stages")
HEDDLE = os.environ.get("HEDDLE_BIN") or os.path.join(ROOT, "target", "release", "heddle")
PIPELINE = "direct"
NAME = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML for {v!r}")


def parse_label(label):
    """`probe[context=X,precision=Y]` -> ("probe", {"context": "X", "precision": "Y"}); `o` -> ("o", {})."""
    m = re.fullmatch(r"([A-Za-z0-9_-]+)(?:\[(.*)\])?", label)
    if not m:
        raise ValueError(f"label {label!r} is not a heddle instance label (name or name[k=v,...])")
    matrix = {}
    for kv in (m.group(2).split(",") if m.group(2) else []):
        k, _, v = kv.partition("=")
        matrix[k] = v
    return m.group(1), matrix


class Gather:
    """A gathered input to replay in the pipeline: members as (matrix, status, output path or None)."""

    def __init__(self, members):
        self.members = [(dict(mx), dict(st), out) for mx, st, out in members]


def gather(folder, members):
    """members: list of (matrix dict, status dict, output path or None). `folder` is kept for the callers'
    signature and holds the ok members' files for the replay."""
    g = Gather(members)
    g.folder = os.path.abspath(folder)
    os.makedirs(g.folder, exist_ok=True)
    return g


def skipped(label, cause):
    return {"label": label, "status": "skipped", "cause": {"label": cause["label"], "error": cause.get("error")}}


def _table(name, entries):
    lines = [f"[stages.{name}]"]
    for k, v in entries.items():
        lines.append(f"{k} = {toml_value(v)}")
    return "\n".join(lines) + "\n"


def _gather_stages(iname, g, project):
    """The TOML of the stages replaying gather `g` for input `iname`, and the reference to bind."""
    members = g.members
    keys = sorted({k for mx, _, _ in members for k in mx})
    by = {tuple(str(mx.get(k)) for k in keys): (mx, st, out) for mx, st, out in members}
    values = {k: sorted({str(mx[k]) for mx, _, _ in members}) for k in keys}
    combos = list(itertools.product(*(values[k] for k in keys)))
    missing = [dict(zip(keys, c)) for c in combos if c not in by]
    if missing:
        raise ValueError(f"gather `{iname}`: a heddle gather is every instance of a matrix stage; "
                         f"no member for {missing}")
    files = [out for _, st, out in members if out and st["status"] == "ok"]
    file = os.path.basename(files[0]) if files else "result"
    # The ok members' files, one per member folder name, as a repo folder input.
    src = os.path.join(project, f"gather-{iname}")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    script = {}
    for c, (mx, st, out) in by.items():
        tag = ",".join(f"{k}={v}" for k, v in zip(keys, c))
        if st["status"] == "ok":
            shutil.copy(out, os.path.join(src, tag.replace("/", "_") + ".file"))
        script[tag] = st
    json.dump(script, open(os.path.join(src, "statuses.json"), "w"))
    # Skipped members: their cause, an instance that fails, upstream of them by a matrix key they share.
    causes = {}
    for mx, st, out in members:
        if st["status"] == "skipped":
            cname, cmx = parse_label(st["cause"]["label"])
            if not cmx or any(str(mx.get(k)) != v for k, v in cmx.items()):
                raise ValueError(f"gather `{iname}`: skipped member {mx} names cause {st['cause']['label']}, "
                                 f"which is not an instance over its matrix keys")
            causes.setdefault(cname, {})[tuple(sorted(cmx.items()))] = st["cause"].get("error")
    if len(causes) > 1:
        raise ValueError(f"gather `{iname}`: skips from more than one stage: {sorted(causes)}")
    replay = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay_member.py")
    out = []
    member = f"member-{iname}"
    inputs = {"files": {"path": src}}
    if causes:
        (cname, errs), = causes.items()
        ckeys = sorted({k for t in errs for k, _ in t})
        cvals = {k: values[k] for k in ckeys}
        failing = {",".join(f"{k}={v}" for k, v in t): e for t, e in errs.items()}
        out.append(_table(cname, {
            "matrix": cvals,
            "run": ["python3", replay, "cause", "{{ instance }}", json.dumps(failing), "{{ out.done }}"],
            "outputs": {"done": "done"},
            "allow_failure": True,
        }))
        inputs["cause"] = f"{cname}.done"
    out.append(_table(member, {
        "matrix": {k: values[k] for k in keys if not (causes and k in ckeys)},
        "inputs": inputs,
        "run": ["python3", replay, "member", "{{ in.files }}", "{{ instance }}", "{{ out.result }}"]
        + [f"{k}={{{{ matrix.{k} }}}}" for k in keys],
        "outputs": {"result": file},
        "allow_failure": True,
    }))
    return "".join(out), f"{member}[*].result"


CONTAINER_KEYS = ("image", "gpus", "devices", "network", "shm_size", "memory", "cpus", "user", "workdir", "pull",
                  "docker_host", "transfer")
MARK = ".direct-stages"


def _project_stages(project, uses):
    """`project`/stages: links to this repository's stage groups. A definition that runs in a container (`image`
    in its [stage]; heddle has no way for a pipeline to unset it) is copied with its container settings removed,
    so heddle runs it with the host executor, as the tests need (the DFC test double is a host python package)."""
    dst = os.path.join(project, "stages")
    if os.path.islink(dst):
        os.remove(dst)
    elif os.path.exists(dst):
        if not os.path.exists(os.path.join(dst, MARK)):
            raise FileExistsError(f"{dst} exists and was not made by direct.py")
        shutil.rmtree(dst)
    src = os.path.join(STAGES, uses)
    with open(os.path.join(src, "stage.toml"), "rb") as f:
        in_container = "image" in tomllib.load(f)["stage"]
    if not in_container:
        os.symlink(STAGES, dst)
        return
    os.makedirs(dst)
    open(os.path.join(dst, MARK), "w").close()
    group, name = uses.split("/")
    for entry in os.listdir(STAGES):
        if entry != group:
            os.symlink(os.path.join(STAGES, entry), os.path.join(dst, entry))
    os.makedirs(os.path.join(dst, group))
    for entry in os.listdir(os.path.join(STAGES, group)):
        if entry != name:
            os.symlink(os.path.join(STAGES, group, entry), os.path.join(dst, group, entry))
    copy = os.path.join(dst, group, name)
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    lines, section = [], None
    for line in open(os.path.join(src, "stage.toml")):
        m = re.match(r"^\[([^\]]+)\]", line)
        if m:
            section = m.group(1).strip()
        key = re.match(r"^\s*([A-Za-z_]+)\s*=", line)
        if section == "stage" and key and key.group(1) in CONTAINER_KEYS:
            continue
        lines.append(line)
    open(os.path.join(copy, "stage.toml"), "w").write("".join(lines))


class _Completed(subprocess.CompletedProcess):
    pass


def run_stage(uses, label, outdir, inputs=None, with_=None, python=None, extra_env=None, timeout=1800):
    """Run definition `uses` once through heddle in project `outdir`. inputs: name -> file or folder path, or a
    Gather (bound as a gathered input). Returns (status dict, outputs name -> path, CompletedProcess)."""
    project = os.path.abspath(outdir)
    os.makedirs(project, exist_ok=True)
    _project_stages(project, uses)
    name, matrix = parse_label(label)
    stage = {"uses": uses}
    if matrix:
        stage["matrix"] = {k: [v] for k, v in matrix.items()}
    extra = []
    bound = {}
    for k, v in (inputs or {}).items():
        if isinstance(v, Gather):
            toml, ref = _gather_stages(k, v, project)
            extra.append(toml)
            bound[k] = ref
        elif os.path.exists(v):
            bound[k] = {"path": os.path.abspath(v)}
        # else: a path that does not exist leaves the input unbound (heddle refuses a missing repo path; an
        # unbound optional input renders as a folder that does not exist, as the stages expect)
    if bound:
        stage["inputs"] = bound
    if with_:
        stage["with"] = dict(with_)
    if extra_env:
        stage["vars"] = {k: str(v) for k, v in extra_env.items()}
    stage["allow_failure"] = True
    pipe = os.path.join(project, "heddle.toml")
    with open(pipe, "w") as f:
        f.write(f'[pipeline]\nname = "{PIPELINE}"\n\n' + "\n".join(extra) + "\n" + _table(name, stage))
    env = dict(os.environ)
    if python:
        env["PATH"] = os.path.dirname(python) + os.pathsep + env.get("PATH", "")
    env.pop("HEDDLE_REMOTE_CACHE", None)
    runs = os.path.join(project, ".heddle", "runs")
    before = set(os.listdir(runs)) if os.path.isdir(runs) else set()
    cmd = [HEDDLE, "run", pipe, "--root", project, "--no-cache", "--cache-dir", os.path.join(project, ".cache"),
           "--progress", "plain", "--color", "never", "-j", "4"]
    h = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
    new = sorted(set(os.listdir(runs)) - before) if os.path.isdir(runs) else []
    if h.returncode not in (0, 1) or not new:
        raise RuntimeError(f"heddle run exited {h.returncode} without a run record:\n{h.stdout}\n{h.stderr}")
    record = json.load(open(os.path.join(runs, new[-1])))
    inst = dict(record["instances"])[label]
    st = inst["status"]
    status = {k: v for k, v in st.items() if v is not None and k not in ("tolerated", "matrix")}
    status.setdefault("stderr_tail", "")
    status.setdefault("exit_code", 0 if st["status"] == "ok" else None)
    logs = {}
    for kind, rel in zip(("out", "err"), inst.get("logs") or []):
        path = os.path.join(project, rel)
        logs[kind] = open(path, errors="replace").read() if os.path.exists(path) else ""
    with open(os.path.join(STAGES, uses, "stage.toml"), "rb") as f:
        declared = tomllib.load(f).get("outputs", {})
    outs = {k: os.path.join(project, inst.get("output_paths", {}).get(k) or
                            os.path.join("out", PIPELINE, label, v)) for k, v in declared.items()}
    p = _Completed(cmd, h.returncode, logs.get("out", ""), logs.get("err", "") +
                   ("" if st["status"] == "ok" else f"\n--- heddle ---\n{h.stdout}{h.stderr}"))
    return status, outs, p


if __name__ == "__main__":
    sys.exit("import this module; see run_pipeline_ort.py")
