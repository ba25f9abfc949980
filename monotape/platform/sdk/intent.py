"""What a terminal means to hold, Sans-I/O: its watchlist and priority marks, and the requests in
flight that change them.

The intent changes when the caller asks, before the request is sent: a terminal between
connections keeps what it was asked to hold and restores it on the next connection
(``restore_watchlist``, ``restore_marks``). The node's answer then settles it (docs/wire.md,
"How a request is answered"): a key refused is not held (so never restored), a priority mark
refused is undone, and a request refused whole (ERROR) is undone whole. ``client.py`` sends the
requests this builds and hands every ACK, REFUSED and ERROR back here.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TypeVar

import msgspec

from monotape.platform.sdk.answers import Answer, KeysRefused, ServerError, answer_of, code_name
from monotape.platform.sdk.stats import SdkStats
from monotape.platform.sdk.view import TerminalView
from monotape.platform.wire import codec
from monotape.platform.wire.requests import (
    MAX_KEYS,
    MAX_PRIORITY_KEYS,
    KeyRequest,
    SetPriority,
    Subscribe,
    Unsubscribe,
)

__all__ = ["Asked", "Intent", "chunks"]

R = TypeVar("R", Subscribe, Unsubscribe, SetPriority)


def chunks(items: Sequence[str], size: int) -> list[list[str]]:
    """``items`` in requests of at most ``size`` keys (the wire's per-request limits)."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


class Asked(msgspec.Struct):
    """A request in flight, and what undoes it if the node refuses it."""

    request: KeyRequest
    new: list[str]  # a subscribe: the keys it put on the watchlist
    before: dict[str, None]  # a priority request: the marks before it
    restoring: bool  # sent by a reconnect's restore, not by the caller
    refused: list[codec.Refusal] = msgspec.field(default_factory=list)  # REFUSED before its ACK


class Intent:
    """The watchlist (held on the screen: ``screen.watchlist``), the priority marks, and the
    requests in flight, numbered once per terminal."""

    def __init__(self, screen: TerminalView, stats: SdkStats) -> None:
        self.screen = screen
        self.stats = stats
        self.priority: dict[str, None] = {}  # order-ticket marks, in the caller's order
        self._asked: dict[int, Asked] = {}
        self._req = itertools.count(1)

    def next_req(self) -> int:
        """A request number (resync requests take theirs here too: one numbering per terminal)."""
        return next(self._req)

    # -- what the caller asks -------------------------------------------------------------------
    def subscribe(self, keys: list[str]) -> Subscribe:
        new = self.screen.hold(keys)
        return self._ask(Subscribe(req=self.next_req(), keys=keys), new=new)

    def unsubscribe(self, keys: list[str]) -> Unsubscribe:
        self.screen.release(keys)
        for k in keys:
            self.priority.pop(k, None)
        return self._ask(Unsubscribe(req=self.next_req(), keys=keys))

    def set_priority(self, keys: list[str], on: bool) -> SetPriority:
        before = dict(self.priority)
        for k in keys:
            if on:
                self.priority[k] = None
            else:
                self.priority.pop(k, None)
        return self._ask(SetPriority(req=self.next_req(), keys=keys, on=on), before=before)

    # -- a reconnect's restore ------------------------------------------------------------------
    def restore_watchlist(self) -> list[list[str]]:
        """The watchlist to re-subscribe on a new connection, in request-sized chunks (each
        key's snapshot re-hydrates the glass through the guard). Keys the new dictionary does
        not know are dropped first."""
        unknown = [k for k in self.screen.watchlist if k not in self.screen.ids]
        self.screen.release(unknown)
        for k in unknown:
            self.priority.pop(k, None)
        if unknown:
            self.stats.error_log.append(f"dropped on reconnect (unknown): {unknown[:5]}")
        return chunks(list(self.screen.watchlist), MAX_KEYS)

    def resubscribe(self, keys: list[str]) -> Subscribe:
        return self._ask(Subscribe(req=self.next_req(), keys=keys), restoring=True)

    def restore_marks(self) -> list[list[str]]:
        """The priority marks to re-apply, after the watchlist is restored (a mark needs its
        subscription), in request-sized chunks."""
        marked = [k for k in self.priority if k in self.screen.watchlist]
        return chunks(marked, MAX_PRIORITY_KEYS)

    def remark(self, keys: list[str]) -> SetPriority:
        return self._ask(SetPriority(req=self.next_req(), keys=keys), restoring=True)

    # -- the node's answers ---------------------------------------------------------------------
    def refused(self, msg: codec.Refused) -> None:
        """REFUSED: kept until the request's ACK, which follows it."""
        asked = self._asked.get(msg.req)
        if asked is not None:
            asked.refused.extend(msg.keys)

    def acked(self, ack: codec.Ack) -> Answer | KeysRefused | None:
        """The request's Answer (``KeysRefused`` when every key was refused), with what was
        refused settled; None for a request not in flight here (a resync, or one abandoned)."""
        asked = self._asked.pop(ack.req, None)
        if asked is None:
            return None
        try:
            answer = answer_of(ack, asked.request.keys, asked.refused)
        except KeysRefused as exc:
            self._settle(asked, exc.answer.refused)
            return exc
        self._settle(asked, answer.refused)
        if asked.restoring and isinstance(asked.request, Subscribe):
            self.stats.resubscribed += len(answer.applied)
        return answer

    def errored(self, error: codec.Error) -> ServerError | None:
        """ERROR: the request was refused whole, so what it changed is undone; None for a
        request not in flight here."""
        asked = self._asked.pop(error.req, None)
        if asked is None:
            return None
        exc = ServerError(error)
        request = asked.request
        if asked.restoring:
            what = "re-subscribe" if isinstance(request, Subscribe) else "priority"
            self.stats.error_log.append(f"{what} refused: {exc}")
        elif isinstance(request, Subscribe):
            self.screen.release(asked.new)  # nothing of it is held
        elif isinstance(request, SetPriority):
            self.priority = asked.before
        return exc

    def abandon(self, req: int) -> None:
        """No answer will come (the connection ended, or the wait timed out): the intent stands
        and the next connection restores it."""
        self._asked.pop(req, None)

    # -- the rules ------------------------------------------------------------------------------
    def _ask(
        self,
        request: R,
        *,
        new: list[str] | None = None,
        before: dict[str, None] | None = None,
        restoring: bool = False,
    ) -> R:
        self._asked[request.req] = Asked(request, new or [], before or {}, restoring)
        return request

    def _settle(self, asked: Asked, refused: Iterable[codec.Refusal]) -> None:
        request = asked.request
        if isinstance(request, Subscribe):
            self._forget(refused)
        elif isinstance(request, SetPriority):
            self._unmark(refused, asked.before, request.on)

    def _forget(self, refused: Iterable[codec.Refusal]) -> None:
        """A refused key is not held: it is neither shown nor restored on a reconnect."""
        for r in refused:
            self.screen.release([r.key])
            self.priority.pop(r.key, None)
            self._count(r)

    def _unmark(self, refused: Iterable[codec.Refusal], before: dict[str, None], on: bool) -> None:
        """Priority refused for a key: the subscription stands, only the mark is undone."""
        for r in refused:
            if on and r.key not in before:
                self.priority.pop(r.key, None)
            self._count(r)

    def _count(self, r: codec.Refusal) -> None:
        self.stats.refused_keys += 1
        self.stats.error_log.append(f"refused {r.key}: {r.reason} ({code_name(r.code)})")
