"""verify_webhook agrees with the `standardwebhooks` reference implementation."""

from __future__ import annotations

import base64
import datetime as dt
import os
import time

import pytest
from holdpoint_sdk import WebhookVerificationError, sign_webhook, verify_webhook
from standardwebhooks.webhooks import Webhook

SECRET = "whsec_" + base64.b64encode(os.urandom(32)).decode()
BODY = b'{"type":"step.decided","timestamp":"2026-11-29T12:00:00Z","data":{"decision":{}}}'


def signed(body: bytes = BODY, *, at: int | None = None, msg_id: str = "msg_1") -> dict[str, str]:
    timestamp = at if at is not None else int(time.time())
    signature = Webhook(SECRET).sign(msg_id, dt.datetime.fromtimestamp(timestamp, tz=dt.UTC), body.decode())
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature,
    }


def test_a_webhook_signed_by_the_reference_library_verifies() -> None:
    event = verify_webhook(BODY, signed(), SECRET)
    assert event["type"] == "step.decided"


def test_our_signature_is_the_reference_librarys() -> None:
    headers = signed(at=1_700_000_000)
    ours = sign_webhook(SECRET, message_id="msg_1", timestamp=1_700_000_000, body=BODY)
    assert ours == headers["webhook-signature"]


def test_headers_are_case_insensitive_and_the_body_may_be_text() -> None:
    headers = {key.title(): value for key, value in signed().items()}
    assert verify_webhook(BODY.decode(), headers, SECRET)["type"] == "step.decided"


def test_one_matching_signature_among_several_is_enough() -> None:
    headers = signed()
    headers["webhook-signature"] = "v1,AAAA " + headers["webhook-signature"]
    verify_webhook(BODY, headers, SECRET)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h: ({**h, "webhook-id": "msg_2"}, BODY),
        lambda h: (h, BODY.replace(b"decided", b"deleted")),
        lambda h: ({k: v for k, v in h.items() if k != "webhook-signature"}, BODY),
        lambda h: ({**h, "webhook-signature": h["webhook-signature"].replace("v1,", "v2,")}, BODY),
        lambda h: ({**h, "webhook-timestamp": "soon"}, BODY),
    ],
    ids=["id", "body", "missing", "version", "timestamp"],
)
def test_anything_changed_or_missing_is_refused(tamper) -> None:  # type: ignore[no-untyped-def]
    headers, body = tamper(signed())
    with pytest.raises(WebhookVerificationError):
        verify_webhook(body, headers, SECRET)


def test_an_old_or_future_timestamp_is_a_replay() -> None:
    now = int(time.time())
    for at in (now - 301, now + 301):
        with pytest.raises(WebhookVerificationError, match="tolerance"):
            verify_webhook(BODY, signed(at=at), SECRET)
    verify_webhook(BODY, signed(at=now - 301), SECRET, tolerance=600)


def test_another_secret_is_refused() -> None:
    other = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    with pytest.raises(WebhookVerificationError):
        verify_webhook(BODY, signed(), other)
