"""Where the time of kpd's calls and steps goes, from two reads of a sidecar's /metrics.

A pop-group call's time at the client is its HTTP round trip (client, uvicorn, FastAPI) plus its
time in kpd's router (`kpd_pop_request_seconds{call}`), and the router's time is mostly the
shard step that serves the call. Every step of a delay or pop role waits on the broker three
times (`kpd_transaction_seconds{role,phase}`): `write` (AddPartitionsToTxn, then Produce of the
step's records), `offsets` (consumer offsets sent into the transaction) and `commit` (EndTxn).
Means, from the histograms' sums and counts, so they add up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

PHASES = ("write", "offsets", "commit")


@dataclass(frozen=True)
class Times:
    calls: dict[str, float] = field(default_factory=dict)  # by pop-group call: answered
    call_s: dict[str, float] = field(default_factory=dict)  # by call: seconds in the router
    waits: dict[tuple[str, str], float] = field(default_factory=dict)  # (role, phase): waited
    wait_s: dict[tuple[str, str], float] = field(default_factory=dict)  # (role, phase): seconds

    def minus(self, before: Times) -> Times:
        def less(now: dict, then: dict) -> dict:
            return {k: v - then.get(k, 0.0) for k, v in now.items()}

        return Times(
            less(self.calls, before.calls),
            less(self.call_s, before.call_s),
            less(self.waits, before.waits),
            less(self.wait_s, before.wait_s),
        )

    def calls_row(self, client_ms: dict[str, float]) -> str:
        """Pop-group calls; `client_ms`: each call's mean time at the client (e.g. {"pop": 8.7,
        "ack": 8.0}). The pop role's waits are spread over those calls."""
        calls = sum(self.calls.get(c, 0.0) for c in client_ms)
        if not calls:
            return "no kpd_pop_request_seconds exported"
        router = {
            c: 1000 * self.call_s.get(c, 0.0) / max(self.calls.get(c, 0.0), 1) for c in client_ms
        }
        broker = {p: 1000 * self.wait_s.get(("pop", p), 0.0) / calls for p in PHASES}
        http = {c: client_ms[c] - router[c] for c in client_ms}
        return (
            "mean per call: "
            + ", ".join(f"{c} {client_ms[c]:.2f} ms" for c in client_ms)
            + "; in kpd's router "
            + ", ".join(f"{c} {router[c]:.2f}" for c in client_ms)
            + "; of it waiting on the broker, per call: "
            + ", ".join(f"{p} {broker[p]:.2f}" for p in PHASES)
            + "; HTTP (client, uvicorn, FastAPI) "
            + ", ".join(f"{c} {http[c]:.2f}" for c in client_ms)
        )

    def steps_row(self, role: str) -> str:
        """The role's committed steps, and what each waited on the broker on average."""
        steps = self.waits.get((role, "commit"), 0.0)
        if not steps:
            return f"no {role} step measured"
        mean = {p: 1000 * self.wait_s.get((role, p), 0.0) / steps for p in PHASES}
        return f"{steps:,.0f} {role} steps waited on the broker, mean per step: " + ", ".join(
            f"{p} {mean[p]:.2f} ms" for p in PHASES
        )


def read(url: str) -> Times:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    times = Times()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels = sample.name, sample.labels
            if family.name == "kpd_pop_request_seconds" and name.endswith(("_count", "_sum")):
                into = times.calls if name.endswith("_count") else times.call_s
                into[labels["call"]] = into.get(labels["call"], 0.0) + sample.value
            elif family.name == "kpd_transaction_seconds" and name.endswith(("_count", "_sum")):
                into2 = times.waits if name.endswith("_count") else times.wait_s
                key = (labels["role"], labels["phase"])
                into2[key] = into2.get(key, 0.0) + sample.value
    return times
