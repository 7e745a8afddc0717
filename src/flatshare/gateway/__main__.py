"""`python -m flatshare.gateway gateway|calibrate ...`: the two commands without the rest of the CLI."""

from __future__ import annotations

import typer

from flatshare.cli.gateway import calibrate, gateway

app = typer.Typer(name="flatshare-gateway", no_args_is_help=True, add_completion=False)
app.command("gateway")(gateway)
app.command("calibrate")(calibrate)

if __name__ == "__main__":
    app()
