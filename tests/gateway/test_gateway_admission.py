"""Before routing: request bodies checked, tenants and priorities settled, input tokens counted."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from flatshare.gateway.config import BackendConfig, GatewayConfig, TenantConfig, TokenConfig
from flatshare.gateway.errors import GatewayError
from flatshare.gateway.inbound import parse_inbound
from flatshare.gateway.input_count import CHAT_MESSAGE_OVERHEAD, TokenCounter, estimate
from flatshare.gateway.tenants import Tenants
from flatshare.gateway.upstream import UpstreamError

BACKENDS = (BackendConfig("http://a:1"),)
TENANTS = (
    TenantConfig("voice", ("sk-voice-key",), max_priority=-10),
    TenantConfig("agents", ("sk-agent-key1", "sk-agent-key2"), max_priority=10),
)


def tenants(**changes: Any) -> Tenants:
    return Tenants(
        GatewayConfig(backends=BACKENDS, tenants=TENANTS, classes={"voice": -10, "agent": 10}, **changes)
    )


def test_priority_is_clamped_to_what_the_tenant_may_use() -> None:
    agents = {"authorization": "Bearer sk-agent-key2"}
    asked_high = tenants().admit(agents, -20)
    assert (asked_high.tenant, asked_high.requested_priority, asked_high.priority) == ("agents", -20, 10)
    assert asked_high.clamped
    assert tenants().admit(agents, None).priority == 10  # the default 0 is too important for agents
    assert tenants().admit(agents, 50).priority == 50  # lowering one's own priority is allowed
    voice = tenants().admit({"authorization": "Bearer sk-voice-key"}, -20)
    assert (voice.priority, voice.clamped) == (-10, True)


def test_class_header_sets_the_priority_when_the_body_does_not() -> None:
    voice_key = {"authorization": "bearer sk-voice-key", "x-flatshare-class": "voice"}
    assert tenants().admit(voice_key, None).priority == -10
    assert tenants().admit(voice_key, 3).priority == 3
    agent_as_voice = {"authorization": "Bearer sk-agent-key1", "x-flatshare-class": "voice"}
    admitted = tenants().admit(agent_as_voice, None)
    assert (admitted.cls, admitted.priority) == ("voice", 10)


@pytest.mark.parametrize(
    ("headers", "priority", "status", "fragment"),
    [
        ({}, None, 401, "valid API key is required"),
        ({"authorization": "Bearer sk-unknown-key"}, None, 401, "valid API key"),
        ({"authorization": "Basic sk-voice-key"}, None, 401, "valid API key"),
        (
            {"authorization": "Bearer sk-voice-key", "x-flatshare-class": "vip"},
            None,
            400,
            "unknown class 'vip'",
        ),
        ({"authorization": "Bearer sk-voice-key"}, "high", 400, "'priority' must be an integer"),
        ({"authorization": "Bearer sk-voice-key"}, True, 400, "'priority' must be an integer"),
    ],
)
def test_refusals(headers: dict[str, str], priority: object, status: int, fragment: str) -> None:
    with pytest.raises(GatewayError, match=fragment) as caught:
        tenants().admit(headers, priority)
    assert caught.value.status == status
    if status == 401:  # RFC 9110 section 11.6.1: a 401 names the scheme to authenticate with
        assert caught.value.headers.get("WWW-Authenticate") == "Bearer"


def test_open_gateway_passes_priorities_unchanged() -> None:
    open_gateway = Tenants(GatewayConfig(backends=BACKENDS))
    admitted = open_gateway.admit({}, -100)
    assert (admitted.tenant, admitted.priority, admitted.clamped) == ("open", -100, False)


@pytest.mark.parametrize(
    ("raw", "chat", "fragment"),
    [
        (b"{nope", False, "not valid JSON"),
        (b"[1, 2]", False, "must be a JSON object"),
        (b"\xff\xfe", False, "not valid JSON"),
        (b'{"model": 3, "prompt": "x"}', False, "'model' must be a string"),
        (b'{"prompt": "x", "stream": "yes"}', False, "'stream' must be true or false"),
        (b'{"max_tokens": 3}', False, "'prompt' is required"),
        (b'{"messages": []}', True, "'messages' must be a non-empty list"),
    ],
)
def test_malformed_bodies(raw: bytes, chat: bool, fragment: str) -> None:
    with pytest.raises(GatewayError, match=fragment) as caught:
        parse_inbound(raw, chat)
    assert caught.value.status == 400


def test_estimates() -> None:
    assert estimate({"prompt": [1, 2, 3]}, chat=False).tokens == 3
    assert estimate({"prompt": [[1, 2], [3]]}, chat=False).source == "ids"
    text = estimate({"prompt": "a" * 400}, chat=False)
    assert (text.tokens, text.source) == (100, "estimate")
    assert estimate({"prompt": "é" * 4}, chat=False).tokens == 2  # UTF-8 bytes / 4
    chat = {
        "messages": [
            {"role": "user", "content": "x" * 40},
            {"role": "user", "content": [{"type": "text", "text": "y" * 8}]},
        ]
    }
    assert estimate(chat, chat=True).tokens == 10 + 2 + 2 * CHAT_MESSAGE_OVERHEAD


class StubUpstream:
    """Answers /tokenize with a fixed count, or fails."""

    name = "stub"

    def __init__(self, count: int | None) -> None:
        self.count = count
        self.asked: list[tuple[str, object]] = []

    async def fetch(self, url: str, timeout_s: float, json_body: object = None) -> tuple[int, bytes]:
        self.asked.append((url, json_body))
        if self.count is None:
            raise UpstreamError("refused", refused=True)
        return 200, json.dumps({"count": self.count}).encode()


def count(config: TokenConfig, upstream: StubUpstream, body: dict[str, Any], chat: bool = False) -> Any:
    counter = TokenCounter(config, upstream)  # type: ignore[arg-type]
    return asyncio.run(counter.count(body, chat, "m", lambda: "http://b:1"))


def test_backend_tokenize_only_for_long_requests() -> None:
    upstream = StubUpstream(1234)
    config = TokenConfig(source="backend", exact_min_estimate=256)
    short = count(config, upstream, {"prompt": "short question"})
    assert (short.source, upstream.asked) == ("estimate", [])
    long = count(config, upstream, {"prompt": "word " * 400})
    assert (long.tokens, long.source) == (1234, "backend")
    assert upstream.asked == [("http://b:1/tokenize", {"model": "m", "prompt": "word " * 400})]
    chat = count(config, upstream, {"messages": [{"role": "user", "content": "w " * 600}]}, chat=True)
    assert chat.source == "backend" and upstream.asked[-1][1] == {
        "model": "m",
        "messages": [{"role": "user", "content": "w " * 600}],
    }


def test_tokenize_failure_falls_back_to_the_estimate() -> None:
    result = count(
        TokenConfig(source="backend", exact_min_estimate=0), StubUpstream(None), {"prompt": "a" * 40}
    )
    assert (result.tokens, result.source) == (10, "estimate") and "refused" in result.error


def test_local_tokenizer(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    config = TokenConfig(source="local", tokenizer_file=str(path), exact_min_estimate=0)
    result = count(config, StubUpstream(None), {"prompt": "hello world hello"})
    assert (result.tokens, result.source) == (3, "local")
