"""Logistic regression by minibatch SGD, fed by exactbatch from an .ndf file on disk.

Writes a synthetic dataset once (rows drawn from a logistic model with known
coefficients) to ``.cache/`` at the repository root, then trains on it for a
few shuffled epochs and checks that the fitted coefficients match the true ones.

    python examples/demo.py                # the defaults below
    python examples/demo.py --rows 200000 --epochs 5
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from exactbatch import DataLoader, NdfError, open_ndf, save_ndf

ROWS = 1_000_000
FEATURES = 16
EPOCHS = 3
BATCH_SIZE = 1024
LEARNING_RATE = 0.5  # plain SGD, decayed linearly to 0 over the run
SEED = 0
CACHE = Path(__file__).resolve().parent.parent / ".cache"

TRUE_W = np.linspace(-1.5, 1.5, FEATURES)  # the model the labels are drawn from
TRUE_B = 0.25


def sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # 1 / (1 + exp(-z)), without overflow


def log_loss(z, y):
    """Mean of -log p(y | z) for labels y in {0, 1} and logits z."""
    return float(np.mean(np.logaddexp(0.0, z) - y * z))


def dataset_file(folder: Path, rows: int) -> Path:
    """The demo's .ndf file in ``folder``: reused when valid, else (re)written."""
    path = folder / f"logistic-n{rows}-d{FEATURES}-seed{SEED}.ndf"
    try:
        with open_ndf(path) as f:
            if (f.n, f.d, f.l) == (rows, FEATURES, 1):
                print(f"reusing {path}")
                return path
    except (FileNotFoundError, NdfError):
        pass
    t0 = time.perf_counter()
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((rows, FEATURES))  # the only full-size array: 8*rows*d bytes
    y = (rng.random(rows) < sigmoid(x @ TRUE_W + TRUE_B)).astype(np.float64)
    folder.mkdir(parents=True, exist_ok=True)
    save_ndf(path, (x, y))  # atomic; writes in slabs, so no second full-size copy
    size_mb = path.stat().st_size / 1e6
    print(f"wrote {path} ({size_mb:.0f} MB) in {time.perf_counter() - t0:.1f} s")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--rows", type=int, default=ROWS, help="rows in the dataset")
    ap.add_argument("--epochs", type=int, default=EPOCHS, help="passes over the data")
    ap.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="rows per SGD step")
    ap.add_argument("--lr", type=float, default=LEARNING_RATE, help="initial learning rate")
    ap.add_argument("--cache", type=Path, default=CACHE, help="folder for the .ndf file")
    args = ap.parse_args()

    data = open_ndf(dataset_file(args.cache, args.rows))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, seed=SEED)

    w, b = np.zeros(FEATURES), 0.0
    steps = args.epochs * len(loader)
    bar = tqdm(total=steps, unit="batch", desc="training")
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        for xb, yb in loader:  # each pass over the loader is a new shuffled epoch
            y = yb[:, 0]
            z = xb @ w + b
            r = sigmoid(z) - y  # d(log-loss)/dz
            lr = args.lr * (1 - bar.n / steps)
            w -= lr * (xb.T @ r) / len(y)
            b -= lr * r.mean()
            bar.set_postfix(epoch=epoch, loss=f"{log_loss(z, y):.4f}", refresh=False)
            bar.update()
    seconds = time.perf_counter() - t0
    bar.close()

    # Evaluate over the whole file, in file order, in large batches.
    loss_fit = loss_true = correct = 0.0
    for xb, yb in DataLoader(data, batch_size=65536, shuffle=False):
        y = yb[:, 0]
        z = xb @ w + b
        loss_fit += log_loss(z, y) * len(y)
        loss_true += log_loss(xb @ TRUE_W + TRUE_B, y) * len(y)
        correct += np.sum((z > 0) == (y > 0.5))
    n = data.n

    print(
        f"\n{args.epochs} epochs of {n:,} rows, batch {args.batch_size}: {seconds:.2f} s, "
        f"{args.epochs * n / seconds:,.0f} rows/s (loader + SGD)"
    )
    print(f"log-loss {loss_fit / n:.5f} (true coefficients: {loss_true / n:.5f})")
    print(f"accuracy {correct / n:.2%}")
    print("\n| coefficient | true | fitted | error |\n|---|---:|---:|---:|")
    names = [f"w[{j}]" for j in range(FEATURES)] + ["intercept"]
    for name, t, f in zip(names, [*TRUE_W, TRUE_B], [*w, b], strict=True):
        print(f"| {name} | {t:+.3f} | {f:+.3f} | {f - t:+.3f} |")
    err = np.abs(np.r_[w, b] - np.r_[TRUE_W, TRUE_B]).max()
    print(f"\nmax |fitted - true| = {err:.4f}")


if __name__ == "__main__":
    main()
