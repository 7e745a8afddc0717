"""`python -m flatshare.gateway gateway|calibrate-thresholds ...`: the two commands without the rest of the CLI."""

from __future__ import annotations

import typer

from flatshare.cli.gateway import calibrate_thresholds, gateway

app = typer.Typer(name="flatshare-gateway", no_args_is_help=True, add_completion=False)
app.command("gateway")(gateway)
app.command("calibrate-thresholds")(calibrate_thresholds)

if __name__ == "__main__":
    app()
