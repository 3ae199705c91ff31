"""A small chatbot instrumented as a team would: the ``openai`` SDK against the judge simulator, one of three
instrumentations, and the SDK's ``OTLPSpanExporter`` configured by the environment alone
(``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``, ``OTEL_RESOURCE_ATTRIBUTES``).

It holds a 3-session conversation (2 exchanges a session, ``--pause`` seconds between sessions), sending the whole
history with each call, and stamps the conversation id on its spans (a span processor for the OpenTelemetry and
OpenLLMetry instrumentations, ``using_session`` for OpenInference). Prints the conversation it held as JSON.

    python -m tests.otlp.chatbot openai-v2 --base-url http://127.0.0.1:PORT/v1 --conversation c1
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

SESSIONS = [
    ["Hi! I just adopted a beagle called Rex.", "He loves long walks in the park."],
    ["I'm back. Rex chewed my shoes today.", "Any tips for chewing?"],
    ["Guess who is sleeping on my bed?", "Do you remember my dog's name and breed?"],
]
SYSTEM = "You are Max, a friendly pet-care assistant. Remember what the user tells you about their pets."


class ConversationId(SpanProcessor):
    """Stamps ``gen_ai.conversation.id`` on every span (what an app does for the instrumentations that do not)."""

    def __init__(self, conversation: str) -> None:
        self.conversation = conversation

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        span.set_attribute("gen_ai.conversation.id", self.conversation)


def instrument(name: str) -> None:
    if name == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument()
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as LlmetryInstrumentor

        LlmetryInstrumentor().instrument()
    elif name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as InferenceInstrumentor

        InferenceInstrumentor().instrument()
    else:
        raise SystemExit(f"unknown instrumentation {name!r}")


def session_context(name: str, conversation: str) -> AbstractContextManager[Any]:
    if name == "openinference":
        from openinference.instrumentation import using_session

        return using_session(conversation)
    return nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("instrumentation", choices=["openai-v2", "openllmetry", "openinference"])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--pause", type=float, default=1.5)
    args = parser.parse_args()

    provider = TracerProvider(resource=Resource.create())  # service.name etc. from OTEL_RESOURCE_ATTRIBUTES
    if args.instrumentation != "openinference":
        provider.add_span_processor(ConversationId(args.conversation))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint and headers from the environment
    trace.set_tracer_provider(provider)
    instrument(args.instrumentation)

    import openai

    client = openai.OpenAI(base_url=args.base_url, api_key="sk-simulated")
    history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
    held: list[dict[str, Any]] = []
    for number, session in enumerate(SESSIONS, start=1):
        if number > 1:
            time.sleep(args.pause)
        for user in session:
            history.append({"role": "user", "content": user})
            with session_context(args.instrumentation, args.conversation):
                reply = client.chat.completions.create(model="gpt-4o-mini", messages=history)  # type: ignore[arg-type]
            text = reply.choices[0].message.content or ""
            history.append({"role": "assistant", "content": text})
            held.append({"session": number, "user": user, "bot": text})
    provider.force_flush(30_000)
    provider.shutdown()
    print(json.dumps(held))


if __name__ == "__main__":
    main()
