"""Talking to a running flatshare gateway for the admission experiment's endpoint mode (the HTTP edge).

- `check_gateway(url, token)`: is it a flatshare gateway (`GET /gateway/backends` and `/gateway/routing`
  answer as the gateway does), may this token switch its routing (admin routes on), which backends it
  has and which model it serves. Every refusal is an `InputError` naming the URL.
- `put_routing`: `PUT /gateway/routing` with the admin token (a refusal is an `InputError` saying why).
- `wait_idle`: until every backend is healthy, fresh and runs and queues nothing.
- `backend_loads`: the rows of `GET /gateway/backends` as `flatshare.policy.load.BackendLoad`s.
- `BackendPoller`: polls `/gateway/backends` while a run goes on, keeping each fresh reading of a
  backend with its `time.perf_counter()`.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

import httpx

from flatshare import httpclient
from flatshare.errors import InputError
from flatshare.policy.load import BackendLoad
from flatshare.protocol.models import PATH as MODELS_PATH
from flatshare.protocol.models import first_model
from flatshare.replay.endpoints import normalize_url

TIMEOUT = httpx.Timeout(10.0, connect=5.0)


@dataclass(frozen=True)
class GatewayInfo:
    """What the gateway says about itself: its base URL, backends (in configured order), the routing in
    force when the experiment started, the model to send, and that model's `max_model_len` if known."""

    url: str
    backends: tuple[str, ...]
    routing: dict[str, Any]
    model: str
    max_model_len: int | None


def _get(client: httpx.Client, url: str, path: str) -> Any:
    try:
        response = client.get(f"{url}{path}")
    except httpx.HTTPError as exc:
        raise InputError(f"--endpoint {url}: cannot reach it ({type(exc).__name__}: {exc})") from None
    if response.status_code != 200:
        raise InputError(
            f"--endpoint {url}: GET {path} answered {response.status_code}; is it a flatshare gateway "
            "(`flatshare gateway`, with PUT /gateway/routing)?"
        )
    try:
        return response.json()
    except ValueError:
        raise InputError(
            f"--endpoint {url}: GET {path} did not answer JSON; not a flatshare gateway"
        ) from None


def _routing_body(change: dict[str, Any]) -> dict[str, Any]:
    """The part of a routing answer a PUT accepts (`policy`, `prefer`, `thresholds` without provenance)."""
    thresholds = change.get("thresholds") or {}
    out: dict[str, Any] = {"policy": change["policy"], "prefer": change["prefer"]}
    out["thresholds"] = {
        k: thresholds[k] for k in ("kv_usage", "input_tokens", "calibrated_from") if k in thresholds
    }
    return out


def check_gateway(
    url: str, token: str, model: str | None = None, client: httpx.Client | None = None
) -> GatewayInfo:
    """Check `url` is a flatshare gateway this `token` may switch (module docstring); what it serves.

    The token is tried by re-sending the routing in force (a PUT that changes nothing)."""
    base = normalize_url(url)
    own = client is None
    client = client or httpclient.client(TIMEOUT)
    try:
        rows = _get(client, base, "/gateway/backends")
        routing = _get(client, base, "/gateway/routing")
        if not isinstance(rows, dict) or not isinstance(rows.get("backends"), list) or not rows["backends"]:
            raise InputError(
                f"--endpoint {base}: GET /gateway/backends lists no backends; not a flatshare gateway"
            )
        if not isinstance(routing, dict) or "policy" not in routing:
            raise InputError(
                f"--endpoint {base}: GET /gateway/routing has no policy; not a flatshare gateway"
            )
        if not routing.get("admin"):
            raise InputError(
                f"--endpoint {base}: the gateway's routing cannot be switched (no admin_token): start it with "
                "--admin-token or FLATSHARE_ADMIN_TOKEN, and pass the same token to the experiment"
            )
        if not token:
            raise InputError(
                f"--endpoint {base}: give the gateway's admin token (--admin-token or FLATSHARE_ADMIN_TOKEN)"
            )
        put_routing(client, base, token, _routing_body(routing))
        names = tuple(str(row["name"]) for row in rows["backends"])
        if len(names) < 2:
            raise InputError(
                f"--endpoint {base}: the gateway has {len(names)} backend; the experiment needs 2 or more"
            )
        served, max_len = _model(client, base)
        chosen = model or served
        if chosen is None:
            raise InputError(
                f"--endpoint {base}: GET /v1/models lists no model (are the backends up?); give --model"
            )
        return GatewayInfo(base, names, _routing_body(routing), chosen, max_len if chosen == served else None)
    finally:
        if own:
            client.close()


def _model(client: httpx.Client, url: str) -> tuple[str | None, int | None]:
    try:
        return first_model(client.get(f"{url}{MODELS_PATH}").json())
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None, None


def put_routing(client: httpx.Client, url: str, token: str, routing: dict[str, Any]) -> dict[str, Any]:
    """Switch the gateway's routing; its answer (the routing now in force)."""
    try:
        response = client.put(
            f"{url}/gateway/routing", json=routing, headers={"Authorization": f"Bearer {token}"}
        )
    except httpx.HTTPError as exc:
        raise InputError(
            f"--endpoint {url}: PUT /gateway/routing failed ({type(exc).__name__}: {exc})"
        ) from None
    if response.status_code == 401:
        raise InputError(
            f"--endpoint {url}: the gateway refused the admin token (401); give the one it runs with"
        )
    if response.status_code != 200:
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = response.text[:300]
        raise InputError(f"--endpoint {url}: PUT /gateway/routing answered {response.status_code}: {message}")
    return dict(response.json())


def backend_loads(answer: Any) -> list[BackendLoad]:
    """The backends of a `GET /gateway/backends` answer (`gateway.app`: `audit.backend_fields` plus
    `preemptions_total` and `degraded`); KeyError, TypeError or ValueError when it is not one."""
    return [_load(row) for row in answer["backends"]]


def _load(row: dict[str, Any]) -> BackendLoad:
    kv, age = row.get("kv_usage"), row.get("scrape_age_s")
    return BackendLoad(
        str(row["name"]),
        kv_usage=None if kv is None else float(kv),
        running=int(row["running"]),
        waiting=int(row["waiting"]),
        preemptions=float(row.get("preemptions_total") or 0),
        scrape_age_s=math.inf if age is None else float(age),
        stale=bool(row["stale"]),
        healthy=bool(row["healthy"]),
        degraded=bool(row.get("degraded", False)),
    )


def _idle(loads: list[BackendLoad]) -> bool:
    return all(b.healthy and not b.stale and b.running == 0 and b.waiting == 0 for b in loads)


async def wait_idle(
    client: httpx.AsyncClient, url: str, timeout_s: float = 300.0, settle_s: float = 0.3
) -> None:
    """Until every backend is healthy, fresh and idle (nothing running or waiting), seen twice
    `settle_s` apart; InputError after `timeout_s` (naming the busy backends)."""
    deadline = time.monotonic() + timeout_s
    loads: list[BackendLoad] = []
    calm = 0
    while True:
        loads = backend_loads((await client.get(f"{url}/gateway/backends")).json())
        calm = calm + 1 if _idle(loads) else 0
        if calm >= 2:
            return
        if time.monotonic() > deadline:
            busy = ", ".join(
                f"{b.name} (running {b.running}, waiting {b.waiting}, healthy {b.healthy})"
                for b in loads
                if not _idle([b])
            )
            raise InputError(f"--endpoint {url}: backends not idle after {timeout_s:.0f} s: {busy}")
        await asyncio.sleep(settle_s if calm else 0.1)


class BackendPoller:
    """Reads `/gateway/backends` every `interval_s` until cancelled; `readings` grows as it goes: each
    backend with a fresh reading, with `time.perf_counter()` when the answer came (the caller turns it
    into run time). Stale readings and backends never read are skipped."""

    def __init__(self, client: httpx.AsyncClient, url: str, interval_s: float = 0.1) -> None:
        self.client = client
        self.url = url
        self.interval_s = interval_s
        self.readings: list[tuple[float, BackendLoad]] = []
        self.errors = 0

    async def run(self) -> None:
        while True:
            try:
                loads = backend_loads((await self.client.get(f"{self.url}/gateway/backends")).json())
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                self.errors += 1
            else:
                now = time.perf_counter()
                self.readings.extend((now, b) for b in loads if b.kv_usage is not None and not b.stale)
            await asyncio.sleep(self.interval_s)
