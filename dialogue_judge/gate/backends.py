"""Where the judging happens: ``LocalBackend`` judges in this process on a SQLite file (``standalone``: no Redis,
no API; the file is the judge cache), ``ApiBackend`` on a running service (``--api``: one run per batch).

A backend reads rubrics and existing runs, and ``judge`` runs a request batch by batch in a seeded item order,
calling ``on_look`` with a ``Look`` after each batch and stopping when it returns True. Both satisfy ``Backend``.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from dialogue_judge.gate.config import GateConfig
from dialogue_judge.gate.decision import Look
from dialogue_judge.gate.inputs import GateInputError
from dialogue_judge.gate.progress import progress_bar
from dialogue_judge.gate.result import CallStats

OnLook = Callable[[Look], bool]


@dataclass
class RubricInfo:
    id: str
    kind: str
    aspects: list[str]
    scale: tuple[float, float] | None
    facts: bool = False
    """A fact-check rubric (kind ``facts``): its judgments carry per-response fact figures."""


class Backend(Protocol):
    kind: str

    def close(self) -> None: ...

    def rubric(self, rubric_id: str) -> RubricInfo: ...

    def run_items(self, run_id: str) -> list[dict[str, Any]]:
        """The items of an existing run (``GateInputError`` when there is no such run)."""
        ...

    def run_judgments(self, run_id: str) -> list[dict[str, Any]]:
        """The judgment rows of an existing run, once it has finished."""
        ...

    def run_ratings(self, run_id: str) -> list[dict[str, Any]]:
        """The human ratings of an existing run (``repository.ratings_frame``'s columns)."""
        ...

    def run_label_queue(self, run_id: str) -> tuple[str, dict[str, float]] | None:
        """The run's label queue: its strategy and each drawn item's inclusion probability (None: no queue)."""
        ...

    def judge(self, request: Any, looks: list[int], on_look: OnLook, abort_after_failures: int) -> CallStats:
        """Judge ``request`` batch by batch (``looks`` = cumulative item counts) until ``on_look`` says stop."""
        ...


class LocalBackend:
    """Standalone: an in-process runner on a SQLite file (the persistent judge cache) or a temporary one."""

    kind = "standalone"

    def __init__(self, config: GateConfig) -> None:
        from dialogue_judge.gate.standalone import InProcessRunner, default_cache_db

        database = (config.database or default_cache_db()) if config.cache else None
        self.runner = InProcessRunner(database, workers=config.workers)
        self.config = config

    def close(self) -> None:
        self.runner.close()

    def rubric(self, rubric_id: str) -> RubricInfo:
        from judge_api.rubrics import RubricError, get_registry

        try:
            rubric = get_registry().get(rubric_id)
        except RubricError as exc:
            raise GateInputError(str(exc)) from None
        return RubricInfo(rubric.id, rubric.mode, rubric.aspect_names, rubric.scale, rubric.parser == "fact_check")

    def run_items(self, run_id: str) -> list[dict[str, Any]]:
        if self.runner.summary(run_id) is None:
            raise GateInputError(
                f"run {run_id!r} is not in the standalone database {self.runner.url} "
                "(use --api URL for runs of a service)"
            )
        return self.runner.items(run_id)

    def run_judgments(self, run_id: str) -> list[dict[str, Any]]:
        return self.runner.judgments(run_id)

    def run_ratings(self, run_id: str) -> list[dict[str, Any]]:
        from judge_api import repository

        with self.runner.session() as session:
            frame = repository.ratings_frame(session, run_id)
        return [{k: (None if v != v else v) for k, v in row.items()} for row in frame.to_dict("records")]

    def run_label_queue(self, run_id: str) -> tuple[str, dict[str, float]] | None:
        from judge_api import repository

        with self.runner.session() as session:
            queue = repository.label_queue(session, run_id)
        return None if queue is None else (queue.strategy, dict(queue.drawn))

    def judge(self, request: Any, looks: list[int], on_look: OnLook, abort_after_failures: int) -> CallStats:
        from dialogue_judge.gate.standalone import EARLY_STOP, run_in_process

        def look(context: Any) -> bool:
            return on_look(
                Look(
                    context.judgments(),
                    context.item_ids,
                    context.look,
                    context.n_looks,
                    context.final,
                    context.budget_exhausted,
                )
            )

        seen: dict[str, int] = {}

        def counting(context: Any) -> bool:
            seen["looks"] = context.look
            seen["items"] = len(context.item_ids)
            return look(context)

        run_id = run_in_process(
            request,
            runner=self.runner,
            order_seed=self.config.seed,
            looks=looks,
            on_look=counting,
            progress=self.config.progress,
            abort_after_failures=abort_after_failures,
        )
        summary = self.runner.summary(run_id)
        assert summary is not None
        rows = self.runner.judgments(run_id)
        counts = summary.counts
        return CallStats(
            planned=summary.n_judgments,
            judged=counts.done + counts.failed + counts.unparseable,
            saved=sum(1 for r in rows if r["status"] == "cancelled" and r["error"] == EARLY_STOP),
            provider_calls=summary.provider_calls,
            cached=summary.cached,
            cost_usd=summary.cost_usd,
            run_ids=[run_id],
            looks_done=seen.get("looks", 0),
            looks_planned=len(looks),
            items_judged=seen.get("items", 0),
            budget_exhausted=summary.budget_exhausted,
        )


class ApiBackend:
    """A running service: one run per batch (the API has no way to cancel part of a run)."""

    kind = "api"

    def __init__(self, config: GateConfig) -> None:
        from dialogue_judge.client import ApiClient

        assert config.api is not None
        self.config = config
        self.client = ApiClient(config.api, config.api_key or os.environ.get("DJ_API_KEY"))

    def close(self) -> None:
        self.client.close()

    def _call(self, fn: Callable[[], Any]) -> Any:
        from dialogue_judge.client import ApiError

        try:
            return fn()
        except ApiError as exc:
            raise GateInputError(f"the service at {self.config.api} answered: {exc.message}") from None

    def rubric(self, rubric_id: str) -> RubricInfo:
        rubrics = self._call(lambda: self.client.get("/v1/rubrics"))
        for rubric in rubrics:
            if rubric["id"] == rubric_id:
                scale = tuple(rubric["scale"]) if rubric.get("scale") else None
                return RubricInfo(
                    rubric["id"],
                    "pairwise" if rubric["kind"] == "pairwise" else "single",  # a facts rubric yields scores
                    list(rubric["aspects"]),
                    scale,
                    rubric.get("parser") == "fact_check",
                )
        known = ", ".join(sorted(r["id"] for r in rubrics))
        raise GateInputError(f"unknown rubric {rubric_id!r} on the service (known: {known})")

    def run_items(self, run_id: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = self._call(functools.partial(self.client.get, f"/v1/runs/{run_id}/items", offset=offset, limit=1000))
            items.extend(page["items"])
            offset += 1000
            if offset >= page["total"]:
                return items

    def _wait(self, run_id: str, label: str) -> dict[str, Any]:
        deadline = time.monotonic() + self.config.timeout_s
        with progress_bar(self.config.progress) as bar:
            summary = self._call(lambda: self.client.run(run_id))
            task = bar.add_task(label, total=summary["n_judgments"], detail="")
            while True:
                summary = self._call(lambda: self.client.run(run_id))
                counts = summary["counts"]
                finished = sum(counts[k] for k in ("done", "failed", "unparseable", "cancelled"))
                bar.update(
                    task,
                    completed=finished,
                    detail=f"done {counts['done']} · failed {counts['failed'] + counts['unparseable']}",
                )
                if summary["status"] in ("done", "budget_exhausted"):
                    return dict(summary)
                if time.monotonic() > deadline:
                    raise GateInputError(
                        f"run {run_id} did not finish within {self.config.timeout_s:.0f}s "
                        f"({finished} of {summary['n_judgments']} judgments)"
                    )
                time.sleep(0.25)

    def run_judgments(self, run_id: str) -> list[dict[str, Any]]:
        self._wait(run_id, f"waiting for {run_id}")
        return list(self._call(lambda: self.client.all_judgments(run_id)))

    def run_ratings(self, run_id: str) -> list[dict[str, Any]]:
        data = self._call(lambda: self.client.get(f"/v1/runs/{run_id}/human-ratings"))
        return list(data.get("items", []))

    def run_label_queue(self, run_id: str) -> tuple[str, dict[str, float]] | None:
        from dialogue_judge.client import ApiError

        try:
            data = self.client.get(f"/v1/runs/{run_id}/label-queue")
        except ApiError as exc:
            if exc.status_code == 404:
                return None
            raise GateInputError(f"the label queue of run {run_id} could not be read: {exc}") from None
        return str(data["strategy"]), {str(i["item_id"]): float(i["inclusion_probability"]) for i in data["items"]}

    def judge(self, request: Any, looks: list[int], on_look: OnLook, abort_after_failures: int) -> CallStats:
        from dialogue_judge.gate.standalone import seeded_order

        by_id = {item.id: item for item in request.items}
        order = seeded_order(list(by_id), self.config.seed)
        base = request.model_dump(mode="json", exclude={"items"})
        stats = CallStats(looks_planned=len(looks))
        rows: list[dict[str, Any]] = []
        start = 0
        failures = 0
        submitted_items = 0
        for index, end in enumerate(looks, start=1):
            body = dict(base)
            body["items"] = [by_id[i].model_dump(mode="json") for i in order[start:end]]
            body["name"] = f"{request.name or 'gate'} · batch {index}/{len(looks)}"
            if request.budget_usd is not None:
                remaining = request.budget_usd - stats.cost_usd
                if remaining <= 0:
                    stats.budget_exhausted = True
                    break
                body["budget_usd"] = remaining
            created = self._call(lambda: self.client.create_run(body))  # noqa: B023
            stats.run_ids.append(created["id"])
            summary = self._wait(created["id"], f"judging {created['id']} (batch {index}/{len(looks)})")
            batch_rows = list(self._call(lambda: self.client.all_judgments(created["id"])))  # noqa: B023
            rows.extend(batch_rows)
            submitted_items = end
            stats.planned += summary["n_judgments"]
            counts = summary["counts"]
            stats.judged += counts["done"] + counts["failed"] + counts["unparseable"]
            failures += counts["failed"] + counts["unparseable"]
            stats.provider_calls += summary["provider_calls"]
            stats.cached += summary["cached"]
            stats.cost_usd += summary["cost_usd"]
            stats.budget_exhausted = stats.budget_exhausted or bool(summary["budget_exhausted"])
            stats.looks_done = index
            stats.items_judged = end
            aborted = failures > abort_after_failures
            final = index == len(looks) or stats.budget_exhausted or aborted
            start = end
            if on_look(Look(rows, order[:end], index, len(looks), final, stats.budget_exhausted)) or final:
                break
        remaining_items = len(order) - submitted_items
        if remaining_items > 0 and submitted_items:
            per_item = stats.planned / submitted_items
            stats.saved = round(per_item * remaining_items)
            stats.planned += stats.saved
        return stats
