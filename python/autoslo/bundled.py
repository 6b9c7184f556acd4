"""The bundled, pretrained predictors shipped inside the package, and how to load a model.

Kept apart from :mod:`autoslo.predictor` (training, which needs the emulator) so that emulation
can load the default model without importing training code: no import cycle.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal, overload

from autoslo._core import Predictor

#: Directory names of the bundled models, by variant.
BUNDLED = {"iconq+": "iconq_plus", "censored": "censored", "size": "size", "iconq": "iconq"}


def bundled_model_dir(variant: str = "iconq+") -> Path:
    """Directory of a bundled model (shipped inside the package)."""
    if variant not in BUNDLED:
        raise ValueError(f"unknown variant {variant!r}; bundled: {sorted(BUNDLED)}")
    return Path(str(resources.files("autoslo").joinpath("models", BUNDLED[variant])))


def load(path: str | Path | None = None, backend: str = "native") -> Predictor:
    """Load a model directory (default: the bundled Iconq+), verifying native against libtorch.

    Raises ``AutoSloCoreError`` if the directory is missing, a file is corrupt (digest mismatch),
    or the model was written by an incompatible version.
    """
    return Predictor(str(path if path is not None else bundled_model_dir()), backend)


#: Routing policies that consult the latency predictor.
NEEDS_PREDICTOR = ("autoslo", "autoslo-latency", "stage-cost", "least-work")


@overload
def predictor_for(needed: Literal[True], predictor: Predictor | None) -> Predictor: ...
@overload
def predictor_for(needed: bool, predictor: Predictor | None) -> Predictor | None: ...
def predictor_for(needed: bool, predictor: Predictor | None) -> Predictor | None:
    """``predictor``, or the bundled Iconq+ if it is ``None`` and one is ``needed``."""
    if predictor is None and needed:
        return load()
    return predictor


def model_option(path: str | None, routing: str | None, scales: bool) -> Predictor | None:
    """The predictor of a command's ``--model`` option: ``None`` without one, else the model at
    ``path``, refused when nothing in the run predicts latency (``routing`` not among
    ``NEEDS_PREDICTOR`` and no autoscaler, configuration or admission: ``scales`` is False)."""
    if path is None:
        return None
    if not scales and (routing or "autoslo") not in NEEDS_PREDICTOR:
        raise ValueError(f"--model: {routing} routing over fixed clusters predicts no latency (the model serves AutoSLO routing, the autoscaler and admission)")
    return load(path)
