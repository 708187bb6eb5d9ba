"""The AWS reading behind `gpuforge catalog refresh`: clients, paging, bounds, and each call.

- clients: boto3 with bounded retries and timeouts, and an endpoint that timed out or refused
  once is not asked again (`default_clients`);
- paging: every paginated call stops after MAX_PAGES pages (`pages`);
- the calls: `describe_availability_zones` (the region's regular AZ IDs; Local and Wavelength
  Zones left out), `describe_instance_type_offerings` by `availability-zone-id`,
  `describe_spot_price_history` (the lowest current price over regular AZs), and the Pricing
  API's `get_products` (served from us-east-1 only; the first refusal stops it).
A call that is not served, denied or unreachable is recorded in the report with `why`, in words a
user can act on, and its fields are kept; core/catalog/refresh.py merges what came back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from gpuforge.common.errors import InputError
from gpuforge.core.catalog.refresh_report import RefreshReport

PRICING_REGION = "us-east-1"  # the Pricing API has endpoints in us-east-1 (and few others), not per region
MAX_PAGES = 50  # every paginated call is bounded: a misbehaving endpoint cannot loop us forever
_REGULAR_AZ_ID = re.compile(r"[a-z]+\d-az\d+")  # use1-az4; Local Zones look like usw2-lax1-az1

ClientFactory = Callable[[str, str], Any]  # (service, region) -> boto3 client


def default_clients() -> ClientFactory:
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError

    session = boto3.Session()
    if session.get_credentials() is None:
        raise InputError(
            "catalog refresh needs AWS credentials and found none",
            "run `aws configure` or `aws sso login`, or set AWS_PROFILE / AWS_ACCESS_KEY_ID",
        )
    # Bounded (issue 13 item 2): one call costs at most 2 x (5 + 20) s, and an endpoint that timed
    # out or refused once is not asked again (its later calls fail at once and their fields are
    # kept), so a stalled endpoint costs one call's bound, not one per region, type and page.
    config = Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=20)
    dead: dict[str, str] = {}

    def make(service: str, region: str) -> Any:
        client = session.client(service, region_name=region, config=config)  # type: ignore[call-overload]
        url = str(client.meta.endpoint_url)

        def before(**_: Any) -> None:
            if url in dead:
                raise EndpointConnectionError(endpoint_url=f"{url} (not asked again: {dead[url]})")

        def after_error(exception: Exception, **_: Any) -> None:
            if isinstance(exception, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError)):
                dead.setdefault(url, str(exception))

        client.meta.events.register("before-call", before)
        client.meta.events.register("after-call-error", after_error)
        return client

    return make


def why(exc: Exception) -> str:
    """One line for the report: what went wrong with the call, in words a user can act on."""
    from botocore.exceptions import ClientError
    from botocore.parsers import ResponseParserError

    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", "?"))
        if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation"):
            return f"{code}: not allowed for these credentials"
        if code.isdigit():
            return f"not served by this endpoint (HTTP {code})"
        return f"{code}: {str(err.get('Message', ''))[:160]}"
    if isinstance(exc, ResponseParserError):
        return "not served by this endpoint (the reply was not an API response)"
    return f"{type(exc).__name__}: {str(exc)[:160]}"


def api_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError
    from botocore.parsers import ResponseParserError  # not a BotoCoreError: moto's HTML 500 on EC2 raises it

    return (ClientError, BotoCoreError, ResponseParserError)


def pages(call: Callable[..., dict[str, Any]], key: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
    token = None
    for _ in range(MAX_PAGES):
        page = call(**kwargs, **({"NextToken": token} if token else {}))
        yield from page.get(key, [])
        token = page.get("NextToken")
        if not token:
            return


def region_zones(ec2: Any, region: str, report: RefreshReport, regions_doc: dict[str, Any]) -> dict[str, str] | None:
    """AZ name -> AZ ID for the region's regular AZs; also refreshes regions.yaml's az_ids."""
    try:
        azs = ec2.describe_availability_zones()["AvailabilityZones"]
    except api_errors() as exc:
        report.add("az_ids (region)", region, "kept", f"describe_availability_zones: {why(exc)}")
        return None
    zones = {z["ZoneName"]: z["ZoneId"] for z in azs if z.get("ZoneType", "availability-zone") == "availability-zone"}
    regions_doc["regions"][region]["az_ids"] = sorted(zones.values())
    report.add("az_ids (region)", region, "refreshed", ",".join(sorted(zones.values())))
    report.add("s3express_az_ids", region, "kept", "no API lists S3 Express One Zone AZs; carried over")
    return zones


def offered_az_ids(
    ec2: Any, region: str, names: list[str], zones: dict[str, str] | None, report: RefreshReport
) -> dict[str, set[str]] | None:
    try:
        entries = list(
            pages(
                ec2.describe_instance_type_offerings,
                "InstanceTypeOfferings",
                LocationType="availability-zone-id",
                Filters=[{"Name": "instance-type", "Values": names}],
            )
        )
    except api_errors() as exc:
        report.add("az_ids", region, "kept", f"describe_instance_type_offerings: {why(exc)}")
        return None
    regular = set(zones.values()) if zones is not None else None
    out: dict[str, set[str]] = {}
    for e in entries:
        az = e["Location"]
        if (regular is not None and az not in regular) or not _REGULAR_AZ_ID.fullmatch(az):
            continue  # Local and Wavelength Zones are not places a cluster placement group goes
        out.setdefault(e["InstanceType"], set()).add(az)
    report.add("az_ids", region, "refreshed", f"{len(out)} of {len(names)} types offered")
    return out


def lowest_spot_prices(
    ec2: Any, region: str, names: list[str], zones: dict[str, str] | None, report: RefreshReport, now: datetime
) -> dict[str, float] | None:
    if zones is None:
        report.add("spot_usd_per_hour", region, "kept", "AZs unknown, so regular AZs cannot be told from Local Zones")
        return None
    try:
        entries = list(
            pages(
                ec2.describe_spot_price_history,
                "SpotPriceHistory",
                InstanceTypes=names,
                ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"],
                StartTime=now,
            )
        )
    except api_errors() as exc:
        report.add("spot_usd_per_hour", region, "kept", f"describe_spot_price_history: {why(exc)}")
        return None
    low: dict[str, float] = {}
    for e in entries:
        if e.get("AvailabilityZone") not in zones:
            continue
        price = float(e["SpotPrice"])
        low[e["InstanceType"]] = min(price, low.get(e["InstanceType"], price))
    report.add("spot_usd_per_hour", region, "refreshed", f"lowest regular-AZ price for {len(low)} types")
    return low


class PriceLookup:
    """On-demand Linux/shared-tenancy prices from the Pricing API; stops at the first refusal."""

    def __init__(self, clients: ClientFactory, report: RefreshReport) -> None:
        self._clients = clients
        self._report = report
        self._client: Any = None
        self._failed: str | None = None
        self._found = 0
        self._missing: list[str] = []

    def on_demand(self, name: str, region: str) -> float | None:
        if self._failed is not None:
            return None
        filters = {
            "instanceType": name,
            "regionCode": region,
            "operatingSystem": "Linux",
            "tenancy": "Shared",
            "preInstalledSw": "NA",
            "capacitystatus": "Used",
            "licenseModel": "No License required",
        }
        try:
            if self._client is None:
                self._client = self._clients("pricing", PRICING_REGION)
            reply = self._client.get_products(
                ServiceCode="AmazonEC2",
                MaxResults=10,
                Filters=[{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in filters.items()],
            )
        except api_errors() as exc:
            # One refusal means the API is unusable here; asking 160 more times would only be slow.
            self._failed = f"pricing.get_products: {why(exc)}"
            return None
        price = usd_per_hour(reply.get("PriceList", []))
        if price is None:
            self._missing.append(f"{name} {region}")
        else:
            self._found += 1
        return price

    def summarise(self, regions: list[str]) -> None:
        scope = ", ".join(regions)
        if self._failed is not None:
            self._report.add("on_demand_usd_per_hour", scope, "kept", self._failed)
            return
        self._report.add("on_demand_usd_per_hour", scope, "refreshed", f"{self._found} prices")
        for key in self._missing:
            self._report.add("on_demand_usd_per_hour", key, "kept", "no matching product in the Pricing API")


def usd_per_hour(price_list: list[Any]) -> float | None:
    for item in price_list:
        doc = json.loads(item) if isinstance(item, str) else item
        for term in (doc.get("terms", {}).get("OnDemand") or {}).values():
            for dim in (term.get("priceDimensions") or {}).values():
                usd = (dim.get("pricePerUnit") or {}).get("USD")
                if usd is not None and dim.get("unit", "Hrs") == "Hrs" and float(usd) > 0:
                    return float(usd)
    return None
