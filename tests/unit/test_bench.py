"""The benchmark's synthetic backup (planning at 100k and 1M objects without a cluster) is made by the real backup
engine from a stand-in lister: it must keep serving what the engine asks of a cluster. And the report's ratio to
the Go writer from alternated pairs."""

from __future__ import annotations

from statusvault.storage.local import LocalStore
from statusvault.store.catalog import verify
from statusvault.testing.bench import synthetic_backup


def test_the_synthetic_backup_is_a_complete_verified_backup(tmp_path):
    store = LocalStore(tmp_path)
    result = synthetic_backup(store, "plan-bench", 1203)
    assert result.objects == 1203
    assert result.manifest["server"]["host"] == "https://synthetic.invalid"
    assert verify(store, "plan-bench").ok


def test_the_alternated_cpu_rounds_give_their_median_ratio_to_go_and_its_spread():
    from statusvault.testing.benchreport import report

    figures = {"parallel": 16, "cpu_rounds": {"restore": [0.9, 0.6, 0.7], "go": [0.5, 0.5, 0.4]}}
    row = next(line for line in report(figures).splitlines() if "alternated pairs" in line)
    assert "restore (--processes 1) vs Go, median of 3 alternated pairs (1.20-1.80x)" in row
    assert row.split()[-1] == "1.75x" and "<= 1.5x" in row  # ratios 1.8, 1.2, 1.75: the median is 1.75


def test_the_report_prints_the_first_write_of_an_encrypted_and_a_signed_backup_by_default():
    from statusvault.testing.benchreport import report

    first = {"first_write_seconds": 0.31, "peak_rss_mib": 80.0, "sampled_seconds": 15.0}
    text = report({"n": 100_000, "parallel": 16, "first_write_encrypted": first,
                   "first_write_signed": {**first, "first_write_seconds": 0.52}})  # fmt: skip
    lines = [line.split() for line in text.splitlines()]
    assert ["first", "write", "of", "100,000", "objects,", "encrypted", "backup,", "default", "options", "0.31s",
            "<=", "2s", "80"] in lines  # fmt: skip
    assert any("signed" in line and "0.52s" in line for line in lines)


def test_the_scale_table_shows_the_parts_that_ran_and_a_dash_for_the_others():
    from statusvault.testing.benchscale import table

    fig = {"cpu_ms_per_object": 0.021, "peak_rss_mib": 40.0}
    first = {"first_write_seconds": 0.31, "peak_rss_mib": 50.0}
    text = table({"1000000": {"objects": 1_000_000, "backup_dir": fig, "default_encrypted": first,
                              "default_signed": {**first, "first_write_seconds": 0.52}}})  # fmt: skip
    row = text.splitlines()[1].split()
    assert row[:3] == ["1000000", "0.021", "40"] and row[-2:] == ["0.31s", "0.52s"] and row.count("-") == 9


def test_the_default_options_get_their_own_ratio_to_go_and_rate():
    from statusvault.testing.benchreport import report

    rounds = {"default": [0.8, 0.7, 0.9], "restore": [0.7, 0.7, 0.8], "go": [0.6, 0.6, 0.6],
              "default_rate": [240.0, 230.0, 220.0], "go_rate": [240.0, 240.0, 240.0],
              "default_processes": [0, 2, 0]}  # fmt: skip
    row = next(
        line for line in report({"parallel": 16, "cpu_rounds": rounds}).splitlines() if "default options" in line
    )
    assert "median of 3 alternated pairs (1.17-1.50x), 1 of 3 in worker processes" in row and "<= 1.2x" in row
    assert row.split()[-1] == "1.33x" and " 0.96 " in row, row  # rates 1.0, 0.958, 0.917: the median 0.958


def test_the_default_options_ratio_is_also_given_over_the_pairs_at_about_the_same_rate():
    from statusvault.testing.benchreport import report

    rounds = {"default": [0.8, 0.66, 0.9, 0.6], "restore": [0.7] * 4, "go": [0.5, 0.6, 0.6, 0.6],
              "default_rate": [180.0, 250.0, 200.0, 300.0], "go_rate": [250.0, 240.0, 205.0, 240.0],
              "default_processes": [0] * 4}  # fmt: skip
    lines = report({"parallel": 16, "cpu_rounds": rounds}).splitlines()
    row = next(line for line in lines if "pairs at rates within" in line)
    assert "the 2 of 4 pairs at rates within 10% of each other" in row and "<= 1.2x" in row
    assert row.split()[-1] == "1.30x", row  # 250 vs 240 (1.1x) and 200 vs 205 (1.5x); 180/250 and 300/240 left out
    rounds["default_rate"] = [100.0, 100.0, 100.0, 100.0]
    assert not any(
        "pairs at rates within" in line for line in report({"parallel": 16, "cpu_rounds": rounds}).splitlines()
    )


def test_each_cpu_round_takes_its_turn_at_going_first_and_clears_its_objects_before_the_next(monkeypatch, tmp_path):
    """A run right after a busy one may meet a server still busy with it, and a server slows as its etcd fills:
    the three runs rotate, and a round's objects are gone before the next round writes."""
    from statusvault.testing import bench

    events: list[tuple[str, str]] = []

    def restore(env, n, prefix, *extra):
        events.append(("write", prefix))
        return {"cpu_ms_per_object": 0.5, "objects_per_s": 300.0, "processes": 0}

    def go(binary, server, n, prefix, work):
        events.append(("write", prefix))
        return {"cpu_ms_per_object": 0.4, "objects_per_s": 310.0}

    monkeypatch.setattr(bench, "restore_figures", restore)
    monkeypatch.setattr(bench, "go_write", go)
    monkeypatch.setattr(bench, "make_namespaces", lambda http, prefix: None)
    monkeypatch.setattr(bench, "delete_objects", lambda http, prefixes: events.extend(("delete", p) for p in prefixes))
    monkeypatch.setenv("BENCH_CPU_ROUNDS", "3")
    cluster = type("Cluster", (), {"server": "https://127.0.0.1:1"})()
    figures = bench.cpu_rounds(None, cluster, {}, 10, tmp_path, tmp_path / "goref")  # type: ignore[arg-type]

    writes = [prefix for how, prefix in events if how == "write"]
    assert writes == ["cpudefault0", "cpuone0", "gocpu0", "cpuone1", "gocpu1", "cpudefault1",
                      "gocpu2", "cpudefault2", "cpuone2"]  # fmt: skip
    for r in range(2):  # every object of round r deleted before round r + 1's first write
        next_round = events.index(("write", writes[3 * (r + 1)]))
        deleted = {prefix for how, prefix in events[:next_round] if how == "delete"}
        assert {f"cpudefault{r}", f"cpuone{r}", f"gocpu{r}"} <= deleted
    assert figures["default"] == [0.5] * 3 and figures["go"] == [0.4] * 3 and figures["go_rate"] == [310.0] * 3
