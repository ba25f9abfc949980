"""The host's Unix-socket links' plain-int counters at scrape time (a prometheus_client custom
Collector): one set of families for every link a process holds, labelled ``link``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from monotape import metric_names as m
from monotape.platform.bus.link import LinkCounters

__all__ = ["LinkCollector"]


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(m.counter_base(name), doc, labels=labels)


class LinkCollector(Collector):
    """``monotape_ipc_*{link}`` (dropped: ``{link,reason}``) for the links ``links()`` returns."""

    def __init__(self, links: Callable[[], Iterable[LinkCounters]]) -> None:
        self._links = links

    def collect(self) -> Iterator[Metric]:
        one = ["link"]
        sent = _counter(m.IPC_SENT_MESSAGES, "Messages sent on a host-local link.", one)
        sent_items = _counter(m.IPC_SENT_ITEMS, "Ticks or venue updates sent on a link.", one)
        dropped = _counter(
            m.IPC_DROPPED_MESSAGES,
            "Messages a link's sender dropped instead of waiting (receiver down or full).",
            ["link", "reason"],
        )
        dropped_items = _counter(
            m.IPC_DROPPED_ITEMS, "Ticks or venue updates in dropped messages.", ["link", "reason"]
        )
        received = _counter(m.IPC_RECEIVED_MESSAGES, "Messages received on a link.", one)
        received_items = _counter(m.IPC_RECEIVED_ITEMS, "Ticks or updates received.", one)
        malformed = _counter(
            m.IPC_MALFORMED_MESSAGES, "Messages received truncated or undecodable.", one
        )
        connects = _counter(m.IPC_CONNECTS, "Link (re)connects (sender) or accepts.", one)
        peers = GaugeMetricFamily(m.IPC_PEERS, "Connected peers of a link's end.", labels=one)
        for c in self._links():
            label = [c.link]
            sent.add_metric(label, c.sent_messages)
            sent_items.add_metric(label, c.sent_items)
            # copies first: the scrape's thread is not the loop's (role/collectors.py says why)
            for reason, n in sorted(dict(c.dropped_messages).items()):
                dropped.add_metric([c.link, str(reason)], n)
            for reason, n in sorted(dict(c.dropped_items).items()):
                dropped_items.add_metric([c.link, str(reason)], n)
            received.add_metric(label, c.received_messages)
            received_items.add_metric(label, c.received_items)
            malformed.add_metric(label, c.malformed_messages)
            connects.add_metric(label, c.connects)
            peers.add_metric(label, c.peers)
        yield from (sent, sent_items, dropped, dropped_items, received, received_items)
        yield from (malformed, connects, peers)
