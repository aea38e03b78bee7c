"""The table `make bench` prints: each measurement beside its baseline and target."""

from __future__ import annotations

from typing import Any


def report(r: dict[str, Any]) -> str:
    lb, wb = r["list_bare"]["objects_per_s"], r["write_bare"]["objects_per_s"]
    seq = r["write_sequential"]["objects_per_s"]
    rows = [
        ("measurement", "objects/s", "ratio", "target", "peak RSS MiB"),
        ("bare HTTP LIST + JSON + gzip", f"{lb:.0f}", "1.00", "", ""),
        (
            "statusvault backup -> directory",
            f"{r['backup_dir']['objects_per_s']:.0f}",
            f"{r['backup_dir']['objects_per_s'] / lb:.2f}",
            ">= 0.80",
            f"{r['backup_dir']['peak_rss_mib']:.0f}",
        ),
        (
            "statusvault backup -> S3 (moto)",
            f"{r['backup_s3']['objects_per_s']:.0f}",
            f"{r['backup_s3']['objects_per_s'] / lb:.2f}",
            ">= 0.70",
            f"{r['backup_s3']['peak_rss_mib']:.0f}",
        ),
        ("statusvault verify", f"{r['verify']['objects_per_s']:.0f}", "", "", f"{r['verify']['peak_rss_mib']:.0f}"),
        (f"bare HTTP create + PUT status ({r['parallel']} threads)", f"{wb:.0f}", "1.00", "", ""),
        ("sequential create + PUT status (1 thread)", f"{seq:.0f}", "", "", ""),
    ]
    if "write_kubectl" in r:
        rows.append(
            ("kubectl create + replace --subresource=status", f"{r['write_kubectl']['objects_per_s']:.1f}", "", "", "")
        )
    rr = r["restore"]["objects_per_s"]
    rows.append(
        (
            "statusvault restore (create + status)",
            f"{rr:.0f}",
            f"{rr / wb:.2f}",
            ">= 0.80",
            f"{r['restore']['peak_rss_mib']:.0f}",
        )
    )
    if "write_kubectl" in r:
        rows.append(
            ("  restore vs the kubectl loop", "", f"{rr / r['write_kubectl']['objects_per_s']:.1f}", ">= 2.00", "")
        )
    rows.append(("  restore vs one-thread raw HTTP", "", f"{rr / seq:.2f}", "", ""))
    if "restore_modifiers" in r:
        rm = r["restore_modifiers"]
        rows.append(
            (
                "statusvault restore, 3 modifier rules",
                f"{rm['objects_per_s']:.0f}",
                f"{rm['objects_per_s'] / wb:.2f}",
                "~ restore",
                f"{rm['peak_rss_mib']:.0f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
