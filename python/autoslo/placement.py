"""Placement controls around the router: outlier ejection of a cluster whose completions
persistently exceed the router's predictions (the load-balancing chapter; ``docs/placement.md``)."""

from __future__ import annotations

from dataclasses import dataclass

from autoslo import _core
from autoslo._checks import check_flag, check_number, check_whole


@dataclass(frozen=True)
class Ejection:
    """Outlier ejection around the ``autoslo`` router. A cluster whose completed queries run
    ``ratio``× longer, relative to their predictions at routing, than the other clusters' do (a
    running mean, weight ``alpha``, over at least ``min_samples`` completions since it last
    (re-)entered) is hidden from routing for ``base_ejection_s``, then
    twice as long if it is ejected again on return; at most ``max_ejected_fraction`` of the
    clusters (but always one while another remains) are ejected at once. An ejected cluster stays
    up and billed and finishes what it runs. Ejections and re-entries appear in
    ``result.events``.

    With ``cover``, the lost capacity is replaced: while a cluster is ejected, or back in service
    but not yet cleared (in service for as long as its last ejection with no new evidence), a
    cover cluster of its size is spun up beside whatever autoscaler runs (reason
    ``ejection-cover``); once it is cleared the cover drains and is torn down
    (``ejection-cleared``)."""

    min_samples: int = 20
    ratio: float = 1.5
    #: Weight of a new completion in a cluster's running ratio.
    alpha: float = 0.02
    max_ejected_fraction: float = 0.2
    base_ejection_s: float = 600.0
    #: Replace an ejected cluster's capacity until it is cleared.
    cover: bool = False

    def __post_init__(self) -> None:
        check_whole(self.min_samples, "ejection policy's min_samples", 0)
        for name in ("ratio", "alpha", "max_ejected_fraction", "base_ejection_s"):
            check_number(getattr(self, name), f"ejection policy's {name}")
        check_flag(self.cover, "ejection's `cover`")
        # The core's own ranges (ratio > 1, α in (0, 1], ...), as a run would check them.
        _core.validate_ejection(self.as_args())

    def as_args(self) -> tuple[int, float, float, float, float, bool]:
        """The form ``_core.emulate(ejection=...)`` takes."""
        return int(self.min_samples), float(self.ratio), float(self.alpha), float(self.max_ejected_fraction), float(self.base_ejection_s), bool(self.cover)

