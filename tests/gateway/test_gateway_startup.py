"""`flatshare gateway` refuses what an unlucky operator gives it before it serves: one line on stderr,
exit 2, nothing served (issue 16). And tenant keys are matched in constant time."""

from __future__ import annotations

import hmac
import subprocess
import sys
from pathlib import Path

import pytest

from flatshare.gateway import tenants as tenants_module
from flatshare.gateway.config import BackendConfig, GatewayConfig, TenantConfig
from flatshare.gateway.tenants import Tenants

GATEWAY = [sys.executable, "-m", "flatshare.gateway", "gateway"]
BACKEND = '[[backends]]\nurl = "http://127.0.0.1:1"\n'


def refused(args: list[str]) -> str:
    """Run the gateway with `args`; assert it exits 2 with one line on stderr; that line."""
    result = subprocess.run([*GATEWAY, "--port", "0", *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "listening" not in result.stdout
    return lines[0]


def test_a_config_that_is_not_utf8(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_bytes(BACKEND.encode() + b'policy = "\xff\xfe"\n')
    assert "not UTF-8" in refused(["--config", str(config)])


def test_an_audit_log_under_a_file_or_at_a_folder(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    config = tmp_path / "gw.toml"
    config.write_text(BACKEND)
    line = refused(["--config", str(config), "--audit-log", str(tmp_path / "plain" / "audit.jsonl")])
    assert "audit_log" in line and "plain" in line
    line = refused(["--config", str(config), "--audit-log", str(tmp_path)])
    assert "audit_log" in line


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".ini"])
def test_a_config_that_is_neither_toml_nor_json(tmp_path: Path, suffix: str) -> None:
    config = tmp_path / f"gw{suffix}"
    config.write_text("backends:\n  - url: http://127.0.0.1:1\n")
    line = refused(["--config", str(config)])
    assert ".toml or .json" in line and "not valid" not in line
    if suffix != ".ini":
        assert "YAML" in line


def test_a_json_config_outside_the_json_limits(tmp_path: Path) -> None:
    config = tmp_path / "gw.json"
    config.write_text('{"backends": [{"url": "http://127.0.0.1:1"}], "port": ' + "9" * 5000 + "}")
    assert "digits" in refused(["--config", str(config)])


@pytest.mark.parametrize("host", ["256.1.1.1", "192.0.2.1", "no such host"])
def test_a_host_it_cannot_listen_on(host: str) -> None:
    line = refused(["--backend", "http://127.0.0.1:1", "--host", host])
    assert f"cannot listen on {host}:0" in line


@pytest.mark.parametrize("key", ["          ", " sk-padded-key ", "sk-with space-in", "sk-tab\tkey-01"])
def test_api_keys_with_whitespace_are_refused_without_showing_them(tmp_path: Path, key: str) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(BACKEND + f'[[tenants]]\nname = "t"\napi_keys = ["{key}"]\n'.replace("\t", "\\t"))
    line = refused(["--config", str(config)])
    assert "api_keys[0]" in line and "whitespace" in line
    assert not key.strip() or key.strip() not in line


def test_backend_api_key_and_admin_token_with_whitespace_are_refused() -> None:
    backends = (BackendConfig("http://127.0.0.1:1"),)
    with pytest.raises(ValueError, match="backend_api_key"):
        GatewayConfig(backends=backends, backend_api_key="   ")
    with pytest.raises(ValueError, match="admin_token"):
        GatewayConfig(backends=backends, admin_token=" admin-token-0123456789 ")


def test_tenant_keys_are_each_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key is compared with `hmac.compare_digest`, found or not: no dict lookup, no early exit."""
    compared: list[bytes] = []
    compare = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return compare(a, b)

    monkeypatch.setattr(tenants_module.hmac, "compare_digest", spy)
    config = GatewayConfig(
        backends=(BackendConfig("http://127.0.0.1:1"),),
        tenants=(
            TenantConfig("a", ("sk-first-key-1", "sk-first-key-2")),
            TenantConfig("b", ("sk-second-key",)),
        ),
    )
    tenants = Tenants(config)
    assert tenants.tenant("Bearer sk-first-key-1") == config.tenants[0]
    assert len(compared) == 3
    compared.clear()
    with pytest.raises(Exception, match="valid API key"):
        tenants.tenant("Bearer sk-nobody-at-all")
    assert len(compared) == 3
