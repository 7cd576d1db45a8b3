"""Preflight wall time: deskctl's concurrent engine vs checking providers one after another (the naive way).

Several providers whose own check takes 200 ms each (a stand-in for one authenticated API read) are checked
by ``deskctl.preflight(..., instances=...)`` (which also runs the cross-provider compat, geometry,
credentials and budget checks) and by a plain loop calling each provider's ``preflight`` in turn. Prints
medians and the ratios: deskctl / slowest single check (ideal: close to 1) and sequential / deskctl.

    .venv/bin/python bench/bench_preflight.py [--providers 6] [--rounds 7] [--check-ms 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from deskctl.checks import CheckResult
from deskctl.checks.runner import PreflightRequest, preflight
from deskctl.providers.base import Capabilities, Provider, RemoteHandle, Screenshot
from deskctl.spec import DesktopSpec, Platform


class SlowCheckProvider(Provider):
    """A provider whose preflight is one request that takes ``check_seconds`` to answer."""

    name: ClassVar[str] = "slow"
    capabilities: ClassVar[Capabilities] = Capabilities(platforms=frozenset({Platform.UBUNTU}))

    def __init__(self, index: int, check_seconds: float) -> None:
        super().__init__({})
        self.index = index
        self.check_seconds = check_seconds
        self.name = f"slow-{index}"  # type: ignore[misc]  # one instance per simulated provider

    def preflight(self, spec: DesktopSpec) -> list[CheckResult]:
        time.sleep(self.check_seconds)  # the simulated network round trip of one authenticated read
        return [CheckResult("pass", f"{self.name}.auth", "key accepted")]

    def create(self, spec: DesktopSpec, session_id: str, labels: Mapping[str, str]) -> RemoteHandle:
        raise RuntimeError("preflight never creates")

    def wait_ready(self, handle: RemoteHandle, deadline: float) -> None:
        raise RuntimeError("unused")

    def destroy(self, handle: RemoteHandle) -> None:
        raise RuntimeError("unused")

    def list_owned(self, selector: Mapping[str, str] | None = None) -> list[RemoteHandle]:
        return []

    def display_size(self, handle: RemoteHandle) -> tuple[int, int]:
        raise RuntimeError("unused")

    def screenshot(self, handle: RemoteHandle) -> Screenshot:
        raise RuntimeError("unused")

    def act(self, handle: RemoteHandle, action: Any) -> None:
        raise RuntimeError("unused")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--check-ms", type=float, default=200.0)
    args = parser.parse_args()
    seconds = args.check_ms / 1000
    fakes = [SlowCheckProvider(i, seconds) for i in range(args.providers)]
    spec = DesktopSpec.build(platform="ubuntu", geometry="1024x768")
    request = PreflightRequest(DesktopSpec(platform=Platform.UBUNTU), timeout=10.0)

    preflight(request, instances=fakes[:1])  # warm imports and caches once, outside the measurement

    single, sequential, concurrent = [], [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        fakes[0].preflight(spec)
        single.append(time.perf_counter() - start)

        start = time.perf_counter()
        for fake in fakes:  # the naive way: one provider after another
            fake.preflight(spec)
        sequential.append(time.perf_counter() - start)

        start = time.perf_counter()
        report = preflight(request, instances=fakes)
        concurrent.append(time.perf_counter() - start)
        assert report.ok and len(report.ready) == args.providers, report.verdict

    med_single, med_seq, med_conc = (statistics.median(x) * 1000 for x in (single, sequential, concurrent))
    print(f"{args.providers} providers, each check {args.check_ms:.0f} ms, {args.rounds} rounds (medians)")
    print(f"  slowest single check           {med_single:8.1f} ms")
    print(f"  naive sequential loop          {med_seq:8.1f} ms")
    print(f"  deskctl.preflight (concurrent) {med_conc:8.1f} ms  (plus compat/geometry/credentials/budget checks)")
    print(f"  ratio deskctl / slowest check  {med_conc / med_single:8.2f}x")
    print(f"  ratio sequential / deskctl     {med_seq / med_conc:8.2f}x")


if __name__ == "__main__":
    main()
