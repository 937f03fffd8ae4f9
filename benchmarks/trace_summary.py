"""When each kind of work ran in a trace written by ``STFLOW_TRACE_FILE``.

    STFLOW_TRACE_FILE=run.json python examples/cholesky.py --backend cuda --n 32768 --nb 2048
    python benchmarks/trace_summary.py run.json

For each kind of span — the copies to the devices, the copies to the host, and the
tasks and host callbacks by symbol (``potrf``, ``gemm``, ``store``...) — prints how
many there were, when the first started, when half and nine tenths of them had
ended and when the last ended (milliseconds from the first span), and their summed
length: whether the copies in overlap the factorisation, and whether the copies back
follow each tile's last writer or wait for the end.
"""

from __future__ import annotations

import argparse
import collections
import json


def kind_of(span: dict) -> str:
    """``transfer to host`` / ``transfer to device`` for copies (their names end
    with the place they go to), else the symbol of the task or callback."""
    if span.get("cat") == "transfer":
        return (
            "transfer to host" if span["name"].endswith("host") else "transfer to device"
        )
    return span["name"].split("(")[0].replace("'", "")


def summarise(path: str) -> list[str]:
    with open(path) as file:
        spans = [e for e in json.load(file)["traceEvents"] if e.get("ph") == "X"]
    if not spans:
        return ["no spans in the trace"]
    origin = min(span["ts"] for span in spans)
    last = max(span["ts"] + span["dur"] for span in spans)
    kinds: dict[str, list[dict]] = collections.defaultdict(list)
    for span in spans:
        kinds[kind_of(span)].append(span)
    lines = [f"{len(spans)} spans over {(last - origin) / 1e3:.1f} ms"]
    for kind, members in sorted(kinds.items()):
        starts = [(span["ts"] - origin) / 1e3 for span in members]
        ends = sorted((span["ts"] + span["dur"] - origin) / 1e3 for span in members)
        summed = sum(span["dur"] for span in members) / 1e3
        lines.append(
            f"{kind:24s} {len(members):5d}  first start {min(starts):9.1f} ms, half "
            f"ended {ends[len(ends) // 2]:9.1f}, 90% {ends[int(0.9 * (len(ends) - 1))]:9.1f}, "
            f"last {ends[-1]:9.1f}, summed {summed:9.1f} ms"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="a file written by STFLOW_TRACE_FILE")
    print("\n".join(summarise(parser.parse_args().trace)))


if __name__ == "__main__":
    main()
