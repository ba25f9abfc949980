"""Where the token rides on the upgrade, and a newer one put in its place."""

from __future__ import annotations

from websockets.datastructures import Headers

from monotape.platform.sdk.credentials import presented_token, with_bearer, with_token


def test_with_token_sets_the_query_parameter() -> None:
    assert with_token("ws://h:1/", "abc") == "ws://h:1/?token=abc"
    assert with_token("ws://h:1/?token=old&x=1", "new") == "ws://h:1/?x=1&token=new"


def test_the_header_is_read_first_then_the_query() -> None:
    assert presented_token("ws://h:1/?token=q", {}) == "q"
    assert presented_token("ws://h:1/?token=q", {"additional_headers": {"X": "1"}}) == "q"
    headers = {"additional_headers": {"authorization": "Bearer h.e.s"}}
    assert presented_token("ws://h:1/?token=q", headers) == "h.e.s"
    pairs = {"additional_headers": [("Authorization", "bearer  p.q.r ")]}
    assert presented_token("ws://h:1/", pairs) == "p.q.r"
    multi = {"additional_headers": Headers([("Authorization", "Bearer m")])}
    assert presented_token("ws://h:1/", multi) == "m"
    basic = {"additional_headers": {"Authorization": "Basic x"}}
    assert presented_token("ws://h:1/", basic) is None
    assert presented_token("ws://h:1/", {}) is None


def test_a_newer_token_replaces_the_old_where_it_was() -> None:
    kwargs = {"additional_headers": {"Authorization": "Bearer old", "X-Desk": "7"}, "sock": None}
    url, swapped = with_bearer("ws://h:1/", kwargs, "new")
    assert url == "ws://h:1/"
    assert swapped["additional_headers"] == [("Authorization", "Bearer new"), ("X-Desk", "7")]
    assert swapped["sock"] is None
    assert kwargs["additional_headers"] == {"Authorization": "Bearer old", "X-Desk": "7"}
    assert presented_token(url, swapped) == "new"
    url, same = with_bearer("ws://h:1/?token=old&x=1", {}, "new")
    assert url == "ws://h:1/?x=1&token=new" and same == {}
    # no token presented (auth off): none is added
    assert with_bearer("ws://h:1/", {}, "new") == ("ws://h:1/", {})
