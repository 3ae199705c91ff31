"""Moved to ``judge_api.prompting`` (the API renders prompts too, for the estimate); kept for existing imports."""

from judge_api.prompting import (
    RenderedPrompt,
    TemplateRefused,
    build_variables,
    fence,
    format_facts,
    format_persona,
    format_sources,
    format_turns,
    last_user_question,
    neutralise,
    parse_context,
    render,
)

__all__ = [
    "RenderedPrompt",
    "TemplateRefused",
    "build_variables",
    "fence",
    "format_facts",
    "format_persona",
    "format_sources",
    "format_turns",
    "last_user_question",
    "neutralise",
    "parse_context",
    "render",
]
