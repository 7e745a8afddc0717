"""Turning a gateway-side baseline on from the settings file: checked like every other key."""

from __future__ import annotations

from pathlib import Path

import pytest

from flatshare.errors import InputError
from flatshare.gateway.app import startup_notes
from flatshare.gateway.configfile import load_config

HEAD = 'backends = [{url = "http://127.0.0.1:8001"}]\n'


def _load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "gw.toml"
    path.write_text(HEAD + text)
    return load_config(path)


def test_a_baseline_and_its_settings_load_and_are_announced(tmp_path: Path) -> None:
    config = _load(tmp_path, 'baseline = "agent-cap"\n[baseline_settings]\nmax_agents_per_backend = 3\n')
    assert config.baseline == "agent-cap" and config.baseline_settings == {"max_agents_per_backend": 3.0}  # type: ignore[attr-defined]
    assert "gateway: baseline agent-cap (max_agents_per_backend 3)" in startup_notes(config)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('baseline = "cap"\n', "unknown baseline 'cap'"),
        ('baseline = "flow-control"\n[baseline_settings]\nkv = 0.5\n', "unknown setting kv"),
        ('baseline = "agent-cap"\n[baseline_settings]\nmax_agents_per_backend = 0\n', "must be >= 1, got 0"),
        ('baseline = "agent-cap"\n[baseline_settings]\nmax_agents_per_backend = 1.5\n', "must be an integer"),
        ("[baseline_settings]\nlease_s = 3\n", "baseline_settings given without a baseline"),
        (
            'baseline = "leaseholder"\n[baseline_settings]\nlease_s = "long"\n',
            "baseline leaseholder: setting lease_s must be a number, got 'long'",
        ),
        (
            'baseline = "abort-resubmit"\n[baseline_settings]\nresume_on = "soon"\n',
            "resume_on must be one of",
        ),
        (
            'baseline = "abort-resubmit"\n[baseline_settings]\nresume_on = true\n',
            "must be float or str, got True",
        ),
    ],
)
def test_bad_baseline_settings_are_refused_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(InputError, match=r"gw\.toml") as caught:
        _load(tmp_path, text)
    assert message in str(caught.value)
