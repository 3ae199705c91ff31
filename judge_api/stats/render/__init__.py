"""The report's renderers for the CLI: ``report_to_markdown`` (Markdown pipe tables), ``report_to_table``
(fixed-width plain text) and ``agreement_to_table`` (the ``agreement`` section alone).

They read a report as ``judge_api.stats.report.build_report`` returns it (or as the API serves it, with an optional
``run.economy`` block), put the reference-metric tokenisation warning above every table, and show each part as a
titled table (an empty part says so). Modules: ``cells`` (one figure as text), ``tables`` (every table of a report,
in order), ``calibrated`` (judge-only, human-only and calibrated intervals), ``judges`` (the panel and the
agreement with humans), ``optional_sections`` (fact-check, memory audit, adaptive planning, reference tokens),
``formats`` (Markdown and plain text). Computing stays in ``stats.report``:
the arrows run from here to there only.
"""

from judge_api.stats.render.formats import (
    agreement_to_table,
    calibrated_to_markdown,
    calibrated_to_table,
    report_to_markdown,
    report_to_table,
)

__all__ = [
    "agreement_to_table",
    "calibrated_to_markdown",
    "calibrated_to_table",
    "report_to_markdown",
    "report_to_table",
]
