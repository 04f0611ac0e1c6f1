#!/usr/bin/env python3
"""Lay out the model corpus tests/corpus.rs runs through pipelines/compile-onnx.toml.

    python make_corpus.py SITE_PACKAGES OUT_DIR

SITE_PACKAGES holds the packages whose wheels ship the models (tests/all.sh installs them with --no-deps into
target/pytest-venv: only their files are used). OUT_DIR gets models/<name>.onnx (or models/<name>/ for a model
with external data), images/ (real photos scikit-image ships) and corpus.json: one entry per model with its source
(package, version, path in the wheel), the `--set` params it runs with, and what the chain must do with it ("eval",
or "refused" at import). A few entries are *derived* from a shipped model by onnx's and onnxruntime's own tools, to
cover what no shipped model has (opset 7, float16 weights, an NHWC input, external data, opset 21); each says how.
Needs onnx and onnxruntime (the venv running it).
"""
import json
import os
import shutil
import sys
from importlib import metadata

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

LIGHT = "onnx/backend/test/data/light"


def version(dist):
    return metadata.version(dist)


def shipped(site, dist, rel):
    """(path, source text) of a file a package ships."""
    path = os.path.join(site, rel)
    if not os.path.isfile(path):
        raise SystemExit(f"{path} is missing: install {dist} (--no-deps) into that site-packages")
    return path, f"{dist} {version(dist)}: {rel}"


def fold_constant_of_shape(model):
    """ConstantOfShape nodes whose shape is an initializer, as initializers (onnx's light models write every
    weight so: opset 9 has the op, opset 7 does not)."""
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    keep = []
    for n in model.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in inits:
            value = numpy_helper.to_array(n.attribute[0].t) if n.attribute else np.zeros(1, np.float32)
            arr = np.full(tuple(int(d) for d in inits[n.input[0]]), value.reshape(-1)[0], dtype=value.dtype)
            model.graph.initializer.append(numpy_helper.from_array(arr, n.output[0]))
        else:
            keep.append(n)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    used = {i for n in model.graph.node for i in n.input}
    dead = [i for i in model.graph.initializer if i.name not in used]
    for i in dead:
        model.graph.initializer.remove(i)
    names = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in {d.name for d in dead}]
    for name in names - {i.name for i in inputs}:  # IR 3: every initializer is an input too
        t = next(i for i in model.graph.initializer if i.name == name)
        inputs.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    return model


def nhwc_in_front(model):
    """An NHWC input in front of an NCHW model, through a Transpose: what tf2onnx writes for a Keras model."""
    vi = model.graph.input[0]
    old = vi.name
    dims = [d for d in vi.type.tensor_type.shape.dim]
    nchw = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or "?") for d in dims]
    new = helper.make_tensor_value_info(old + "_nhwc", vi.type.tensor_type.elem_type,
                                        [nchw[0], nchw[2], nchw[3], nchw[1]])
    model.graph.node.insert(0, helper.make_node("Transpose", [new.name], [old], perm=[0, 3, 1, 2],
                                                name="nhwc_to_nchw"))
    del model.graph.input[:]
    model.graph.input.extend([new])
    return model


def main(site, out):
    models = os.path.join(out, "models")
    os.makedirs(models, exist_ok=True)
    entries = []

    def add(name, path, source, expect, params=None, derived=None, model=None):
        if model is not None:
            dest = os.path.join(models, name + ".onnx")
            onnx.save(model, dest)
        else:
            dest = os.path.join(models, name + ".onnx")
            shutil.copy(path, dest)
        entries.append({"name": name, "model": os.path.relpath(dest, out), "source": source, "expect": expect,
                        "params": params or {}, "derived": derived})

    onnx_v = version("onnx")
    light = sorted(f for f in os.listdir(os.path.join(site, LIGHT)) if f.endswith(".onnx"))
    for f in light:
        path, src = shipped(site, "onnx", f"{LIGHT}/{f}")
        add(f[len("light_"):-len(".onnx")], path, src, "eval")

    ocr = "rapidocr_onnxruntime/models"
    cls, cls_src = shipped(site, "rapidocr_onnxruntime", f"{ocr}/ch_ppocr_mobile_v2.0_cls_infer.onnx")
    add("ppocr_cls", cls, cls_src, "eval", {"shape": [1, 3, 48, 192]})
    path, src = shipped(site, "rapidocr_onnxruntime", f"{ocr}/ch_PP-OCRv4_det_infer.onnx")
    add("ppocr_det", path, src, "eval", {"shape": [1, 3, 224, 224]})
    path, src = shipped(site, "rapidocr_onnxruntime", f"{ocr}/ch_PP-OCRv4_rec_infer.onnx")
    # [N, T, 6625]: the class axis is the last one
    add("ppocr_rec", path, src, "eval", {"shape": [1, 3, 48, 320], "top1_axis": -1})
    nude, nude_src = shipped(site, "nudenet", "nudenet/320n.onnx")
    add("nudenet_320n", nude, nude_src, "eval", {"shape": [1, 3, 320, 320]})
    path, src = shipped(site, "magika", "magika/models/standard_v3_3/model.onnx")
    add("magika", path, src, "refused")
    path, src = shipped(site, "silero-vad", "silero_vad/data/silero_vad.onnx")
    add("silero_vad", path, src, "refused")
    path, src = shipped(site, "silero-vad", "silero_vad/data/silero_vad_op18_ifless.onnx")
    add("silero_vad_op18", path, src, "refused")
    for f in ("mul_1.onnx", "sigmoid.onnx", "logreg_iris.onnx"):
        path, src = shipped(site, "onnxruntime", f"onnxruntime/datasets/{f}")
        add("ort_" + f[:-5], path, src, "refused")

    # Derived: what no shipped model covers, made from shipped ones by onnx's / onnxruntime's own tools.
    sq, sq_src = shipped(site, "onnx", f"{LIGHT}/light_squeezenet.onnx")
    m = version_converter.convert_version(fold_constant_of_shape(onnx.load(sq)), 7)
    add("squeezenet_opset7", None, sq_src, "eval", model=m,
        derived="weights folded from ConstantOfShape, onnx.version_converter down to opset 7")
    from onnxruntime.transformers.float16 import convert_float_to_float16
    m = convert_float_to_float16(onnx.load(cls), keep_io_types=False)
    add("ppocr_cls_fp16", None, cls_src, "eval", {"shape": [1, 3, 48, 192]}, model=m,
        derived="onnxruntime.transformers.float16.convert_float_to_float16 (float16 weights and input)")
    add("ppocr_cls_nhwc", None, cls_src, "eval", {"shape": [1, 48, 192, 3]}, model=nhwc_in_front(onnx.load(cls)),
        derived="an NHWC input through a Transpose in front (as tf2onnx writes Keras models)")
    add("ppocr_cls_opset21", None, cls_src, "eval", {"shape": [1, 3, 48, 192]},
        model=version_converter.convert_version(onnx.load(cls), 21), derived="onnx.version_converter up to opset 21")
    folder = os.path.join(models, "nudenet_external")
    os.makedirs(folder, exist_ok=True)
    onnx.save(onnx.load(nude), os.path.join(folder, "320n.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="320n.onnx.data", size_threshold=1024)
    entries.append({"name": "nudenet_external", "model": os.path.relpath(folder, out), "source": nude_src,
                    "expect": "eval", "params": {"shape": [1, 3, 320, 320]},
                    "derived": "onnx.save(save_as_external_data=True): a folder with 320n.onnx + 320n.onnx.data"})
    # The same model bound as its .onnx file alone: refused, the message says to bind the folder.
    entries.append({"name": "nudenet_external_file_only", "model": os.path.relpath(os.path.join(folder, "320n.onnx"),
                                                                                 out),
                    "source": nude_src, "expect": "refused", "params": {"shape": [1, 3, 320, 320]},
                    "derived": "the external-data model's .onnx file bound without its data file"})

    images = os.path.join(out, "images")
    os.makedirs(images, exist_ok=True)
    photos = ["astronaut.png", "chelsea.png", "coffee.png", "hubble_deep_field.jpg", "motorcycle_left.png",
              "retina.jpg", "rocket.jpg", "camera.png"]
    for n in photos:
        shutil.copy(shipped(site, "scikit-image", f"skimage/data/{n}")[0], os.path.join(images, n))
    with open(os.path.join(out, "corpus.json"), "w") as f:
        json.dump({"onnx": onnx_v, "images": f"scikit-image {version('scikit-image')}: skimage/data/ "
                   f"({len(photos)} photos)", "models": entries}, f, indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
