#!/usr/bin/env python3
"""Decodes a Perfetto trace written by `profiler/src/render/perfetto.rs` with Perfetto's own
protos (PyPI `perfetto`: perfetto.protos.perfetto.trace.perfetto_trace_pb2) and prints a JSON
summary: processes, threads (pid, tid, name) with their slices (start, duration, name, state,
args)
and instant events, flows, and samples with their leaf frames.

It reads the trace the way Perfetto's trace processor does, so that a trace it accepts is one
the UI shows as the writer meant:
- interned data is looked up per packet sequence, in file order, and forgotten when a packet
  clears the sequence's incremental state; a packet that needs that state before any packet
  cleared it is skipped (and counted);
- events are then ordered by timestamp, ties kept in file order, and each track's
  SLICE_BEGIN / SLICE_END are paired on a stack.
Anything the trace processor would reject or ignore (an unknown iid, an END without a BEGIN, a
slice left open, a flow's end read before its start) is listed under "errors".

Usage: perfetto_decode.py TRACE
Exit status: 0 decoded, 2 usage, 3 the `perfetto` package is missing (`pip install perfetto`).
"""

import json
import sys

try:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
except ImportError as e:  # pragma: no cover - reported to the caller
    print(f"perfetto_decode: cannot import the perfetto protos ({e}); "
          "install them with `pip install perfetto`", file=sys.stderr)
    sys.exit(3)

SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2


class Sequence:
    def __init__(self):
        self.cleared = False
        self.reset()

    def reset(self):
        self.names = {}
        self.categories = {}
        self.functions = {}
        self.frames = {}
        self.callstacks = {}
        self.mappings = {}
        self.mapping_paths = {}
        self.default_clock = None

    def intern(self, data):
        for e in data.event_names:
            self.names[e.iid] = e.name
        for e in data.event_categories:
            self.categories[e.iid] = e.name
        for e in data.function_names:
            self.functions[e.iid] = e.str.decode()
        for e in data.mapping_paths:
            self.mapping_paths[e.iid] = e.str.decode()
        for e in data.mappings:
            self.mappings[e.iid] = e
        for e in data.frames:
            self.frames[e.iid] = e
        for e in data.callstacks:
            self.callstacks[e.iid] = e


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())

    errors = []
    sequences = {}
    processes = {}
    threads = {}  # track uuid -> thread dict
    events = []  # (ts, file index, track uuid, type, name, state, flow ids, terminating ids)
    samples = []
    skipped = 0
    clock = {}

    for index, p in enumerate(trace.packet):
        seq = sequences.setdefault(p.trusted_packet_sequence_id, Sequence())
        if p.sequence_flags & SEQ_INCREMENTAL_STATE_CLEARED:
            seq.reset()
            seq.cleared = True
        if p.sequence_flags & SEQ_NEEDS_INCREMENTAL_STATE and not seq.cleared:
            skipped += 1
            continue
        if p.HasField("trace_packet_defaults"):
            seq.default_clock = p.trace_packet_defaults.timestamp_clock_id
            clock["sequence_clock_id"] = seq.default_clock
        if p.HasField("interned_data"):
            seq.intern(p.interned_data)

        def lookup(table, iid, what):
            if iid not in table:
                errors.append(f"packet {index}: unknown {what} iid {iid}")
                return None
            return table[iid]

        kind = p.WhichOneof("data")
        if kind == "clock_snapshot":
            clock["primary_trace_clock"] = p.clock_snapshot.primary_trace_clock
            clock["snapshot"] = [
                {"clock_id": c.clock_id, "timestamp": c.timestamp}
                for c in p.clock_snapshot.clocks
            ]
        elif kind == "track_descriptor":
            d = p.track_descriptor
            if d.HasField("process"):
                processes[d.process.pid] = d.process.process_name
            if d.HasField("thread"):
                threads[d.uuid] = {
                    "pid": d.thread.pid,
                    "tid": d.thread.tid,
                    "name": d.thread.thread_name,
                    "slices": [],
                    "instants": [],
                }
        elif kind == "track_event":
            e = p.track_event
            if e.HasField("name_iid"):
                name = lookup(seq.names, e.name_iid, "event name")
            else:
                name = e.name if e.HasField("name") else None
            state = [lookup(seq.categories, c, "category") for c in e.category_iids]
            state += list(e.categories)
            args = {a.name: a.string_value for a in e.debug_annotations}
            events.append((p.timestamp, index, e.track_uuid, e.type, name,
                           state[0] if state else None,
                           list(e.flow_ids), list(e.terminating_flow_ids), args))
        elif kind == "perf_sample":
            s = p.perf_sample
            frames = []
            if s.HasField("callstack_iid"):
                cs = lookup(seq.callstacks, s.callstack_iid, "callstack")
                for fid in cs.frame_ids if cs else []:
                    fr = lookup(seq.frames, fid, "frame")
                    if fr is None:
                        continue
                    if fr.mapping_id and fr.mapping_id not in seq.mappings:
                        errors.append(f"packet {index}: unknown mapping iid {fr.mapping_id}")
                    frames.append(lookup(seq.functions, fr.function_name_id, "function name"))
            samples.append({
                "ts": p.timestamp,
                "pid": s.pid,
                "tid": s.tid,
                "cpu_mode": pb.Profiling.CpuMode.Name(s.cpu_mode),
                "depth": len(frames),
                "leaf": frames[-1] if frames else None,
            })

    # The trace processor sorts by timestamp and keeps the file's order between equal ones.
    events.sort(key=lambda ev: (ev[0], ev[1]))
    stacks = {}
    flows = {}
    T = pb.TrackEvent
    for ts, index, track, typ, name, state, flow_ids, terminating, args in events:
        thread = threads.get(track)
        if thread is None:
            errors.append(f"packet {index}: event on unknown track {track}")
            continue
        # As the trace processor does: an id not in flight starts a flow (else it is a step),
        # and a terminating id ends a flow in flight (else it is ignored).
        for f in flow_ids:
            flow = flows.get(f)
            if flow is None or "to" in flow:
                flows[f] = {"from": {"tid": thread["tid"], "ts": ts}}
            else:
                flow.setdefault("steps", []).append({"tid": thread["tid"], "ts": ts})
        for f in terminating:
            flow = flows.get(f)
            if flow is None or "to" in flow:
                errors.append(f"packet {index}: flow {f} ends before it starts (ignored)")
            else:
                flow["to"] = {"tid": thread["tid"], "ts": ts}
        stack = stacks.setdefault(track, [])
        if typ == T.TYPE_SLICE_BEGIN:
            stack.append((ts, name, state, len(stack), args))
        elif typ == T.TYPE_SLICE_END:
            if not stack:
                errors.append(f"packet {index}: SLICE_END without a SLICE_BEGIN")
                continue
            start, name, state, depth, begin_args = stack.pop()
            thread["slices"].append({"start": start, "dur": ts - start, "name": name,
                                     "state": state, "depth": depth, "args": begin_args})
        elif typ == T.TYPE_INSTANT:
            thread["instants"].append({"ts": ts, "name": name, "state": state,
                                       "depth": len(stack)})
        else:
            errors.append(f"packet {index}: event type {typ}")
    for track, stack in stacks.items():
        if stack:
            errors.append(f"track {track}: {len(stack)} slice(s) never end")
    for thread in threads.values():
        thread["slices"].sort(key=lambda s: (s["start"], s["depth"]))

    summary = {
        "packets": len(trace.packet),
        "sequences": sorted(sequences),
        "skipped_without_incremental_state": skipped,
        "clock": clock,
        "processes": [{"pid": pid, "name": name} for pid, name in sorted(processes.items())],
        "threads": sorted(threads.values(), key=lambda t: t["tid"]),
        "flows": sum(1 for f in flows.values() if "from" in f and "to" in f),
        "flow_list": [dict(id=i, **f) for i, f in sorted(flows.items())],
        "samples": len(samples),
        "sample_list": samples,
        "errors": errors,
    }
    json.dump(summary, sys.stdout, indent=1, ensure_ascii=False)
    print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: perfetto_decode.py TRACE", file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1])
