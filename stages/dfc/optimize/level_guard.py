"""dfc/optimize's silent-fallback guard: what the merged model script asks the DFC's optimiser to run, and whether its
log says that ran.

Why a module of its own: which algorithm a level runs, what the DFC prints for it and how sure the public record is
about each are separate facts, and the guard must fail only where the record is sure (issue 25).

What a level runs — exactly one post-quantisation algorithm per level (the model-script reference's table as
mirrored publicly, docs/hailo-toolchain.md §2.3; a public third-party reading of hailo_model_optimization's
mo_config.get_optimization_config says the same: an if/elif per level):
    0: none   1: bias_correction   2: finetune (Quantization-Aware Fine-Tuning)   3, 4: adaround
hailo_model_zoo's cfg/alls/generic/*.alls use level 4 (fastvit_sa12, yolo_world_v2s, and clip_resnet_50x4 with
`post_quantization_optimization(adaround, policy=enabled, epochs=100)`). An explicit
`post_quantization_optimization(ALGORITHM, policy=enabled|disabled)` overrides the level (the zoo: 25 scripts enable
finetune at level 0, 37 disable it).

What the DFC prints (its log as public code quotes it):
  finetune         "Starting Quantization-Aware Fine-Tuning", "[Model Optimization Algorithm ]Quantization-Aware
                   Fine-Tuning is done (completion time is ...)", "Quantization-Aware Fine-Tuning skipped"
                   (older releases: "Fine Tune")
  bias_correction  "Model Optimization Algorithm Bias Correction is done (...)", "Bias Correction skipped"
  adaround         "Adaround skipped" only: no public log shows what the DFC prints when AdaRound runs.

Verdict per algorithm the script asks for:
  a done line              -> ran;
  its skipped line         -> fail, except finetune when every layer is 16-bit: whether QAFT runs at a16_w16 is not
                              publicly documented (the entry saw its distillation loss "at lower precisions"), so
                              a warning;
  neither                  -> fail where the done line is on public record (finetune, bias_correction; a level line
                              alone is no evidence that the level ran), a warning otherwise (adaround).
An algorithm the script does not ask for is not checked.
"""
import re

LEVEL_ALGORITHM = {0: None, 1: "bias_correction", 2: "finetune", 3: "adaround", 4: "adaround"}

# Per algorithm: its names in the log, and whether a public log shows its done line.
LOG_NAMES = {"finetune": r"(?:Quantization-Aware Fine-Tuning|Fine Tune)",
             "bias_correction": r"Bias Correction",
             "adaround": r"Ada[Rr]ound"}
DONE_ON_RECORD = {"finetune": True, "bias_correction": True, "adaround": False}


def expected(level, post_quantization):
    """The algorithms the optimiser should run at `level` under the script's explicit policies, in log order."""
    want = set()
    if isinstance(level, int) and LEVEL_ALGORITHM.get(level):
        want.add(LEVEL_ALGORITHM[level])
    for algo, policy in (post_quantization or {}).items():
        if algo in LOG_NAMES and policy == "enabled":
            want.add(algo)
        elif algo in LOG_NAMES and policy == "disabled":
            want.discard(algo)
    return [a for a in LOG_NAMES if a in want]


def all_16_bit(precision):
    return str(precision or "").startswith("a16_w16")


def evidence(algo, text):
    """-> ("done" | "skipped" | None, the log line)."""
    name = LOG_NAMES[algo]
    clean = lambda ln: re.sub(r"^\[\w+\]\s*", "", ln.strip())  # noqa: E731  (drop the "[info] " level tag)
    done = re.findall(rf"[^\n]*\b{name} is done\b[^\n]*", text)
    if done:
        return "done", clean(done[-1])
    skipped = re.findall(rf"[^\n]*\b{name} skipped\b[^\n]*", text)
    if skipped:
        return "skipped", clean(skipped[-1])
    return None, None


def judge(text, level, post_quantization, precision):
    """-> (algorithms {algo: {verdict, line}}, failure reason or None, warnings [str])."""
    algos, failures, warnings = {}, [], []
    for algo in expected(level, post_quantization):
        kind, line = evidence(algo, text)
        if kind == "done":
            algos[algo] = {"verdict": "ran", "line": line}
            continue
        unsure_16 = algo == "finetune" and all_16_bit(precision)
        if kind == "skipped":
            algos[algo] = {"verdict": "skipped", "line": line}
            if unsure_16:
                warnings.append(f"{line}: at {precision} every layer is 16-bit, and whether the DFC runs "
                                "Quantization-Aware Fine-Tuning there is not publicly documented; not failing")
            else:
                failures.append(f"{line} at optimisation level {level}, which asks for it")
            continue
        algos[algo] = {"verdict": "unconfirmed", "line": None}
        if DONE_ON_RECORD[algo] and not unsure_16:
            failures.append(f"no '{algo} ... is done' line in the SDK log at optimisation level {level}, which asks "
                            "for it")
        else:
            warnings.append(f"{algo}: no done or skipped line in the SDK log; no public DFC log shows what it prints "
                            f"when {algo} runs{' at a16_w16' if unsure_16 else ''}, so its absence is not failed")
    return algos, ("; ".join(failures) or None), warnings
