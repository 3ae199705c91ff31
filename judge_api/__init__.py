"""dialogue-judge service layer: request schemas, storage, rubric registry, reports and the HTTP API.

Dependency direction: ``dialogue_judge`` (CLI) -> ``dashboard`` / ``workers`` -> ``judge_api``.
``judge_api`` never imports ``workers``; it enqueues judgments by Celery task name.
"""

__version__ = "0.1.0"
