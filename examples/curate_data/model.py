"""The judge's fixed model: multinomial logistic regression trained by full-batch gradient descent.

Everything about it is fixed and deterministic (zero initialisation, fixed step size, fixed number
of steps, fixed L2 penalty, no shuffling), so a selection always gets the same accuracy. It takes the
features as they are, after one safety step: non-finite values become 0 (NaN) or the clip bound
(+/-inf) and every value is clipped to [-CLIP, CLIP]; so a corrupted row hurts training the way a
real outlier does, without making the arithmetic overflow. It is unweighted: a class that fills
most of the selection also pulls the bias towards itself, and the hidden test set is balanced."""

from __future__ import annotations

import numpy as np

CLIP = 25.0
STEPS = 300
LEARNING_RATE = 0.05
L2 = 1e-3


def sanitise_features(x: np.ndarray) -> np.ndarray:
    """Finite, bounded float64 features (what the model actually trains on)."""
    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=CLIP, neginf=-CLIP)
    return np.clip(x, -CLIP, CLIP)


def fit(x: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Weights (d, k) and bias (k,) of a softmax regression; an empty training set gives zeros."""
    x = sanitise_features(x)
    n, d = x.shape
    w = np.zeros((d, n_classes))
    b = np.zeros(n_classes)
    if n == 0:
        return w, b
    onehot = np.zeros((n, n_classes))
    onehot[np.arange(n), y] = 1.0
    for _ in range(STEPS):
        logits = x @ w + b
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        grad = (p - onehot) / n
        w -= LEARNING_RATE * (x.T @ grad + L2 * w)
        b -= LEARNING_RATE * grad.sum(axis=0)
    return w, b


def accuracy(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, n_classes: int) -> float:
    """Test accuracy of the fixed model trained on (x_train, y_train)."""
    w, b = fit(x_train, y_train, n_classes)
    predicted = np.argmax(sanitise_features(x_test) @ w + b, axis=1)
    return float(np.mean(predicted == y_test))
