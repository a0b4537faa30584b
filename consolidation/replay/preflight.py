"""Before a replay plays anything: is the harness usable at all?

A replay of a harness that cannot answer (no key, nothing listening at its server) would
play every episode with every run failing, and read like a cautious model. So a paying
harness is checked first: its key where the vendor's own API needs one, and one cheap
request to its server (``GET <base_url>/models``, a few seconds at most). Any HTTP answer
but 401/403 means something listens; the model itself is judged by the runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from consolidation.errors import InvalidSettings
from consolidation.harnesses import spec

PROBE_TIMEOUT_S = 5.0
VENDOR_URLS = {"anthropic": "https://api.anthropic.com/v1", "openai": "https://api.openai.com/v1"}


def check_usable(harness: str, *, target: Mapping[str, Any], access: Mapping[str, Any]) -> None:
    """Refuse a paying harness that cannot be called: a missing key, a server that does not answer.

    ``target``: the scope settings the replay sets (``base_url`` among them); ``access``: the keys and
    servers the service was given (``api_key``, ``base_url``, ``openai_api_key``, ``openai_base_url``).

    Raises:
        InvalidSettings: the harness is unusable; the message says what to fix.
    """
    row = spec(harness)
    if not row.pays:
        return
    if harness == "openai":
        key, url = access.get("openai_api_key"), target.get("base_url") or access.get("openai_base_url")
    else:
        key, url = access.get("api_key"), access.get("base_url")
    if key is None and (url is None or harness != "openai"):
        raise InvalidSettings(
            f"the {harness} harness has no API key: set {row.key_env}"
            + (", or pass --base-url of a local server that needs none" if row.takes_base_url else "")
            + " (nothing was played)"
        )
    _probe(harness, url or VENDOR_URLS[harness], key)


def _probe(harness: str, url: str, key: str | None) -> None:
    import httpx  # the SDKs' own HTTP client: installed with them

    headers = {} if key is None else {"authorization": f"Bearer {key}", "x-api-key": key}
    where = url.rstrip("/") + "/models"
    try:
        status = httpx.get(where, headers=headers, timeout=PROBE_TIMEOUT_S).status_code
    except httpx.HTTPError as exc:
        raise InvalidSettings(
            f"nothing answers at {url} ({type(exc).__name__}: {exc}); start the {harness} server there, or pass "
            "--base-url where it listens (nothing was played)"
        ) from exc
    if status in (401, 403):
        raise InvalidSettings(
            f"the server at {url} refused the key (HTTP {status}); check the API key (nothing was played)"
        )
