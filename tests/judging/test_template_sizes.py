"""Issue 42 review: a template cannot exhaust a worker's memory by any operator, format, filter, method, literal or
global, only by ``*`` as before. Each template below, rendered on the old sandbox, would build a value of about a
gigabyte or more (run under an address-space limit of 1.5 GB, every one died with MemoryError, or rendered 900 MB);
now each is refused by the sandbox before the value is built, and the judgment fails with the SecurityError."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from judge_api.rubrics import MessageTemplate, Rubric, get_registry
from workers.prompting import TemplateRefused, render

ITEM = {"id": "i", "dialogue": [{"speaker": "user", "text": "Do you remember my dog?"}], "candidates": {"a": "Rex."}}
BIG = "{% set big = 'a' * 1000000 %}"

HOGS = {
    "percent width": "{{ '%900000000s' % 'a' }}",
    "format method width": "{{ '{:>900000000}'.format('a') }}",
    "format method nested width": "{{ '{:>{w}}'.format('a', w=900000000) }}",
    "format filter width": "{{ '%900000000s'|format('a') }}",
    "plus doubled in a loop": BIG + "{% set ns = namespace(s=big) %}{% for i in range(12) %}"
    "{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "tilde doubled in a loop": BIG + "{% set ns = namespace(s=big) %}{% for i in range(12) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "tilde doubled by a recursive macro": "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}"
    "{{ s|length }}{% endif %}{% endmacro %}{{ d('a' * 1000000, 12) }}",
    "center filter": "{{ 'a'|center(900000000)|length }}",
    "center method": "{{ 'a'.center(900000000)|length }}",
    "zfill method": "{{ 'a'.zfill(900000000)|length }}",
    "replace filter": BIG + "{{ big|replace('a', 'aaaaaaaaaa' * 100)|length }}",
    "replace method": BIG + "{{ big.replace('a', 'aaaaaaaaaa' * 100)|length }}",
    "join separator": BIG + "{{ range(100000)|join(big)|length }}",
    "join method": BIG + "{{ big.join(range(100000)|map('string'))|length }}",
    "list of a big string repeated": BIG + "{{ ([big] * 1000000)|string|length }}",
    "nested literals": BIG + "{% set a = [big, big, big, big] %}{% set b = [a, a, a, a] %}{% set c = [b, b, b, b] %}"
    "{% set d = [c, c, c, c] %}{% set e = [d, d, d, d] %}{{ e|string|length }}",
    "lipsum paragraphs": "{{ lipsum(n=10000000)|length }}",
    "output of many big values": BIG + "{% for i in range(100000) %}{{ big }}{% endfor %}",
    "macro calling itself": "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
}


@pytest.fixture
def memory_cap() -> Iterator[None]:
    """A worker with 1.5 GB more than now: what the old sandbox would have tried to take dies of MemoryError here
    instead of taking the test machine down."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/status") as status:
        used = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (used + 1_500_000_000, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def planted(source: str) -> Rubric:
    rubric = get_registry().get("rsum-single")
    return rubric.model_copy(
        update={"id": "planted-rubric", "messages": [MessageTemplate(role="user", text=source)], "templates": {}},
        deep=True,
    )


@pytest.mark.parametrize("name", list(HOGS))
def test_a_template_building_a_huge_value_is_refused_before_it_is_built(memory_cap: None, name: str) -> None:
    with pytest.raises(TemplateRefused) as refused:
        render(planted(HOGS[name]), ITEM, "consistency", "Rex.")
    message = str(refused.value)
    assert "'planted-rubric'" in message
    assert "SecurityError" in message or "RecursionError" in message


def test_templates_of_ordinary_size_still_render() -> None:
    source = (
        BIG + "{{ (big ~ big)|length }} {{ ('%5s' % 'a')|length }} {{ '{:>5}'.format('a') }} {{ 'a'|center(7) }}"
        " {{ [1, 2]|join(',') }} {{ big.replace('a', 'bb')|length }} {{ ([1] * 1000000)|length }} {{ response }}"
    )
    content = render(planted(source), ITEM, "consistency", "Rex.").messages[0]["content"]
    assert content.startswith("2000000 5     a    a    1,2 2000000 1000000 ")
    assert "Rex." in content
