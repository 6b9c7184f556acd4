"""Tenancy controls: admission with typed rejections, and reservations for premium tenants. Reports per tenant × class, the chargeback and fairness are on
:class:`autoslo.EmulationResult`; the rules are in ``docs/tenancy.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from autoslo import _core, corejson
from autoslo._checks import check_flag, check_names, check_number, check_whole, finite_at_least


@dataclass(frozen=True)
class Reservation:
    """Clusters held for premium tenants (or some of their classes, ``premium_classes``): their
    queries may use every cluster, other queries only the unreserved ones (and, with ``borrow_idle``, a reserved cluster while it is
    idle; queries are not preempted, so borrowing gives up some of the reservation). Clusters
    are indices of the run's initial clusters; clusters the autoscaler adds are unreserved. A
    query that no unreserved cluster can take may use any."""

    premium_tenants: Sequence[str]
    reserved_clusters: Sequence[int]
    #: Only these classes of the premium tenants are premium (default: all their classes).
    premium_classes: Sequence[str] | None = None
    borrow_idle: bool = False

    def __post_init__(self) -> None:
        # Names and cluster indices are checked against the run's workload and clusters when it starts.
        check_names(self.premium_tenants, "the reservation's premium tenants")
        if self.premium_classes is not None:
            check_names(self.premium_classes, "the reservation's premium classes")
        c = self.reserved_clusters
        if isinstance(c, (str, bytes)) or not isinstance(c, Sequence) or not c:
            raise _core.AutoSloCoreError(f"the reservation's clusters must be a non-empty list of initial-cluster indices, got {c!r}")
        for i in c:
            check_whole(i, "a reserved cluster (an index of the run's initial clusters, 0-based)", 0, 2**32)
        check_flag(self.borrow_idle, "the reservation's `borrow_idle`")

    def as_args(self) -> tuple[list[str], list[str] | None, list[int], bool]:
        """The form ``_core.emulate(reservation=...)`` takes."""
        classes = [str(c) for c in self.premium_classes] if self.premium_classes is not None else None
        return [str(t) for t in self.premium_tenants], classes, [int(c) for c in self.reserved_clusters], bool(self.borrow_idle)


@dataclass(frozen=True)
class DeadlineAdmission:
    """Admission at the router boundary: reject, before any work, a query whose Stage estimate
    alone on the largest cluster size available exceeds its SLO × ``margin``
    (``infeasible-deadline``), and a query no cluster can take (``capacity``). ``largest_size``:
    the largest size the fleet can offer (e.g. the autoscaler's largest spinup size; default: the
    largest cluster taking queries now). A rejected query is an outcome of its own: never met, no
    cluster, no cost (``trace["outcome"] == "rejected"``, with ``reject_reason``)."""

    margin: float = 1.0
    largest_size: int | None = None

    def __post_init__(self) -> None:
        if not finite_at_least(self.margin, 1.0):
            raise _core.AutoSloCoreError(f"admission margin must be a finite number ≥ 1, got {self.margin!r}")
        s = self.largest_size
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or not 0 < s < 2**32 or not _core.is_base_capacity(s)):
            raise _core.AutoSloCoreError(f"admission's largest size must be {_core.BASE_CAPACITIES}, got {s!r}")

    def as_args(self) -> tuple[float, int | None]:
        """The form ``_core.emulate(admission=...)`` takes."""
        return float(self.margin), (int(self.largest_size) if self.largest_size is not None else None)


@dataclass(frozen=True)
class Budgets:
    """Per-tenant spending budgets in dollars per window (``window_s``, a day by default, windows
    from t = 0), enforced at admission (``tenancy::BudgetAdmission`` in the core) on *estimated*
    spend: a query's Stage runtime on the largest cluster taking queries × that size × the RPU-hour
    price. A query that would take its tenant past the budget is refused, reason ``budget``;
    tenants not named are not limited. What a tenant is finally charged is the chargeback, which
    shares each cluster's bill by work: compare the two in the report."""

    per_tenant: Mapping[str, float]
    window_s: float = 86_400.0

    def __post_init__(self) -> None:
        for tenant, budget in self.per_tenant.items():
            if not finite_at_least(budget, 0.0):
                raise _core.AutoSloCoreError(f"the budget of tenant {tenant!r} must be a finite number of dollars ≥ 0, got {budget!r}")
        if not (finite_at_least(self.window_s, 0.0) and self.window_s > 0):
            raise _core.AutoSloCoreError(f"budget window must be a finite time > 0 s, got {self.window_s!r}")

    def as_args(self) -> tuple[dict[str, float], float]:
        """The form ``_core.emulate(budgets=...)`` takes."""
        return {str(k): float(v) for k, v in self.per_tenant.items()}, float(self.window_s)


@dataclass(frozen=True)
class Share:
    """A tenant's share of the admission queue when capacity is contested: a ``reservation`` in
    seconds of estimated work per second (Stage estimates; a cluster's slots deliver about one
    work-second per second each), delivered first, and a ``weight`` dividing what the
    reservations leave."""

    reservation: float = 0.0
    weight: float = 1.0


@dataclass(frozen=True)
class Deferral:
    """Batch work deferred to a later window: a query of one of ``classes`` arriving outside the
    daily window ``[from_h, until_h)`` (hours into the day; wrapping midnight when ``from_h >
    until_h``, as the default night 20 h to 6 h does) is held until the window opens, if its
    deadline still leaves its execution reserve then. From the window's start it runs in the
    background: after every query waiting in the foreground, and only on clusters holding fewer
    than ``slots_per_cluster`` queries. Its latency counts from its arrival, so it needs a
    deadline that allows the wait (an SLO policy's deadline for the class); its timeout counts
    from when it starts on a cluster."""

    classes: Sequence[str]
    from_h: float = 20.0
    until_h: float = 6.0
    slots_per_cluster: int = 1

    def __post_init__(self) -> None:
        for name in ("from_h", "until_h"):
            h = getattr(self, name)
            if not (finite_at_least(h, 0.0) and h <= 24.0):
                raise _core.AutoSloCoreError(f"deferral `{name}` must be an hour of the day from 0 to 24, got {h!r}")
        check_names(self.classes, "the deferral's classes")
        check_whole(self.slots_per_cluster, "the deferral's `slots_per_cluster`", 1)
        # The core's own rules (the window must not be empty); class names are checked when a run starts.
        _core.validate_deferral(self.as_args())

    def as_args(self) -> tuple[list[str], float, float, int]:
        """The form ``_core.emulate(queue=(..., deferral))`` takes."""
        return [str(c) for c in self.classes], float(self.from_h) * 3600.0, float(self.until_h) * 3600.0, int(self.slots_per_cluster)


@dataclass(frozen=True)
class AdmissionQueue:
    """A queue at the router boundary (``tenancy::AdmissionQueue`` in the core). A cluster is full
    at ``slots_per_cluster`` queries (running and queued inside it); while every cluster is full,
    or others already wait, an arrival waits here and is routed, among the clusters with room,
    when a slot frees. A query may wait only until its latest start,
    ``arrival + SLO − Stage estimate × reserve``; it is refused at arrival if that has passed
    (``infeasible-deadline``) or the queue is at a bound (``max_queued`` queries, or
    ``max_queued_work_s`` seconds of estimated work: ``capacity``), and while waiting when it
    passes (``expired``): a typed outcome, not a late run.

    Without ``shares`` a freed slot goes to the oldest waiting query. With ``shares`` (tenant →
    :class:`Share`, others get ``default_share``) it goes by mClock's dual tags
    (``tenancy::sharing``): reservations first, then weights; with ``excess_only`` (the default,
    a change to mClock) weights divide only what the reservations leave, without it mClock's
    literal rule gives a tenant about the larger of its reservation and its weighted share. A
    query that has waited ``max_wait_s`` goes first whatever its tags, so no tenant starves.

    With ``defer`` (a :class:`Deferral`) batch work arriving outside its window waits for it
    (use a large ``slots_per_cluster`` to defer without otherwise holding arrivals)."""

    slots_per_cluster: int = 8
    max_queued: int = 1000
    max_queued_work_s: float = float("inf")
    reserve: float = 1.0
    shares: Mapping[str, Share] | None = None
    default_share: Share = Share()
    max_wait_s: float = float("inf")
    excess_only: bool = True
    defer: Deferral | None = None

    def __post_init__(self) -> None:
        check_whole(self.slots_per_cluster, "the queue's `slots_per_cluster`", 1)
        check_whole(self.max_queued, "the queue's `max_queued`", 0)
        for name in ("max_queued_work_s", "reserve", "max_wait_s"):
            check_number(getattr(self, name), f"the queue's `{name}`")
        if not self.max_wait_s > 0:
            raise _core.AutoSloCoreError(f"the queue's `max_wait_s` must be > 0 s (inf: no aging), got {self.max_wait_s!r}")
        check_flag(self.excess_only, "the queue's `excess_only`")
        if self.defer is not None and not isinstance(self.defer, Deferral):
            raise _core.AutoSloCoreError(f"the queue's `defer` must be a Deferral, got {self.defer!r}")
        if self.shares is not None and not (isinstance(self.shares, Mapping) and all(isinstance(sh, Share) for sh in self.shares.values())):
            raise _core.AutoSloCoreError(f"the queue's `shares` must map tenant names to Share(...), got {self.shares!r}")
        if not isinstance(self.default_share, Share):
            raise _core.AutoSloCoreError(f"the queue's `default_share` must be a Share(...), got {self.default_share!r}")
        named = [(f"tenant {t!r}", sh) for t, sh in (self.shares or {}).items()]
        for who, share in [*named, ("the default share", self.default_share)]:
            if not finite_at_least(share.reservation, 0.0):
                raise _core.AutoSloCoreError(f"the queue's share of {who}: reservation must be a finite number of work-seconds per second ≥ 0, got {share.reservation!r}")
            if not (finite_at_least(share.weight, 0.0) and share.weight > 0):
                raise _core.AutoSloCoreError(f"the queue's share of {who}: weight must be a finite number > 0, got {share.weight!r}")
        # The core's own rules for the rest (the reserve, the work bound).
        _core.validate_queue(*self.as_args()[:5])

    def as_args(
        self,
    ) -> tuple[int, int, float, float, tuple[list[tuple[str, float, float]], tuple[float, float], float, bool] | None, tuple[list[str], float, float, int] | None]:
        """The form ``_core.emulate(queue=...)`` takes."""
        work = float(self.max_queued_work_s)
        sharing = None
        if self.shares is not None:
            shares = [(str(t), float(s.reservation), float(s.weight)) for t, s in self.shares.items()]
            wait = float(self.max_wait_s)
            d = self.default_share
            sharing = (shares, (float(d.reservation), float(d.weight)), (wait if wait != float("inf") else 1e300), bool(self.excess_only))
        return int(self.slots_per_cluster), int(self.max_queued), (work if work != float("inf") else 1e300), float(self.reserve), sharing, (self.defer.as_args() if self.defer is not None else None)


def apply_slo_policy(workload: pa.Table, policy: Mapping[str, Any]) -> pa.Table:
    """``workload`` with each query's ``slo`` set by an SLO policy and a ``tier`` column.

    The policy is the ``slo_policy`` of an execution configuration: ``tiers`` (tenant → tier),
    ``default_tier`` (``standard``), ``deadlines`` (``{tier, class, deadline_s}``, tier ``*`` for
    any) and ``templates`` (``{template, deadline_s[, tier]}`` overrides). A query no rule covers
    keeps its SLO. Bad policies raise :class:`autoslo.AutoSloCoreError` naming the rule."""
    table, tiers = _core.apply_slo_policy(workload, corejson.dumps(dict(policy), "slo_policy"))
    extra = [c for c in workload.column_names if c not in table.column_names and c != "tier"]
    for c in extra:
        table = table.append_column(c, workload[c])
    return table.append_column("tier", pa.array(tiers, pa.string()))
