"""Markdown tables of medians from benches/compare results.

Usage: table.py RESULTS.jsonl RSS.txt "weir sink activemq ..."
"""
import json
import statistics
import sys


def median(values):
    return statistics.median(values) if values else None


def main(results_path, rss_path, brokers):
    brokers = brokers.split()
    runs = [json.loads(line) for line in open(results_path) if line.strip()]
    scenarios = []
    for r in runs:
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])

    def pick(broker, scenario, key, sub=None):
        values = []
        for r in runs:
            if r["broker"] != broker or r["scenario"] != scenario or not r.get("ok"):
                continue
            v = r.get(key)
            if sub is not None:
                v = (v or {}).get(sub)
            if v is not None:
                values.append(v)
        return median(values)

    def failures(broker, scenario):
        return sum(1 for r in runs if r["broker"] == broker and r["scenario"] == scenario and not r.get("ok"))

    present = [b for b in brokers if any(r["broker"] == b for r in runs)]
    peers = [b for b in present if b != "weir"]

    print("### Throughput (msgs/s, median)\n")
    print("| scenario | " + " | ".join(present) + " | " + " | ".join(f"weir/{p}" for p in peers) + " |")
    print("|---" * (1 + len(present) + len(peers)) + "|")
    for s in scenarios:
        cells, rates = [], {}
        for b in present:
            rate = pick(b, s, "msgs_per_sec")
            rates[b] = rate
            bad = failures(b, s)
            cell = f"{rate:,.0f}" if rate is not None else "n/a"
            cells.append(cell + (f" ({bad} failed)" if bad else ""))
        ratios = []
        for p in peers:
            w, o = rates.get("weir"), rates.get(p)
            ratios.append(f"{w / o:.2f}x" if w and o else "n/a")
        print(f"| {s} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")

    print("\n### Latency p50 / p99 (µs, median of runs)\n")
    print("| scenario | " + " | ".join(present) + " |")
    print("|---" * (1 + len(present)) + "|")
    for s in scenarios:
        cells = []
        for b in present:
            p50 = pick(b, s, "latency_us", "p50")
            p99 = pick(b, s, "latency_us", "p99")
            cells.append(f"{p50:,.0f} / {p99:,.0f}" if p50 is not None else "n/a")
        print(f"| {s} | " + " | ".join(cells) + " |")

    late = [s for s in scenarios if any(r.get("lateness_us") for r in runs if r["scenario"] == s)]
    if late:
        print("\n### Lateness of delayed messages p50 / p99 / max (µs)\n")
        print("| scenario | " + " | ".join(present) + " |")
        print("|---" * (1 + len(present)) + "|")
        for s in late:
            cells = []
            for b in present:
                vals = [pick(b, s, "lateness_us", k) for k in ("p50", "p99", "max")]
                cells.append(" / ".join(f"{v:,.0f}" for v in vals) if None not in vals else "n/a")
            print(f"| {s} | " + " | ".join(cells) + " |")

    rss = {}
    for line in open(rss_path):
        parts = line.split()
        if len(parts) == 2:
            rss[parts[0]] = int(parts[1])
    if rss:
        print("\n### Broker RSS after the runs (MiB)\n")
        print("| " + " | ".join(rss) + " |")
        print("|---" * len(rss) + "|")
        print("| " + " | ".join(f"{v / 1024:,.0f}" for v in rss.values()) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:4])
