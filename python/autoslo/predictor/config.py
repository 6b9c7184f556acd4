"""Training configuration and metrics that do not need PyTorch (so the CLI starts fast)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The paper's ablation (§8.3.1): name → (size features, censored observations, incremental order).
VARIANTS: dict[str, tuple[bool, bool, bool]] = {
    "iconq": (False, False, False),
    "size": (True, False, False),
    "censored": (True, True, False),
    "iconq+": (True, True, True),
}


@dataclass
class TrainConfig:
    """Hyper-parameters (defaults follow the reference predictor where the CPU budget allows)."""

    variant: str = "iconq+"
    embedding: int = 32
    hidden: int = 64
    head_hidden: int = 64
    censored_prob: float = 0.005
    batch_size: int = 256
    learning_rate: float = 2e-3
    learning_rate_gamma: float = 0.9
    grad_clip_max_norm: float = 2.0
    epochs: int = 40
    patience: int = 5
    min_loss_improvement: float = 1e-3
    #: Samples drawn (without replacement) per epoch; None = all. Bounds an epoch's CPU time.
    max_train_samples: int | None = 8192
    #: Validation samples used for early stopping (a fixed random subset); None = all.
    max_val_samples: int | None = 4096
    seed: int = 0
    threads: int = 2

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown variant {self.variant!r}; choose from {sorted(VARIANTS)}")
        for k in ("embedding", "hidden", "head_hidden", "batch_size", "epochs", "patience", "threads"):
            if getattr(self, k) <= 0:
                raise ValueError(f"{k} must be positive")


def qerror_summary(ln_pred: np.ndarray, ln_label: np.ndarray) -> dict[str, float]:
    """Q-error percentiles of ln predictions against ln labels."""
    q = np.exp(np.abs(np.asarray(ln_pred, dtype=np.float64) - np.asarray(ln_label, dtype=np.float64)))
    if len(q) == 0:
        return {"n": 0, "p50": float("nan"), "p90": float("nan"), "p95": float("nan")}
    return {"n": int(len(q)), "p50": float(np.quantile(q, 0.5)), "p90": float(np.quantile(q, 0.9)), "p95": float(np.quantile(q, 0.95))}
