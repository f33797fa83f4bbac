"""``neotoma_agent.exceptions.error_label``: how a log line names an error without its text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from neotoma_agent.exceptions import (
    ConnectionLost,
    NotFoundError,
    ServerError,
    ValidationError,
    error_label,
)


def test_an_answered_error_is_named_by_class_status_and_code() -> None:
    exc = ServerError("the store failed on 'secret text'", status=500, code="ERR_STORE_FAILED")
    assert error_label(exc) == "ServerError 500 ERR_STORE_FAILED"
    assert error_label(NotFoundError("no such entity", status=404)) == "NotFoundError 404"


@pytest.mark.parametrize(
    ("exc", "label"),
    [
        (ConnectionLost("reset while sending 'secret text'"), "ConnectionLost"),
        (KeyError("secret text"), "KeyError"),
        (ValueError("secret text"), "ValueError"),
    ],
)
def test_any_other_error_is_named_by_its_class(exc: BaseException, label: str) -> None:
    assert error_label(exc) == label


@given(message=st.text(), code=st.none() | st.text(alphabet="ABCDEFGHIJ_", min_size=1))
def test_the_message_never_reaches_the_label(message: str, code: str | None) -> None:
    # whatever a server or the application put in the message (content, an escape, a forged
    # log line), the label holds only the class, the status and the code
    label = error_label(ValidationError("\x1b[2J" + message + "\nforged", status=400, code=code))
    assert label == "ValidationError 400" + (f" {code}" if code else "")
    assert error_label(RuntimeError(message)) == "RuntimeError"
