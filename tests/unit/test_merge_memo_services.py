"""merge() with a memo, for services: a provider naming its services in the order it did
last time keeps what each service that is the very same object became; a replaced one
is qualified again. Whatever the provider passes, the result equals, in content and in
order, a merge without memo."""

from __future__ import annotations

import random

import msgspec

from edge.config.dynamic import Configuration, HTTPConfiguration, Service
from edge.config.merge import RouterMemo, merge


def service(rng: random.Random, names: list[str]) -> Service:
    if rng.random() < 0.3:
        members = [{"name": rng.choice(names), "weight": 1}, {"name": "x@file", "weight": 2}]
        return msgspec.convert({"weighted": {"services": members}}, Service)
    lb: dict = {"servers": [{"url": f"http://10.0.0.{rng.randrange(1, 250)}:80"}]}
    if rng.random() < 0.5:
        lb["serversTransport"] = rng.choice(["t", "u@file"])
    return msgspec.convert({"loadBalancer": lb}, Service)


def test_services_merge_as_without_memo_round_after_round() -> None:
    reused = 0
    for seed in range(100):
        rng = random.Random(seed)
        names = [f"s{i}" for i in range(rng.randrange(1, 12))]
        services = {n: service(rng, names) for n in names}
        other = Configuration(http=HTTPConfiguration(services={"f": service(rng, ["f"])}))
        memo: RouterMemo = {}
        previous = None
        for _ in range(6):
            services = dict(services)  # a new table, as a provider publishes one
            for n in rng.sample(names, k=rng.randrange(0, len(names) + 1)):
                services[n] = service(rng, names)  # replaced (maybe equal, never the same)
            if rng.random() < 0.15:  # another order: merged afresh
                services = dict(reversed(list(services.items())))
            if rng.random() < 0.1:
                services[f"new{rng.randrange(100)}"] = service(rng, names)
            configs = {"kubernetes": Configuration(http=HTTPConfiguration(services=services))}
            if rng.random() < 0.5:
                configs["file"] = other
            merged = merge(configs, memo)
            plain = merge(configs)
            assert merged == plain
            assert list(merged.http.services) == list(plain.http.services)
            if previous is not None:
                reused += sum(
                    merged.http.services[n] is previous.http.services.get(n)
                    for n in merged.http.services
                )
            previous = merged
    assert reused > 100  # the memo did serve
