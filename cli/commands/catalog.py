"""`gpuforge catalog`: list and show instance types, suggest shapes for a profile, refresh from AWS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from gpuforge.commands.options import complete_instance_types, complete_profiles, project_dir_option
from gpuforge.common.errors import InputError
from gpuforge.common.table import Column, Rows, emit, format_option
from gpuforge.common.table import console as rich_console
from gpuforge.core.catalog import Catalog, InstanceType, did_you_mean, load_catalog

DEFAULT_REGION = "us-east-1"


def _region(catalog: Catalog, region: str, flag: str = "--region") -> str:
    if region not in catalog.regions:
        raise InputError(
            f"{flag}: {region!r} is not a region the catalog covers{did_you_mean(region, catalog.regions)}",
            f"use one of {', '.join(catalog.regions)}",
        )
    return region


def _console() -> Any:
    return rich_console()


@click.group("catalog")
def command() -> None:
    """The instance catalog: facts and prices of AWS GPU types (core/catalog).

    The catalog is the installed gpuforge's (gpuforge.core.catalog), the same one `cost`,
    `preview` and `pulumi up` read through the project's virtualenv.
    """


def _type_row(it: InstanceType, region: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "instance_type": it.name,
        "family": it.family,
        "gpu_model": it.gpu_model,
        "gpu_count": it.gpu_count,
        "gpu_memory_gib": it.gpu_memory_gib,
        "vcpus": it.vcpus,
        "memory_gib": it.memory_gib,
        "network_gbps": it.network_gbps,
        "efa_interfaces": it.efa_interfaces,
        "nvme": f"{it.nvme_count}x{it.nvme_gb_each}GB" if it.nvme_count else "",
        "interconnect": it.interconnect,
    }
    if region is not None:
        off = it.offering(region)
        row["on_demand_usd_per_hour"] = off.on_demand_usd_per_hour if off else None
        row["spot_usd_per_hour"] = off.spot_usd_per_hour if off else None
        row["az_ids"] = list(off.az_ids) if off else []
    return row


@command.command("list")
@click.option("--family", help="Only this family (p4d, g5, ...).")
@click.option("--region", help="Only types offered in this region; adds its prices and AZ IDs.")
@format_option
@project_dir_option
def list_cmd(family: str | None, region: str | None, fmt: str, project_dir: Path) -> None:
    """List the catalog's instance types."""
    catalog = load_catalog()
    types = list(catalog.instance_types.values())
    if family is not None:
        families = sorted({t.family for t in types})
        if family not in families:
            raise InputError(
                f"--family: {family!r} is not a catalog family{did_you_mean(family, families)}",
                f"use one of {', '.join(families)}",
            )
        types = [t for t in types if t.family == family]
    if region is not None:
        _region(catalog, region)
        types = [t for t in types if t.offering(region) is not None]
    rows = [_type_row(t, region) for t in types]
    if fmt == "json":
        click.echo(json.dumps({"region": region, "instance_types": rows}, indent=2))
        return
    heads = ["type", "GPUs", "vCPU", "RAM GiB", "Gbps", "EFA", "NVMe", "GPU link"]
    heads += ["on-demand $/h", "spot $/h", "AZ IDs"] if region else []
    table = Rows(f"instance types{' in ' + region if region else ''}",
                 [Column(h, justify="right" if h in _NUMERIC else "left") for h in heads])
    for r in rows:
        cells = [
            r["instance_type"],
            f"{r['gpu_count']}×{r['gpu_model']} ({r['gpu_memory_gib']:g} GiB)",
            str(r["vcpus"]),
            _cell(r["memory_gib"]),
            _cell(r["network_gbps"]),
            str(r["efa_interfaces"] or "-"),
            r["nvme"] or "-",
            r["interconnect"],
        ]
        if region:
            cells += [_cell(r["on_demand_usd_per_hour"]), _cell(r["spot_usd_per_hour"]), _cell(r["az_ids"])]
        table.add(*cells)
    emit(table, fmt)


_NUMERIC = {"vCPU", "RAM GiB", "Gbps", "EFA", "on-demand $/h", "spot $/h"}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(value) or "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


@command.command("show")
@click.argument("instance_type", shell_complete=complete_instance_types)
@format_option
@project_dir_option
def show_cmd(instance_type: str, fmt: str, project_dir: Path) -> None:
    """Everything the catalog knows about one instance type, with prices per region."""
    catalog = load_catalog()
    if instance_type not in catalog.instance_types:
        raise InputError(
            f"INSTANCE_TYPE: unknown instance type {instance_type!r}{did_you_mean(instance_type, catalog.instance_types)}",
            "see `gpuforge catalog list`",
        )
    it = catalog.instance_types[instance_type]
    gpu = catalog.gpu(it)
    doc = _type_row(it, None) | {
        "network_cards": it.network_cards,
        "gpudirect_rdma": it.gpudirect_rdma,
        "gpu": {k: v for k, v in vars(gpu).items() if k != "name"} | {"mig_profiles": list(gpu.mig_profiles)},
        "offerings": {
            r: {
                "on_demand_usd_per_hour": o.on_demand_usd_per_hour,
                "spot_usd_per_hour": o.spot_usd_per_hour,
                "az_ids": list(o.az_ids),
            }
            for r, o in sorted(it.offerings.items())
        },
    }
    if fmt == "json":
        click.echo(json.dumps(doc, indent=2))
        return
    facts = Rows(it.name, [Column("fact"), Column("value")])
    for key, value in doc.items():
        if key not in ("offerings", "gpu"):
            facts.add(key, _cell(value))
    for key, value in doc["gpu"].items():
        facts.add(f"gpu.{key}", _cell(value) if not isinstance(value, list) else ",".join(value) or "-")
    prices = Rows("offerings", [Column("region"), Column("on-demand $/h", justify="right"),
                                Column("spot $/h", justify="right"), Column("AZ IDs")])
    for region, o in doc["offerings"].items():
        prices.add(region, _cell(o["on_demand_usd_per_hour"]), _cell(o["spot_usd_per_hour"]), _cell(o["az_ids"]))
    emit(facts, fmt)
    emit(prices, fmt)


@command.command("suggest")
@click.option("--profile", "profile_name", required=True, shell_complete=complete_profiles,
              help="A profile in components/profiles.")
@click.option("--region", default=DEFAULT_REGION, show_default=True)
@format_option
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Show the N best shapes.")
@click.option("--results", "results_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Rank by the workload's cost per epoch (or per 1M inferences, 1e9 paths): `gpuforge poc` results "
                   "in DIR, NVIDIA's published figures for the shapes not measured.")
@click.option("--html", "html_page", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --results: also write a self-contained page charting cost per unit and throughput per shape.")
@project_dir_option
def suggest_cmd(profile_name: str, region: str, fmt: str, top: int, results_dir: Path | None, html_page: Path | None,
                project_dir: Path) -> None:
    """Catalog shapes (type × nodes) for a profile's requirements: fit, gaps, price.

    With --results DIR, also ranks the shapes by what the profile's POC workload costs on them:
    measured figures (`gpuforge poc --out DIR`) where a shape's type was measured on a GPU,
    NVIDIA's published figures elsewhere, each labelled with what it was measured on. CPU and
    --quick runs are listed, never ranked.
    """
    from gpuforge.core.profiles import UnknownProfileError, load_profile
    from gpuforge.core.resolver import ResolveError, resolve

    catalog = load_catalog()
    _region(catalog, region)
    try:
        profile = load_profile(profile_name)
    except UnknownProfileError as exc:
        raise InputError(
            f"--profile: unknown profile {profile_name!r}{exc.suggestion}", f"use one of {', '.join(exc.known)}"
        ) from None
    try:
        ranked = resolve(profile.requirements, region, catalog)
    except ResolveError as exc:
        raise InputError(f"{profile.name}: requirements.gpu_model: {exc}", "use a GPU model from gpus.yaml") from None
    shown = ranked[:top]
    ranking = None
    if results_dir is not None:
        ranking = _workload_ranking(profile, region, results_dir)
    elif html_page is not None:
        raise InputError("--html: needs --results DIR (the page charts the workload ranking)",
                         "add --results DIR (an empty folder ranks by published figures alone)")
    if html_page is not None and ranking is not None:
        from gpuforge.pocreport import write_page

        write_page(ranking, html_page)
    if fmt == "json":
        doc = {
            "profile": profile.name,
            "region": region,
            "requirements": profile.requirements.model_dump(),
            "profile_shape": {"instance_type": profile.shape.instance_type, "node_count": profile.shape.node_count},
            "candidates": [c.to_dict() for c in shown],
            "total_candidates": len(ranked),
        }
        if ranking is not None:
            doc["workload_ranking"] = _ranking_dict(ranking, top)
        click.echo(json.dumps(doc, indent=2))
        return
    _print_suggestions(profile.name, region, shown, len(ranked), fmt)
    if ranking is not None:
        _print_ranking(ranking, top, fmt)
    if html_page is not None:
        click.echo(f"report: {html_page}", err=True)


def _workload_ranking(profile: Any, region: str, results_dir: Path) -> Any:
    from gpuforge.core.pocrank import PROFILE_WORKLOAD, rank
    from gpuforge.validate.checks import ParseError
    from gpuforge.validate.poc import load_results

    if profile.name not in PROFILE_WORKLOAD:
        raise InputError(f"--results: profile {profile.name!r} has no POC workload",
                         f"use one of {', '.join(PROFILE_WORKLOAD)}")
    if not results_dir.is_dir():
        raise InputError(f"--results: {results_dir} is not a directory", "pass the folder `gpuforge poc --out` wrote")
    try:
        docs = load_results(results_dir)
    except ParseError as exc:
        raise InputError(f"--results: {exc}", "remove or fix that file; results are `gpuforge poc` JSON files") from None
    return rank(profile, region, docs)


def _ranking_dict(r: Any, top: int) -> dict[str, Any]:
    return {"workload": r.workload, "ranked_by": "cost per unit at on-demand prices",
            "ranked": [s.to_dict() for s in r.ranked[:top]], "total_ranked": len(r.ranked),
            "unranked": [s.to_dict() for s in r.unranked], "set_aside": [{"file": f, "why": w} for f, w in r.set_aside]}


def _usd(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if value >= 0.1 else f"{value:.4f}"


def _print_ranking(r: Any, top: int, fmt: str) -> None:
    from gpuforge.core.poccost import UNITS
    from gpuforge.core.pocrank import FIGURE_UNITS

    unit, words = UNITS[r.workload]
    rows = Rows(f"{r.workload} on {r.profile}'s shapes in {r.region}: cost of {words} (cheapest first; "
                f"{min(top, len(r.ranked))} of {len(r.ranked)} ranked)",
                [Column("#", justify="right"), Column("shape"), Column("GPUs"), Column("fit"), Column("figure"),
                 Column(FIGURE_UNITS[r.workload], justify="right"), Column("basis"), Column("time per " + unit, justify="right"),
                 Column(f"$ per {unit} on-demand", justify="right"), Column(f"$ per {unit} spot", justify="right")])
    sources: dict[tuple[str, str], None] = {}
    for i, s in enumerate(r.ranked[:top], 1):
        c, cost = s.candidate, s.cost
        sources.setdefault((f"{s.label}: {s.system}", s.source))
        rows.add(str(i), c.label, f"{c.gpus_total}×{c.gpu_model}", c.fit if c.fit == "exact" else f"{len(c.gaps)} gap(s)",
                 s.label, f"{s.figure:,.1f}", s.basis, _seconds(cost.seconds_per_unit),
                 _usd(cost.usd_per_unit["on_demand"]), _usd(cost.usd_per_unit["spot"]))
    emit(rows, fmt)
    prefix = "# " if fmt == "plain" else ""
    for what, src in sources:
        click.echo(f"{prefix}source: {what} <{src}>")
    if r.unranked:
        names = ", ".join(s.candidate.label for s in r.unranked)
        click.echo(f"{prefix}not ranked (no measured or published figure, or no on-demand price): {names}")
    for f, why in r.set_aside:
        click.echo(f"{prefix}set aside: {f}: {why}")
    click.echo(f"{prefix}measured = a `gpuforge poc` result on that instance type; published = NVIDIA's figure for the GPU, "
               "on the system named (a DGX is not an EC2 shape); costs: the catalog's prices, as `gpuforge cost`")


def _seconds(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    return f"{s / 60:.1f} min" if s >= 60 else f"{s:.1f} s"


def _print_suggestions(profile: str, region: str, shown: list[Any], total: int, fmt: str) -> None:
    from gpuforge.common.plain import escape

    # A compact ranking first, then the explanations as text: long sentences read badly in table cells.
    fit_styles = {"exact": "green"}
    table = Rows(f"shapes for {profile} in {region} (best first; {len(shown)} of {total})",
                 [Column("#", justify="right"), Column("shape"), Column("GPUs"), Column("fit", styles=fit_styles),
                  Column("on-demand $/h", justify="right"), Column("spot $/h", justify="right")])
    for i, c in enumerate(shown, 1):
        table.add(
            str(i),
            c.label,
            f"{c.gpus_total}×{c.gpu_model}",
            "exact" if c.fit == "exact" else f"{len(c.gaps)} gap(s)",
            _cell(None if c.on_demand_usd_per_hour is None else round(c.on_demand_usd_per_hour, 3)),
            _cell(None if c.spot_usd_per_hour is None else round(c.spot_usd_per_hour, 3)),
        )
    emit(table, fmt)
    if fmt == "plain":  # the explanations as comment lines: the records above stay one per line
        for i, c in enumerate(shown, 1):
            for prefix, lines in (("gap", c.gaps), ("more", c.surpluses), ("note", c.notes)):
                for line in lines:
                    click.echo(f"# {i} {prefix}: {line}")
        return
    console = _console()
    for i, c in enumerate(shown, 1):
        console.print(f"\n[bold]{i}. {c.label}[/] ({c.node_reason})")
        for prefix, style, lines in (
            ("gap", "yellow", c.gaps),
            ("more", "cyan", c.surpluses),
            ("note", "dim", c.notes),
        ):
            for line in lines:
                console.print(f"   [{style}]{prefix}:[/] {escape(line)}")
    console.print("\n[dim]Prices: the catalog snapshot (core/catalog/meta.yaml); spot moves hourly.[/]")


@command.command("refresh")
@click.option("--regions", default=None, help="Comma-separated regions (default: every catalog region).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory to write the refreshed catalog files to.",
)
@click.option("--in-place", is_flag=True, help="Replace the project's components/catalog instead (review `git diff` after).")
@format_option
@project_dir_option
def refresh_cmd(regions: str | None, out: Path | None, in_place: bool, fmt: str, project_dir: Path) -> None:
    """Rewrite the catalog from the AWS APIs with your credentials (EC2 and Pricing).

    Facts no API gives (GPU interconnect, GPUDirect RDMA, the GPU label) are carried over from
    the existing catalog; where an API is not served or forbidden, the old value is kept and
    the report says so per field. A price more than 5x away from the previous snapshot, under
    a cent an hour, or a spot price under 5% of on-demand is implausible: the previous value is
    kept and a warning says so. Nothing is written unless --out or --in-place says where.
    """
    catalog = load_catalog()
    wanted = [r.strip() for r in regions.split(",") if r.strip()] if regions else list(catalog.regions)
    if not wanted:
        raise InputError("--regions: empty", f"give one or more of {', '.join(catalog.regions)}, comma-separated")
    for region in wanted:
        _region(catalog, region, "--regions")
    from gpuforge.core.catalog.refresh import CATALOG_DIR, refresh_catalog  # boto3 is loaded only here

    if (out is None) == (not in_place):
        raise InputError(
            "catalog refresh: say where to write: --out DIR, or --in-place" if out is None
            else "catalog refresh: --out and --in-place exclude each other",
            f"--out DIR writes a new copy; --in-place replaces {CATALOG_DIR} (the catalog this project reads)",
        )
    from gpuforge.common.inputfile import check_output_dir

    check_output_dir(out or CATALOG_DIR, "--out" if out is not None else "--in-place")  # before the AWS calls
    report = refresh_catalog(wanted, out or CATALOG_DIR)
    for item in report.items:
        if item.status == "implausible":
            click.echo(f"warning: {item.field} {item.scope}: {item.detail}", err=True)
    if fmt == "json":
        click.echo(json.dumps(report.to_dict(), indent=2))
        return
    table = Rows(f"catalog refresh -> {report.out_dir}",
                 [Column("field"), Column("scope"), Column("status", styles={"refreshed": "green"}), Column("detail")])
    for item in report.items:
        table.add(item.field, item.scope, item.status, item.detail)
    emit(table, fmt)
    click.echo(f"wrote {', '.join(report.written)}", err=fmt == "plain")
