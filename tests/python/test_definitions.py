"""Static checks of stage.toml files and the mezo pipelines (a stand-in for `heddle plan` until the CLI exists)."""
import glob
import os
import re
import tomllib

import pytest

from direct import ROOT

PIPES = sorted(glob.glob(os.path.join(ROOT, "pipelines", "mezo-*.toml"))
               + glob.glob(os.path.join(ROOT, "pipelines", "entry-*.toml"))
               + glob.glob(os.path.join(ROOT, "pipelines", "compile-onnx*.toml")))
# Pipelines whose path inputs are the user's own files (model.onnx, images/), not files of this repository.
USER_FILES = {"compile-onnx.toml", "compile-onnx-dfc.toml"}


def load(p):
    with open(p, "rb") as f:
        return tomllib.load(f)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "stages", "*", "*", "stage.toml"))))
def test_stage_definition(path):
    d = load(path)
    assert "run" in d["stage"] and isinstance(d["stage"]["run"], list)
    for var in re.findall(r"\{\{\s*([\w.]+)\s*\}\}", " ".join(d["stage"]["run"])):
        ns, *rest = var.split(".")
        table = {"params": "params", "in": "inputs", "out": "outputs"}.get(ns)
        if table:
            assert rest[0] in d.get(table, {}), f"{path}: {var}"
        else:
            assert var == "stage.dir", var
    assert os.path.exists(os.path.join(os.path.dirname(path), os.path.basename(d["stage"]["run"][1])))


@pytest.mark.parametrize("path", PIPES)
def test_pipeline_binds_definitions(path):
    p = load(path)
    stages = p["stages"]
    for name, s in stages.items():
        d = load(os.path.join(ROOT, "stages", s["uses"], "stage.toml"))
        for k in s.get("with", {}):
            assert k in d.get("params", {}), f"{name}: with.{k}"
        for k, v in d.get("params", {}).items():
            assert "default" in v or k in s.get("with", {}), f"{name}: param {k} unset"
        for k, ref in s.get("inputs", {}).items():
            assert k in d.get("inputs", {}), f"{name}: input {k}"
            if isinstance(ref, dict):  # a file of the project, e.g. the shared helpers
                if os.path.basename(path) not in USER_FILES:
                    assert os.path.isfile(os.path.join(ROOT, ref["path"])), f"{name}: input {k}: {ref}"
                continue
            st, out = ref.split(".")
            st = st.split("[")[0]
            assert st in stages, ref
            assert out in load(os.path.join(ROOT, "stages", stages[st]["uses"], "stage.toml"))["outputs"], ref
        for k, v in d.get("inputs", {}).items():
            assert v.get("optional") or k in s.get("inputs", {}), f"{name}: input {k} unbound"
        for v in s.get("with", {}).values():
            for var in re.findall(r"\{\{\s*([\w.]+)\s*\}\}", str(v)):
                ns, key = var.split(".")
                assert (ns == "params" and key in p["params"]) or (ns == "matrix"), var
        assert not ("image" in s and "env" in s), name
        if "env" in s:
            assert s["env"] in p["envs"]
