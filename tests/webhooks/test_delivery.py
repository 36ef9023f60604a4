"""Delivering the outbox to a real receiver on 127.0.0.1: signatures, retries, leases."""

from __future__ import annotations

import socket
import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from accounts.models import Team
from outbound.retry import MAX_TRIES, retry_after_seconds, retry_delay
from webhooks import delivery
from webhooks.delivery import LEASE, deliver_due_messages, message_send, messages_claim, try_record
from webhooks.models import DeliveryTry, OutboxMessage, WebhookEndpoint
from webhooks.outbox import event_emit
from webhooks.services import endpoint_create, endpoint_disable

from .conftest import Answer, Receiver, fake_resolver

pytestmark = pytest.mark.usefixtures("no_prompt_delivery")


def emit(team: Team, event_type: str = "tool.resumed", **data: object) -> OutboxMessage:
    with transaction.atomic():
        event_emit(
            team_id=team.pk,
            event_type=event_type,
            data={"tool": "send_email", "reason": "test", "until": None, "reviewer": None, **data},
        )
    return OutboxMessage.objects.order_by("-id").first()  # type: ignore[return-value]


def close_to(value, expected, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    return abs((value - expected).total_seconds()) <= seconds


# --- the schedule (pure) -----------------------------------------------------------------------


def test_the_schedule_backs_off_from_five_seconds_to_a_day_with_jitter() -> None:
    expected = [5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400]
    for tries, seconds in enumerate(expected, start=1):
        for _ in range(20):
            delay = retry_delay(tries)
            assert delay is not None
            assert seconds * 0.9 <= delay.total_seconds() <= seconds * 1.1
    assert MAX_TRIES == 10
    assert retry_delay(MAX_TRIES) is None


def test_the_jitter_spreads_the_delays() -> None:
    assert len({retry_delay(3) for _ in range(10)}) > 1


def test_retry_after_is_honoured_only_when_it_asks_for_longer_and_never_beyond_a_day() -> None:
    assert retry_delay(1, retry_after=120) == timedelta(seconds=120)
    shorter = retry_delay(2, retry_after=10)
    assert shorter is not None and shorter.total_seconds() >= 270
    assert retry_delay(1, retry_after=10**7) == timedelta(days=1)


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = timezone.now().replace(microsecond=0)
    assert retry_after_seconds("120", now=now) == 120
    later = now + timedelta(minutes=10)
    assert retry_after_seconds(later.strftime("%a, %d %b %Y %H:%M:%S GMT"), now=now) == 600
    assert retry_after_seconds("soon", now=now) is None
    assert retry_after_seconds(None, now=now) is None


# --- sending -----------------------------------------------------------------------------------


def test_a_2xx_delivers_the_exact_body_signed_per_standard_webhooks(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    message = emit(team)
    assert deliver_due_messages() == 1
    [request] = receiver.received
    assert request.body == message.body.encode()
    assert request.headers["content-type"] == "application/json"
    assert request.headers["webhook-id"] == message.message_id
    assert Webhook(endpoint.secret).verify(request.body, request.headers)["type"] == "tool.resumed"
    message.refresh_from_db()
    assert message.status == "delivered" and message.delivered_at is not None
    [tried] = message.delivery_tries.all()
    assert (tried.number, tried.status_code, tried.error, tried.next_try_at) == (1, 200, "", None)
    assert tried.latency_ms is not None
    assert deliver_due_messages() == 0  # delivered once, never again


def test_a_sweep_builds_one_client_for_all_its_tries(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    built: list[object] = []
    build = delivery.sending_client

    def counted(timeout: float):  # type: ignore[no-untyped-def]
        client = build(timeout)
        built.append(client)
        return client

    monkeypatch.setattr(delivery, "sending_client", counted)
    for _ in range(3):
        emit(team)
    assert deliver_due_messages() == 3
    assert len(built) == 1  # building a client costs ~17 ms: not once per try
    assert len({request.headers["webhook-id"] for request in receiver.received}) == 3
    assert deliver_due_messages() == 0 and len(built) == 1  # nothing due: no client built


def test_a_failed_try_is_retried_after_about_five_seconds_with_the_same_webhook_id(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    receiver.answer(Answer(500))
    message = emit(team)
    deliver_due_messages()
    message.refresh_from_db()
    assert message.status == "pending" and message.tries == 1
    assert close_to(message.next_try_at, timezone.now() + timedelta(seconds=5), 1.5)
    assert message.delivery_tries.get().status_code == 500
    assert deliver_due_messages() == 0  # not due yet

    with time_machine.travel(timezone.now() + timedelta(seconds=7), tick=True):
        assert deliver_due_messages() == 1
    first, second = receiver.received
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == message.message_id
    assert int(second.headers["webhook-timestamp"]) - int(first.headers["webhook-timestamp"]) >= 6
    for request in (first, second):
        Webhook(endpoint.secret).verify(request.body, request.headers)
    message.refresh_from_db()
    assert message.status == "delivered"
    assert [t.status_code for t in message.delivery_tries.order_by("number")] == [500, 200]


def test_every_try_until_the_last_then_a_dead_letter(team: Team, endpoint: WebhookEndpoint, receiver: Receiver) -> None:
    receiver.answer(*[Answer(503)] * MAX_TRIES)
    message = emit(team)
    start = timezone.now()
    for day in range(MAX_TRIES):
        with time_machine.travel(start + timedelta(days=day * 1.2), tick=True):
            assert deliver_due_messages() == 1
    message.refresh_from_db()
    assert (message.status, message.dead_reason, message.tries) == ("dead", "tries_exhausted", 10)
    tries = list(message.delivery_tries.order_by("number"))
    assert [t.number for t in tries] == list(range(1, 11))
    assert tries[-1].next_try_at is None and all(t.next_try_at for t in tries[:-1])
    assert {r.headers["webhook-id"] for r in receiver.received} == {message.message_id}
    assert OutboxMessage.objects.dead().filter(team=team).get() == message


def test_retry_after_asking_for_longer_is_honoured(team: Team, endpoint: WebhookEndpoint, receiver: Receiver) -> None:
    receiver.answer(Answer(429, {"Retry-After": "120"}))
    message = emit(team)
    deliver_due_messages()
    message.refresh_from_db()
    assert close_to(message.next_try_at, timezone.now() + timedelta(seconds=120), 2)


def test_retry_after_as_an_http_date_is_honoured(team: Team, endpoint: WebhookEndpoint, receiver: Receiver) -> None:
    when = timezone.now().replace(microsecond=0) + timedelta(minutes=10)
    receiver.answer(Answer(503, {"Retry-After": when.strftime("%a, %d %b %Y %H:%M:%S GMT")}))
    message = emit(team)
    deliver_due_messages()
    message.refresh_from_db()
    assert close_to(message.next_try_at, when, 2)


def test_410_disables_the_endpoint_and_its_pending_messages_become_dead(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    receiver.answer(Answer(410))
    gone = emit(team)
    waiting = emit(team)
    [claimed] = messages_claim(limit=1)
    assert claimed.pk == gone.pk
    try_record(claimed, message_send(claimed))
    endpoint.refresh_from_db()
    assert endpoint.active is False and "410" in endpoint.disabled_reason
    assert endpoint.disabled_at is not None
    gone.refresh_from_db()
    waiting.refresh_from_db()
    assert (gone.status, gone.dead_reason) == ("dead", "endpoint_gone")
    assert (waiting.status, waiting.dead_reason) == ("dead", "endpoint_disabled")
    emit(team)
    assert OutboxMessage.objects.count() == 2  # a disabled endpoint gets no new messages
    assert len(receiver.received) == 1


def test_a_redirect_is_not_followed(team: Team, endpoint: WebhookEndpoint, receiver: Receiver) -> None:
    receiver.answer(Answer(302, {"Location": "http://127.0.0.1:9/elsewhere"}))
    message = emit(team)
    deliver_due_messages()
    assert len(receiver.received) == 1
    tried = message.delivery_tries.get()
    assert (tried.status_code, tried.error) == (302, "redirect not followed")
    message.refresh_from_db()
    assert message.status == "pending"


def test_a_slow_receiver_times_out_and_is_retried(team: Team, endpoint: WebhookEndpoint, receiver: Receiver) -> None:
    receiver.answer(Answer(200, delay=1.0))
    message = emit(team)
    deliver_due_messages(timeout=0.2)
    tried = message.delivery_tries.get()
    assert tried.status_code is None and tried.error.startswith("timeout")
    message.refresh_from_db()
    assert message.status == "pending" and message.next_try_at > timezone.now()


def test_an_error_never_shows_the_url_path_or_the_secret(team: Team, allow_private: None) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    created = endpoint_create(team=team, url=f"http://127.0.0.1:{port}/hooks/tok_s3cr3t?key=k3y")
    message = emit(team)
    deliver_due_messages()
    tried = message.delivery_tries.get()
    assert tried.status_code is None and tried.error
    for secret in ("tok_s3cr3t", "k3y", created.secret):
        assert secret not in tried.error


def test_a_claim_whose_worker_died_is_due_again_after_the_lease(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    message = emit(team)
    assert len(messages_claim()) == 1  # ... and the worker dies before sending
    message.refresh_from_db()
    assert message.status == "pending"
    assert close_to(message.next_try_at, timezone.now() + LEASE, 2)
    assert deliver_due_messages() == 0
    with time_machine.travel(timezone.now() + LEASE + timedelta(seconds=1), tick=True):
        assert deliver_due_messages() == 1
    message.refresh_from_db()
    assert message.status == "delivered" and message.tries == 2
    assert [t.number for t in message.delivery_tries.all()] == [2]


def test_a_late_worker_records_its_try_but_leaves_the_schedule_to_the_new_claim(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    receiver.answer(Answer(500), Answer(500))
    message = emit(team)
    [late] = messages_claim()
    with time_machine.travel(timezone.now() + LEASE + timedelta(seconds=1), tick=True):
        [fresh] = messages_claim()
        assert (late.number, fresh.number) == (1, 2)
        try_record(fresh, message_send(fresh))
        message.refresh_from_db()
        scheduled = message.next_try_at
        try_record(late, message_send(late))
    message.refresh_from_db()
    assert message.next_try_at == scheduled
    assert sorted(t.number for t in message.delivery_tries.all()) == [1, 2]


def test_a_disabled_endpoints_messages_are_dead_without_a_try(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    message = emit(team)
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(active=False)
    assert deliver_due_messages() == 0
    message.refresh_from_db()
    assert (message.status, message.dead_reason) == ("dead", "endpoint_disabled")
    assert receiver.received == []


def test_disabling_an_endpoint_kills_its_pending_messages(team: Team, endpoint: WebhookEndpoint) -> None:
    message = emit(team)
    assert endpoint_disable(endpoint=endpoint, reason="by hand") == 1
    message.refresh_from_db()
    assert message.status == "dead"


# --- the SSRF guard at send time -------------------------------------------------------------


def test_a_name_that_now_resolves_to_loopback_is_refused_at_send_time(
    team: Team,
    receiver: Receiver,
    settings,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    settings.HOLDPOINT_WEBHOOK_ALLOW_PRIVATE = False
    host = "hooks.example.com"
    # Registration sees a public address (no traffic is ever sent to it)...
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({host: ["93.184.216.34"]}))
    endpoint_create(team=team, url=f"http://{host}:{receiver.port}/hook")
    message = emit(team)
    # ... then the name is rebound to loopback before the try.
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({host: ["127.0.0.1"]}))
    deliver_due_messages()
    tried = message.delivery_tries.get()
    assert tried.status_code is None
    assert tried.error.startswith("refused:") and "loopback" in tried.error
    assert receiver.received == []
    message.refresh_from_db()
    assert message.status == "pending"


def test_the_try_connects_to_the_vetted_address_and_keeps_the_host_header(
    team: Team, receiver: Receiver, allow_private: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = "receiver.test"
    monkeypatch.setattr(socket, "getaddrinfo", fake_resolver({host: ["127.0.0.1"]}))
    created = endpoint_create(team=team, url=f"http://{host}:{receiver.port}/hook")
    emit(team)
    deliver_due_messages()
    [request] = receiver.received
    assert request.headers["host"] == f"{host}:{receiver.port}"
    assert request.path == "/hook"
    Webhook(created.secret).verify(request.body, request.headers)


# --- concurrent sweepers -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_sweepers_running_side_by_side_send_each_message_once(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    for _ in range(20):
        emit(team)
    errors: list[BaseException] = []

    def sweep() -> None:
        try:
            deliver_due_messages(batch=2)
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    ids = [r.headers["webhook-id"] for r in receiver.received]
    assert len(ids) == len(set(ids)) == 20
    assert OutboxMessage.objects.filter(status="delivered").count() == 20
    assert DeliveryTry.objects.count() == 20


def test_a_sweep_out_of_time_hands_back_the_claims_it_did_not_try(
    team: Team, endpoint: WebhookEndpoint, receiver: Receiver
) -> None:
    receiver.answer(Answer(200, delay=0.3))
    messages = [emit(team) for _ in range(3)]
    assert deliver_due_messages(budget_seconds=0.2, batch=3) == 1
    assert len(receiver.received) == 1
    for message in messages:
        message.refresh_from_db()
    waiting = [m for m in messages if m.status == "pending"]
    assert len(waiting) == 2
    assert all(m.tries == 0 and m.next_try_at <= timezone.now() for m in waiting)
    assert deliver_due_messages() == 2
