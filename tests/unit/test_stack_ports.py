"""The embedded stack refuses to start when one of its ports is held by another server (before this it started,
its API failed to bind, and the readiness check talked to whatever answered on the port: `dialogue-judge demo`
submitted its run to another process's API and then lost it)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dialogue_judge.stack import Stack, free_port


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_taken_api_port_stops_the_start_before_anything_is_spawned(tmp_path: Path, held_port: int) -> None:
    stack = Stack(home=tmp_path / "home", api_port=held_port, start_dashboard=False)
    with pytest.raises(RuntimeError, match=rf"port {held_port} is taken .*--api-port"):
        stack.start()
    assert stack.children == [] and not (tmp_path / "home").exists()


def test_taken_ports_names_each_one_with_its_option(held_port: int, tmp_path: Path) -> None:
    stack = Stack(home=tmp_path, api_port=free_port(), dashboard_port=held_port, local_judge_port=held_port)
    stack.start_local_judge = True
    problems = stack.taken_ports()
    assert [p.rsplit(" ", 1)[1] for p in problems] == ["--dashboard-port", "--local-judge-port"]
    assert Stack(home=tmp_path, api_port=free_port(), dashboard_port=free_port()).taken_ports() == []
