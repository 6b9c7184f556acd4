"""SimulateBatch on Ray: the Policy Tuner's simulations spread over a Ray cluster.

``RayBackend`` is what ``tune(..., backend="ray")`` and ``simulate_batch(..., backend="ray")``
use. The tuner itself still runs here, in the Rust core; each SimulateBatch call it makes is cut
into chunks of (configuration, workload) jobs, and every chunk is one Ray task that simulates its
jobs in the Rust core on the worker (``_core.simulate_pairs``) and returns an Arrow table.

* The predictor artifact (its model directory's files) is put in Ray's object store once per
  backend, and each workload once per backend (the core fingerprints workloads by content, so
  the forecasts of a tuning are put once however many batches simulate them). Tasks receive object
  references; a worker loads the predictor once and keeps it.
* Simulation is deterministic, so the results equal the rayon backend's for the same inputs.
* A task whose worker dies is retried by Ray (``max_retries``); its jobs are simulated again and
  the result is unchanged. A task that raises fails the batch with the task's error.
* ``ray.init()`` is called on first use if Ray is not initialised: with no ``address`` (and no
  ``RAY_ADDRESS`` in the environment) it starts a local cluster on this machine; with an address
  (``"ray://head:10001"``, ``"auto"``) it joins an existing cluster, whose nodes need the same
  ``autoslo`` version installed (``pip install "autoslo[ray]"``).

Ray is an optional dependency: ``pip install "autoslo[ray]"``.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from autoslo import _core

#: Predictors loaded in this (worker) process, by artifact key.
_WORKER_PREDICTORS: dict[str, _core.Predictor] = {}


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError('the Ray backend needs Ray: pip install "autoslo[ray]"') from None
    return ray


def _artifact(path: str, kernel: str, arrival_correction: bool, model_sha256: str) -> dict[str, Any]:
    """A predictor's model directory as one picklable object, with a key naming its content."""
    root = Path(path)
    if not root.is_dir():
        raise _core.AutoSloCoreError(f"the predictor's model directory {path} is gone; the Ray backend ships it to the workers")
    files = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    h = hashlib.sha256()
    for name, data in files.items():
        h.update(name.encode())
        h.update(hashlib.sha256(data).digest())
    h.update(f"{kernel}/{arrival_correction}".encode())
    return {"key": h.hexdigest()[:24], "files": files, "kernel": kernel, "arrival_correction": arrival_correction, "model_sha256": model_sha256, "version": _core.__version__}


def _worker_predictor(artifact: Mapping[str, Any]) -> _core.Predictor:
    """The artifact's predictor, loaded once per worker process (its files written once per node)."""
    key = artifact["key"]
    if key in _WORKER_PREDICTORS:
        return _WORKER_PREDICTORS[key]
    if artifact["version"] != _core.__version__:
        raise _core.AutoSloCoreError(f"this Ray worker runs autoslo {_core.__version__}, the driver {artifact['version']}: install the same version on every node")
    target = Path(tempfile.gettempdir()) / f"autoslo-predictor-{key}"
    if not target.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=f".autoslo-predictor-{key}-"))
        for name, data in artifact["files"].items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        try:
            os.rename(tmp, target)
        except OSError:  # another worker of this node wrote it first
            shutil.rmtree(tmp, ignore_errors=True)
    predictor = _core.Predictor(str(target), artifact["kernel"])
    if predictor.meta["model_sha256"] != artifact["model_sha256"]:
        raise _core.AutoSloCoreError(f"the predictor loaded on this worker ({target}) is not the driver's (model digest differs)")
    if not artifact["arrival_correction"]:
        predictor = predictor.without_arrival_correction()
    _WORKER_PREDICTORS[key] = predictor
    return predictor


def _simulate_chunk(artifact: Mapping[str, Any], configs: list[str], pairs: list[tuple[int, int]], jobs: list[int], settings: Mapping[str, Any], threads: int, *workloads: pa.Table) -> pa.Table:
    """One Ray task: simulate ``pairs`` (indices into ``configs`` and ``workloads``) on this worker."""
    return _core.simulate_pairs(configs, list(workloads), pairs, jobs, _worker_predictor(artifact), threads=threads, **settings)


def _evaluate_chunk(artifact: Mapping[str, Any], plans: list[tuple[int, str]], settings: Mapping[str, Any], threads: int, workload: pa.Table) -> str:
    """One Ray task of a hindsight search: emulate ``plans`` on the day under the search's bound."""
    return _core.evaluate_plans(workload, plans, _worker_predictor(artifact), threads=threads, **settings)


class RayBatch:
    """A submitted SimulateBatch: its chunks' object references, collected as they finish."""

    def __init__(self, ray: Any, refs: list[Any], chunk_jobs: list[int]) -> None:
        self._ray = ray
        self.pending = list(refs)
        self.tasks = len(refs)
        self.chunk_jobs = chunk_jobs
        self.submitted_at = time.perf_counter()

    def wait(self, timeout_s: float) -> list[Any]:
        """Results of the chunks finished within ``timeout_s``: outcome tables (SimulateBatch) or
        JSON outcomes (a hindsight search). Raises a failed task's error."""
        if not self.pending:
            return []
        ready, self.pending = self._ray.wait(self.pending, num_returns=len(self.pending), timeout=timeout_s)
        return list(self._ray.get(ready)) if ready else []

    def cancel(self) -> None:
        """Stop the chunks still running or queued (their workers are killed)."""
        for ref in self.pending:
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - a chunk that finished meanwhile cannot be cancelled
                pass
        self.pending = []


class RayBackend:
    """Run the Policy Tuner's SimulateBatch on Ray (see the module's documentation).

    ``address``: the cluster to join (``None``: ``RAY_ADDRESS``, or a new local cluster); only used
    if Ray is not initialised yet. ``chunk_size``: jobs per task (default: about four tasks per
    CPU of the cluster). ``cpus_per_task``: CPUs each task reserves, and the threads it simulates
    on. ``max_retries``: retries of a task whose worker died. ``max_workloads``: workloads kept in the
    object store between batches (least recently used dropped). ``init_kwargs``: more arguments to
    ``ray.init`` (e.g. ``num_cpus``)."""

    name = "ray"

    def __init__(self, address: str | None = None, *, chunk_size: int | None = None, cpus_per_task: int = 1, max_retries: int = 3, max_workloads: int = 256, init_kwargs: Mapping[str, Any] | None = None) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be ≥ 1, got {chunk_size}")
        if cpus_per_task < 1:
            raise ValueError(f"cpus_per_task must be ≥ 1, got {cpus_per_task}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be ≥ 0, got {max_retries}")
        self.address = address
        self.chunk_size = chunk_size
        self.cpus_per_task = cpus_per_task
        self.max_retries = max_retries
        self.init_kwargs = dict(init_kwargs or {})
        self.max_workloads = max_workloads
        self._workloads: dict[int, Any] = {}
        self._predictor: tuple[tuple[Any, ...], Any] | None = None
        self._task: Any = None
        self._plan_task: Any = None
        #: Tasks submitted and workloads put so far, and the last batch (for reports and benches).
        self.tasks_submitted = 0
        self.workloads_put = 0
        self.last_batch: RayBatch | None = None

    def connect(self) -> RayBackend:
        """Initialise Ray (if it is not) and this backend's task. Call it from the main thread:
        :func:`backend_for` does, before the core's worker thread uses the backend."""
        self._ray()
        return self

    def _ray(self) -> Any:
        ray = _import_ray()
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "logging_level": "warning", "log_to_driver": False, **self.init_kwargs}
            ray.init(address=self.address, **kwargs)
        if self._task is None:
            self._task = ray.remote(_simulate_chunk).options(num_cpus=self.cpus_per_task, max_retries=self.max_retries, retry_exceptions=False)
            self._plan_task = ray.remote(_evaluate_chunk).options(num_cpus=self.cpus_per_task, max_retries=self.max_retries, retry_exceptions=False)
        return ray

    def cluster_cpus(self) -> int:
        """CPUs of the Ray cluster this backend runs on."""
        return max(1, int(self._ray().cluster_resources().get("CPU", 1)))

    # The protocol the Rust core calls (see rust/autoslo-py/src/tuner.rs, `PyBackend`).

    def put_predictor(self, path: str, kernel: str, arrival_correction: bool, model_sha256: str) -> None:
        """Put the predictor's artifact in the object store (once per predictor)."""
        ident = (path, kernel, arrival_correction, model_sha256)
        if self._predictor is None or self._predictor[0] != ident:
            self._predictor = (ident, self._ray().put(_artifact(path, kernel, arrival_correction, model_sha256)))

    def get_workload(self, key: int) -> Any:
        """The reference of the workload with this fingerprint, if this backend put it already."""
        ref = self._workloads.pop(key, None)
        if ref is not None:
            self._workloads[key] = ref  # most recently used last
        return ref

    def put_workload(self, key: int, table: pa.Table) -> Any:
        """Put one workload (fingerprint ``key``) in the object store; returns its reference. The
        backend holds the last ``max_workloads`` it put."""
        ref = self._ray().put(table)
        self.workloads_put += 1
        self._workloads[key] = ref
        while len(self._workloads) > self.max_workloads:
            self._workloads.pop(next(iter(self._workloads)))
        return ref

    def submit(self, configs: Sequence[str], workloads: Sequence[Any], n_jobs: int, settings: Mapping[str, Any]) -> RayBatch:
        """Submit jobs ``0..n_jobs`` (job ``k``: configuration ``k // len(workloads)`` on workload
        ``k % len(workloads)``) as chunked tasks."""
        ray = self._ray()
        if self._predictor is None:
            raise _core.AutoSloCoreError("put_predictor must be called before submit")
        nw = len(workloads)
        if n_jobs != len(configs) * nw:
            raise _core.AutoSloCoreError(f"{n_jobs} jobs for {len(configs)} configurations × {nw} workloads")
        size = self.chunk_size or max(1, math.ceil(n_jobs / (4 * max(1, self.cluster_cpus() // self.cpus_per_task))))
        refs, chunk_jobs = [], []
        for start in range(0, n_jobs, size):
            jobs = list(range(start, min(n_jobs, start + size)))
            cs = sorted({k // nw for k in jobs})
            ws = sorted({k % nw for k in jobs})
            ci = {c: i for i, c in enumerate(cs)}
            wi = {w: i for i, w in enumerate(ws)}
            pairs = [(ci[k // nw], wi[k % nw]) for k in jobs]
            refs.append(self._task.remote(self._predictor[1], [configs[c] for c in cs], pairs, jobs, dict(settings), self.cpus_per_task, *[workloads[w] for w in ws]))
            chunk_jobs.append(len(jobs))
        self.tasks_submitted += len(refs)
        self.last_batch = RayBatch(ray, refs, chunk_jobs)
        return self.last_batch

    def submit_plans(self, plans: Sequence[tuple[int, str]], workload: Any, settings: Mapping[str, Any]) -> RayBatch:
        """Submit a hindsight search's plans ((index, JSON) pairs) on one day (a workload
        reference) as chunked tasks; each returns its outcomes as JSON. ``settings`` carry the
        target, the incumbent's cost at submission and the emulator's settings."""
        ray = self._ray()
        if self._predictor is None:
            raise _core.AutoSloCoreError("put_predictor must be called before submit_plans")
        n = len(plans)
        size = self.chunk_size or max(1, math.ceil(n / (4 * max(1, self.cluster_cpus() // self.cpus_per_task))))
        refs, chunk_jobs = [], []
        for start in range(0, n, size):
            chunk = [tuple(p) for p in plans[start : start + size]]
            refs.append(self._plan_task.remote(self._predictor[1], chunk, dict(settings), self.cpus_per_task, workload))
            chunk_jobs.append(len(chunk))
        self.tasks_submitted += len(refs)
        self.last_batch = RayBatch(ray, refs, chunk_jobs)
        return self.last_batch

    def __repr__(self) -> str:
        return f"RayBackend(address={self.address!r}, chunk_size={self.chunk_size}, cpus_per_task={self.cpus_per_task}, max_retries={self.max_retries})"


def backend_for(backend: str | RayBackend | None) -> RayBackend | None:
    """The SimulateBatch backend a caller named: ``None``/``"rayon"`` (this machine's cores, run
    in the core without Python), ``"ray"`` (a :class:`RayBackend` with defaults), or a backend."""
    if backend is None or backend == "rayon":
        return None
    if backend == "ray":
        return RayBackend().connect()
    if isinstance(backend, RayBackend):
        return backend.connect()
    raise ValueError(f"unknown SimulateBatch backend {backend!r}: 'rayon', 'ray' or a RayBackend")
