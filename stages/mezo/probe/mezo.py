"""MeZO zeroth-order probe: the maths, shared by every inference context (numpy only).

A rank-r LoRA lives on the host and acts as a pre-transform of the input over channels:
    x' = x + (x @ A) @ B,   x: (..., C) channels-last, A: (C, r), B: (r, C)
t = concat(A.ravel(), B.ravel()) are the only trainable parameters; the base graph is frozen and is evaluated in
one inference context. Loss L(t) = mean((base(x'(t)) - target)^2) over a fixed small batch, accumulated in
float64 on the host. The target is the float reference's output at t0 plus a seeded offset whose mean square is
`target_loss`, so the start loss is low but nonzero (at an exact minimum no estimator wins; logbook probe 5).

For each draw z_d ~ N(0, I) (d < D) and each eps: g = [L(t0 + eps z) - L(t0 - eps z)] / (2 eps), in the context
under test and in the float reference on the same z. Everything is driven by numpy.random.default_rng(seed), so
the probe is bit-for-bit reproducible for a fixed seed as long as the contexts are deterministic.
"""
import numpy as np


class Context:
    """An inference context: forward(x_nhwc float32 (N,H,W,C)) -> float32 array (N, ...), same layout per backend.

    Use as a context manager; `info` is a dict recorded in the probe output."""

    name = "context"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def forward(self, x):
        raise NotImplementedError

    @property
    def info(self):
        return {}


class NumpyFloatContext(Context):
    """Float32 reference of the authored graph (1x1 conv, ReLU, 1x1 conv) from its weights; NHWC output."""

    name = "NUMPY_FLOAT"

    def __init__(self, weights):
        w = np.load(weights) if isinstance(weights, str) else weights
        self.w1 = w["w1"][:, :, 0, 0].T.astype(np.float32)  # (C0, C1)
        self.w2 = w["w2"][:, :, 0, 0].T.astype(np.float32)  # (C1, C2)
        # A graph without biases (the entry's) stores none.
        names = set(getattr(w, "files", None) or w.keys())
        self.b1 = w["b1"].astype(np.float32) if "b1" in names else np.zeros(self.w1.shape[1], np.float32)
        self.b2 = w["b2"].astype(np.float32) if "b2" in names else np.zeros(self.w2.shape[1], np.float32)

    def forward(self, x):
        h = np.maximum(x @ self.w1 + self.b1, np.float32(0))
        return h @ self.w2 + self.b2


def lora_init(channels, rank, rng, scale_a=None, scale_b=0.1):
    """t0: a generic 'pretrained' adapter (both factors nonzero so the gradient reaches A and B)."""
    scale_a = (1.0 / np.sqrt(channels)) if scale_a is None else scale_a
    a = rng.standard_normal((channels, rank)) * scale_a
    b = rng.standard_normal((rank, channels)) * (scale_b / np.sqrt(rank))
    return np.concatenate([a.ravel(), b.ravel()])


def lora_apply(x, t, channels, rank):
    """x (N,H,W,C) float32 -> x + (x@A)@B, computed in float64 and returned as float32."""
    a = t[: channels * rank].reshape(channels, rank)
    b = t[channels * rank:].reshape(rank, channels)
    x64 = x.astype(np.float64)
    return (x64 + (x64 @ a) @ b).astype(np.float32)


def mse(y, target):
    d = y.astype(np.float64) - target
    return float(np.mean(d * d))


def pearson(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    a = a - a.mean()
    b = b - b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / den) if den > 0 else float("nan")


class Plan:
    """The fixed part of a probe: batch, t0, draws z, eps list. Built from one seeded generator."""

    def __init__(self, calib, batch, rank, draws, eps, seed):
        rng = np.random.default_rng(seed)
        n = calib.shape[0]
        idx = np.sort(rng.choice(n, size=min(batch, n), replace=False))
        self.x = np.ascontiguousarray(calib[idx], dtype=np.float32)
        self.sample_index = idx.tolist()
        self.channels = int(calib.shape[-1])
        self.rank = int(rank)
        self.t0 = lora_init(self.channels, self.rank, rng)
        self.z = rng.standard_normal((int(draws), self.t0.size))
        self.eps = [float(e) for e in eps]
        self.offset_rng_state = rng.bit_generator.state  # offset drawn later, once the output shape is known

    def points(self):
        """Every parameter point to evaluate: index 0 = t0, then for each eps, each draw: +, -."""
        pts = [self.t0]
        for e in self.eps:
            for z in self.z:
                pts.append(self.t0 + e * z)
                pts.append(self.t0 - e * z)
        return pts

    def inputs(self, t):
        return lora_apply(self.x, t, self.channels, self.rank)


def evaluate(ctx, plan, chunk=8):
    """Run every plan point through ctx; returns the list of output arrays (float32) in point order."""
    pts = plan.points()
    outs = []
    b = plan.x.shape[0]
    for i in range(0, len(pts), chunk):
        xs = np.concatenate([plan.inputs(t) for t in pts[i:i + chunk]], axis=0)
        y = np.asarray(ctx.forward(xs), dtype=np.float32)
        if y.shape[0] != xs.shape[0]:
            raise ValueError(f"context {ctx.name} returned batch {y.shape[0]} for {xs.shape[0]} inputs")
        outs.extend(y[j * b:(j + 1) * b] for j in range(len(pts[i:i + chunk])))
    return outs


def make_target(plan, float_outs, target_loss):
    rng = np.random.default_rng()
    rng.bit_generator.state = plan.offset_rng_state
    y0 = float_outs[0].astype(np.float64)
    off = rng.standard_normal(y0.shape)
    off *= np.sqrt(target_loss / np.mean(off * off))
    return y0 + off


def losses(outs, target):
    return np.array([mse(y, target) for y in outs], dtype=np.float64)


def gradients(plan, loss_values):
    """Split the loss vector (same order as plan.points()) into {eps: g array over draws}."""
    d = plan.z.shape[0]
    g = {}
    k = 1
    for e in plan.eps:
        lp = loss_values[k:k + 2 * d:2]
        lm = loss_values[k + 1:k + 2 * d:2]
        g[e] = (lp - lm) / (2.0 * e)
        k += 2 * d
    return g


def summarise(plan, g_ctx, g_float):
    rows = []
    for e in plan.eps:
        a, b = g_ctx[e], g_float[e]
        mf = float(np.median(np.abs(b)))
        mq = float(np.median(np.abs(a)))
        rows.append({
            "eps": e,
            "sign": float(np.mean(np.sign(a) == np.sign(b))),
            "r": pearson(a, b),
            "ratio": (mq / mf) if mf > 0 else float("inf"),
            "median_abs_g": mq,
            "median_abs_g_float": mf,
            "max_abs_g": float(np.max(np.abs(a))),
            "g": [float(v) for v in a],
            "g_float": [float(v) for v in b],
        })
    return rows
