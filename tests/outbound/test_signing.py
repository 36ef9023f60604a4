"""Standard Webhooks signatures, checked with the `standardwebhooks` package."""

from __future__ import annotations

import base64
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from outbound.signing import InvalidSecret, secret_decode, secret_generate, signed_headers

BODY = b'{"type":"step.state_changed","timestamp":"2026-11-29T12:00:00Z","data":{}}'


def test_a_new_secret_is_whsec_and_32_random_bytes() -> None:
    first, second = secret_generate(), secret_generate()
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"))) == 32
    assert first != second


def test_the_signature_verifies_with_the_standard_webhooks_library() -> None:
    secret = secret_generate()
    now = int(time.time())
    headers = signed_headers(secret=secret, message_id="msg_1", timestamp=now, body=BODY)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(secret).verify(BODY, headers) == {
        "type": "step.state_changed",
        "timestamp": "2026-11-29T12:00:00Z",
        "data": {},
    }


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, b: (h, b.replace(b"{}", b'{"x":1}')),
        lambda h, b: ({**h, "webhook-id": "msg_2"}, b),
        lambda h, b: ({**h, "webhook-timestamp": str(int(h["webhook-timestamp"]) + 1)}, b),
    ],
    ids=["body", "id", "timestamp"],
)
def test_a_changed_body_id_or_timestamp_does_not_verify(tamper) -> None:  # type: ignore[no-untyped-def]
    secret = secret_generate()
    headers = signed_headers(secret=secret, message_id="msg_1", timestamp=int(time.time()), body=BODY)
    headers, body = tamper(headers, BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)


def test_another_secret_does_not_verify() -> None:
    headers = signed_headers(secret=secret_generate(), message_id="msg_1", timestamp=int(time.time()), body=BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret_generate()).verify(BODY, headers)


@pytest.mark.parametrize(
    "secret",
    ["not-a-secret", "whsec_***", "whsec_" + base64.b64encode(b"short").decode()],
)
def test_a_malformed_secret_is_refused(secret: str) -> None:
    with pytest.raises(InvalidSecret):
        secret_decode(secret)
