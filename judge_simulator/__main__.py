"""CLI: ``python -m judge_simulator --host 127.0.0.1 --port 0 [--script FILE]``.

Binds the socket itself (so ``--port 0`` picks a free port), serves the app with a single
uvicorn worker, and prints ``SIMULATOR_URL=http://HOST:PORT`` on stdout (flushed) once uvicorn
has started; everything else uvicorn logs goes to stderr. SIGTERM/SIGINT stop it gracefully, with
in-flight (possibly hung) calls cut off after ``--graceful-timeout`` seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

import uvicorn

from .app import create_app
from .script import Script


def build_parser(prog: str = "python -m judge_simulator") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Loopback LLM-judge server on the OpenAI Chat Completions and Anthropic Messages wire formats, "
        "answering with the verdicts, latency and faults of a behaviour script (judge_simulator/script.py). "
        "Prints SIMULATOR_URL=http://HOST:PORT once it serves.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to bind; 0 picks a free port (default)")
    parser.add_argument("--script", metavar="FILE", help="behaviour script, .json or .yaml/.yml")
    parser.add_argument("--seed", type=int, default=None, help="override the script's seed")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    parser.add_argument("--log-size", type=int, default=1000, help="calls kept for GET /_sim/requests")
    parser.add_argument("--graceful-timeout", type=int, default=2, help="seconds to drain calls on shutdown")
    return parser


def load_script(path: str | None, seed: int | None) -> Script:
    """The script from ``path`` (default script when None), with an optional seed override."""
    script = Script.from_file(path) if path else Script()
    if seed is not None:
        script = script.model_copy(update={"seed": seed})
    return script


async def serve(sock: socket.socket, config: uvicorn.Config) -> None:
    """Run uvicorn on ``sock`` and announce the URL once it accepts connections."""
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # startup failed: surface the error
            return
        await asyncio.sleep(0.01)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"SIMULATOR_URL=http://{shown}:{port}", flush=True)
    await task


def main(argv: list[str] | None = None, prog: str = "python -m judge_simulator") -> int:
    """Serve until SIGTERM/SIGINT; 2 when the script cannot be loaded or the address bound (argparse: bad options)."""
    args = build_parser(prog).parse_args(argv)
    try:
        script = load_script(args.script, args.seed)
    except Exception as exc:  # report any load/validation problem and exit non-zero
        print(f"judge simulator: cannot load script {args.script!r}: {exc}", file=sys.stderr)
        return 2
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: without it a keep-alive client waits ~40 ms per reply (Nagle meets the
    # client's delayed ACK), which is not what a provider's latency looks like
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        print(f"judge simulator: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    config = uvicorn.Config(
        create_app(script, log_size=args.log_size),
        log_level=args.log_level,
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=args.graceful_timeout,
        backlog=2048,
    )
    asyncio.run(serve(sock, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
