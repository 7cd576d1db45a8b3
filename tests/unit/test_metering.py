"""The price catalog, rates, costs and their display."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deskctl.errors import ConfigInvalid
from deskctl.ledger import SessionRecord
from deskctl.metering import Rate, catalog_rows, cost_for, format_cost, lookup_rate, rate_for, session_cost
from deskctl.spec import DesktopSpec


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DESKCTL_HOME", str(tmp_path))
    monkeypatch.delenv("DESKCTL_PRICES", raising=False)


def test_every_packaged_row_names_its_source_and_date() -> None:
    rows = catalog_rows()
    assert rows
    for row in rows:
        assert row["source"].strip() and row["date"][:2] == "20", row
    packaged = json.loads((Path(__file__).parents[2] / "src/deskctl/data/prices.json").read_text())
    for table in packaged["resource_rates"].values():
        assert table["source"] and table["date"] and table["third_party"] is True


def test_every_packaged_row_names_a_registered_provider_and_a_real_platform() -> None:
    from deskctl.providers import PROVIDERS
    from deskctl.spec import Platform

    for row in catalog_rows():
        assert row["provider"] in PROVIDERS, row
        assert row.get("platform", "*") in {"*", *(p.value for p in Platform)}, row


def test_local_providers_are_known_free_not_unknown() -> None:
    for provider in ("xvfb", "docker"):
        rate = lookup_rate(provider, "ubuntu")
        assert rate is not None and rate.usd_per_hour == 0.0 and rate.source.startswith("local")
        assert cost_for(rate, 3600) == 0.0
        assert format_cost(cost_for(rate, 3600)) == "$0.0000"


def test_unknown_prices_are_none_never_zero() -> None:
    assert lookup_rate("ssh", "ubuntu") is None
    assert lookup_rate("cua-cloud", "windows") is None  # priced in credits; no USD rate is published
    assert lookup_rate("use-computer", "macos") is None
    assert lookup_rate("daytona", "ubuntu", {"snapshot": "someone-elses-snapshot"}) is None
    assert lookup_rate("no-such-provider", "ubuntu") is None
    assert cost_for(None, 100) is None
    assert format_cost(None) == "unknown"


def test_daytona_windows_from_per_resource_rates() -> None:
    rate = lookup_rate("daytona", "windows")
    assert rate is not None
    assert rate.usd_per_hour == pytest.approx(2 * 0.0504 + 8 * 0.0162 + 30 * 0.000108)
    assert format_cost(cost_for(rate, 3600)) == "$0.2336"
    assert rate.third_party and rate.granularity_seconds == 1 and rate.date == "2026-05-25"
    assert "third-party" in rate.source


def test_daytona_sizes_and_explicit_resources() -> None:
    small = lookup_rate("daytona", "ubuntu")
    medium = lookup_rate("daytona", "ubuntu", {"snapshot": "daytona-medium"})
    explicit = lookup_rate("daytona", "ubuntu", {"cpu": 2, "memory": 4, "disk": 8})
    assert small is not None and medium is not None and explicit is not None
    assert small.size == "daytona-small" and medium.size == "daytona-medium"
    assert small.usd_per_hour == pytest.approx(0.0504 + 0.0162 + 3 * 0.000108)
    assert explicit.usd_per_hour == pytest.approx(medium.usd_per_hour)
    assert lookup_rate("daytona", "ubuntu", {"cpu": 2}) is not None  # the rest from the default size
    assert lookup_rate("daytona", "ubuntu", {"snapshot": "nope", "cpu": 2}) is None


def test_rate_for_a_spec() -> None:
    spec = DesktopSpec.build(provider="xvfb", geometry="800x600")
    rate = rate_for(spec)
    assert rate is not None and rate.usd_per_hour == 0.0 and rate.provider == "xvfb"


def test_granularity_and_minimum() -> None:
    per_minute = Rate(usd_per_hour=6.0, granularity_seconds=60, minimum_seconds=60, source="t", date="2026-01-01")
    assert cost_for(per_minute, 1) == pytest.approx(0.1)  # one minute minimum
    assert cost_for(per_minute, 60.0000000001) == pytest.approx(0.1)
    assert cost_for(per_minute, 61) == pytest.approx(0.2)
    per_second = Rate(usd_per_hour=3.6, granularity_seconds=1, minimum_seconds=0, source="t", date="2026-01-01")
    assert cost_for(per_second, 0) == 0.0
    assert cost_for(per_second, 10) == pytest.approx(0.01)
    per_hour = Rate(usd_per_hour=0.5, granularity_seconds=3600, minimum_seconds=3600, source="t", date="d")
    assert cost_for(per_hour, 3601) == pytest.approx(1.0)


def test_format_cost() -> None:
    assert format_cost(0.01234) == "$0.0123"
    assert format_cost(1234.5) == "$1,234.5000"


def test_user_file_overrides_and_extends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "my-prices.json"
    user.write_text(json.dumps({
        "rates": [{"provider": "ssh", "platform": "*", "size": "*", "usd_per_hour": 0.12,
                   "granularity_seconds": 60, "source": "our rack, finance sheet", "date": "2026-11-01"}],
        "resource_rates": {"daytona": {"cpu_per_hour": 0.1, "memory_gib_per_hour": 0.0, "disk_gib_per_hour": 0.0,
                                       "source": "negotiated", "date": "2026-10-01"}},
    }))  # fmt: skip
    monkeypatch.setenv("DESKCTL_PRICES", str(user))
    ssh = lookup_rate("ssh", "ubuntu")
    assert ssh is not None and ssh.usd_per_hour == 0.12 and ssh.source == "our rack, finance sheet"
    assert cost_for(ssh, 30) == pytest.approx(0.002)
    daytona = lookup_rate("daytona", "windows")
    assert daytona is not None and daytona.usd_per_hour == pytest.approx(0.2) and "negotiated" in daytona.source
    # the default file location is used when DESKCTL_PRICES is not set
    monkeypatch.delenv("DESKCTL_PRICES")
    (tmp_path / "prices.json").write_text(user.read_text())
    assert lookup_rate("ssh", "ubuntu") is not None
    # and edits are seen without a restart
    (tmp_path / "prices.json").write_text(json.dumps({"rates": []}))
    assert lookup_rate("ssh", "ubuntu") is None


@pytest.mark.parametrize(
    ("doc", "match"),
    [
        ({"rates": [{"provider": "ssh", "usd_per_hour": 1}]}, "source"),
        ({"rates": [{"provider": "ssh", "usd_per_hour": -1, "source": "s", "date": "d"}]}, "usd_per_hour"),
        ({"rates": [{"provider": "ssh", "usd_per_hour": 1, "granularity_seconds": 1.5, "source": "s",
                     "date": "d"}]}, "granularity_seconds"),
        ({"rates": {}}, "must be a list"),
        ([], "JSON object"),
    ],
)
def test_bad_user_file_is_config_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, doc: object, match: str
) -> None:
    user = tmp_path / "bad.json"
    user.write_text(json.dumps(doc))
    monkeypatch.setenv("DESKCTL_PRICES", str(user))
    with pytest.raises(ConfigInvalid, match=match):
        lookup_rate("ssh", "ubuntu")


def test_unreadable_user_file_is_config_invalid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "broken.json"
    user.write_text("{not json")
    monkeypatch.setenv("DESKCTL_PRICES", str(user))
    with pytest.raises(ConfigInvalid, match="cannot be read"):
        lookup_rate("xvfb", "ubuntu")


def test_session_cost_so_far() -> None:
    record = SessionRecord("dk-1", "daytona", "windows", "1024x768", "h:1", False, "ready", 0.0, created_at=100.0,
                           rate_usd_per_hour=3.6)  # fmt: skip
    assert session_cost(record, now=110.0) == pytest.approx(0.01)
    record.rate_usd_per_hour = None
    assert session_cost(record, now=110.0) is None
    never_created = SessionRecord("dk-2", "daytona", "windows", "1024x768", "h:1", False, "intent", 0.0)
    assert session_cost(never_created, now=50.0) == 0.0
    ended = SessionRecord("dk-3", "x", "ubuntu", "1x1", "h:1", False, "ended", 0.0, created_at=1.0, cost_usd=0.5)
    assert session_cost(ended) == 0.5


def test_the_catalog_cache_keeps_the_last_eight_files_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each user file (by path, mtime and size) is read once while it is among the last eight read; a ninth pushes
    the oldest out, and an edit of a file is a new key (seen without a restart)."""
    from deskctl import metering

    def rate(usd: float) -> str:
        return json.dumps({"rates": [{"provider": "ssh", "platform": "*", "size": "*", "usd_per_hour": usd,
                                      "granularity_seconds": 1, "source": "s", "date": "d"}]})

    reads: list[str] = []
    real_read = metering._read

    def counted(path: str, mtime: int) -> object:
        reads.append(path)
        return real_read(path, mtime)

    monkeypatch.setattr(metering, "_read", counted)
    metering._LOADED.clear()
    files = [tmp_path / f"prices-{n}.json" for n in range(9)]
    for number, path in enumerate(files):
        path.write_text(rate(number + 1))
    for path in files[:8]:
        monkeypatch.setenv("DESKCTL_PRICES", str(path))
        assert lookup_rate("ssh", "ubuntu") is not None
        lookup_rate("ssh", "ubuntu")
    assert reads == [str(p) for p in files[:8]] and len(metering._LOADED) == 8
    monkeypatch.setenv("DESKCTL_PRICES", str(files[8]))
    found = lookup_rate("ssh", "ubuntu")
    assert found is not None and found.usd_per_hour == 9
    assert len(metering._LOADED) == 8 and reads[-1] == str(files[8])
    monkeypatch.setenv("DESKCTL_PRICES", str(files[0]))  # the oldest was pushed out: read again
    lookup_rate("ssh", "ubuntu")
    assert reads[-1] == str(files[0]) and len(reads) == 10
    files[0].write_text(rate(42.5))  # an edit: another size, so another key
    found = lookup_rate("ssh", "ubuntu")
    assert found is not None and found.usd_per_hour == 42.5 and len(reads) == 11
