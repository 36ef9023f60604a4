"""The one outbound POST: vet the target, connect only to an address it vetted, within a hard
wall-clock deadline, without redirects or proxies.

Every try of webhooks and notifications goes through `post` (a signed webhook through
`signed_post`): the name is resolved and checked right before the try (outbound.ssrf, DNS
answers change), each vetted address is tried in turn while the connection is refused, and the
whole try, connect to answer, ends at its deadline (outbound.deadline). It never raises for the
receiver's faults: they are the result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from datetime import datetime

import httpx
from django.utils import timezone

from . import ssrf
from .deadline import deadline_passed, deadline_transport, try_deadline
from .retry import retry_after_seconds
from .signing import signed_headers

SEND_TIMEOUT = 10.0  # a try's wall-clock deadline, connect to answer, every address included
MAX_ADDRESSES_TRIED = 3
WEBHOOK_USER_AGENT = "Holdpoint-Webhooks/1"


@dataclass(frozen=True)
class Posted:
    """A try's answer: its status (None: no answer) and the start of its body, or why not.
    `error` may hold the URL unless the sender hid it (`signed_post` does)."""

    tried_at: datetime
    status_code: int | None = None
    body: str = ""
    error: str = ""
    latency_ms: int | None = None
    retry_after: float | None = None  # seconds the receiver asked us to wait

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def sending_client(timeout: float = SEND_TIMEOUT) -> httpx.Client:
    """An HTTP client for tries. Building one loads the CA bundle (costlier than a try on a near
    receiver), so a sweep builds one for all its tries. No connection is kept alive: each try
    connects to the address it has just vetted, and a connection pooled for one host name is
    never reused for another's that shares its address. trust_env=False: no proxy from the
    environment may route around the pinned address. Its transport ends every operation at the
    try's deadline."""
    return httpx.Client(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        transport=deadline_transport(),
    )


def post(
    url: str,
    body: bytes,
    *,
    headers: dict[str, str],
    timeout: float = SEND_TIMEOUT,
    client: httpx.Client | None = None,
    answer_bytes: int = 0,
) -> Posted:
    """POST `body` to `url` at an address vetted by outbound.ssrf (every address public unless
    HOLDPOINT_WEBHOOK_ALLOW_PRIVATE), all within `timeout` seconds of wall-clock time (only a DNS
    lookup that hangs can outlast it). At most `answer_bytes` of the answer are read (0: its
    status is the whole answer). A redirect is answered, not followed."""
    if client is None:
        with sending_client(timeout) as own:
            return post(url, body, headers=headers, timeout=timeout, client=own, answer_bytes=answer_bytes)
    with try_deadline(timeout):  # from before the name is resolved: the whole try
        return _post(url, body, headers=headers, timeout=timeout, client=client, answer_bytes=answer_bytes)


def _post(
    url: str, body: bytes, *, headers: dict[str, str], timeout: float, client: httpx.Client, answer_bytes: int
) -> Posted:
    tried_at = timezone.now()
    try:
        target = ssrf.url_check(url)
    except ssrf.UnsafeTarget as refusal:
        return Posted(tried_at=tried_at, error=f"refused: {refusal}")
    headers = {**headers, "Host": target.authority}
    started = time.perf_counter()
    last_error: BaseException | None = None
    for address in target.addresses[:MAX_ADDRESSES_TRIED]:
        request = client.build_request(
            "POST", target.pinned_url(address), content=body, headers=headers, extensions=target.extensions
        )
        try:
            response = client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as error:
            last_error = error  # never sent: the next address may answer
            continue
        except httpx.HTTPError as error:
            last_error = error
            break
        try:
            answer = _answer(response, answer_bytes)
        except httpx.HTTPError as error:
            last_error = error
            break
        return Posted(
            tried_at=tried_at,
            status_code=response.status_code,
            body=answer,
            error="redirect not followed" if response.is_redirect else "",
            latency_ms=int((time.perf_counter() - started) * 1000),
            retry_after=retry_after_seconds(response.headers.get("Retry-After"), now=tried_at),
        )
    assert last_error is not None
    return Posted(
        tried_at=tried_at,
        error=_error_text(last_error, timeout=timeout),
        latency_ms=int((time.perf_counter() - started) * 1000),
    )


def _answer(response: httpx.Response, limit: int) -> str:
    try:
        answer = b""
        if limit:
            for chunk in response.iter_raw():
                answer += chunk
                if len(answer) >= limit:
                    break
    finally:
        response.close()
    return answer[:limit].decode("utf-8", "replace")


def _error_text(error: BaseException, *, timeout: float) -> str:
    """Why a try got no answer (read inside the try's deadline, which it may name)."""
    if deadline_passed():
        return f"timeout: no answer within {timeout:g} s ({type(error).__name__})"
    if isinstance(error, httpx.TimeoutException):
        return f"timeout ({type(error).__name__})"
    return f"{type(error).__name__}: {error}"


def signed_post(
    *,
    url: str,
    secret: str,
    message_id: str,
    body: str,
    timeout: float = SEND_TIMEOUT,
    client: httpx.Client | None = None,
    user_agent: str = WEBHOOK_USER_AGENT,
) -> Posted:
    """One webhook try (contract §5): the body signed with this try's timestamp (Standard
    Webhooks), POSTed as `post` does. Its error names neither the URL (its path or query may be
    a credential) nor the secret."""
    content = body.encode("utf-8")
    headers = {
        **signed_headers(secret=secret, message_id=message_id, timestamp=int(time.time()), body=content),
        "Content-Type": "application/json",
        "User-Agent": user_agent,
    }
    posted = post(url, content, headers=headers, timeout=timeout, client=client)
    if posted.status_code is not None or posted.error.startswith("refused: "):
        return dataclasses.replace(posted, error=posted.error[:300])  # no URL in these
    return dataclasses.replace(posted, error=error_hidden(posted.error, url=url, secret=secret))


def error_hidden(text: str, *, url: str, secret: str = "") -> str:
    """An error in words safe to show: never the URL, its path, nor the secret."""
    hidden = [url, secret]
    with contextlib.suppress(httpx.InvalidURL):
        hidden.append(httpx.URL(url).path)
    for value in hidden:
        if value and value != "/":
            text = text.replace(value, "[hidden]")
    return text[:300]
