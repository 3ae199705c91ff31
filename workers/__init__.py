"""dialogue-judge workers: prompt rendering, verdict parsing, judge clients, rate limits, cache and Celery tasks."""
