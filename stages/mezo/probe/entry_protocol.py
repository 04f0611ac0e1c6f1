"""The probe protocol of the 2026 logbook entry (../shared/seeds/000_*), as its public probe scripts ran it.

Two public scripts made the entry's table, and this module follows them line for line (numpy's legacy global stream
is reproduced with np.random.RandomState(seed), which draws the same numbers as np.random.seed(seed) followed by
np.random.randn):
  * the SDK_QUANTIZED column came from "MeZO viability: a16w16, full optimisation, small-but-real loss, batched"
    (probe 5). It seeds 1171 once: W1, W2, the calibration set, then X, the noise and z CONTINUE that stream —
    stream = "continue" here; its start loss is 1.848e-03 (the entry's "1.85e-03");
  * the SDK_BIT_EXACT column came from "Three probes: does the MeZO result survive bit-exact emulation and
    deployable precisions?" (probe 6). It calls np.random.seed(99) before X — stream = "reseed"; start loss
    1.7700e-03.
So the entry's "same 48 perturbation draws" is not literally true: the two columns drew different X, noise and z.

Both scripts then do the same:
  * X = randn(samples, H, W, C) float32 (the entry: 64 x 1 x 1 x 256, NHWC);
  * y_f = the float reference's output at X; noise = (randn(*y_f.shape) * std(y_f) * 0.10).astype(float32), drawn
    next and shared by every context; each context's target is ITS OWN unperturbed output plus that noise (float32),
    so its start loss is mean(noise^2) whatever the context computes;
  * z = randn(draws, *X.shape) float32, drawn next, each SAMPLE ROW of each draw scaled to unit norm
    (`Zs /= np.linalg.norm(Zs.reshape(N, B, -1), axis=2).reshape(N, B, 1, 1, 1)`): each input element moves by
    about eps / sqrt(H*W*C), not eps / sqrt(samples*H*W*C);
  * one forward call per context per eps over every draw's X + eps z, then every draw's X - eps z;
    g_d = [L(X + eps z_d) - L(X - eps z_d)] / (2 eps), L = mean over samples and outputs of the squared error,
    all in float32 as the scripts computed it.
Everything else (summaries, JSON) is shared with mezo.py.
"""
import numpy as np

import mezo

STREAMS = ("reseed", "continue")


class StreamMismatch(ValueError):
    """stream = continue replays the author's draws; they are not the weights and calibration set given."""


class EntryPlan:
    def __init__(self, sample_shape, samples, draws, eps, seed, noise_scale, stream="reseed", author_seed=None,
                 weights=None, calib=None):
        if stream == "reseed":
            self.rs = np.random.RandomState(int(seed))
        elif stream == "continue":
            self.rs = self._replay_author(author_seed, weights, calib)
        else:
            raise ValueError(f"stream {stream!r}: expected one of {', '.join(STREAMS)}")
        self.stream = stream
        self.x = self.rs.randn(int(samples), *sample_shape).astype(np.float32)
        self.draws = int(draws)
        self.eps = [float(e) for e in eps]
        self.noise_scale = float(noise_scale)
        self.noise = None
        self.z = None

    @staticmethod
    def _replay_author(author_seed, weights, calib):
        """The stream after onnx/author's draws (entry-000 graph: W1, W2 as randn * 0.05, then the calibration set),
        checked against the weights and calibration set this probe was given."""
        if author_seed is None or weights is None or calib is None:
            raise ValueError("stream = continue needs author_seed, the author's weights and its calibration set")
        rs = np.random.RandomState(int(author_seed))
        for name in ("w1", "w2"):
            w = np.asarray(weights[name])
            if not np.array_equal((rs.randn(*w.shape) * 0.05).astype(np.float32), w):
                raise StreamMismatch(f"stream = continue: np.random.seed({author_seed}) does not draw the weights' "
                                     f"{name} {list(w.shape)}; set author_seed to onnx/author's seed (graph entry-000)")
        c = np.asarray(calib)
        if not np.array_equal(rs.randn(*c.shape).astype(np.float32), c):
            raise StreamMismatch(f"stream = continue: the calibration set {list(c.shape)} is not the next draw of "
                                 f"np.random.seed({author_seed}) after the weights")
        return rs

    def draw_noise_then_z(self, y_float):
        """Noise from the float output's spread, then the per-sample unit-norm directions: the stream's order."""
        y = np.asarray(y_float, np.float32)
        self.noise = (self.rs.randn(*y.shape) * y.std() * self.noise_scale).astype(np.float32)
        z = self.rs.randn(self.draws, *self.x.shape).astype(np.float32)
        n = self.x.shape[0]
        norms = np.linalg.norm(z.reshape(self.draws, n, -1), axis=2)
        z /= norms.reshape((self.draws, n) + (1,) * (self.x.ndim - 1))
        self.z = z

    def both_signs(self, eps):
        """(2 * draws * samples, H, W, C): every draw's X + eps z, then every draw's X - eps z."""
        rows = [self.x + eps * z for z in self.z] + [self.x - eps * z for z in self.z]
        return np.concatenate(rows).astype(np.float32)


def forward(ctx, x):
    y = np.asarray(ctx.forward(x), dtype=np.float32)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"context {ctx.name} returned batch {y.shape[0]} for {x.shape[0]} inputs")
    return y.reshape(len(x), -1)


def estimates(ctx, plan, y0):
    """{eps: g over draws} for one context, whose target is its own y0 plus the shared noise (float32 throughout)."""
    target = y0 + plan.noise.reshape(y0.shape)
    n, d = plan.x.shape[0], plan.draws
    g = {}
    for e in plan.eps:
        y = forward(ctx, plan.both_signs(e)).reshape(2 * d, n, -1)
        g[e] = (((y[:d] - target) ** 2).mean((1, 2)) - ((y[d:] - target) ** 2).mean((1, 2))) / (2 * e)
    return g, float(np.mean((y0 - target) ** 2))


def run(ctx_factory, float_factory, sample_shape, samples, draws, eps, seed, noise_scale, stream="reseed",
        author_seed=None, weights=None, calib=None):
    """-> dict with the float and context results, in the shape mezo/compare reads."""
    plan = EntryPlan(sample_shape, samples, draws, eps, seed, noise_scale, stream, author_seed, weights, calib)
    fctx = float_factory()
    with fctx:
        y0_float = forward(fctx, plan.x)
        plan.draw_noise_then_z(y0_float)
        g_float, loss_float = estimates(fctx, plan, y0_float)
    ctx = ctx_factory()
    with ctx:
        y0 = forward(ctx, plan.x)
        if y0.shape != y0_float.shape:
            raise ValueError(f"context output shape {y0.shape} != float reference {y0_float.shape}")
        g_ctx, loss = estimates(ctx, plan, y0)
    rows = mezo.summarise(plan, g_ctx, g_float)
    return {"fctx": fctx, "ctx": ctx, "rows": rows, "start_loss": loss, "start_loss_float": loss_float,
            "y0": y0, "y0_float": y0_float, "noise_std": float(np.std(plan.noise)),
            "float_output_std": float(np.std(y0_float))}
