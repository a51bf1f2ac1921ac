# TensorFlow MultiWorkerMirroredStrategy on the canonical MLP or CNN (the
# models of benches/dist/*.tfl), Adam, one thread per worker; after
# ../shared/bench/bench_tf_mwms.py, with the CNN added.
# Usage: python tf_mwms.py MODEL NWORKERS INDEX PORT0 PER_WORKER_BATCH
# (NWORKERS=1 runs without a cluster). Start workers 1..N-1 in the
# background first, then worker 0, which prints one JSON line.
import json, os, sys, time, statistics
model_name, n, idx, port0, B = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
if n > 1:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{port0 + i}" for i in range(n)]}, "task": {"type": "worker", "index": idx}})
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"; os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np, tensorflow as tf, keras
tf.config.threading.set_intra_op_parallelism_threads(1); tf.config.threading.set_inter_op_parallelism_threads(1)
strategy = tf.distribute.MultiWorkerMirroredStrategy() if n > 1 else tf.distribute.get_strategy()
L = keras.layers
with strategy.scope():
    if model_name == "mlp":
        model = keras.Sequential([keras.Input((784,)), L.Dense(256, activation="relu"), L.Dense(256, activation="relu"), L.Dense(10)])
        shape = (B, 784)
    else:
        model = keras.Sequential([keras.Input((28, 28, 1)), L.Conv2D(16, 3, padding="same", activation="relu"), L.MaxPooling2D(2),
                                  L.Conv2D(32, 3, padding="same", activation="relu"), L.MaxPooling2D(2), L.Flatten(), L.Dense(10)])
        shape = (B, 28, 28, 1)
    opt = keras.optimizers.Adam(learning_rate=1e-3, epsilon=1e-8); opt.build(model.trainable_variables)
rng = np.random.default_rng(1 + idx)
x = tf.constant(rng.normal(size=shape).astype(np.float32)); y = tf.constant(rng.integers(0, 10, B).astype(np.int32))
loss_obj = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
@tf.function
def step(x, y):
    def fn(x, y):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_obj(y, model(x, training=True)), global_batch_size=B * n)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables)); return loss
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(fn, args=(x, y)), axis=None)
for _ in range(20): step(x, y)
ts = []
for _ in range(200):
    t0 = time.perf_counter(); l = step(x, y); float(l); ts.append(time.perf_counter() - t0)
m = statistics.median(ts) * 1e3
if idx == 0: print(json.dumps({"model": model_name, "workers": n, "per_worker_batch": B, "step_ms": round(m, 3), "examples_per_s": round(n * B / m * 1e3)}))
