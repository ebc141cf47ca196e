#!/usr/bin/env python3
"""Largest stable step a = lr * h of heavy-ball SGD on f(x) = h x^2 / 2 when the gradient is
computed on parameters `s` updates old, for each staleness compensation of sluice::pipeline
(docs/pipeline.md, "Staleness"). The update is the pipeline's: m = mu m + g, w = w - lr m, with g
taken at the parameters the trainer holds. Stability is decided by iterating the linear recurrence
(the decay of the state over 3000 steps) and bisecting on a; no third-party packages.

The second table is local_step when the ranks disagree: two ranks with f_r(x) = h (x - c_r)^2 / 2,
c = +1 and -1. Each rank's view steps the s in-flight updates with its own gradient, which was
itself computed at its own view, so the difference between the ranks' views feeds back on itself
without averaging: stable for lr h < 1 at staleness 1 and lr h < 1 / (1 + mu) at staleness 2
(the older in-flight gradient enters the view through the momentum twice). h is then the curvature
of one rank's batch.

  python3 scripts/staleness_quadratic.py
"""
import math


def settles(a, mu, s, method, mu_eff=None, steps=3000):
    mu = mu if mu_eff is None else mu_eff
    w = [1.0] * (s + 2)  # w[-1]: master weights after the latest update; w[-1-s]: what the trainer holds
    m = [0.0] * (s + 2)
    for _ in range(steps):
        held = w[-1 - s]
        if method == "none":
            p = held
        elif method == "weight_prediction":  # w + s (w - w_prev)
            p = held + s * (held - w[-2 - s])
        elif method == "local_step":  # the optimizer stepped s times with this rank's own gradients
            # On a quadratic every rank sees the same function, so this equals the master weights.
            p = w[-1]
        mn = mu * m[-1] + p
        wn = w[-1] - a * mn
        w = w[1:] + [wn]
        m = m[1:] + [mn]
        if abs(wn) > 1e30:
            return False
    return abs(w[-1]) + abs(w[-2]) < 1e-3


def max_step(mu, s, method, mu_eff=None):
    lo, hi = 0.0, 8.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if settles(mid, mu, s, method, mu_eff) else (lo, mid)
    return lo


def settles_disagreeing(a, mu, s, steps=4000, centers=(1.0, -1.0)):
    """local_step with two ranks whose minima differ: True when the master weights settle at 0 and
    the ranks' views (so their gradients) settle too."""
    w, m, pending = 1.0, 0.0, []  # pending: the ranks' gradients of the steps in flight, oldest first
    grads = [0.0] * len(centers)
    for _ in range(steps):
        before = grads
        grads = []
        for c in centers:
            p, mm = w, m
            for own in pending:  # the view: the optimizer stepped with this rank's own gradients
                mm = mu * mm + own[len(grads)]
                p -= a * mm
            grads.append(p - c)
        pending.append(grads)
        if len(pending) > s:
            g = pending.pop(0)
            m = mu * m + sum(g) / len(g)
            w -= a * m
        if abs(w) > 1e12 or abs(grads[0]) > 1e12:
            return False
    return abs(w) < 1e-3 and max(abs(x - y) for x, y in zip(grads, before)) < 1e-3


def max_step_disagreeing(mu, s):
    lo, hi = 0.0, 8.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if settles_disagreeing(mid, mu, s) else (lo, mid)
    return lo


if __name__ == "__main__":
    mu = 0.9
    print(f"heavy ball, momentum {mu}: largest stable lr*h (fresh gradients: 2 (1 + mu) = {2 * (1 + mu):.2f})")
    print("| compensation | staleness 0 | staleness 1 | staleness 2 |")
    print("|---|---|---|---|")
    for method in ("none", "weight_prediction", "local_step"):
        row = [f"{max_step(mu, s, method):.3f}" for s in (0, 1, 2)]
        print(f"| {method} | " + " | ".join(row) + " |")
    row = [f"{max_step(0.0, s, 'none'):.3f}" for s in (0, 1, 2)]
    print("| none, momentum reduced to 0 | " + " | ".join(row) + " |")
    print()
    print("local_step, two ranks that disagree: largest stable lr*h of one rank")
    print("| momentum | staleness 0 | staleness 1 | staleness 2 |")
    print("|---|---|---|---|")
    for m in (0.0, 0.5, 0.9):
        row = [f"{max_step_disagreeing(m, s):.3f}" for s in (0, 1, 2)]
        print(f"| {m} | " + " | ".join(row) + " |")
