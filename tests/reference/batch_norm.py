# Reference numbers for tests/cases/run/batch_norm_matches_pytorch.tfl:
# PyTorch's documented BatchNorm (torch.nn.BatchNorm1d/BatchNorm2d in
# training mode, then eval) written in NumPy (float64), with plain SGD on
# gamma and beta for the MSE loss. PyTorch itself is not installed where the
# case was written; the formulas are those of its documentation:
#   y = (x - mean) / sqrt(var_biased + eps) * gamma + beta
#   running = (1 - momentum) * running + momentum * stat   (var: unbiased)
# The tests do not need Python; run `python3 tests/reference/batch_norm.py`
# (with numpy) to print the numbers the case asserts.
import numpy as np
np.set_printoptions(precision=8, suppress=False)
def bn_train(x, gamma, beta, rm, rv, m, eps=1e-5):
    c = x.shape[-1]; rows = x.reshape(-1, c); n = rows.shape[0]
    mu = rows.mean(0); var = rows.var(0)
    xhat = (x - mu) / np.sqrt(var + eps)
    y = xhat * gamma + beta
    rm = (1 - m) * rm + m * mu
    rv = (1 - m) * rv + m * rows.var(0, ddof=1)
    return y, xhat, rm, rv
def sgd_step(x, t, gamma, beta, rm, rv, m, lr):
    y, xhat, rm, rv = bn_train(x, gamma, beta, rm, rv, m)
    g = 2 * (y - t) / y.size            # d mse / d y
    axes = tuple(range(x.ndim - 1))
    dgamma = (g * xhat).sum(axes); dbeta = g.sum(axes)
    return gamma - lr * dgamma, beta - lr * dbeta, rm, rv, np.mean((y - t) ** 2)
def bn_eval(x, gamma, beta, rm, rv, eps=1e-5):
    return (x - rm) / np.sqrt(rv + eps) * gamma + beta

# [B, C]: two batches of 4, one epoch, sgd(lr = 0.5), momentum 0.1.
xs = np.array([[1,2,3],[4,0,-1],[2,2,2],[0.5,-3,1],[-1,0,1],[3,1,4],[2,-2,0],[1,1,1]], dtype=np.float64)
ts = 0.5 * xs
gamma, beta, rm, rv = np.ones(3), np.zeros(3), np.zeros(3), np.ones(3)
for k in range(2):
    gamma, beta, rm, rv, loss = sgd_step(xs[4*k:4*k+4], ts[4*k:4*k+4], gamma, beta, rm, rv, 0.1, 0.5)
print("2d running_mean", rm); print("2d running_var", rv); print("2d gamma", gamma); print("2d beta", beta)
print("2d eval", bn_eval(np.array([[1.0, 0.0, 2.0]]), gamma, beta, rm, rv))

# NHWC [2, 2, 2, 3]: one step, momentum 0.3, sgd(lr = 0.5).
x4 = np.arange(24, dtype=np.float64).reshape(2, 2, 2, 3)
x4 = np.sin(x4) * 2 + 0.25 * x4
t4 = 0.5 * x4 + 1.0
gamma, beta, rm, rv = np.ones(3), np.zeros(3), np.zeros(3), np.ones(3)
gamma, beta, rm, rv, loss = sgd_step(x4, t4, gamma, beta, rm, rv, 0.3, 0.5)
print("4d running_mean", rm); print("4d running_var", rv); print("4d gamma", gamma); print("4d beta", beta)
print("4d x", x4.reshape(-1).tolist()[:3])
