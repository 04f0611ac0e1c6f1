"""The fixes onnx/import makes so a model as users bring it runs through every later stage unchanged.

Each one answers a failure seen on a real model (the corpus in tests/corpus.rs):
  - weights in external data files (`.onnx` + `.data`): read from the folder bound as `model`, saved inline;
  - IR 3 lists every initializer as a graph input: onnxruntime's quantizer drops some of those initializers
    and leaves their names as *required* inputs (light_shufflenet's OC2_DUMMY_*), so they are taken out of the
    inputs and the IR raised to 4, the first that allows it;
  - float16 weights and tensors: quantizers and the DFC calibrate float32, so every float16 tensor, type and
    Cast target becomes float32 (the model computes the same graph at higher precision);
  - opsets below `min_opset`: onnxruntime's quantizer only *relabels* an old opset (Unsqueeze, Slice, ... keep
    their old form and the model no longer loads), so the onnx version converter upgrades it properly here.
Errors are ImportModelError with the one line a user reads.
"""
import hashlib
import os

import numpy as np


class ImportModelError(Exception):
    """The model cannot be taken as it is; the message says what is unsupported and what to do."""


def locate(path):
    """The .onnx file of `path`: the file itself, or the only .onnx file of a folder (a model with its external
    data files beside it)."""
    if not os.path.isdir(path):
        return path
    found = sorted(f for f in os.listdir(path) if f.endswith(".onnx") and not f.startswith("."))
    if len(found) != 1:
        raise ImportModelError(f"the folder bound as `model` holds {len(found)} .onnx files "
                               f"({', '.join(found) or 'none'}); it must hold one model and its data files")
    return os.path.join(path, found[0])


def external_files(model):
    """The external data files `model`'s tensors name, in order of first use."""
    from onnx.external_data_helper import ExternalDataInfo, _get_all_tensors, uses_external_data
    seen = []
    for t in _get_all_tensors(model):
        if uses_external_data(t):
            loc = ExternalDataInfo(t).location
            if loc not in seen:
                seen.append(loc)
    return seen


def load(path):
    """(model with every weight inline, the source facts for meta.json) of the file or folder at `path`."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model
    onnx_path = locate(path)
    raw = open(onnx_path, "rb").read()
    try:
        model = onnx.load_from_string(raw)
    except Exception as e:  # protobuf's DecodeError names nothing a user can act on
        raise ImportModelError(f"{os.path.basename(onnx_path)} is not an ONNX model ({type(e).__name__})") from e
    source = {"file": os.path.basename(onnx_path), "sha256": hashlib.sha256(raw).hexdigest()}
    files = external_files(model)
    if files:
        base = os.path.dirname(onnx_path)
        missing = [f for f in files if not os.path.isfile(os.path.join(base, f))]
        if missing:
            hint = ("bind the folder that holds the .onnx and its data files as `model` "
                    "(inputs = { model = { path = \"models/NAME/\" } })") if not os.path.isdir(path) else \
                "put them in the folder bound as `model`"
            raise ImportModelError(f"the model keeps its weights in external data ({', '.join(missing)}), "
                                   f"not found beside it: {hint}")
        load_external_data_for_model(model, base)
        source["external_data"] = {f: hashlib.sha256(open(os.path.join(base, f), "rb").read()).hexdigest()
                                   for f in files}
    return model, source


def drop_initializer_inputs(model):
    """Take initializers out of the graph inputs (IR 3 lists them there); returns how many. The IR becomes 4 at
    least, the first version where an initializer need not be an input."""
    inits = {i.name for i in model.graph.initializer}
    keep = [i for i in model.graph.input if i.name not in inits]
    dropped = len(model.graph.input) - len(keep)
    if dropped:
        del model.graph.input[:]
        model.graph.input.extend(keep)
    if model.ir_version < 4:
        model.ir_version = 4
    return dropped


def _graphs(graph):
    """`graph` and every subgraph (If / Loop / Scan bodies) in it."""
    yield graph
    for n in graph.node:
        for a in n.attribute:
            if a.HasField("g"):
                yield from _graphs(a.g)
            for g in a.graphs:
                yield from _graphs(g)


def float16_to_float32(model):
    """Every float16 tensor, type and dtype attribute of `model` as float32 (in place); returns how many tensors
    changed. Cast nodes to float16 become casts to float32 (identity where the value already is one)."""
    from onnx import TensorProto, numpy_helper
    f16, f32 = TensorProto.FLOAT16, TensorProto.FLOAT

    def tensor(t):
        if t.data_type != f16:
            return 0
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
        return 1

    def vtype(v):
        tt = v.type.tensor_type
        if tt.elem_type == f16:
            tt.elem_type = f32

    n = 0
    for g in _graphs(model.graph):
        for t in g.initializer:
            n += tensor(t)
        for v in list(g.input) + list(g.output) + list(g.value_info):
            vtype(v)
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    n += tensor(a.t)
                for t in a.tensors:
                    n += tensor(t)
                if a.name in ("to", "dtype") and a.i == f16:
                    a.i = f32
    return n


def default_opset(model):
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


def upgrade_opset(model, target):
    """`model` at opset `target` (the onnx version converter), or unchanged when it is there already."""
    from onnx import version_converter
    have = default_opset(model)
    if have >= target:
        return model
    try:
        return version_converter.convert_version(model, target)
    except Exception as e:
        reason = str(e).strip().splitlines()[-1][:200] if str(e).strip() else type(e).__name__
        raise ImportModelError(f"the onnx version converter cannot take the model from opset {have} to {target} "
                               f"({reason}); export it at opset {target} or later") from e
