"""Train Iconq+ (and the paper's ablation variants) in PyTorch and export the artifact Rust serves.

Loss (§8.3.2, §4.3): predictions and labels are ln seconds; an observed latency costs |pred − label|
(the log of the Q-error); a censored one (timed out, or a sampled partial neighbour set) costs
max(0, label − pred), i.e. nothing once the prediction reaches the lower bound. Adam with gradient
clipping and a decaying learning rate; early stopping on the validation loss.

An artifact is a directory: ``model.pt`` (TorchScript), ``stage.json`` and ``meta.json``. Export
loads it back through the Rust core, which checks the native kernel against libtorch.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import torch
from tqdm.auto import tqdm

from autoslo import _core
from autoslo.predictor.config import VARIANTS, TrainConfig
from autoslo.predictor.model import IconqPlus

FORMAT = "autoslo-iconq"
FORMAT_VERSION = 1
FEATURE_VERSION = 1
class Samples:
    """Iconq+ samples from the Rust dataset builder, assembled into padded batches on demand."""

    def __init__(self, d: dict) -> None:
        self.f = torch.from_numpy(d["query_features"])
        self.pt = torch.from_numpy(d["pair_target"])
        self.pn = torch.from_numpy(d["pair_neighbour"])
        self.px = torch.from_numpy(d["pair_extra"])
        self.target = torch.from_numpy(d["target"])
        self.boff, self.blen = torch.from_numpy(d["before_off"]), torch.from_numpy(d["before_len"])
        self.aoff, self.alen = torch.from_numpy(d["after_off"]), torch.from_numpy(d["after_len"])
        self.label = torch.from_numpy(d["ln_label"])
        self.censored = torch.from_numpy(d["censored"])
        self.ln_stage = self.f[self.target, -1]

    def __len__(self) -> int:
        return len(self.label)

    def _seq(self, off: torch.Tensor, ln: torch.Tensor) -> torch.Tensor:
        t = max(int(ln.max()), 1)
        steps = torch.arange(t)
        mask = steps[None, :] < ln[:, None]
        rows = torch.where(mask, off[:, None] + steps[None, :], torch.zeros_like(off)[:, None])
        x = torch.cat([self.f[self.pt[rows]], self.f[self.pn[rows]], self.px[rows]], -1)
        return x * mask[..., None]

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            self._seq(self.boff[idx], self.blen[idx]),
            self.blen[idx],
            self._seq(self.aoff[idx], self.alen[idx]),
            self.alen[idx],
            self.ln_stage[idx],
            self.label[idx],
            self.censored[idx],
        )

    def normalisation(self, max_rows: int = 200_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and std of interaction vectors over (a sample of) all pair rows."""
        g = torch.Generator().manual_seed(seed)
        n = len(self.pt)
        rows = torch.randperm(n, generator=g)[:max_rows] if n > max_rows else torch.arange(n)
        x = torch.cat([self.f[self.pt[rows]], self.f[self.pn[rows]], self.px[rows]], -1).double()
        mu, sd = x.mean(0), x.std(0)
        sd = torch.where(sd > 1e-6, sd, torch.ones_like(sd))
        return mu.float(), sd.float()

    def batches(self, batch_size: int, shuffle: bool, g: torch.Generator | None = None, subset: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Batches of similar total length (less padding), in random order when training."""
        ids = torch.arange(len(self)) if subset is None else subset
        length = (self.blen[ids] + self.alen[ids]).float()
        if shuffle:
            length = length + torch.rand(len(ids), generator=g) * 4.0
        order = ids[torch.argsort(length)]
        out = list(torch.split(order, batch_size))
        if shuffle:
            out = [out[k] for k in torch.randperm(len(out), generator=g).tolist()]
        return out


def loss_fn(pred: torch.Tensor, label: torch.Tensor, censored: torch.Tensor) -> torch.Tensor:
    """Mean of |pred − label| (observed) and max(0, label − pred) (censored), in ln seconds."""
    d = pred - label
    return torch.where(censored, torch.relu(-d), d.abs()).mean()


def build_samples(trace: pa.Table, stage_path: str | Path, variant: str, censored_prob: float, seed: int, classes_path: str | Path | None = None) -> Samples:
    size, censored, chrono = VARIANTS[variant]
    d = _core.predictor_dataset(
        trace,
        str(stage_path),
        size_features=size,
        after_chronological=chrono,
        censored_prob=censored_prob if censored else 0.0,
        seed=seed,
        keep_timeouts=censored,
        classes_path=None if classes_path is None else str(classes_path),
    )
    return Samples(d)


def _evaluate_loss(model: IconqPlus, s: Samples, batch_size: int, subset: torch.Tensor | None = None) -> float:
    total, n = 0.0, 0
    with torch.no_grad():
        for idx in s.batches(batch_size * 4, shuffle=False, subset=subset):
            xb, lb, xa, la, ls, y, c = s.batch(idx)
            total += float(loss_fn(model(xb, lb, xa, la, ls), y, c)) * len(idx)
            n += len(idx)
    return total / max(n, 1)


def train(
    train_trace: pa.Table,
    val_trace: pa.Table,
    stage_path: str | Path,
    out: str | Path,
    config: TrainConfig = TrainConfig(),
    training_data_sha256: str = "",
    extra_meta: dict | None = None,
    progress: bool = True,
    classes_path: str | Path | None = None,
) -> dict:
    """Train one variant and export it to directory `out`; returns the training report. For a
    history's traces, ``classes_path`` is its ``classes.json`` (see
    :func:`autoslo.predictor.stage.write_classes_json`), exported with the model.

    Ctrl-C stops training early: the best model so far is exported and the report says so.
    """
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    tr = build_samples(train_trace, stage_path, config.variant, config.censored_prob, config.seed, classes_path)
    va = build_samples(val_trace, stage_path, config.variant, config.censored_prob, config.seed + 1, classes_path)
    if len(tr) == 0 or len(va) == 0:
        raise ValueError("no training or validation samples: are the traces empty?")
    model = IconqPlus(tr.f.shape[1] * 2 + tr.px.shape[1], config.embedding, config.hidden, config.head_hidden)
    mu, sd = tr.normalisation(seed=config.seed)
    with torch.no_grad():
        model.mu.copy_(mu)
        model.sigma.copy_(sd)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=config.learning_rate)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=config.learning_rate_gamma)
    g = torch.Generator().manual_seed(config.seed)
    val_subset = None
    if config.max_val_samples is not None and config.max_val_samples < len(va):
        val_subset = torch.randperm(len(va), generator=torch.Generator().manual_seed(config.seed + 7))[: config.max_val_samples]
    best, best_state, bad, history, stopped = math.inf, None, 0, [], "max_epochs"
    t0 = time.time()
    bar = tqdm(range(config.epochs), desc=f"training {config.variant}", unit="epoch", disable=not progress)
    try:
        for epoch in bar:
            model.train()
            subset = None
            if config.max_train_samples is not None and config.max_train_samples < len(tr):
                subset = torch.randperm(len(tr), generator=g)[: config.max_train_samples]
            batches = tr.batches(config.batch_size, shuffle=True, g=g, subset=subset)
            run = 0.0
            for idx in batches:
                xb, lb, xa, la, ls, y, c = tr.batch(idx)
                loss = loss_fn(model(xb, lb, xa, la, ls), y, c)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, config.grad_clip_max_norm)
                opt.step()
                run += loss.item()
            sched.step()
            model.eval()
            v = _evaluate_loss(model, va, config.batch_size, val_subset)
            history.append({"epoch": epoch, "train_loss": run / len(batches), "val_loss": v})
            bar.set_postfix(train=f"{run / len(batches):.3f}", val=f"{v:.3f}")
            if v < best - config.min_loss_improvement:
                best, bad = v, 0
                best_state = {k: t.clone() for k, t in model.state_dict().items()}
            else:
                bad += 1
                if bad >= config.patience:
                    stopped = "early_stopping"
                    break
    except KeyboardInterrupt:
        stopped = "interrupted"
        if best_state is None:
            raise
    finally:
        bar.close()
    assert best_state is not None
    model.load_state_dict(best_state)
    model.eval()
    report = {
        "variant": config.variant,
        "train_samples": len(tr),
        "val_samples": len(va),
        "epochs": len(history),
        "best_val_loss": best,
        "stopped": stopped,
        "seconds": round(time.time() - t0, 1),
        "history": history,
    }
    export(model, stage_path, out, config, training_data_sha256, {**(extra_meta or {}), "training": report}, classes_path)
    return report


def export(model: IconqPlus, stage_path: str | Path, out: str | Path, config: TrainConfig, training_data_sha256: str, extra: dict, classes_path: str | Path | None = None) -> Path:
    """Write ``model.pt``, ``stage.json``, ``meta.json`` (and ``classes.json`` for a history's
    model) to `out`, then load it back through Rust."""
    import hashlib

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.jit.script(model).save(str(out / "model.pt"))
    if Path(stage_path).resolve() != (out / "stage.json").resolve():
        shutil.copyfile(stage_path, out / "stage.json")
    digest = lambda p: hashlib.sha256(p.read_bytes()).hexdigest()  # noqa: E731
    if classes_path is not None:
        if Path(classes_path).resolve() != (out / "classes.json").resolve():
            shutil.copyfile(classes_path, out / "classes.json")
        extra = {**extra, "classes_sha256": digest(out / "classes.json")}
    elif (out / "classes.json").exists():
        (out / "classes.json").unlink()
    size, censored, chrono = VARIANTS[config.variant]
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "feature_version": FEATURE_VERSION,
        "variant": config.variant,
        "size_features": size,
        "after_chronological": chrono,
        "censored_prob": config.censored_prob if censored else 0.0,
        "embedding": config.embedding,
        "hidden": config.hidden,
        "head_hidden": config.head_hidden,
        "feature_names": _core.interaction_feature_names(),
        "model_sha256": digest(out / "model.pt"),
        "stage_sha256": digest(out / "stage.json"),
        "training_data_sha256": training_data_sha256,
        "torch_version": torch.__version__,
        "config": asdict(config),
        **extra,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    _core.Predictor(str(out))  # raises if the artifact does not load or native ≠ libtorch
    return out
