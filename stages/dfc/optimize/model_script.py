"""dfc/optimize's model script: the lines the stage writes, and their merge with a user's own `.alls` file.

Why a module of its own: the merge is the one place where two authors (the stage's params and the user's script) set
the same DFC settings, and its rule has to be exact, tested and stated once.

The rule (stage.toml's `alls` input says the same):
  * A statement is one model-script command, `[lhs =] command(args...)`, possibly over several lines (brackets and
    parentheses open), with `#` comments. Statements are identified by their command and first positional argument
    (the target: `{*}` for quantization_param, `calibration` for model_optimization_config, none for
    model_optimization_flavor).
  * A user statement with the same command and target as a stage line replaces it, keyword by keyword: the user's
    keywords win, the stage's other keywords stay (e.g. the user's `model_optimization_flavor(compression_level=1)`
    and the stage's `optimization_level=2, compression_level=0` become `optimization_level=2, compression_level=1`).
    Each replaced value is reported as an override.
  * Every other user statement is kept verbatim, in the user's order.
  * The stage's remaining lines go after the user's leading graph-modification commands (normalization, resize,
    input_conversion, ...) and before the user's first other command, so a user's quantization_param for named
    layers comes after the stage's `{*}` default and refines it.
The merge does not judge command names: the DFC's own parser does (an unknown command fails in load_model_script).
"""
import re

# Commands that change the graph before quantisation; the stage's lines go after a leading run of these.
GRAPH_MODIFICATION = {"normalization", "input_conversion", "resize", "transpose", "change_output_activation",
                      "logits_layer", "nms_postprocess", "remove_node", "set_seed", "reshape", "format_conversion"}


class ModelScriptSyntaxError(ValueError):
    """A user's .alls statement this stage cannot split into command and arguments."""


def generated(precision, level, compression, batch_size, calibset_size, mode="full"):
    """The stage's own lines: precision for every layer, plus level and calibration in mode "full"."""
    lines = [f"quantization_param({{*}}, precision_mode={precision})"]
    if mode == "full":
        lines += [f"model_optimization_flavor(optimization_level={level}, compression_level={compression})",
                  f"model_optimization_config(calibration, batch_size={batch_size}, calibset_size={calibset_size})"]
    elif mode != "precision-only":
        raise ValueError(f"model script mode {mode!r}: expected full or precision-only")
    return "\n".join(lines) + "\n"


def _unquoted(text):
    """(index, character) for each character of `text` outside quotes; the quote characters are not yielded."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        else:
            yield i, ch


def _strip_comment(line):
    """The line without a `#` comment outside quotes."""
    for i, ch in _unquoted(line):
        if ch == "#":
            return line[:i]
    return line


def _depth(text):
    """Open brackets minus closed ones, outside quotes."""
    return sum((ch in "([{") - (ch in ")]}") for _, ch in _unquoted(text))


def statements(text):
    """-> [(first line number, statement text)], comments and blank lines dropped, continuation lines joined."""
    out, cur, start = [], "", 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).strip()
        if not line:
            continue
        if not cur:
            start = n
        cur = f"{cur} {line}" if cur else line
        if _depth(cur) <= 0:
            out.append((start, cur))
            cur = ""
    if cur:
        raise ModelScriptSyntaxError(f"line {start}: statement never closes its brackets: {cur[:80]!r}")
    return out


def split_args(body):
    """Top-level comma split of an argument list (brackets and quotes respected)."""
    args, start, depth = [], 0, 0
    for i, ch in _unquoted(body):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(body[start:i].strip())
            start = i + 1
    if body[start:].strip():
        args.append(body[start:].strip())
    return args


class Statement:
    """One command: `lhs = name(positional..., key=value...)`; `text` is the user's own spelling."""

    CALL = re.compile(r"^(?:(?P<lhs>[^=()]+?)\s*=\s*)?(?P<name>[\w.]+)\s*\((?P<body>.*)\)$", re.S)
    KEYWORD = re.compile(r"^(\w+)\s*=(?!=)\s*(.*)$", re.S)

    def __init__(self, text, line=0):
        m = self.CALL.match(text)
        if not m:
            raise ModelScriptSyntaxError(f"line {line}: not a model-script command `[name =] command(...)`: {text!r}")
        self.text, self.line, self.lhs, self.name = text, line, m["lhs"], m["name"]
        self.positional, self.keywords = [], {}
        for arg in split_args(m["body"]):
            kw = self.KEYWORD.match(arg)
            if kw:
                self.keywords[kw[1]] = kw[2].strip()
            else:
                self.positional.append(arg)

    @property
    def key(self):
        return (self.name, self.positional[0] if self.positional else "")

    def render(self):
        args = self.positional + [f"{k}={v}" for k, v in self.keywords.items()]
        head = f"{self.lhs} = " if self.lhs else ""
        return f"{head}{self.name}({', '.join(args)})"


def parse(text):
    return [Statement(s, n) for n, s in statements(text)]


def merge(stage_text, user_text):
    """-> (merged script text, overrides). overrides: [{command, target, keyword, stage, user}] for every stage value
    a user statement replaced."""
    ours = parse(stage_text)
    theirs = parse(user_text)
    by_key = {s.key: s for s in ours}
    overrides, taken, lines = [], set(), []
    for u in theirs:
        g = by_key.get(u.key)
        if g is None or u.lhs or u.key in taken:
            lines.append(u.text)
            continue
        taken.add(u.key)
        merged = Statement(g.render())
        for k, v in u.keywords.items():
            if k in merged.keywords and merged.keywords[k] != v:
                overrides.append({"command": u.name, "target": u.key[1], "keyword": k,
                                  "stage": merged.keywords[k], "user": v})
            merged.keywords[k] = v
        lines.append(merged.render())
    rest = [g.text for g in ours if g.key not in taken]
    at = next((i for i, u in enumerate(theirs) if u.name not in GRAPH_MODIFICATION), len(theirs))
    # `at` counts statements; lines[] holds one entry per user statement, so the index carries over.
    lines[at:at] = rest
    return "\n".join(lines) + "\n", overrides


def effective(script_text):
    """What the merged script asks the DFC for: {precision, optimization_level, compression_level, calibset_size,
    batch_size}, each None when the script leaves it to the DFC's default, and post_quantization: {algorithm:
    policy} for each post_quantization_optimization(ALGORITHM, policy=...) (e.g. {"finetune": "disabled"}). The
    last statement that sets a value wins, as the DFC reads a script top to bottom."""
    out = dict.fromkeys(["precision", "optimization_level", "compression_level", "calibset_size", "batch_size"])
    out["post_quantization"] = {}
    for s in parse(script_text):
        kw = s.keywords
        if s.name == "post_quantization_optimization" and s.positional and "policy" in kw:
            out["post_quantization"][s.positional[0]] = kw["policy"]
            continue
        if s.key == ("quantization_param", "{*}") and "precision_mode" in kw:
            out["precision"] = kw["precision_mode"]
        elif s.name == "model_optimization_flavor":
            for k in ("optimization_level", "compression_level"):
                if k in kw:
                    out[k] = _number(kw[k])
        elif s.key == ("model_optimization_config", "calibration"):
            for k in ("calibset_size", "batch_size"):
                if k in kw:
                    out[k] = _number(kw[k])
    return out


def _number(v):
    """An int when the script wrote one; the text otherwise (the DFC judges it)."""
    try:
        return int(v)
    except ValueError:
        return v
