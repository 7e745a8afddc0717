"""The gateway package's docstring names every module it has, and no module it does not have."""

from __future__ import annotations

import re
from pathlib import Path

import flatshare.gateway

GATEWAY = Path(flatshare.gateway.__file__).parent


def test_the_package_docstring_lists_exactly_its_modules() -> None:
    doc = flatshare.gateway.__doc__ or ""
    modules_part = doc.split("Modules", 1)[1].split("Operator guides", 1)[0]
    named = set(re.findall(r"`([a-z_]+)`", modules_part))
    present = {path.stem for path in GATEWAY.glob("*.py") if path.stem != "__init__"}
    assert named == present, {"named, not present": named - present, "present, not named": present - named}
