"""A small HTTP client for the API, used by the CLI, the dashboard and the CI gate."""

from __future__ import annotations

from typing import Any

import httpx


class ApiError(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def describe_error(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:500]}"
    if isinstance(detail, list):
        parts = []
        for error in detail:
            loc = ".".join(str(p) for p in error.get("loc", []) if p != "body")
            parts.append(f"{loc}: {error.get('msg')}" if loc else str(error.get("msg")))
        return f"HTTP {response.status_code}: " + "; ".join(parts)
    return f"HTTP {response.status_code}: {detail}"


class ApiClient:
    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, f"cannot reach the API at {self.base_url}: {exc}") from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, describe_error(response))
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        return response.text

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    # convenience
    def create_run(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.post("/v1/runs", body))

    def run(self, run_id: str) -> dict[str, Any]:
        return dict(self.get(f"/v1/runs/{run_id}"))

    def report(self, run_id: str, n_boot: int = 1000) -> dict[str, Any]:
        return dict(self.get(f"/v1/runs/{run_id}/report", n_boot=n_boot))

    def all_judgments(self, run_id: str, page: int = 1000, **filters: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        offset = 0
        while True:
            data = self.get(f"/v1/runs/{run_id}/judgments", offset=offset, limit=page, **filters)
            rows.extend(data["items"])
            offset += page
            if offset >= data["total"]:
                return rows
