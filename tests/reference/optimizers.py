# Reference numbers for tests/cases/run/optimizers_*.tfl: plain Python floats
# (IEEE f64) running PyTorch's documented update rules (torch.optim.SGD with
# momentum/nesterov, Adam, AdamW, RMSprop, clip_grad_norm_) and the std.optim
# schedules. The tests do not need Python; this script wrote them:
#   python3 tests/reference/optimizers.py tests/cases/run   (or no argument: print)
import math, sys
X = [[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [2.0, 0.0, 1.0], [1.0, -1.0, 1.0]]
Y = [1.0, -2.0, 3.0, 0.5]
def grads(P):
    w, b = P
    r = [sum(X[i][j]*w[j] for j in range(3)) + b[0] - Y[i] for i in range(4)]
    return [[2/4*sum(X[i][j]*r[i] for i in range(4)) for j in range(3)], [2/4*sum(r)]]
def run(opt, steps=3, lr=None, clipn=None, per_tensor=False, grads=grads, P=None, **hp):
    P = P or [[1.0,1.0,1.0],[0.0]]
    st = [dict() for _ in P]
    for t in range(1, steps+1):
        gs = grads(P)
        if clipn is not None:
            if per_tensor:
                gs = [[g*min(1.0, clipn/(math.sqrt(sum(x*x for x in gg))+1e-6)) for g in gg] for gg in gs]
            else:
                n = math.sqrt(sum(g*g for gg in gs for g in gg))
                s = min(1.0, clipn/(n+1e-6))
                gs = [[g*s for g in gg] for gg in gs]
        for k in range(len(P)):
            # std.optim decays only parameters of rank >= 2 (PyTorch with
            # the biases in a weight_decay = 0 group, as nanoGPT does): here
            # w, a [3, 1] matrix in the adamw files, and never the bias b.
            hk = dict(hp, weight_decay=0.0) if 'weight_decay' in hp and k == 1 else hp
            P[k] = opt(P[k], gs[k], st[k], t, lr(t) if callable(lr) else lr, **hk)
    return P
def sgd(p, g, s, t, lr): return [pi - lr*gi for pi, gi in zip(p, g)]
def momentum(p, g, s, t, lr, beta=0.9, nesterov=False):
    v = [beta*vi + gi for vi, gi in zip(s.get('v', [0.0]*len(p)), g)]; s['v'] = v
    if nesterov: return [pi - lr*(gi + beta*vi) for pi, gi, vi in zip(p, g, v)]
    return [pi - lr*vi for pi, vi in zip(p, v)]
def adam(p, g, s, t, lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0):
    m = [beta1*mi + (1-beta1)*gi for mi, gi in zip(s.get('m', [0.0]*len(p)), g)]
    v = [beta2*vi + (1-beta2)*gi*gi for vi, gi in zip(s.get('v', [0.0]*len(p)), g)]
    s['m'], s['v'] = m, v
    # torch.optim.AdamW decays first (p *= 1 - lr*wd), then takes the Adam step.
    return [pi*(1 - lr*weight_decay) - lr*(mi/(1-beta1**t))/(math.sqrt(vi/(1-beta2**t)) + eps)
            for pi, mi, vi in zip(p, m, v)]
def rmsprop(p, g, s, t, lr, rho=0.9, eps=1e-7):
    sq = [rho*si + (1-rho)*gi*gi for si, gi in zip(s.get('s', [0.0]*len(p)), g)]; s['s'] = sq
    return [pi - lr*gi/(math.sqrt(si) + eps) for pi, gi, si in zip(p, g, sq)]
SUFFIX = ''
def fmt(v): return '[' + ', '.join(repr(x) + SUFFIX for x in v) + ']'
def block(var, opt_text, P, tol, model='Lin', extra='', loss=None, steps=3, comment=None, matrix=False):
    loss = loss or f'mse({var}(x), y)'
    out = []
    if comment: out += ['// ' + l for l in comment.split('\n')]
    out += [f'let {var} = {model}()', f'train {var} on data {{', f'    loss(x, y) = {loss}', f'    optimizer = {opt_text}']
    if extra: out.append('    ' + extra)
    w = f'{var}.w[:, 0]' if matrix else f'{var}.w'
    out += [f'    steps = {steps}', '}', f'print({w}, {var}.b)',
            f'assert_close({w}, {fmt(P[0])}, tol = {tol})',
            f'assert_close({var}.b, {fmt(P[1])}, tol = {tol})', '']
    return '\n'.join(out)

PROBLEM = '''// The problem: least squares with one batch of four rows,
//   net(x) = x @ w + b,  w: [3] = ones,  b: [1] = zeros,  loss = mse(net(x), y),
// so every step's gradient is grad w = (2/4) xs^T r, grad b = (2/4) sum(r),
// r = xs @ w + b - ys. Each `train` runs `steps` steps (one batch per epoch).
// Expected values: plain Python floats (f64) running PyTorch's documented
// update rules (tests/reference/optimizers.py prints them), step t 1-based:'''
RULES = {
 'sgd': '//   sgd:      p -= lr * g',
 'momentum': '//   momentum: v = beta * v + g; p -= lr * v            (torch.optim.SGD, dampening 0)\n//   nesterov: v = beta * v + g; p -= lr * (g + beta * v)',
 'adam': '//   adam:     m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;\n//             p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)',
 'adamw': '//   adamw:    p *= 1 - lr * weight_decay, then the adam step (torch.optim.AdamW),\n//             for w only: std.optim decays only parameters of rank >= 2, never the bias b',
 'rmsprop': '//   rmsprop:  s = rho s + (1 - rho) g^2; p -= lr * g / (sqrt(s) + eps)  (torch.optim.RMSprop, alpha = rho)',
}
def header(title, rules, dtype='f32'):
    model = f'''model Lin {{
    param w: {dtype}[3] = ones()
    param b: {dtype}[1] = zeros()
    fn forward(x) = x @ w + b
}}
'''
    if 'adamw' in rules:
        # w as a [3, 1] matrix, the same problem, so that adamw decays it.
        model += f'''// The same with w a [3, 1] matrix, which adamw decays (a vector it would not).
model Mat {{
    param w: {dtype}[3, 1] = ones()
    param b: {dtype}[1] = zeros()
    fn forward(x) = reshape(x @ w, [-1]) + b
}}
'''
    xs = '[[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [2.0, 0.0, 1.0], [1.0, -1.0, 1.0]]'
    ys = '[1.0, -2.0, 3.0, 0.5]'
    if dtype == 'f64':
        data = f'let data = from_tensors(cast({xs}, f64), cast({ys}, f64)) |> batch(4)'
    else:
        data = f'let data = from_tensors({xs}, {ys}) |> batch(4)'
    return '\n'.join([title, PROBLEM] + [RULES[r] for r in rules]) + '\n\n' + model + data + '\n\n'

files = {}
# ---- A: sgd, momentum, nesterov (f32) ----
s = header('// sgd, momentum and momentum with nesterov (std.optim) on a fixed problem, in f32.', ['sgd', 'momentum'])
s = s.replace('use ', 'use ')
s = 'use std.optim.{sgd, momentum}\nuse std.loss.mse\n\n' + s
s += '// Hyper-parameters that are exact in binary keep f32 rounding out of the\n// comparison: the only differences left are f32 rounding of the arithmetic.\n'
s += block('plain', 'sgd(lr = 0.125)', run(sgd, lr=0.125), '1e-6')
s += block('heavy', 'momentum(lr = 0.125, beta = 0.75)', run(momentum, lr=0.125, beta=0.75), '1e-6')
s += block('ahead', 'momentum(lr = 0.125, beta = 0.75, nesterov = true)', run(momentum, lr=0.125, beta=0.75, nesterov=True), '1e-6')
s += block('defaults', 'momentum', run(momentum, lr=0.01), '1e-6', comment='The defaults: lr = 0.01, beta = 0.9, nesterov = false (the bare name works too).')
s += block('sgd_default', 'sgd()', run(sgd, lr=0.01), '1e-6', comment='sgd() defaults to lr = 0.01.')
files['optimizers_sgd_momentum_and_nesterov'] = s

# ---- B: adam, adamw, rmsprop (f32) ----
s = 'use std.optim.{adam, adamw, rmsprop}\nuse std.loss.mse\n\n' + header('// adam, adamw and rmsprop (std.optim) on a fixed problem, in f32.', ['adam', 'adamw', 'rmsprop'])
s += '// Hyper-parameters that are exact in binary (eps = 2^-20) keep f32 rounding of\n// the constants out of the comparison.\n'
E = '9.5367431640625e-07'
s += block('a', f'adam(lr = 0.125, beta1 = 0.75, beta2 = 0.9375, eps = {E})', run(adam, lr=0.125, beta1=0.75, beta2=0.9375, eps=2**-20), '1e-6')
s += block('a_default', 'adam(lr = 0.125)', run(adam, lr=0.125), '1e-5', comment='''The default betas (0.9, 0.999): 0.999 rounds to 0.99900001 in f32, so
1 - beta2^1 is 1.3e-5 (relatively) smaller than in f64 and the f32 run
differs from the f64 reference by about 2e-6 after three steps; hence 1e-5.''')
s += block('w', f'adamw(lr = 0.125, beta1 = 0.75, beta2 = 0.9375, eps = {E}, weight_decay = 0.25)', run(adam, lr=0.125, beta1=0.75, beta2=0.9375, eps=2**-20, weight_decay=0.25), '1e-6', model='Mat', matrix=True)
s += block('w_default', 'adamw(lr = 0.125)', run(adam, lr=0.125, weight_decay=0.01), '1e-5', comment='adamw defaults: the adam defaults and weight_decay = 0.01.', model='Mat', matrix=True)
s += block('r', 'rmsprop(lr = 0.0625, rho = 0.75)', run(rmsprop, lr=0.0625, rho=0.75), '1e-6', comment='rmsprop with the default eps = 1e-7.')
s += block('r_default', 'rmsprop()', run(rmsprop, lr=1e-3), '1e-6', comment='rmsprop defaults: lr = 1e-3, rho = 0.9, eps = 1e-7.')
s += block('r_eps', 'rmsprop(lr = 0.0625, rho = 0.75, eps = 0.5)', run(rmsprop, lr=0.0625, rho=0.75, eps=0.5), '1e-6', comment='A large eps shows it is added to sqrt(s), outside the root (PyTorch, Keras 3).')
files['optimizers_adam_adamw_and_rmsprop'] = s

# ---- C: schedules ----
def step_decay(lr, period, gamma=0.1): return lambda t: lr * gamma ** math.floor((t - 1) / period)
def exponential(lr, rate, period=1): return lambda t: lr * rate ** ((t - 1) / period)
def cosine(lr, steps, final=0.0): return lambda t: final + (lr - final) * 0.5 * (1 + math.cos(math.pi * min(t - 1, steps) / steps))
def warmup(lr, steps): return lambda t: lr * min(t / steps, 1.0)
def constant(lr): return lambda t: lr
scheds = [
  ('constant(0.125)', constant(0.125)),
  ('step_decay(0.25, 2, gamma = 0.5)', step_decay(0.25, 2, 0.5)),
  ('step_decay(0.25, 1)', step_decay(0.25, 1)),
  ('exponential(0.25, 0.5)', exponential(0.25, 0.5)),
  ('exponential(0.25, 0.5, period = 2)', exponential(0.25, 0.5, 2)),
  ('cosine(0.25, 4)', cosine(0.25, 4)),
  ('cosine(0.25, steps = 2, final = 0.0625)', cosine(0.25, 2, 0.0625)),
  ('warmup(0.25, 3)', warmup(0.25, 3)),
]
s = 'use std.optim.{sgd, momentum, adam, constant, step_decay, exponential, cosine, warmup}\nuse std.loss.mse\n\n'
s += header('''// Learning-rate schedules (std.optim): a hyper-parameter given a function is
// called with the 1-based step. Schedules follow Keras/PyTorch, whose
// iteration count is 0-based, so step t is evaluated at t - 1:
//   constant(lr)                = lr
//   step_decay(lr, period, g)   = lr * g^floor((t - 1) / period)
//   exponential(lr, rate, per)  = lr * rate^((t - 1) / per)
//   cosine(lr, steps, final)    = final + (lr - final) (1 + cos(pi min(t - 1, steps) / steps)) / 2
//   warmup(lr, steps)           = lr * min(t / steps, 1)''', ['sgd', 'momentum', 'adam'])
s += '// The schedules themselves, at steps 1..5 (values from Python\'s math module).\n'
for i, (name, f) in enumerate(scheds):
    vals = [f(t) for t in range(1, 6)]
    s += f'let sched{i} = {name}\n'
    s += f'print(sched{i}(1.0), sched{i}(2.0), sched{i}(3.0), sched{i}(4.0), sched{i}(5.0))\n'
    s += f'assert_close(stack((sched{i}(1.0), sched{i}(2.0), sched{i}(3.0), sched{i}(4.0), sched{i}(5.0))), {fmt(vals)}, tol = 1e-7)\n'
s += '''
// A schedule changes the rate at every step: with the linear loss
// sum(c * w) + sum(b) (c = [1, 2, 4]) the gradient is constant, so after k
// steps b = -(lr(1) + ... + lr(k)) and w = 1 - c * (lr(1) + ... + lr(k)).
// step_decay(0.5, 2, gamma = 0.5) gives rates 0.5, 0.5, 0.25, 0.25: b after
// 1..4 steps is -0.5, -1, -1.25, -1.5.
'''
lrs = step_decay(0.5, 2, 0.5)
for k in range(1, 5):
    S = sum(lrs(t) for t in range(1, k + 1))
    var = f'lin{k}'
    P = [[1 - c * S for c in (1.0, 2.0, 4.0)], [-S]]
    s += block(var, 'sgd(lr = step_decay(0.5, 2, gamma = 0.5))', P, '1e-6', loss=f'sum({var}.w * [1.0, 2.0, 4.0]) + sum({var}.b)', steps=k)
s += '// Each schedule driving sgd on the least-squares problem for 4 steps.\n'
for i, (name, f) in enumerate(scheds):
    s += block(f'sg{i}', f'sgd(lr = {name})', run(sgd, steps=4, lr=f), '1e-6', steps=4)
s += '// Schedules drive the other optimizers\' lr too.\n'
s += block('mw', 'momentum(lr = warmup(0.25, 2), beta = 0.75)', run(momentum, steps=4, lr=warmup(0.25, 2), beta=0.75), '1e-6', steps=4)
E = '9.5367431640625e-07'
s += block('ac', f'adam(lr = cosine(0.25, 3), beta1 = 0.75, beta2 = 0.9375, eps = {E})', run(adam, steps=4, lr=cosine(0.25, 3), beta1=0.75, beta2=0.9375, eps=2**-20), '1e-6', steps=4)
s += '// Any function of the step is a schedule, e.g. a lambda: lr = 0.5 / t.\n'
s += block('lam', 'sgd(lr = fn(t) = 0.5 / t)', run(sgd, steps=4, lr=lambda t: 0.5 / t), '1e-6', steps=4)
files['optimizers_schedules'] = s

# ---- D: clip_grad_norm ----
s = 'use std.optim.{sgd, momentum}\nuse std.loss.mse\n\n' + header('''// clip_grad_norm = c scales every gradient by min(1, c / (||g|| + 1e-6)),
// ||g|| the global norm over all parameters' gradients together
// (torch.nn.utils.clip_grad_norm_), before the optimizer sees them.''', ['sgd', 'momentum'])
n1 = math.sqrt(sum(g*g for gg in grads([[1.0,1.0,1.0],[0.0]]) for g in gg))
s += f'''// At the start ||g|| = {n1!r}
// = sqrt(14.75) (grad w = [1.25, 2.75, -0.75], grad b = [2.25]), well above
// 0.5, and it stays above it, so every step of `clipped` is clipped.
'''
s += block('clipped', 'sgd(lr = 0.125)', run(sgd, lr=0.125, clipn=0.5), '1e-6', extra='clip_grad_norm = 0.5')
pt = run(sgd, lr=0.125, clipn=0.5, per_tensor=True)
s += f'''// Clipping each tensor by its own norm instead would give b = {pt[1][0]!r}
// after three steps (w = {fmt(pt[0])}): far from the global result.
'''
s += block('loose', 'sgd(lr = 0.125)', run(sgd, lr=0.125), '1e-6', extra='clip_grad_norm = 100', comment='A bound above the norm leaves the gradients alone: plain sgd.')
s += block('int_bound', 'sgd(lr = 0.125)', run(sgd, lr=0.125, clipn=1.0), '1e-6', extra='clip_grad_norm = 1', comment='An int bound, with momentum accumulating clipped gradients below.')
s += block('clip_momentum', 'momentum(lr = 0.125, beta = 0.75)', run(momentum, lr=0.125, beta=0.75, clipn=2.0), '1e-6', extra='clip_grad_norm = 2.0')
files['optimizers_clip_grad_norm'] = s

# ---- E: f64 parameters ----
SUFFIX = 'f64'  # exact f64 literals
s = 'use std.optim.{sgd, momentum, adam, adamw, rmsprop, cosine, exponential}\nuse std.loss.mse\n\n' + header('''// Every optimizer on f64 parameters, at the default hyper-parameters: in f64
// the update, the step number (bound in the parameter's dtype), schedules and
// the gradient-norm clipping all run in f64, so the results match the f64
// reference to rounding (tol = 1e-12).''', ['sgd', 'momentum', 'adam', 'adamw', 'rmsprop'], dtype='f64')
s += block('d_sgd', 'sgd()', run(sgd, lr=0.01), '1e-12')
s += block('d_momentum', 'momentum(lr = 0.1)', run(momentum, lr=0.1), '1e-12')
s += block('d_nesterov', 'momentum(lr = 0.1, nesterov = true)', run(momentum, lr=0.1, nesterov=True), '1e-12')
s += block('d_adam', 'adam(lr = 0.1)', run(adam, lr=0.1), '1e-12')
s += block('d_adamw', 'adamw(lr = 0.1)', run(adam, lr=0.1, weight_decay=0.01), '1e-12', model='Mat', matrix=True)
s += block('d_rmsprop', 'rmsprop(lr = 0.1)', run(rmsprop, lr=0.1), '1e-12')
s += block('d_cosine', 'adam(lr = cosine(0.1, 3, final = 0.01))', run(adam, steps=4, lr=cosine(0.1, 3, 0.01)), '1e-12', steps=4)
s += block('d_exp', 'momentum(lr = exponential(0.1, 0.3))', run(momentum, steps=4, lr=exponential(0.1, 0.3)), '1e-12', steps=4)
s += block('d_clip', 'sgd(lr = 0.1)', run(sgd, lr=0.1, clipn=0.3), '1e-12', extra='clip_grad_norm = 0.3')
files['optimizers_on_f64_parameters'] = s

if __name__ == '__main__':
    out = sys.argv[1] if len(sys.argv) > 1 else None
    for name, text in files.items():
        if out:
            open(f'{out}/{name}.tfl', 'w').write(text)
        else:
            print(f'==== {name}.tfl'); print(text)
