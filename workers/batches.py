"""The batch stage of batch-mode runs (``execution: batch``): submit claimed judgments as provider batches, poll
them, and store each result as the verdict of its judgment.

Submit (a worker's judge task, workers.execute): the task's judgments and the run's other pending judgments of the
same judge (up to the provider's limits) are claimed first (so the run's other task messages find them taken and
prepare none of them), then prepared and looked up in the judge cache (a hit's verdict is written with its claim).
Judgments sharing a judge-cache key share one request. Each batch is stored with its judgments
(``provider_batches``, ``provider_batch_judgments``) and their claims handed to the batch **before** the provider is
asked (repository.batches.open_batch), then submitted and marked ``open``. A worker killed after that leaves a
batch the pollers know; a worker killed in between leaves a ``submitting`` batch, which the poller looks up at the
provider (OpenAI by metadata; Anthropic by its request count and creation time, proven by its results' custom ids)
before it gives the judgments back. Each custom id carries the row, a random nonce drawn with it and a digest of the
request's prompt key, so a result is only ever written to the row that sent it. A row's status moves one way
(compare-and-set): a batch that reached the provider after its row was given up is taken by a new row with the
judgments still waiting for it, or cancelled (``_arrived_late``). No judgment inside a batch is claimed or re-sent
by anyone else: its claim is the batch's.

Poll (the task ``dialogue_judge.poll_batches``, sent by the sweeper while batches are due; any worker): one poller
per batch (compare-and-set on ``next_poll_at``). It sends a requested cancel, retrieves the batch and, once it has
ended, reads the results (each request's judgments prepared as its result is read, their verdicts handed to the
writer at once): a result whose custom id is not the row's, or names another prompt, is refused; a succeeded
request is parsed, priced at the batch price from the price table (its prompt
cache tokens as the provider reported them), its reply cached, and its verdict written through the verdict writer
with the batch's claim token. The provider keeps the results (24 h and more), so the stash has nothing to keep: a
poller killed while writing leaves the batch open and the next one writes the rest. Errored and expired requests are
retried per the usual rules (``DJ_MAX_ATTEMPTS``; a rejected request, 4xx, fails at once): in a later batch, or in
real time when the run says ``batch_retry: realtime``; billed by neither provider, they are not provider calls. A
cancelled request's judgment is cancelled when the run was
cancelled (or its budget ran out), else retried.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any

from judge_api import metrics, queue
from judge_api.judges import JudgeSpec, parse_judge
from judge_api.models import utcnow
from judge_api.repository import batches as repo
from judge_api.repository import claims
from workers.batch_clients import PROVIDER_LIMITS, BatchClient, BatchResult, batch_client_for, request_part
from workers.billing import CallTally
from workers.clients import JudgeCallError, JudgeRequest
from workers.dispatch import cache_plan
from workers.execute import JudgeEngine
from workers.judgecache import cache_mode, cache_row
from workers.stages import Loaded, Paid, Prepared, Submitted
from workers.verdicts import parse_scored, verdict_values
from workers.writer import VerdictWrite

log = logging.getLogger(__name__)

SUBMIT_GRACE_S = 120.0  # a batch still 'submitting' this long after it was stored: its worker is gone
COLLECT_LEASE_S = 600.0  # an ended batch being collected is not polled again before this (its poller died)


class BatchStage:
    def __init__(
        self, engine: JudgeEngine, client_factory: Callable[[JudgeSpec, Any], BatchClient | None] = batch_client_for
    ) -> None:
        self.engine = engine
        self.client_factory = client_factory

    @property
    def settings(self) -> Any:
        return self.engine.settings

    # -- submit ---------------------------------------------------------------------------------------------------

    def submit(self, mine: list[Loaded], token: str) -> Submitted:
        """Submit claimed, prepared cache misses (all of batch-mode runs) as provider batches."""
        done = Submitted()
        groups: dict[tuple[str, str], list[Loaded]] = defaultdict(list)
        for loaded in mine:
            groups[(loaded.judgment.run_id, loaded.judgment.judge)].append(loaded)
        for (run_id, judge), members in groups.items():
            for chunk in self._chunks(self._cache_order(members)):
                self._submit_one(run_id, judge, chunk, token, done)
        return done

    def _cache_order(self, members: list[Loaded]) -> list[Loaded]:
        """Cache-aware (``DJ_CACHE_AWARE_DISPATCH``, as real-time dispatch): the requests of a shared cacheable
        prefix carry its ``prompt_cache_key`` / ``cache_control`` breakpoint and follow their group's first request
        in the batch, so the provider can serve the prefix from its cache."""
        if not self.settings.cache_aware_dispatch or len(members) < 2:
            return members
        now, followers = cache_plan(members, self.settings)
        return [members[j] for i in now for j in (i, *followers.get(i, ()))]

    def _chunks(self, members: list[Loaded]) -> list[list[Loaded]]:
        """Split into batches within the provider's limits on requests and bytes (a shared key stays together)."""
        spec = parse_judge(members[0].judgment.judge)
        max_requests, max_bytes = PROVIDER_LIMITS.get(spec.provider, (50_000, 200 * 1024 * 1024))
        max_requests = min(max_requests, self.settings.batch_max_requests)
        try:
            client = self.client_factory(spec, self.settings)
        except JudgeCallError:  # e.g. no API key: the submit step records why for each judgment
            client = None
        by_key: dict[str, list[Loaded]] = defaultdict(list)
        for loaded in members:
            assert loaded.ready is not None
            by_key[loaded.ready.key].append(loaded)
        chunks: list[list[Loaded]] = [[]]
        requests = size = 0
        for same in by_key.values():
            ready = same[0].ready
            assert ready is not None
            sized = f"{repo.CUSTOM_ID_LEAD}{'0' * 10}-{'0' * 12}-{request_part(ready.key)}"  # a custom_id's longest
            line = client.line_bytes(sized, ready.request) if client is not None else 0
            if chunks[-1] and (requests + 1 > max_requests or size + line > max_bytes):
                chunks.append([])
                requests = size = 0
            chunks[-1].extend(same)
            requests += 1
            size += line
        return [chunk for chunk in chunks if chunk]

    def _submit_one(self, run_id: str, judge: str, chunk: list[Loaded], token: str, done: Submitted) -> None:
        engine = self.engine
        spec = parse_judge(judge)
        keeper = engine.lease_keeper()
        budget = chunk[0].judgment.budget_usd
        if budget is not None and engine._budget_exhausted(chunk[0].judgment):
            for loaded in chunk:  # cancelled with the run's pending ones; this claim gives them up the same way
                engine._hand_back(loaded.judgment.id, token, _no_paid())
                keeper.drop(loaded.judgment.id)
                done.settled[loaded.judgment.id] = "cancelled"
            with engine.sessions() as session:
                from judge_api import repository

                repository.cancel_pending(session, run_id, f"run budget of ${budget} reached")
                session.commit()
            return
        own: dict[str, str] = {}  # a request's own part of its custom_id, by prompt key
        members: list[tuple[int, str]] = []
        requests: list[tuple[str, JudgeRequest]] = []
        for loaded in chunk:
            ready = loaded.ready
            assert ready is not None
            if ready.key not in own:
                own[ready.key] = request_part(ready.key)
                requests.append((own[ready.key], ready.request))
            members.append((loaded.judgment.id, own[ready.key]))
        opened = repo.open_batch(
            engine.db,
            run_id,
            spec.provider,
            judge,
            members,
            token,
            max(SUBMIT_GRACE_S, 4 * self.settings.claim_lease_s),
        )
        for loaded in chunk:
            keeper.drop(loaded.judgment.id)
        if opened is None:
            return  # every claim was lost meanwhile: their new holders judge them
        pk, held, prefix = opened
        sent = {cid for j, cid in members if j in held}
        requests = [(prefix + c, r) for c, r in requests if c in sent]
        try:
            client = self.client_factory(spec, self.settings)
            if client is None:
                raise JudgeCallError("unsupported", f"{spec.provider} has no batch API", False)
            batch_id, file_id = client.submit(requests, prefix)
        except JudgeCallError as exc:
            self._submit_failed(pk, exc, chunk, held, token, done)
            return
        if not repo.mark_submitted(engine.db, pk, batch_id, file_id, self.settings.batch_poll_s):
            done.batched |= self._arrived_late(pk, client, batch_id, file_id)
            return
        done.batched |= held
        log.info(
            "run %s: provider batch %s (%s) holds %d judgments in %d requests",
            run_id,
            pk,
            batch_id,
            len(held),
            len(requests),
        )

    def _arrived_late(self, pk: int, client: BatchClient, batch_id: str, file_id: str | None) -> set[int]:
        """The provider took the batch after its row was given up (this worker was slower than the grace period;
        the row's judgments were sent back). A new row takes the batch with those judgments still waiting, so it is
        read, not paid for again; when any of them was taken meanwhile (it will be asked again elsewhere), the
        batch is cancelled: what it had not run is not billed, and what it had is read for the judgments it
        holds."""
        db = self.engine.db
        adopted = repo.adopt_late_batch(db, pk, batch_id, file_id, self.settings.batch_poll_s)
        new_pk, taken, members = adopted if adopted is not None else (None, set(), 0)
        if adopted is None or len(taken) < members:
            try:
                client.cancel(batch_id)
            except JudgeCallError as exc:  # the row's poll sends it again (cancel_sent_at stays unset)
                log.warning("provider batch %s: cancel of a late batch failed: %s", batch_id, exc)
                if new_pk is not None:
                    repo.update_batch(db, new_pk, cancel_requested_at=utcnow())
            else:
                if new_pk is not None:
                    repo.update_batch(db, new_pk, cancel_requested_at=utcnow(), cancel_sent_at=utcnow())
        if adopted is None:  # nothing waits for it: cancelled, and noted on the given-up row
            repo.update_batch(db, pk, error=f"reached the provider after it was given up: {batch_id} cancelled")
        log.warning(
            "provider batch row %s: its batch %s reached the provider after it was given up; %s",
            pk,
            batch_id,
            f"taken by row {new_pk} with {len(taken)} of {members} judgments" if new_pk else "cancelled",
        )
        return taken

    def _submit_failed(
        self, pk: int, exc: JudgeCallError, chunk: list[Loaded], held: set[int], token: str, done: Submitted
    ) -> None:
        if exc.kind == "unsupported":  # an openai-compatible server without the Batch API: judged in real time
            log.warning("provider batch %s: %s; judging its %d judgments in real time", pk, exc, len(held))
            back = repo.hand_to_worker(self.engine.db, pk, token)
            done.realtime += [loaded for loaded in chunk if loaded.judgment.id in back]
            return
        attempts = {loaded.judgment.id: loaded.judgment.attempts for loaded in chunk}
        outcomes = [self._retry_or_fail(jid, attempts.get(jid, 0), exc, calls=0) for jid in held]
        repo.update_batch(self.engine.db, pk, status="failed", ended_at=utcnow(), error=str(exc)[:2000])
        pending = repo.send_back(self.engine.db, pk, outcomes)
        for outcome in outcomes:
            done.settled[outcome["jid"]] = outcome["status"]
        log.warning("provider batch %s could not be submitted (%s): %d judgments sent back", pk, exc, len(pending))
        self._resend(pending)

    def _retry_or_fail(self, jid: int, attempts: int, exc: JudgeCallError, calls: int = 1) -> dict[str, Any]:
        attempts += 1
        retry = exc.retryable and attempts < self.settings.max_attempts
        error = str(exc) if retry else (f"{exc} (after {attempts} attempts)" if attempts > 1 else str(exc))
        return {
            "jid": jid,
            "status": "pending" if retry else "failed",
            "error": error,
            "attempts": attempts,
            "calls": calls,
        }

    def _resend(self, ids: list[int]) -> None:
        if not ids:
            return
        try:
            queue.enqueue(self.settings, ids)
            with self.engine.sessions() as session:
                claims.mark_enqueued(session, ids)
                session.commit()
        except Exception as exc:  # they are pending and never enqueued: the sweeper sends them
            log.warning("could not re-send %d judgments now (%s); the sweeper will", len(ids), exc)

    # -- poll and collect -------------------------------------------------------------------------------------------

    def poll_due(self) -> int:
        """Poll every due batch this worker can take; returns how many were polled."""
        polled = 0
        for row in repo.due_batches(self.engine.db):
            if not repo.take_poll(self.engine.db, row, max(self.settings.batch_poll_s, self.settings.claim_lease_s)):
                continue
            try:
                self.poll(row)
            except JudgeCallError as exc:  # the provider is unreachable: the next poll tries again
                log.warning("provider batch %s: poll failed: %s", row.id, exc)
                repo.update_batch(self.engine.db, row.id, error=str(exc)[:2000])
            polled += 1
        return polled

    def poll(self, row: repo.BatchRow) -> None:
        spec = parse_judge(row.judge)
        client = self.client_factory(spec, self.settings)
        if client is None:
            return
        db = self.engine.db
        batch_id = row.provider_batch_id
        if row.status == "submitting":
            batch_id = self._recover(row, client)
            if batch_id is None:
                return
        assert batch_id is not None
        if row.cancel_requested_at is not None and row.cancel_sent_at is None:
            client.cancel(batch_id)
            repo.update_batch(db, row.id, cancel_sent_at=utcnow())
        state = client.retrieve(batch_id)
        # an ended batch is this poller's to collect for a while (no other poller writes its results meanwhile)
        hold = self._next_poll(COLLECT_LEASE_S if state.ended else self.settings.batch_poll_s)
        repo.update_batch(db, row.id, provider_status=state.status, result_counts=state.counts, next_poll_at=hold)
        if not state.ended:
            return
        self._collect(row, client, batch_id, state)

    def _next_poll(self, seconds: float) -> datetime:
        from datetime import timedelta

        return utcnow() + timedelta(seconds=max(seconds, self.settings.batch_poll_s))

    def _recover(self, row: repo.BatchRow, client: BatchClient) -> str | None:
        """A batch stored but not marked submitted: its worker died creating it (or is slow). Found at the provider:
        it is open; not found after the grace period: its judgments go back to pending (nothing was sent)."""
        from datetime import timedelta

        db = self.engine.db
        custom_ids = repo.custom_ids(db, row.id)
        prefixes = {repo.prefix_of(custom_id) for custom_id in custom_ids}
        tag = prefixes.pop() if len(prefixes) == 1 and "" not in prefixes else str(row.id)
        since = row.created_at - timedelta(seconds=60)
        found = client.find(tag, custom_ids, since, lambda b: repo.tracked(db, b))
        if found.batch_id is not None:
            # the row's worker may have marked it meanwhile: then the next poll reads it as open
            return found.batch_id if repo.mark_submitted(db, row.id, found.batch_id, None, 0.0) else None
        if found.unconfirmed:  # a batch that may be the row's is still running: wait until it can be checked
            log.info("provider batch row %s: a candidate batch is still processing; waiting to check it", row.id)
            repo.update_batch(db, row.id, next_poll_at=self._next_poll(self.settings.batch_poll_s))
            return None
        if utcnow() - row.created_at < timedelta(seconds=SUBMIT_GRACE_S):
            return None
        members = repo.held_members(db, row.id)
        outcomes = [
            {"jid": jid, "status": "pending", "error": None, "attempts": attempts, "calls": 0}
            for jid, _, attempts in members
        ]
        if repo.give_up(db, row.id, "never reached the provider"):
            self._resend(repo.send_back(db, row.id, outcomes))
        return None

    def _collect(self, row: repo.BatchRow, client: BatchClient, batch_id: str, state: Any) -> None:
        """Write the ended batch's verdicts and send back the rest. Each request's judgments are prepared when its
        result is read and their verdicts handed to the writer at once, so the writes overlap the reading; the
        database sees a few statements per group of verdicts, none per request (repository.batches.send_back)."""
        engine = self.engine
        db = engine.db
        ended: dict[str, Any] = {
            "status": "ended",
            "ended_at": state.ended_at or utcnow(),
            "provider_status": state.status,
            "next_poll_at": None,
        }
        members = repo.held_members(db, row.id)
        if members:
            tasks = {task.id: task for task in claims.load_tasks(db, [jid for jid, _, _ in members])}
            by_custom: dict[str, list[tuple[int, int]]] = defaultdict(list)
            for jid, custom_id, attempts in members:
                by_custom[custom_id].append((jid, attempts))
            requests = _Requests(by_custom, tasks, engine)
            stopped = repo.run_stopped(db, row.run_id)
            token = repo.batch_token(row.id)
            writer = engine.verdict_writer()
            writes: list[VerdictWrite] = []
            outcomes: list[dict[str, Any]] = []

            refused: list[str] = []

            def settle(custom_id: str, result: BatchResult | None) -> None:
                for index, (jid, attempts) in enumerate(by_custom[custom_id]):
                    task, known = tasks.get(jid), requests.prepared(jid)
                    if task is None or known is None:
                        outcomes.append(
                            {"jid": jid, "status": "failed", "error": "cannot be read back", "attempts": attempts + 1}
                        )
                        continue
                    prefix = repo.prefix_of(custom_id)
                    if result is not None and prefix and custom_id[len(prefix) :] != request_part(known.key):
                        refused.append(custom_id)  # the id names another prompt than this judgment's: not its reply
                        error = JudgeCallError("server_error", "result refused: its prompt key is not this one's", True)
                        outcomes.append(self._retry_or_fail(jid, attempts, error, int(index == 0 and result.billed)))
                        continue
                    outcome = self._outcome(jid, attempts, result, stopped, payer=index == 0)
                    if outcome is not None:
                        outcomes.append(outcome)
                        continue
                    assert result is not None and result.reply is not None
                    write = self._verdict(task, known, token, result, attempts, payer=index == 0)
                    writer.submit(write)
                    writes.append(write)

            read: set[str] = set()
            for result in client.results(batch_id, state, requests):
                if result.custom_id not in by_custom:  # another row's request (or another deployment's)
                    refused.append(result.custom_id)
                elif result.custom_id not in read:
                    read.add(result.custom_id)
                    settle(result.custom_id, result)
            for custom_id in by_custom:
                if custom_id not in read:  # no result for it (or it cannot be read back)
                    settle(custom_id, None)
            for write in writes:
                if write.written.result():
                    metrics.judgment_finished(row.judge, write.values)
            budgeted = next((task for task in tasks.values() if task.budget_usd is not None), None)
            if budgeted is not None:
                engine._budget_exhausted(budgeted)  # spent: the run's pending and open batches are cancelled
            pending = repo.send_back(db, row.id, outcomes)
            if pending and repo.run_batch_retry(db, row.run_id) == "realtime":
                engine.judge_realtime(pending)
            else:
                self._resend(pending)
            if refused:
                log.warning("provider batch %s (%s): %d results refused", row.id, batch_id, len(refused))
                ended.update(error=f"{len(refused)} results refused: not this batch's requests ({refused[0]}, ...)")
        repo.update_batch(db, row.id, **ended)

    def _outcome(
        self, jid: int, attempts: int, result: BatchResult | None, stopped: bool, payer: bool
    ) -> dict[str, Any] | None:
        """What a judgment whose request gave no reply becomes (None: it has a reply, a verdict to write)."""
        if result is not None and result.kind == "succeeded" and result.reply is not None:
            return None
        if result is None:
            error = JudgeCallError("server_error", "the provider returned no result for this request", True)
            return self._retry_or_fail(jid, attempts, error, 0)
        # a call is what the provider bills (an answered request), once for every judgment sharing it
        calls = 1 if payer and result.billed else 0
        if result.kind == "canceled":
            if stopped:
                return {
                    "jid": jid,
                    "status": "cancelled",
                    "error": "provider batch cancelled",
                    "attempts": attempts,
                    "calls": 0,
                }
            return {
                "jid": jid,
                "status": "pending",
                "error": "provider batch cancelled",
                "attempts": attempts,
                "calls": 0,
            }
        if result.kind == "expired":
            if stopped:
                return {
                    "jid": jid,
                    "status": "cancelled",
                    "error": "provider batch expired",
                    "attempts": attempts,
                    "calls": 0,
                }
            error = JudgeCallError("expired", "the provider batch ended before this request was run", True)
            return self._retry_or_fail(jid, attempts, error, calls)
        assert result.error is not None
        return self._retry_or_fail(jid, attempts, result.error, calls)

    def _verdict(
        self,
        task: Any,
        ready: Any,
        token: str,
        result: BatchResult,
        attempts: int,
        payer: bool,
    ) -> VerdictWrite:
        from judge_api.repository import cache

        reply = result.reply
        assert reply is not None
        tally = CallTally()
        tally.attempts = attempts + 1
        if payer:
            tally.provider_calls = 1
        tally.add(reply, from_cache=not payer, batch=True)
        parsed = parse_scored(reply, ready.rubric, ready.request, ready.context)
        values = {
            **ready.base,
            **tally.values(ready.spec, self.settings),
            **verdict_values(ready.rubric, task, parsed),
            "raw_output": reply.text,
            "latency_ms": None,
        }
        mode = cache_mode(task)  # options.cache: 'off' writes no entry, 'refresh' replaces the key's entry
        rows = [] if not payer or mode == "off" else [cache_row(ready.key, ready.spec, reply)]
        if mode == "refresh":
            rows = [{**row, cache.REPLACE: True} for row in rows]
        return VerdictWrite(task.id, token, values, rows, count_lost=False)


class _Requests(Mapping[str, JudgeRequest]):
    """A collected batch's requests by ``custom_id``, each prepared (rendered) when its result is read: the batch
    client looks a request up to read its reply, and the judgments sharing it are prepared then."""

    def __init__(self, by_custom: dict[str, list[tuple[int, int]]], tasks: dict[int, Any], engine: JudgeEngine):
        self._by_custom = by_custom
        self._tasks = tasks
        self._engine = engine
        self._prepared: dict[int, Prepared | None] = {}

    def prepared(self, jid: int) -> Prepared | None:
        if jid not in self._prepared:
            task = self._tasks.get(jid)
            ready = self._engine._prepare(Loaded(task)) if task is not None else None
            self._prepared[jid] = ready if isinstance(ready, Prepared) else None
        return self._prepared[jid]

    def __getitem__(self, custom_id: str) -> JudgeRequest:
        for jid, _ in self._by_custom.get(custom_id, ()):
            ready = self.prepared(jid)
            if ready is not None:
                return ready.request
        raise KeyError(custom_id)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_custom)

    def __len__(self) -> int:
        return len(self._by_custom)


def _no_paid() -> Any:

    return Paid()
