"""The vLLM versions make-room is tested against, checked when the scheduler is built.

make-room reads and drives vLLM scheduler internals that change between releases (see `vllm_view.py` and
`make_room.py`), so an untested version is refused at start-up with the list of tested ones, unless the
user opts in (`make_room.allow_untested_vllm`, or FLATSHARE_ALLOW_UNTESTED_VLLM=1).
"""

from __future__ import annotations

import logging
import os
import re

from flatshare.scheduler.config import MakeRoomConfigError

TESTED_VLLM_VERSIONS = ("0.31.0", "0.32.0")
ALLOW_ENV = "FLATSHARE_ALLOW_UNTESTED_VLLM"

log = logging.getLogger(__name__)


def release(version: str) -> str:
    """The release part of a version string: '0.32.0+cpu' -> '0.32.0'."""
    match = re.match(r"\d+(\.\d+)*", version.strip())
    return match.group(0) if match else version


def installed_vllm_version() -> str:
    from vllm.version import __version__

    return str(__version__)


def check_vllm_version(
    version: str,
    allow_untested: bool,
    *,
    name: str = "make-room",
    key: str = "make_room",
    error: type[ValueError] = MakeRoomConfigError,
) -> None:
    """Raise `error` for a vLLM release outside `TESTED_VLLM_VERSIONS` unless allowed. `name` and `key`
    are the scheduler's and its `additional_config` section's (every flatshare scheduler checks here)."""
    if release(version) in TESTED_VLLM_VERSIONS:
        return
    tested = ", ".join(TESTED_VLLM_VERSIONS)
    if allow_untested or os.environ.get(ALLOW_ENV, "") == "1":
        log.warning("%s: vLLM %s is untested (tested: %s); running as asked", name, version, tested)
        return
    raise error(
        f"{name} is tested with vLLM {tested}, not {version}; set {key}.allow_untested_vllm "
        f"(or {ALLOW_ENV}=1) to run on it anyway"
    )
