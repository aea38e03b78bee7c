"""The table `make bench` prints: each measurement beside its baseline and target."""

from __future__ import annotations

import statistics
from typing import Any

Row = tuple[str, str, str, str, str, str]
HEAD: Row = ("measurement", "objects/s", "ratio", "target", "CPU ms/object", "peak RSS MiB")


def _row(label: str, fig: dict[str, Any], base: float | None = None, target: str = "") -> Row:
    ops = fig["objects_per_s"]
    ratio = f"{ops / base:.2f}" if base else ""
    cpu = f"{fig['cpu_ms_per_object']:.2f}" if "cpu_ms_per_object" in fig else ""
    rss = f"{fig['peak_rss_mib']:.0f}" if "peak_rss_mib" in fig else ""
    return (label, f"{ops:.0f}", ratio, target, cpu, rss)


def _backup_rows(r: dict[str, Any]) -> list[Row]:
    lb, lp = r["list_bare"]["objects_per_s"], r["list_bare_parallel"]["objects_per_s"]
    k = r["list_concurrency"]
    return [
        _row("bare HTTP LIST + JSON + gzip, 1 stream", r["list_bare"], lb),
        _row(f"bare HTTP LIST, {k} namespaces at once", r["list_bare_parallel"], lb),
        _row("statusvault backup -> directory, 1 LIST at a time", r["backup_dir_1"], lb, ">= 0.90"),
        _row(f"statusvault backup -> directory, {k} LISTs at once", r[f"backup_dir_{k}"], lp, ">= 0.80 of parallel"),
        _row("  the same, listed in 2 worker processes", r[f"backup_dir_{k}_p2"], lp, ">= 0.80 of parallel"),
        _row(f"statusvault backup -> S3 (moto), {k} LISTs", r["backup_s3"], lb, ">= 0.70"),
        _row("statusvault verify", r["verify"]),
    ]


def _restore_rows(r: dict[str, Any]) -> list[Row]:
    wb = r["write_bare"]["objects_per_s"]
    rows = [
        _row(f"bare HTTP create + PUT status ({r['parallel']} threads)", r["write_bare"], wb),
        _row("sequential create + PUT status (1 thread)", r["write_sequential"]),
    ]
    if "write_kubectl" in r:
        rows.append(_row("kubectl create + replace --subresource=status", r["write_kubectl"]))
    for key in sorted(k for k in r if k.startswith("restore_p")):
        fig = r[key]
        first = fig.get("timings", {}).get("firstResult")
        label = f"statusvault restore --processes {key[9:]}" + (f" (first object after {first:.1f}s)" if first else "")
        rows.append(_row(label, fig, wb, ">= 0.90" if key == "restore_p1" else ""))
    audit = r["restore"].get("audit") or {}
    if audit.get("checked"):
        label = f"  its audit: {audit['checked']} objects read back in {audit['seconds']:.2f}s (in the row above)"
        rows.append((label, "", "", "", f"{audit['cpuMsPerObject']:.3f}", ""))
    if "write_kubectl" in r:
        rr = r["restore"]["objects_per_s"] / r["write_kubectl"]["objects_per_s"]
        rows.append(("  restore vs the kubectl loop", "", f"{rr:.1f}", ">= 2.00", "", ""))
    if "restore_stream" in r:
        first = r["restore_stream"].get("timings", {}).get("firstResult")
        label = "statusvault restore --stream" + (f" (first object after {first:.1f}s)" if first else "")
        rows.append(_row(label, r["restore_stream"], wb, "~ restore"))
    if "restore_modifiers" in r:
        rows.append(_row("statusvault restore, 3 modifier rules", r["restore_modifiers"], wb, "~ restore"))
    for key in sorted((k for k in r if k.startswith("own_work_")), key=lambda k: int(k[9:])):
        label = f"  its own work: writes answered in-process, {key[9:]} writer thread(s)"
        rows.append((label, "", "", "", f"{r[key]['cpu_ms_per_object']:.3f}", f"{r[key]['peak_rss_mib']:.0f}"))
    return rows


def _first_write_rows(r: dict[str, Any]) -> list[Row]:
    """The default restore of a real backup, encrypted or signed: its first object on the server."""
    rows: list[Row] = []
    for how in ("encrypted", "signed"):
        if f"first_write_{how}" in r:
            fig = r[f"first_write_{how}"]
            label = f"first write of {r['n']:,} objects, {how} backup, default options"
            rows.append((label, "", f"{fig['first_write_seconds']:.2f}s", "<= 2s", "", f"{fig['peak_rss_mib']:.0f}"))
    return rows


def _go_rows(r: dict[str, Any]) -> list[Row]:
    """statusvault and the bare Python client against the compiled reference (bench/goref): objects/s and CPU
    per object, each as a ratio (objects/s: higher is better; CPU: lower is better)."""
    rows: list[Row] = []
    pairs = (
        ("list_go", "Go LIST + JSON + gzip, 1 stream", (("list_bare", "bare Python LIST"),
                                                         ("backup_dir_1", "statusvault backup, 1 LIST"))),
        ("write_go", f"Go create + PUT status ({r['parallel']} goroutines)", (("write_bare", "bare Python writer"),
                                                                            ("restore_p1", "statusvault restore"))),
    )  # fmt: skip
    for key, label, others in pairs:
        if key not in r:
            continue
        go = r[key]
        rows.append(_row(label, go, go["objects_per_s"]))
        for other, name in others:
            if other in r:
                fig = r[other]
                speed = fig["objects_per_s"] / go["objects_per_s"]
                cpu = fig["cpu_ms_per_object"] / go["cpu_ms_per_object"]
                rows.append((f"  {name} vs Go", "", f"{speed:.2f}", "", f"{cpu:.2f}x", ""))
    rounds = r.get("cpu_rounds")
    if rounds and rounds["go"]:
        for key, name, target in (("default", "default options", "<= 1.2x"), ("restore", "--processes 1", "<= 1.5x")):
            if not rounds.get(key):
                continue
            ratios = sorted(mine / go for mine, go in zip(rounds[key], rounds["go"], strict=True))
            spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}x"
            label = f"  restore ({name}) vs Go, median of {len(ratios)} alternated pairs ({spread})"
            if key == "default" and "default_processes" in rounds:  # 0 in a run: it stayed in its own threads
                scaled = sum(1 for p in rounds["default_processes"] if p)
                label += f", {scaled} of {len(ratios)} in worker processes"
            speed, matched = "", []
            if key == "default" and rounds.get("default_rate"):
                rates = zip(rounds["default_rate"], rounds["go_rate"], strict=True)
                speed = f"{statistics.median(d / g for d, g in rates):.2f}"  # its rate: >= 0.95 of Go's
                matched = _rate_matched_row(rounds, target)
            rows.append((label, "", speed, target, f"{statistics.median(ratios):.2f}x", ""))
            rows += matched
    return rows


SAME_RATE = 0.10  # two runs of a pair whose server rates differ by less are compared as at the same rate


def _rate_matched_row(rounds: dict[str, list[float]], target: str) -> list[Row]:
    """The default options' ratio over only the pairs whose two runs met the server at about the same rate: CPU per
    object follows the rate (each answer wakes the thread it is for), so a pair at unequal rates says partly how
    busy the server was. No row without such a pair."""
    pairs = zip(rounds["default"], rounds["go"], rounds["default_rate"], rounds["go_rate"], strict=True)
    matched = [mine / go for mine, go, rate, go_rate in pairs if abs(rate - go_rate) <= SAME_RATE * max(rate, go_rate)]
    if not matched:
        return []
    label = f"    the {len(matched)} of {len(rounds['go'])} pairs at rates within {SAME_RATE:.0%} of each other"
    return [(label, "", "", target, f"{statistics.median(matched):.2f}x", "")]


def report(r: dict[str, Any]) -> str:
    rows = [HEAD]
    if "list_bare" in r:
        rows += _backup_rows(r)
    if "write_bare" in r:
        rows += _restore_rows(r)
    rows += _first_write_rows(r)
    rows += _go_rows(r)
    if "planning" in r:
        p = r["planning"]
        rows.append(
            (f"planning {p['objects']} objects (time to first write)", f"{p['planned_seconds']:.1f}s", "", "<= 5s",
             "", f"{p['peak_rss_mib']:.0f}")
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEAD))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
