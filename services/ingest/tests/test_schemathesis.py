"""Property-based API testing with schemathesis against ``/schema``: no request the schema allows
(or nearly allows) makes the API fail with a 5xx, and no write succeeds without a token.

Cases are drawn with schemathesis' per-operation Hypothesis strategies (all operations of the
schema, with positive and negative data) and sent to the app in-process over ASGI.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.shared.settings import Settings

WRITES = {"POST", "PUT", "PATCH", "DELETE"}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture
def api(db, tmp_path, monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")  # control endpoints then answer 503 "message bus …"
    schema = schemathesis.openapi.from_asgi("/schema/openapi.json", create_app(Settings(data_dir=tmp_path), db))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10
    return create_token(db), st.sampled_from(operations).flatmap(lambda op: op.as_strategy())


def test_no_server_errors_with_a_token(api):
    token, cases = api

    @SETTINGS
    @given(case=cases)
    def check(case):
        response = case.call(headers={"Authorization": f"Bearer {token}"})
        bus_down = response.status_code == 503 and "message bus unavailable" in response.text
        assert response.status_code < 500 or bus_down, (
            f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:500]}"
        )

    check()


def test_no_write_succeeds_without_a_token(api):
    _, cases = api

    @SETTINGS
    @given(case=cases, auth=st.sampled_from([None, "Bearer not-a-token", "Bearer ", "bx_guess"]))
    def check(case, auth):
        response = case.call(headers={"Authorization": auth} if auth else {})
        assert response.status_code < 500, f"{case.method} {case.formatted_path} -> {response.status_code}"
        if case.method.upper() in WRITES:
            assert response.status_code == 401, f"{case.method} {case.formatted_path} -> {response.status_code}"

    check()
