"""`flatshare gateway` and `flatshare calibrate` (bodies and options in `flatshare.gateway.cli`)."""

from __future__ import annotations

from flatshare.cli.base import app
from flatshare.gateway.cli import calibrate, gateway

app.command("gateway")(gateway)
app.command("calibrate")(calibrate)
