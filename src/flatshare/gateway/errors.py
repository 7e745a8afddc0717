"""Refusals the gateway answers itself, as OpenAI-style JSON errors (the shape vLLM sends):
`{"error": {"message", "type", "param", "code"}}`. Each carries a `kind`, the label it is counted
under in `flatshare_gateway_errors_total`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from flatshare.protocol.sse import encode_event

ERROR_KINDS = (
    "bad_json",
    "bad_request",
    "body_too_large",
    "unauthorized",
    "unknown_model",
    "no_backend",
    "upstream_connect",
    "upstream_status",
    "upstream_midstream",
    "upstream_timeout",
    "tokenize",
    "shutdown",
    "internal",
    # client-facing limits (connections.py)
    "body_timeout",
    "response_too_large",
)


class GatewayError(Exception):
    """A request the gateway refuses or cannot serve; `headers` go on the response (Retry-After)."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str,
        err_type: str = "BadRequestError",
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        assert kind in ERROR_KINDS, kind
        self.status = status
        self.message = message
        self.kind = kind
        self.err_type = err_type
        self.param = param
        self.headers = dict(headers or {})

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }

    def sse_event(self) -> bytes:
        """The error as one server-sent event (`data: {...}`), as vLLM reports a failure mid-stream."""
        return encode_event(self.body())

    def response(self) -> JSONResponse:
        """The error as a whole JSON answer, with its status and headers."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def unauthorized(message: str) -> GatewayError:
    """A 401 for a route that needs a bearer key or token the caller did not send (`message` says which)."""
    return GatewayError(
        401, message, "unauthorized", "AuthenticationError", headers={"WWW-Authenticate": "Bearer"}
    )


async def answered(
    count: Callable[[str], None], handler: Callable[[Request], Awaitable[Response]], request: Request
) -> Response:
    """`handler`'s answer, or the GatewayError it raised as a JSON answer, counted by its kind."""
    try:
        return await handler(request)
    except GatewayError as exc:
        count(exc.kind)
        return exc.response()
