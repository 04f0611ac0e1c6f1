#!/usr/bin/env python3
"""onnx/import — take any ONNX model into the chain: make it one every later stage takes (normalize.py: weights
inline, IR 3's initializer inputs dropped, float16 as float32, an old opset upgraded), check it, fix its symbolic
dimensions, describe it in meta.json; or refuse it here, in one line that says what to do.

meta.json has the keys onnx/author writes (input_name, output_name, start_node, end_node, input_shape_nchw,
output_shape_nchw, opset, ir_version, batch) plus input_layout (NCHW or NHWC) and input_shape (the model's own
axes), `source` (file, sha256, producer, IR and opset as given) and what was changed (dims_fixed,
initializer_inputs_dropped, float16_to_float32, constants_to_initializers), so dfc/translate and the ORT stages
need no onnx import of their own. Errors a user can act on are ImportModelError; any exception is recorded by
heddle_stage.run (its first line and this stage's frame; the traceback in the log).
"""
import argparse
import json
import math
import sys


from normalize import ImportModelError  # beside this script (the definition's folder)
import normalize

LAYOUTS = ("auto", "NCHW", "NHWC")


def pick_output(names, wanted):
    if wanted:
        if wanted not in names:
            raise ImportModelError(f"output {wanted!r} (param `output`) is not a graph output; the model has: "
                                   f"{', '.join(names)}")
        return wanted
    if len(names) != 1:
        raise ImportModelError(f"the model has {len(names)} outputs ({', '.join(names)}): name the one to evaluate "
                               f"with `output` (with = {{ output = \"NAME\" }})")
    return names[0]


def pick_input(inputs, wanted):
    """The one graph input the image chain feeds. A model that needs several cannot be fed by calib/images."""
    names = [i.name for i in inputs]
    if wanted and wanted not in names:
        raise ImportModelError(f"input {wanted!r} (param `input`) is not a graph input; the model has: "
                               f"{', '.join(names) or 'none'}")
    if len(names) != 1:
        raise ImportModelError(f"the model has {len(names)} inputs ({', '.join(names)}); the image chain feeds "
                               "one: export the model with one image input (the others as constants)")
    return inputs[0]


def declared(vi):
    """The input's axes as declared: an int, or its symbolic name (\"?\" when unnamed)."""
    return [int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?")
            for d in vi.type.tensor_type.shape.dim]


def image_layout(vi, layout):
    """NCHW or NHWC for a float 4-D input with 1 or 3 channels; anything else is not an image calib/images can
    make, refused in one line."""
    from onnx import TensorProto
    tt = vi.type.tensor_type
    dims = declared(vi)
    what = f"input {vi.name!r} is {TensorProto.DataType.Name(tt.elem_type).lower()} [{', '.join(map(str, dims))}]"
    if tt.elem_type != TensorProto.FLOAT or len(dims) != 4:
        raise ImportModelError(f"{what}, not an image: the chain calibrates on images (calib/images), which needs a "
                               "4-D float input (NCHW or NHWC, 1 or 3 channels); this model needs its own "
                               "calibration data")
    if layout != "auto":
        return layout
    if dims[1] in (1, 3):
        return "NCHW"
    if dims[3] in (1, 3):
        return "NHWC"
    raise ImportModelError(f"{what}: neither axis 1 nor axis 3 has 1 or 3 channels; set `layout` = \"NCHW\" or "
                           "\"NHWC\" if it is an image")


def fix_dims(value_info, dims, batch, used, shape_param=()):
    """Replace each symbolic dim of a tensor with its size from `shape` (by axis), `dims` (by name) or `batch`
    (first axis). Exporters write several axes with one placeholder name (PaddlePaddle: "?"), so by-axis wins."""
    shape = value_info.type.tensor_type.shape
    if shape_param and len(shape_param) != len(shape.dim):
        raise ImportModelError(f"`shape` has {len(shape_param)} axes; input {value_info.name!r} has {len(shape.dim)}")
    out = []
    for i, d in enumerate(shape.dim):
        if shape_param and int(shape_param[i]) > 0:
            was_symbolic = not (d.HasField("dim_value") and d.dim_value > 0)
            if d.HasField("dim_value") and d.dim_value > 0 and d.dim_value != int(shape_param[i]):
                raise ImportModelError(f"`shape` axis {i} = {shape_param[i]}, but the model fixes it at {d.dim_value}")
            d.ClearField("dim_param")
            d.dim_value = int(shape_param[i])
            if was_symbolic:
                used[f"axis {i}"] = int(shape_param[i])
            out.append(int(shape_param[i]))
            continue
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
            continue
        name = d.dim_param if d.HasField("dim_param") else ""
        if name and name in dims:
            size = int(dims[name])
            used[name] = size
        elif i == 0:
            size = int(batch)
            used[name or "<unnamed axis 0>"] = size
        else:
            raise ImportModelError(f"{value_info.name}: axis {i} is symbolic ({name or 'unnamed'}); set its size: "
                                   f"`with = {{ shape = [..] }}` (0 keeps an axis)" +
                                   (f" or `with = {{ dims = {{ \"{name}\" = N }} }}`" if name else ""))
        d.ClearField("dim_param")
        d.dim_value = size
        out.append(size)
    return out


def constants_to_initializers(model):
    """Some exporters (PaddlePaddle) write every weight as a Constant node, not an initializer. Quantisers
    (onnxruntime's quantize_static, the DFC) treat only initializers as weights, so such a model would keep float
    weights at every precision. Move each Constant's tensor to an initializer of the same name."""
    from onnx import numpy_helper
    keep, moved = [], 0
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and len(n.attribute) == 1 \
                and n.attribute[0].name == "value":
            t = numpy_helper.from_array(numpy_helper.to_array(n.attribute[0].t), n.output[0])
            model.graph.initializer.append(t)
            moved += 1
        else:
            keep.append(n)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    return moved


def fixed(vi):
    """Whether every axis of `vi` has a size."""
    tt = vi.type.tensor_type
    return tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value > 0 for d in tt.shape.dim)


def run_shapes(model, vi_in, in_shape, names):
    import numpy as np
    import onnx
    import onnxruntime as ort
    dtype = onnx.helper.tensor_dtype_to_np_dtype(vi_in.type.tensor_type.elem_type)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = sess.run(names, {vi_in.name: np.zeros(in_shape, dtype=dtype)})
    return [o.shape for o in outs]


def import_model(path, input_name, output_name, dims, batch, shape=(), layout="auto", min_opset=13):
    import onnx
    from onnx import shape_inference
    if layout not in LAYOUTS:
        raise ImportModelError(f"`layout` = {layout!r}; one of {', '.join(LAYOUTS)}")
    model, source = normalize.load(path)
    ir_in, opset_in = int(model.ir_version), normalize.default_opset(model)
    dropped = normalize.drop_initializer_inputs(model)
    fp16 = normalize.float16_to_float32(model)
    vi_in = pick_input(list(model.graph.input), input_name)
    inp = vi_in.name
    kind = image_layout(vi_in, layout)
    out = pick_output([o.name for o in model.graph.output], output_name)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ImportModelError(f"onnx.checker rejects the model: {str(e).strip().splitlines()[0][:200]}") from e
    model = normalize.upgrade_opset(model, min_opset)
    constants_moved = constants_to_initializers(model)
    used = {}
    vi_in = next(i for i in model.graph.input if i.name == inp)
    in_shape = fix_dims(vi_in, dims, batch, used, shape)
    unknown = sorted(set(dims) - set(used))
    if unknown:
        raise ImportModelError(f"`dims` names {', '.join(unknown)}, which no symbolic axis of input {inp!r} has")
    # Outputs: symbolic axes are re-derived by shape inference from the fixed input. Inference keeps a declared
    # shape, so a symbolic output shape is dropped first, and so is every intermediate one the exporter (or the
    # version converter) wrote with the old symbolic batch (-1 vs 1 would be a conflict in strict mode).
    for o in model.graph.output:
        if not fixed(o):
            o.type.tensor_type.ClearField("shape")
    del model.graph.value_info[:]
    model = shape_inference.infer_shapes(model, strict_mode=True)
    inferred = {v.name: v for v in model.graph.value_info}
    for o in model.graph.output:
        if not o.type.tensor_type.HasField("shape") and o.name in inferred and fixed(inferred[o.name]):
            o.type.tensor_type.shape.CopyFrom(inferred[o.name].type.tensor_type.shape)
    missing = [o for o in model.graph.output if not fixed(o)]
    for o in missing:
        o.type.tensor_type.ClearField("shape")
    if missing:
        # ONNX shape inference stops at ops whose output shape depends on values (PaddlePaddle's Reshape from a
        # computed shape); run the fixed-shape model once on zeros and take the shapes onnxruntime produces.
        for o, shp in zip(missing, run_shapes(model, vi_in, in_shape, [o.name for o in missing])):
            for n in shp:
                o.type.tensor_type.shape.dim.add().dim_value = int(n)
    onnx.checker.check_model(model, full_check=True)
    vo = next(o for o in model.graph.output if o.name == out)
    out_shape = [int(d.dim_value) if d.HasField("dim_value") else None for d in vo.type.tensor_type.shape.dim]
    if None in out_shape or not out_shape:
        raise ImportModelError(f"output {out!r}: shape inference left axes unknown ({out_shape}); name them in `dims`")
    end_node = next((n.name or n.output[0] for n in model.graph.node if out in n.output), out)
    nchw = in_shape if kind == "NCHW" else [in_shape[0], in_shape[3], in_shape[1], in_shape[2]]
    source.update(producer=model.producer_name, producer_version=model.producer_version, ir_version=ir_in,
                  opset=opset_in, nodes=len(model.graph.node),
                  parameters=int(sum(math.prod(i.dims) for i in model.graph.initializer)))
    meta = {"input_name": inp, "output_name": out, "start_node": inp, "end_node": end_node,
            "input_shape_nchw": nchw, "input_layout": kind, "input_shape": in_shape,
            "output_shape_nchw": out_shape, "outputs_per_sample": int(math.prod(out_shape[1:])),
            "opset": normalize.default_opset(model), "ir_version": int(model.ir_version),
            "batch": f"fixed {in_shape[0]}", "dims_fixed": used, "graph": "imported",
            "constants_to_initializers": constants_moved, "initializer_inputs_dropped": dropped,
            "float16_to_float32": fp16, "source": source}
    if model.ByteSize() >= 2**31 - 2**20:
        raise ImportModelError("the model is larger than 2 GB, which one ONNX file cannot hold inline; "
                               "the chain does not take it")
    return model, meta


def import_and_save(a):
    """The stage's work on its arguments: import --model, save the fixed model at --out-onnx; returns the meta."""
    import onnx
    model, meta = import_model(a.model, a.input, a.output, json.loads(a.dims), a.batch, json.loads(a.shape),
                               a.layout, a.min_opset)
    onnx.save(model, a.out_onnx)
    return meta


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", default="")
    ap.add_argument("--output", default="")
    ap.add_argument("--dims", default="{}", help="JSON object: symbolic dim name -> size")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--shape", default="[]", help="JSON list: the input's size per axis, 0 = as the model says")
    ap.add_argument("--layout", default="auto", help="the image input's layout: auto, NCHW or NHWC")
    ap.add_argument("--min-opset", type=int, default=13, help="upgrade a model below this opset")
    ap.add_argument("--out-onnx", required=True)
    ap.add_argument("--out-meta", required=True)
    a = ap.parse_args(argv)
    import heddle_stage as hs  # included by the definition: beside this script
    meta = hs.run(lambda: import_and_save(a))
    hs.write_json(a.out_meta, meta)
    print(f"imported {meta['input_name']} {meta['input_shape_nchw']} -> {meta['output_name']} "
          f"{meta['output_shape_nchw']} ({meta['input_layout']}), IR {meta['source']['ir_version']} -> "
          f"{meta['ir_version']}, opset {meta['source']['opset']} -> {meta['opset']}", file=sys.stderr)


if __name__ == "__main__":
    main()
