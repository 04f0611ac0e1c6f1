"""TEST DOUBLE — not the Hailo SDK. A numpy-only stand-in for `hailo_sdk_client` (the Hailo Dataflow Compiler).

Its job is to check that heddle's dfc/* stage scripts and the mezo probe call the documented API in the documented
order, pass every parameter through, and that SDK exceptions reach the compare table. It does NOT translate,
quantise or compile anything; numbers it returns come from a pseudo network seeded by the ONNX file's hash and
mean nothing. Every call is recorded (name + summarised arguments) in the HAR it writes (key "trace") and, when
$HAILO_DOUBLE_TRACE names a file, appended there as JSON lines.

Emulated behaviour (from public reports, see docs/hailo-toolchain.md and the logbook entry):
  * ClientRunner(hw_arch=..., har=...); translate_onnx_model(path, net_name, start_node_names, end_node_names,
    net_input_shapes={name: [N,C,H,W]}); save_har / load_har; get_hn_dict() with HN input layers
    "<net>/input_layer1" of input_shapes [[-1,H,W,C]] (channels-last).
  * load_model_script(text|path, append=False) understanding quantization_param(..., precision_mode=...),
    model_optimization_flavor(optimization_level=, compression_level=), model_optimization_config(calibration, ...).
  * load_model_script rejects a command that neither the model-script reference (docs/hailo-toolchain.md §2) nor
    any of the model zoo's .alls files uses, as the real parser refuses what it does not know; the exception's real
    class is not public. Statements may span lines; `a, b = defuse(...)` and `ctx.place(...)` after
    `ctx = context(...)` parse as in the zoo. quantization_param({*}, ...) sets the emulated precision; a
    quantization_param naming layers is accepted and not emulated.
  * optimize(calib): calib must be float32 NHWC keyed by HN input names (KeyError otherwise); logs "Using default
    optimization level of 2" when the script sets none, "Using dataset with N entries for calibration"
    (N = min(calibset_size or 64, given)), and per algorithm "Starting X" / "X is done (completion time is ...)" or
    "X skipped". The GPU, as the optimiser picks it: $HAILO_DOUBLE_ASSUME_GPU=1 says one exists;
    $HAILO_DOUBLE_GPU_BUSY=1 says it already uses more than ~5 % of its memory (a GPU driving a display), which the
    optimiser passes over unless CUDA_VISIBLE_DEVICES is set — then it logs "No GPU chosen and no suitable GPU found,
    falling back to CPU". Without a usable GPU a requested level > 0 is reduced to 0 ("Reducing optimization level
    to 0 ..."). Then one post-quantisation algorithm per level used: bias correction at 1, Quantization-Aware
    Fine-Tuning at 2 ("Starting Quantization-Aware Fine-Tuning", "Model Optimization Algorithm Quantization-Aware
    Fine-Tuning is done ..."), AdaRound at 3-4, each overridden by post_quantization_optimization(ALGO, policy=...);
    the others log "X skipped" (see ClientRunner._log_post_quantization). $HAILO_DOUBLE_SKIP_QAFT=1 /
    $HAILO_DOUBLE_SKIP_ADAROUND=1 make an algorithm that was asked for "skipped", to test that a stage does not trust
    the level line alone.
    precision_mode=a16_w4 raises AttributeError("'function' object has no attribute 'set_wraparound_loss'").
  * infer_context(InferenceContext.X) context manager + infer(ctx, data); SDK_BIT_EXACT at a8_w8 raises
    InferenceError("graph execution error at conv2_1/act_op_1/pow"); SDK_HAILO_HW is not emulated.
  * compile() -> bytes of a fake HEF (JSON, marked TEST DOUBLE).
"""
import contextlib
import hashlib
import json
import logging
import os
import re
import sys

import numpy as np

from .exposed_definitions import (CalibrationDataType, InferenceContext, States,  # noqa: F401
                                  SUPPORTED_HW_ARCHS, PRECISION_MODES)

TEST_DOUBLE = "TEST DOUBLE — not the Hailo SDK"
# $HAILO_DOUBLE_SDK_VERSION: the DFC version the double claims (a HEF it compiles carries it, as a real HEF header
# carries its SDK version; hailortcli 5.2+ prints it in parse-hef). Default: none (0.0.0, which HailoRT treats as
# missing).
__version__ = os.environ.get("HAILO_DOUBLE_SDK_VERSION", "0.0.0") + "+testdouble"

_log = logging.getLogger("hailo_sdk_client")
if not _log.handlers:
    _h = logging.StreamHandler(sys.stdout)
    _h.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    _log.addHandler(_h)
    _log.setLevel(logging.INFO)
    _log.propagate = False


class InferenceError(Exception):
    """TEST DOUBLE — named after the logbook's error; its module in the real SDK is not known publicly."""


class ModelScriptError(ValueError):
    """TEST DOUBLE — the real SDK's class for an unknown model-script command is not known publicly."""


# Model-script commands of the public reference (docs/hailo-toolchain.md §2) and every command name the model zoo's 266
# .alls files use (hailo-ai/hailo_model_zoo hailo_model_zoo/cfg/alls/**, counted at commit c83fc03).
MODEL_SCRIPT_COMMANDS = {
    # graph modification
    "normalization", "input_conversion", "resize", "transpose", "change_output_activation", "logits_layer",
    "nms_postprocess", "remove_node", "set_seed", "reshape", "format_conversion",
    # quantisation and optimisation
    "quantization_param", "model_optimization_flavor", "model_optimization_config", "pre_quantization_optimization",
    "post_quantization_optimization",
    # compilation and allocation
    "performance_param", "resources_param", "context_switch_param", "allocator_param", "compilation_param",
    "buffers", "platform_param", "hef_param", "context", "network_group", "output_layer", "shortcut", "concat",
    "defuse", "defuse_block", "bucket", "join", "mux_demux", "shape_splitter", "transpose_concat",
    "spatial_reshape_flow_params",
}
# Methods the zoo calls on a name an earlier `name = context(...)` statement bound.
CONTEXT_METHODS = {"place"}


def _script_statements(text):
    """Statements of a model script: `#` comments dropped, lines joined while brackets are open (the zoo spreads
    post_quantization_optimization(finetune, ...) over several lines)."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = re.sub(r"#.*$", "", raw).strip()
        if not line:
            continue
        cur = f"{cur} {line}" if cur else line
        if sum(cur.count(c) for c in "([{") <= sum(cur.count(c) for c in ")]}"):
            out.append(cur)
            cur = ""
    if cur:
        raise ModelScriptError(f"TEST DOUBLE: model script statement never closes: {cur[:80]!r}")
    return out


def _summ(v):
    if isinstance(v, np.ndarray):
        return {"ndarray": list(v.shape), "dtype": str(v.dtype)}
    if isinstance(v, dict):
        return {str(k): _summ(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_summ(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"bytes": len(v)}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return repr(v)


class _Ctx:
    def __init__(self, target):
        self.target = target
        self.open = True


def _har_property(key):
    """A read-only ClientRunner property: the HAR's `key` (None while the HAR has none: net_name before translate)."""
    return property(lambda self: self._m.get(key))


class ClientRunner:
    """TEST DOUBLE — not the Hailo SDK."""

    def __init__(self, hw_arch=None, har=None, **kwargs):
        self._m = {"test_double": TEST_DOUBLE, "state": States.UNINITIALIZED, "hw_arch": None, "trace": [],
                   "model_script": "", "precision_mode": "a8_w8", "optimization_level": None,
                   "compression_level": 0, "calibset_size": None}
        if har is not None:
            self._load(har)
        if hw_arch is not None:
            if hw_arch not in SUPPORTED_HW_ARCHS:
                raise ValueError(f"Unsupported hw_arch {hw_arch!r} (TEST DOUBLE list: {SUPPORTED_HW_ARCHS})")
            self._m["hw_arch"] = hw_arch
        elif self._m["hw_arch"] is None:
            self._m["hw_arch"] = "hailo10h"
        self._rec("ClientRunner", hw_arch=hw_arch, har=har, **kwargs)

    # ---- bookkeeping -------------------------------------------------------------------------------------------
    def _rec(self, name, *args, **kwargs):
        entry = {"call": name, "args": _summ(list(args)), "kwargs": _summ(kwargs)}
        self._m["trace"].append(entry)
        path = os.environ.get("HAILO_DOUBLE_TRACE")
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def _need(self, *states):
        if self._m["state"] not in states:
            raise RuntimeError(f"TEST DOUBLE: runner state is {self._m['state']}, expected one of {states}")

    def _load(self, path):
        with open(path) as f:
            m = json.load(f)
        if m.get("test_double") != TEST_DOUBLE:
            raise ValueError(f"{path} is not a HAR written by the test double")
        self._m = m

    state = _har_property("state")
    hw_arch = _har_property("hw_arch")
    model_name = _har_property("net_name")
    model_script = _har_property("model_script")

    @property
    def hef(self):
        return self._m.get("hef")

    @hef.setter
    def hef(self, v):
        self._rec("hef=", v)
        self._m["hef"] = v

    # ---- translate ---------------------------------------------------------------------------------------------
    def translate_onnx_model(self, model=None, net_name=None, start_node_names=None, end_node_names=None,
                             net_input_shapes=None, **kwargs):
        self._rec("translate_onnx_model", model, net_name=net_name, start_node_names=start_node_names,
                  end_node_names=end_node_names, net_input_shapes=net_input_shapes, **kwargs)
        self._need(States.UNINITIALIZED)
        with open(model, "rb") as f:
            data = f.read()
        if not isinstance(net_input_shapes, dict) or len(net_input_shapes) != 1:
            raise ValueError("TEST DOUBLE needs net_input_shapes={onnx_input_name: [N, C, H, W]}")
        # Every public caller keys net_input_shapes by the start node names (start_node_names=["images"],
        # net_input_shapes={"images": [...]}); a shape keyed by another name describes no start node. The real
        # DFC's reaction to a mismatch is not public; the double refuses it so a stage cannot pass one.
        if start_node_names is not None and sorted(net_input_shapes) != sorted(start_node_names):
            raise ValueError(f"TEST DOUBLE: net_input_shapes keys {sorted(net_input_shapes)} are not the start node "
                             f"names {sorted(start_node_names)}; key each start node's shape by its own name")
        (in_name, shape), = net_input_shapes.items()
        if len(shape) != 4:
            raise ValueError(f"net_input_shapes[{in_name!r}] must be NCHW, got {shape}")
        net = net_name or os.path.splitext(os.path.basename(model))[0]
        self._m.update(state=States.HAILO_MODEL, net_name=net, onnx_sha256=hashlib.sha256(data).hexdigest(),
                       onnx_input=in_name, input_nchw=list(shape), start_node_names=start_node_names,
                       end_node_names=end_node_names)
        return self._hn(), {"params": "TEST DOUBLE"}

    def get_hn_dict(self):
        self._rec("get_hn_dict")
        return self._hn()

    def _hn(self):
        net = self._m.get("net_name", "net")
        _, c, h, w = self._m.get("input_nchw", [1, 1, 1, 1])
        co = _out_channels(c)
        inp, out = f"{net}/input_layer1", f"{net}/output_layer1"
        return {"name": net, "test_double": TEST_DOUBLE, "net_params": {"output_layers_order": [out]},
                "layers": {
                    inp: {"type": "input_layer", "input": [], "output": [f"{net}/conv1"],
                          "input_shapes": [[-1, h, w, c]], "output_shapes": [[-1, h, w, c]],
                          "original_names": [self._m.get("onnx_input", "input")]},
                    f"{net}/conv1": {"type": "conv", "input": [inp], "output": [f"{net}/conv2"],
                                     "input_shapes": [[-1, h, w, c]], "output_shapes": [[-1, h, w, c]]},
                    f"{net}/conv2": {"type": "conv", "input": [f"{net}/conv1"], "output": [out],
                                     "input_shapes": [[-1, h, w, c]], "output_shapes": [[-1, h, w, co]]},
                    out: {"type": "output_layer", "input": [f"{net}/conv2"], "output": [],
                          "input_shapes": [[-1, h, w, co]], "output_shapes": [[-1, h, w, co]]},
                }}

    # ---- HAR ---------------------------------------------------------------------------------------------------
    def save_har(self, path, **kwargs):
        self._rec("save_har", path, **kwargs)
        with open(path, "w") as f:
            json.dump(self._m, f, indent=1)

    def load_har(self, har=None, **kwargs):
        self._load(har)
        self._rec("load_har", har, **kwargs)

    # ---- model script ------------------------------------------------------------------------------------------
    def load_model_script(self, model_script=None, append=False, **kwargs):
        self._rec("load_model_script", model_script, append=append, **kwargs)
        text = model_script
        if isinstance(text, str) and "(" not in text and os.path.isfile(text):
            with open(text) as f:
                text = f.read()
        contexts = set()
        if not append:
            self._m["post_quantization"] = {}
        for line in _script_statements(text):
            m = re.match(r"^(?:([^=()]+?)\s*=\s*)?([\w.]+)\((.*)\)$", line)
            if not m:
                raise ValueError(f"TEST DOUBLE: cannot parse model script line {line!r}")
            lhs, cmd, body = m.groups()
            if "." in cmd:
                obj, method = cmd.rsplit(".", 1)
                if obj not in contexts or method not in CONTEXT_METHODS:
                    raise ModelScriptError(f"TEST DOUBLE: unknown model script command {cmd!r} in line {line!r}")
                continue
            if cmd not in MODEL_SCRIPT_COMMANDS:
                raise ModelScriptError(f"TEST DOUBLE: unknown model script command {cmd!r} in line {line!r}")
            if cmd == "context" and lhs:
                contexts.add(lhs.strip())
            kv = dict(re.findall(r"(\w+)\s*=\s*([\w.\-]+)", body))
            target = body.split(",")[0].strip()
            if cmd == "quantization_param" and "precision_mode" in kv:
                pm = kv["precision_mode"]
                if pm not in PRECISION_MODES:
                    raise ValueError(f"TEST DOUBLE: unknown precision_mode {pm!r}")
                if target == "{*}":  # every layer; a line naming layers changes only those (not emulated)
                    self._m["precision_mode"] = pm
            elif cmd == "model_optimization_flavor":
                if "optimization_level" in kv:
                    self._m["optimization_level"] = int(kv["optimization_level"])
                if "compression_level" in kv:
                    self._m["compression_level"] = int(kv["compression_level"])
            elif cmd == "model_optimization_config" and target == "calibration":
                if "calibset_size" in kv:
                    self._m["calibset_size"] = int(kv["calibset_size"])
            elif cmd == "post_quantization_optimization" and "policy" in kv:
                if kv["policy"] not in ("enabled", "disabled"):
                    raise ModelScriptError(f"TEST DOUBLE: policy={kv['policy']!r} in line {line!r}")
                self._m.setdefault("post_quantization", {})[target] = kv["policy"]
        self._m["model_script"] = (self._m["model_script"] + "\n" + text).strip() if append else text.strip()

    # ---- optimise ----------------------------------------------------------------------------------------------
    def optimize_full_precision(self, calib_data=None, **kwargs):
        self._rec("optimize_full_precision", calib_data=calib_data, **kwargs)
        self._need(States.HAILO_MODEL)

    def optimize(self, calib_data, data_type=None, **kwargs):
        self._rec("optimize", calib_data, data_type=data_type, **kwargs)
        self._need(States.HAILO_MODEL)
        arr = self._check_input(calib_data, "calibration")
        requested = self._m["optimization_level"]
        if requested is None:
            requested = 2
            _log.info("Using default optimization level of 2")
        entries = min(self._m["calibset_size"] or 64, arr.shape[0])
        _log.info("Starting Model Optimization (TEST DOUBLE — not the Hailo SDK)")
        gpu = os.environ.get("HAILO_DOUBLE_ASSUME_GPU") == "1"
        if gpu and os.environ.get("HAILO_DOUBLE_GPU_BUSY") == "1" and not os.environ.get("CUDA_VISIBLE_DEVICES"):
            _log.warning("No GPU chosen and no suitable GPU found, falling back to CPU")
            gpu = False
        if os.environ.get("CUDA_VISIBLE_DEVICES") in ("99", "-1"):
            gpu = False
        used = requested
        if requested > 0 and not gpu:
            used = 0
            if arr.shape[0] < 1024:
                _log.warning("Reducing optimization level to 0 (the accuracy won't be optimized and compression "
                             "won't be used) because there's less data than the recommended amount (1024), "
                             "and there's no available GPU")
            else:
                _log.warning("Reducing optimization level to 0 (the accuracy won't be optimized and compression "
                             "won't be used) because there's no available GPU")
        _log.info(f"Using dataset with {entries} entries for calibration")
        self._log_post_quantization(used, arr.shape[0])
        if self._m["precision_mode"] == "a16_w4":
            raise AttributeError("'function' object has no attribute 'set_wraparound_loss'")
        _log.info("Model Optimization is done")
        self._m.update(state=States.QUANTIZED_MODEL, optimization_level_used=used, calib_entries=entries)

    def _log_post_quantization(self, level, given):
        """One post-quantisation algorithm per level (bias correction at 1, QAFT at 2, AdaRound at 3-4), as the
        public reading of the optimiser's level table has it, overridden by post_quantization_optimization(ALGO,
        policy=...); each algorithm logs its lines in the order public DFC logs show them. $HAILO_DOUBLE_SKIP_QAFT=1 /
        $HAILO_DOUBLE_SKIP_ADAROUND=1 log "skipped" for an algorithm that was asked for (a silent fallback to catch).
        What the DFC prints while AdaRound runs is in no public log: by default the double prints lines shaped like
        QAFT's (a guess, marked so); $HAILO_DOUBLE_ADAROUND_LOG=silent prints nothing for it."""
        want = {1: {"bias_correction"}, 2: {"finetune"}, 3: {"adaround"}, 4: {"adaround"}}.get(level, set())
        for algo, policy in self._m.get("post_quantization", {}).items():
            (want.add if policy == "enabled" else want.discard)(algo)
        skip = {a for a, var in (("finetune", "HAILO_DOUBLE_SKIP_QAFT"), ("adaround", "HAILO_DOUBLE_SKIP_ADAROUND"))
                if os.environ.get(var) == "1"}
        run = want - skip
        if "bias_correction" in run:
            _log.info("Model Optimization Algorithm Bias Correction is done (completion time is 00:00:00.01)")
        else:
            _log.info("Bias Correction skipped")
        if "adaround" not in run:
            _log.info("Adaround skipped")
        elif os.environ.get("HAILO_DOUBLE_ADAROUND_LOG") != "silent":
            _log.info("Starting Adaround (TEST DOUBLE: the real DFC's AdaRound lines are not in any public log)")
            _log.info(f"Using dataset with {min(256 if level == 3 else 1024, given)} entries for Adaround")
            _log.info("Model Optimization Algorithm Adaround is done (completion time is 00:00:00.01)")
        if "finetune" in run:
            _log.info("Starting Quantization-Aware Fine-Tuning")
            _log.info(f"Using dataset with {min(1024, given)} entries for finetune")
            _log.info("Model Optimization Algorithm Quantization-Aware Fine-Tuning is done "
                      "(completion time is 00:00:00.01)")
        else:
            _log.info("Quantization-Aware Fine-Tuning skipped")
        self._m["post_quantization_ran"] = sorted(run)

    # ---- compile -----------------------------------------------------------------------------------------------
    def compile(self, **kwargs):
        self._rec("compile", **kwargs)
        self._need(States.QUANTIZED_MODEL)
        self._m["state"] = States.COMPILED_MODEL
        hef = {"test_double": TEST_DOUBLE, "kind": "HEF", "hw_arch": self._m["hw_arch"],
               "net_name": self._m["net_name"], "onnx_sha256": self._m["onnx_sha256"],
               "input_nchw": self._m["input_nchw"], "precision_mode": self._m["precision_mode"],
               "sdk_version": __version__.split("+")[0]}
        data = json.dumps(hef).encode()
        self._m["hef_sha256"] = hashlib.sha256(data).hexdigest()
        return data

    # ---- inference ---------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def infer_context(self, target, device_ids=None, nms_score_threshold=None, custom_infer_config=None):
        self._rec("infer_context", target, device_ids=device_ids, nms_score_threshold=nms_score_threshold,
                  custom_infer_config=custom_infer_config)
        if target not in InferenceContext.ALL:
            raise ValueError(f"TEST DOUBLE: unknown inference context {target!r}")
        if target == InferenceContext.SDK_HAILO_HW:
            raise RuntimeError("TEST DOUBLE: SDK_HAILO_HW is not emulated (no device, no hailo_platform)")
        if target in (InferenceContext.SDK_QUANTIZED, InferenceContext.SDK_BIT_EXACT):
            self._need(States.QUANTIZED_MODEL, States.COMPILED_MODEL)
        else:
            self._need(States.HAILO_MODEL, States.QUANTIZED_MODEL, States.COMPILED_MODEL)
        ctx = _Ctx(target)
        try:
            yield ctx
        finally:
            ctx.open = False
            self._rec("infer_context.exit", target)

    def infer(self, context, dataset=None, batch_size=None, data_count=None, **kwargs):
        self._rec("infer", context.target if isinstance(context, _Ctx) else context, dataset,
                  batch_size=batch_size, data_count=data_count, **kwargs)
        if not isinstance(context, _Ctx) or not context.open:
            raise ValueError("TEST DOUBLE: infer needs the object yielded by an open infer_context")
        x = self._check_input(dataset, "inference")
        if data_count is not None:
            x = x[:data_count]
        t = context.target
        pm = self._m["precision_mode"]
        if t == InferenceContext.SDK_BIT_EXACT and pm == "a8_w8":
            raise InferenceError("graph execution error at conv2_1/act_op_1/pow")
        return pseudo_forward(self._m["onnx_sha256"], x, None if t in (InferenceContext.SDK_NATIVE,
                              InferenceContext.SDK_FP_OPTIMIZED) else pm, bit_exact=t == InferenceContext.SDK_BIT_EXACT)

    def _check_input(self, data, what):
        hn = self._hn()
        names = [k for k, v in hn["layers"].items() if v["type"] == "input_layer"]
        if isinstance(data, np.ndarray):
            arr = data
        elif isinstance(data, dict):
            extra = set(data) - set(names)
            if extra:
                raise KeyError(f"{sorted(extra)[0]!r} is not an HN input layer (TEST DOUBLE expects {names})")
            arr = data[names[0]]
        else:
            raise TypeError(f"TEST DOUBLE: {what} data must be an ndarray or a dict keyed by HN input names")
        want = hn["layers"][names[0]]["input_shapes"][0][1:]
        if arr.ndim != 4 or list(arr.shape[1:]) != list(want):
            raise ValueError(f"TEST DOUBLE: {what} data shape {list(arr.shape)} != [N] + {want} (NHWC)")
        if arr.dtype != np.float32:
            raise TypeError(f"TEST DOUBLE: {what} data must be float32, got {arr.dtype}")
        return arr

    def get_hn_model(self):
        self._rec("get_hn_model")
        return _HnModel(self._hn())


class _HnModel:
    def __init__(self, hn):
        self._hn = hn

    def get_input_layers(self):
        return [_Layer(k) for k, v in self._hn["layers"].items() if v["type"] == "input_layer"]

    def get_output_layers(self):
        return [_Layer(k) for k, v in self._hn["layers"].items() if v["type"] == "output_layer"]


class _Layer:
    def __init__(self, name):
        self.name = name


def _out_channels(c):
    return max(1, c // 4)


_weights_cache = {}


def pseudo_forward(seed_hex, x, precision, bit_exact=False):
    """TEST DOUBLE pseudo network: relu(x W1) W2 with weights seeded by the ONNX hash; optional fake quantisation."""
    c = x.shape[-1]
    key = (seed_hex, c)
    if key not in _weights_cache:
        rng = np.random.default_rng(int(seed_hex[:16], 16))
        w1 = (rng.standard_normal((c, c)) * np.sqrt(2.0 / c)).astype(np.float32)
        w2 = (rng.standard_normal((c, _out_channels(c))) * np.sqrt(1.0 / c)).astype(np.float32)
        _weights_cache[key] = (w1, w2)
    w1, w2 = _weights_cache[key]
    if precision is None:
        return np.maximum(x @ w1, 0) @ w2
    bits = 16 if precision.startswith("a16") else 8
    step = np.float32(8.0 / 2 ** bits)
    rnd = np.floor if bit_exact else np.round
    q = lambda v: (rnd(v / step) * step).astype(np.float32)  # noqa: E731
    return q(np.maximum(q(x) @ w1, 0) @ w2)
