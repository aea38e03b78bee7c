"""The API server's answers as typed errors (errors.py): callers catch the outcome they handle, as with lightkube
or client-go, instead of comparing numbers; code and reason stay for the report."""

from __future__ import annotations

import orjson
import pytest

from statusvault.errors import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeApiError,
    NotFound,
    TooManyRequests,
    Unauthorized,
    Unavailable,
)
from statusvault.kube.transport import Request, api_error


@pytest.mark.parametrize(
    ("code", "reason", "kind"),
    [
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (410, "Expired", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (503, "ServiceUnavailable", Unavailable),
        (500, "InternalError", KubeApiError),
    ],
)
def test_an_answer_is_raised_as_the_error_of_its_code(code, reason, kind):
    status = {"kind": "Status", "code": code, "reason": reason, "message": "said the server"}
    error = api_error(Request("GET", "/api/v1/namespaces/x"), code, orjson.dumps(status), "2")

    assert type(error) is kind and isinstance(error, KubeApiError)
    assert (error.code, error.reason, error.retry_after) == (code, reason, 2.0)
    assert str(error) == f"GET /api/v1/namespaces/x: said the server ({code} {reason})"


def test_already_exists_is_a_conflict_and_a_plain_conflict_is_not_already_exists():
    assert issubclass(AlreadyExists, Conflict)
    assert not isinstance(KubeApiError.of("x", 409, "Conflict"), AlreadyExists)
