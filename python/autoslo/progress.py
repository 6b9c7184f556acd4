"""A tqdm progress bar fed by the core's ``progress(done, total)`` callbacks."""

from __future__ import annotations

from collections.abc import Callable


def progress_bar(enabled: bool, desc: str, unit: str) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """(callback for the core, close). The callback sets the bar's total (it may grow, as a tuner
    submits batch after batch) and moves it to ``done``. Disabled: ``(None, no-op)``."""
    if not enabled:
        return None, lambda: None
    from tqdm.auto import tqdm

    bar = tqdm(total=0, unit=unit, desc=desc)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return update, bar.close
