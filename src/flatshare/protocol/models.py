"""A `/v1/models` answer (OpenAI's model list, as vLLM and serve-sim give it): which models a server
serves, and the first one's `max_model_len` (a vLLM extension of the model card).

    {"object": "list", "data": [{"id": "my-model", "root": "/path", "max_model_len": 4096, ...}]}

flatshare sends requests to the first model listed unless told otherwise.
"""

from __future__ import annotations

from typing import Any

import httpx

PATH = "/v1/models"


def model_cards(answer: Any) -> list[dict[str, Any]]:
    """The model cards (the `data` list) of an answer; ValueError when it has no list of objects."""
    cards = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(cards, list) or not all(isinstance(card, dict) for card in cards):
        raise ValueError(f"{PATH}: no list of models under 'data'")
    return cards


def first_card(answer: Any) -> dict[str, Any]:
    """The first model card of an answer; ValueError or IndexError when it lists none."""
    return model_cards(answer)[0]


def first_model(answer: Any) -> tuple[str, int | None]:
    """The first model's `id` and its `max_model_len` (None unless an integer); ValueError, KeyError or
    IndexError when the answer lists none."""
    card = first_card(answer)
    max_len = card.get("max_model_len")
    return str(card["id"]), max_len if isinstance(max_len, int) and not isinstance(max_len, bool) else None


async def fetch_models(client: httpx.AsyncClient, base_url: str) -> Any:
    """GET `{base_url}/v1/models` and its JSON; httpx.HTTPError on an error status, ValueError if the
    body is not JSON."""
    response = await client.get(f"{base_url}{PATH}")
    response.raise_for_status()
    return response.json()
