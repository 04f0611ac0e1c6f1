"""The probe protocol of the 2026 logbook entry (../shared/seeds/000_*), as its public probe scripts ran it.

It differs from the LoRA protocol in mezo.py in what is perturbed and what the target is:
  * np.random.seed(seed) (the entry: 99), then X = randn(samples, H, W, C) (the entry: 64 x 1 x 1 x 256, NHWC);
  * the float reference's output at X, y_f; then one noise = randn(*y_f.shape) * std(y_f) * noise_scale (0.10),
    drawn next from the same stream and shared by every context;
  * each context's target is ITS OWN unperturbed output plus that noise, so its loss at X is mean(noise^2) —
    the same number in every context by construction (the entry's 1.7700e-03 "identical to five figures");
    agreement on the unperturbed output has to be measured directly (max abs diff at t0), not read off it;
  * draws z_d = randn(*X.shape), each scaled to unit norm, drawn next; the INPUTS are perturbed:
    g_d = [L(X + eps z_d) - L(X - eps z_d)] / (2 eps), L(x) = mean((ctx(x) - target_ctx)^2) in float64;
  * both signs of all draws go in ONE forward call per context per eps (2 * draws * samples rows).
The legacy global stream is reproduced with np.random.RandomState(seed), which draws the same numbers as
np.random.seed(seed) followed by np.random.randn. Everything else (summaries, JSON) is shared with mezo.py.
"""
import numpy as np

import mezo


class EntryPlan:
    def __init__(self, sample_shape, samples, draws, eps, seed, noise_scale):
        self.rs = np.random.RandomState(int(seed))
        self.x = self.rs.randn(int(samples), *sample_shape).astype(np.float32)
        self.draws = int(draws)
        self.eps = [float(e) for e in eps]
        self.noise_scale = float(noise_scale)
        self.noise = None
        self.z = None

    def draw_noise_then_z(self, y_float):
        """Noise from the float output's spread, then the unit-norm directions: the stream's order."""
        y = np.asarray(y_float, np.float64)
        self.noise = self.rs.randn(*y.shape) * float(np.std(np.asarray(y_float, np.float32))) * self.noise_scale
        z = self.rs.randn(self.draws, *self.x.shape)
        norms = np.sqrt((z.reshape(self.draws, -1) ** 2).sum(axis=1))
        self.z = (z / norms.reshape((self.draws,) + (1,) * self.x.ndim)).astype(np.float32)

    def both_signs(self, eps):
        """(2 * draws * samples, H, W, C): for each draw, X + eps z then X - eps z."""
        rows = []
        for z in self.z:
            rows.append(self.x + np.float32(eps) * z)
            rows.append(self.x - np.float32(eps) * z)
        return np.ascontiguousarray(np.concatenate(rows, axis=0), dtype=np.float32)


def forward(ctx, x):
    y = np.asarray(ctx.forward(x), dtype=np.float32)
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"context {ctx.name} returned batch {y.shape[0]} for {x.shape[0]} inputs")
    return y


def estimates(ctx, plan, y0):
    """{eps: g over draws} for one context, whose target is its own y0 plus the shared noise."""
    target = y0.astype(np.float64) + plan.noise
    n = plan.x.shape[0]
    g = {}
    for e in plan.eps:
        y = forward(ctx, plan.both_signs(e)).astype(np.float64)
        loss = np.array([mezo.mse(y[k * n:(k + 1) * n], target) for k in range(2 * plan.draws)])
        g[e] = (loss[0::2] - loss[1::2]) / (2.0 * e)
    return g, mezo.mse(y0, target)


def run(ctx_factory, float_factory, sample_shape, samples, draws, eps, seed, noise_scale):
    """-> dict with the float and context results, in the shape mezo/compare reads."""
    plan = EntryPlan(sample_shape, samples, draws, eps, seed, noise_scale)
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
