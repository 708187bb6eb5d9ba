"""How a stack's nodes are bought, scaled, budgeted and watched: the typed `fleet` part of the
stack config, resolved from the flat `gpuforge:*` keys and the figures in guardrails.yaml.

`parse_fleet` is called by `components.config.parse_stack_config`, so a bad purchase option or
autoscaling bound is refused (exit 2, naming the key) before any resource is declared.
No Pulumi here.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from gpuforge.common.errors import ConfigError
from gpuforge.core.catalog import Catalog, InstanceType

GUARDRAILS_FILE = Path(__file__).resolve().parent / "guardrails.yaml"
PurchaseOption = Literal["on-demand", "spot", "capacity-reservation", "capacity-block"]
_NS = "gpuforge"


@cache
def guardrails() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(GUARDRAILS_FILE.read_text())
    return data


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Autoscaling(_Frozen):
    min_size: int
    max_size: int
    queue_threshold: int
    cooldown_s: int
    scale_out_step: int
    metric_namespace: str
    metric_name: str


class FleetConfig(_Frozen):
    purchase_option: PurchaseOption = "on-demand"
    spot_max_price: str | None = None  # USD/hour as AWS takes it; None caps at the on-demand price
    spot_interruption: Literal["terminate", "stop", "hibernate"] = "terminate"
    spot_instance_types: tuple[str, ...] = ()  # compatible types for a mixed-instances ASG
    capacity_reservation_id: str | None = None
    autoscaling: Autoscaling | None = None
    budget_usd: int | None = None
    budget_emails: tuple[str, ...] = ()
    gpu_quota: int | None = None
    idle_util_percent: int = 70
    idle_minutes: int = 60

    def max_nodes(self, node_count: int) -> int:
        return self.autoscaling.max_size if self.autoscaling else node_count


def check_gpu_quota(fleet: FleetConfig, instance: InstanceType, node_count: int) -> None:
    """A stack that states its team's GPU quota must fit in it with the seed's headroom left.

    This is the early, clear refusal (exit 2, before any resource); the policy pack checks the
    same against the team file itself, so a stack cannot raise its own quota by editing this key.
    """
    if fleet.gpu_quota is None:
        return
    headroom = float(guardrails()["quota"]["headroom_fraction"])
    allowed = math.floor(fleet.gpu_quota * (1 - headroom))
    gpus = instance.gpu_count * fleet.max_nodes(node_count)
    if gpus > allowed:
        raise ConfigError(
            f"{_NS}:gpuQuota",
            f"the stack needs {gpus} GPUs ({fleet.max_nodes(node_count)} × {instance.gpu_count} {instance.gpu_model}), "
            f"but a quota of {fleet.gpu_quota} less {headroom:.0%} headroom allows {allowed}",
            "use fewer nodes or a smaller type, or raise the team's gpu_quota in stacks/teams/<team>.yaml",
        )


def compatible_types(instance: InstanceType, region: str, az_id: str, catalog: Catalog) -> tuple[str, ...]:
    """Types a spot fleet may fall back to: same GPU model family and count, same EFA card count
    (so the launch template's interfaces fit), offered in the stack's AZ ID. The stack's own type first."""
    out = [instance.name]
    for other in sorted(catalog.instance_types.values(), key=lambda t: t.name):
        offering = other.offering(region)
        if (
            other.name != instance.name
            and other.gpu_model.split("-")[0] == instance.gpu_model.split("-")[0]
            and other.gpu_count == instance.gpu_count
            and other.efa_interfaces == instance.efa_interfaces
            and offering is not None
            and az_id in offering.az_ids
        ):
            out.append(other.name)
    return tuple(out)


def parse_fleet(raw: Any, instance: InstanceType, region: str, az_id: str, catalog: Catalog) -> FleetConfig:
    """Resolve the fleet keys of a validated RawStackConfig; ConfigError on a bad combination."""
    g = guardrails()
    option: str = raw.purchaseOption
    reservation = raw.capacityReservationId
    if option in ("capacity-reservation", "capacity-block"):
        if not reservation:
            raise ConfigError(
                f"{_NS}:capacityReservationId",
                f"not set, but purchaseOption is {option}",
                "set it to the reservation's id (cr-...), from `aws ec2 describe-capacity-reservations`",
            )
    elif reservation:
        raise ConfigError(
            f"{_NS}:capacityReservationId",
            f"set, but purchaseOption is {option}",
            "set purchaseOption to capacity-reservation (or capacity-block), or remove the id",
        )
    if reservation and not re.fullmatch(r"cr-[0-9a-f]{8,17}", reservation):
        raise ConfigError(
            f"{_NS}:capacityReservationId", f"{reservation!r} is not a reservation id", "write it like cr-0abc12345"
        )
    if option == "capacity-block" and instance.name not in g["capacity_blocks"]["instance_types"]:
        raise ConfigError(
            f"{_NS}:purchaseOption",
            f"{instance.name} is not sold as EC2 Capacity Blocks per core/guardrails.yaml",
            f"use capacity-reservation, or a type sold that way: {', '.join(g['capacity_blocks']['instance_types'])}",
        )
    if raw.spotMaxPrice is not None:
        if option != "spot":
            raise ConfigError(f"{_NS}:spotMaxPrice", f"set, but purchaseOption is {option}", "remove it, or use spot")
        try:
            ok = float(raw.spotMaxPrice) > 0
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"{_NS}:spotMaxPrice", f"{raw.spotMaxPrice!r} is not a price", "write USD per hour, like 12.5")

    autoscaling = None
    if raw.autoscaling:
        a = g["autoscaling"]
        autoscaling = Autoscaling(
            min_size=a["min_size"] if raw.autoscalingMin is None else raw.autoscalingMin,
            max_size=a["max_size"] if raw.autoscalingMax is None else raw.autoscalingMax,
            queue_threshold=a["queue_threshold"] if raw.autoscalingQueueThreshold is None else raw.autoscalingQueueThreshold,
            cooldown_s=a["cooldown_s"] if raw.autoscalingCooldownS is None else raw.autoscalingCooldownS,
            scale_out_step=a["scale_out_step"],
            metric_namespace=raw.queueMetricNamespace or a["queue_metric_namespace"],
            metric_name=raw.queueMetricName or a["queue_metric_name"],
        )
        if not 0 <= autoscaling.min_size <= autoscaling.max_size:
            raise ConfigError(
                f"{_NS}:autoscalingMin",
                f"{autoscaling.min_size} is not between 0 and autoscalingMax ({autoscaling.max_size})",
                "make autoscalingMin <= autoscalingMax",
            )
    else:
        # Under `pulumi up` the CLI hands the program Pulumi.yaml's default for every key the
        # stack leaves out, so "set" can only mean "differs from that default" (the guardrail).
        a = g["autoscaling"]
        for key, gkey in (("autoscalingMin", "min_size"), ("autoscalingMax", "max_size"),
                          ("autoscalingQueueThreshold", "queue_threshold"), ("autoscalingCooldownS", "cooldown_s")):
            value = getattr(raw, key)
            if value is not None and value != a[gkey]:
                raise ConfigError(f"{_NS}:{key}", "set, but autoscaling is off", f"set `{_NS}:autoscaling: true` or remove it")

    if raw.budgetEmails and raw.budgetUsd is None:
        raise ConfigError(f"{_NS}:budgetEmails", "set, but budgetUsd is not", "set budgetUsd (USD per month)")
    for email in raw.budgetEmails:
        if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
            raise ConfigError(f"{_NS}:budgetEmails", f"{email!r} is not an e-mail address", "write it like ml-team@example.com")

    idle = g["idle"]
    return FleetConfig(
        purchase_option=option,  # type: ignore[arg-type]  # RawStackConfig's Literal already checked it
        spot_max_price=raw.spotMaxPrice,
        spot_interruption=raw.spotInterruptionBehavior,
        spot_instance_types=compatible_types(instance, region, az_id, catalog) if option == "spot" else (),
        capacity_reservation_id=reservation,
        autoscaling=autoscaling,
        budget_usd=raw.budgetUsd,
        budget_emails=tuple(raw.budgetEmails),
        gpu_quota=raw.gpuQuota,
        idle_util_percent=idle["util_percent"] if raw.idleUtilPercent is None else raw.idleUtilPercent,
        idle_minutes=idle["minutes"] if raw.idleMinutes is None else raw.idleMinutes,
    )
