"""The API process's OTLP processor lets the exports in flight be answered first (issue 38's p99 a batch): a step
waits while this process reads an export, at most YIELD_TO_EXPORTS_S, so the processing is delayed, never stopped."""

from __future__ import annotations

import threading
import time

from judge_api.otlp import intake


def test_a_step_waits_for_the_export_in_flight_to_be_answered() -> None:
    released = threading.Event()

    def export() -> None:
        with intake.export_in_flight():
            released.wait(5)

    exporter = threading.Thread(target=export)
    exporter.start()
    time.sleep(0.05)
    started = time.monotonic()
    threading.Timer(0.15, released.set).start()
    intake.yield_to_exports(limit_s=2.0)
    waited = time.monotonic() - started
    exporter.join(5)
    assert 0.1 <= waited < 1.5  # until the export was answered, not the whole limit


def test_the_wait_is_bounded_so_the_processing_goes_on_under_constant_exports() -> None:
    with intake.export_in_flight():
        started = time.monotonic()
        intake.yield_to_exports(limit_s=0.2)
        assert 0.15 <= time.monotonic() - started < 1.0


def test_no_wait_without_exports() -> None:
    started = time.monotonic()
    intake.yield_to_exports(limit_s=2.0)
    assert time.monotonic() - started < 0.05


def test_the_count_goes_back_after_a_failed_export() -> None:
    try:
        with intake.export_in_flight():
            raise RuntimeError("the export failed")
    except RuntimeError:
        pass
    started = time.monotonic()
    intake.yield_to_exports(limit_s=2.0)
    assert time.monotonic() - started < 0.05
