# What compare_tables.sh and stream_tables.sh share: their runs' JSON lines grouped by
# configuration, medians, and ratios against the hashed ("fixed") table of the same run.
import json
import statistics

med = statistics.median


def summarize(bench, path, extra):
    """Prints one JSON line per configuration of the runs in `path` (a {"config", "run"}
    object a line, "run" being troupe launch's JSON), then a summary line. extra(config,
    ok_runs, base) gives a bench's own figures; base is the fixed table's line, or None."""
    rows = [json.loads(line) for line in open(path)]
    summary = {"bench": bench, "results": []}
    base = None
    for config in dict.fromkeys(r["config"] for r in rows):
        runs = [r["run"].get("chief", {}) for r in rows if r["config"] == config]
        ok = [c for c in runs if c.get("ok")]
        line = {"bench": bench, "config": config, "runs": len(runs), "ok_runs": len(ok)}
        if ok:
            last = ok[-1]
            line.update({
                "examples": last["examples"],
                "examples_per_sec_median": med(c["examples_per_sec"] for c in ok),
                "examples_per_sec_all": [round(c["examples_per_sec"]) for c in ok],
                "table_rows": last["table_rows"],
                "table_bytes": last["table_bytes"],
                "rows_admitted": last["rows_admitted"],
                "rows_evicted": last["rows_evicted"],
                "grads_dropped_unadmitted": last["grads_dropped_unadmitted"],
                "ps_rss_bytes_median": med(max(c["ps_rss_bytes"]) for c in ok)})
            line.update(extra(config, ok, base))
            if config == "fixed":
                base = line
            if base:
                line["speed_vs_fixed"] = (line["examples_per_sec_median"] /
                                          base["examples_per_sec_median"])
        summary["results"].append(line)
        print(json.dumps(line))
    print(json.dumps(summary))
