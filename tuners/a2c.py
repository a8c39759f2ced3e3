"""The actor-critic networks of N-A2C: one-hidden-layer numpy MLPs with hand-written gradients, and Adam.

Small enough (one transition at a time, tens of inputs, a few hundred actions) that numpy beats any
framework's dispatch overhead, and the tuner needs no deep-learning dependency.
"""
from __future__ import annotations

import math

import numpy as np

GAMMA = 0.5
"""Discount of the critic's one-step target: small, because walks are short and the next step matters most."""


class MLP:
    """x -> W2·tanh(W1·x + b1) + b2, with the gradient of any output-side loss written out by hand."""

    def __init__(self, n_in: int, n_hidden: int, n_out: int, rng: np.random.Generator, out_scale: float = 1.0) -> None:
        self.params = {
            "W1": rng.normal(0.0, 1.0 / math.sqrt(n_in), (n_hidden, n_in)),
            "b1": np.zeros(n_hidden),
            "W2": rng.normal(0.0, out_scale / math.sqrt(n_hidden), (n_out, n_hidden)),
            "b2": np.zeros(n_out),
        }

    def forward(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The output and the hidden activations (which `backward` needs)."""
        h = np.tanh(self.params["W1"] @ x + self.params["b1"])
        return self.params["W2"] @ h + self.params["b2"], h

    def backward(self, x: np.ndarray, h: np.ndarray, grad_out: np.ndarray) -> dict[str, np.ndarray]:
        """d(loss)/d(params) given d(loss)/d(output) at input `x` with hidden activations `h`."""
        grad_pre = (self.params["W2"].T @ grad_out) * (1.0 - h * h)
        return {"W1": np.outer(grad_pre, x), "b1": grad_pre, "W2": np.outer(grad_out, h), "b2": grad_out}


def policy(actor: MLP, x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """π(·|x) as a softmax over the allowed actions (zero elsewhere), and the actor's hidden activations."""
    logits, h = actor.forward(x)
    logits = np.where(mask, logits, -np.inf)
    exp = np.exp(logits - logits[mask].max())
    return exp / exp.sum(), h


def log_prob_grad(actor: MLP, x: np.ndarray, mask: np.ndarray, action: int) -> tuple[float, dict[str, np.ndarray]]:
    """log π(action|x) and its gradient: d/dlogits = onehot(action) − π, zero on masked actions."""
    probs, h = policy(actor, x, mask)
    grad_logits = -probs
    grad_logits[action] += 1.0
    return float(np.log(probs[action])), actor.backward(x, h, grad_logits)


def value_grad(critic: MLP, x: np.ndarray, target: float) -> tuple[float, dict[str, np.ndarray]]:
    """V(x) and the gradient of the squared error ½(V(x) − target)²."""
    out, h = critic.forward(x)
    value = float(out[0])
    return value, critic.backward(x, h, np.array([value - target]))


class Adam:
    """Adam steps on a dict of arrays: single-transition gradients vary wildly in scale, Adam evens them."""

    def __init__(self, params: dict[str, np.ndarray], lr: float, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8) -> None:
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def descend(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        """Update `params` in place against `grads`."""
        self.t += 1
        for k, g in grads.items():
            self.m[k] = self.beta1 * self.m[k] + (1 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g * g
            m_hat = self.m[k] / (1 - self.beta1 ** self.t)
            v_hat = self.v[k] / (1 - self.beta2 ** self.t)
            params[k] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def a2c_update(actor: MLP, critic: MLP, actor_opt: Adam, critic_opt: Adam, x: np.ndarray, mask: np.ndarray,
               action: int, reward: float, x_next: np.ndarray | None) -> float:
    """One advantage actor-critic step on the transition (x, action, reward, x_next); returns the advantage.

    The target r + GAMMA·V(x_next) (just r when the walk ended, x_next None) and the advantage are plain
    numbers, so no gradient flows through them: the critic descends ½(V(x) − target)² and the actor
    ascends advantage·log π(action|x).
    """
    target = reward + (0.0 if x_next is None else GAMMA * float(critic.forward(x_next)[0][0]))
    value, critic_grads = value_grad(critic, x, target)
    advantage = target - value
    _, actor_grads = log_prob_grad(actor, x, mask, action)
    actor_opt.descend(actor.params, {k: -advantage * g for k, g in actor_grads.items()})
    critic_opt.descend(critic.params, critic_grads)
    return advantage
