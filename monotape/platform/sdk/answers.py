"""How a terminal's request is answered, and the SDK's typed errors.

Requests are answered key by key (docs/wire.md, "How a request is answered"): the node sends
REFUSED (the keys it did not apply, each with why) and then the ACK. ``answer_of`` turns them
into an ``Answer``; ``KeysRefused`` is raised only when nothing was applied. An ERROR refuses a
request whole (protocol 1 servers always answer that way): a ``ServerError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from monotape.platform.wire import codec

__all__ = [
    "PROTOCOLS",
    "Answer",
    "KeysRefused",
    "NotConnectedError",
    "ServerError",
    "answer_of",
    "code_name",
]

# Protocol 1 servers refuse a request whole (ERROR); 2 adds REFUSED, per key. Both are
# understood: an ERROR is a ServerError either way.
PROTOCOLS: Final = frozenset({1, 2})


def code_name(code: int) -> str:
    """An ErrorCode's name; a code from a newer server is shown as its number, never a crash."""
    member = codec.ErrorCode._value2member_map_.get(code)
    return member.name if member is not None else f"code {code}"


class ServerError(Exception):
    """The server refused a request whole (an ERROR message); ``code``, ``message``."""

    def __init__(self, error: codec.Error) -> None:
        super().__init__(f"{code_name(error.code)}: {error.message}")
        self.code = error.code
        self.message = error.message


class Answer(msgspec.Struct, frozen=True):
    """The server's answer to a request that it applied (wholly or in part).

    ``subscribed`` and ``priority`` are the connection's counts after the request (as in the
    ACK); ``applied`` the request's keys that took effect (each once, in request order);
    ``refused`` the others, each with its ``codec.ErrorCode`` and the server's reason."""

    req: int
    subscribed: int
    priority: int
    applied: list[str]
    refused: list[codec.Refusal]


class KeysRefused(ServerError):
    """Every key of the request was refused, so nothing was applied. ``answer.refused`` says
    why for each; ``code`` is the first key's."""

    def __init__(self, answer: Answer) -> None:
        first = answer.refused[0]
        shown = "; ".join(f"{r.key}: {r.reason} ({code_name(r.code)})" for r in answer.refused[:5])
        more = len(answer.refused) - 5
        super().__init__(
            codec.Error(first.code, shown + (f" (+{more} more)" if more > 0 else ""), answer.req)
        )
        self.answer = answer


class NotConnectedError(ConnectionError):
    """A request while a reconnecting client is between connections. The request's intent is
    kept (held keys, priority) and applied on the next connection."""


def answer_of(ack: codec.Ack, keys: Sequence[str], refused: list[codec.Refusal]) -> Answer:
    """The Answer to a request for ``keys``: its ACK and the REFUSED that came before it.
    Raises ``KeysRefused`` when every key was refused."""
    gone = {r.key for r in refused}
    applied = [k for k in dict.fromkeys(keys) if k not in gone]
    answer = Answer(ack.req, ack.subscribed, ack.priority, applied, refused)
    if refused and not applied:
        raise KeysRefused(answer)
    return answer
