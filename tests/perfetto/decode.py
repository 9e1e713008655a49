#!/usr/bin/env python3
"""Decodes a Perfetto trace with the descriptors of Perfetto's own schema (the PyPI
`perfetto` package's perfetto_trace_pb2, no network) and prints, as one JSON document, what
tests compare with iosched-trace's own numbers:

- per process track (pid): its name and its requests, the top-level slices on its lane tracks,
  as [begin_ns, end_ns, name], in time order;
- per track: how its slices nest once sorted as the trace processor sorts them (by
  timestamp, ties in file order), and the errors a slice stack meets (an end without a
  begin, a slice still open at the end of the file);
- events on undeclared tracks, interned names that do not resolve, packets that need
  incremental state before it was cleared, flows without both ends.

Usage: decode.py TRACE.pftrace
"""

import json
import sys
from collections import defaultdict

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TrackEvent = pb.TrackEvent
SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())

    errors = []
    tracks = {}
    event_names = {}
    arg_names = {}
    cleared = set()
    events = defaultdict(list)  # track uuid -> [(ts, order, type, name, args)]
    counters = defaultdict(list)
    flows_out, flows_in = defaultdict(int), defaultdict(int)
    for order, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        if seq == 0:
            errors.append(f"packet {order}: no trusted_packet_sequence_id")
        if p.sequence_flags & SEQ_CLEARED:
            cleared.add(seq)
        if p.sequence_flags & SEQ_NEEDS and seq not in cleared:
            errors.append(f"packet {order}: needs incremental state before it was cleared")
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                event_names[n.iid] = n.name
            for n in p.interned_data.debug_annotation_names:
                arg_names[n.iid] = n.name
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            if t.uuid in tracks:
                errors.append(f"track {t.uuid} described twice")
            tracks[t.uuid] = {
                "name": t.name,
                "parent": t.parent_uuid if t.HasField("parent_uuid") else None,
                "pid": t.process.pid if t.HasField("process") else None,
                "process_name": t.process.process_name if t.HasField("process") else None,
                "counter": t.HasField("counter"),
            }
        if p.HasField("track_event"):
            e = p.track_event
            if not p.HasField("timestamp"):
                errors.append(f"packet {order}: track event without a timestamp")
            name = None
            if e.HasField("name_iid"):
                name = event_names.get(e.name_iid)
                if name is None:
                    errors.append(f"packet {order}: name_iid {e.name_iid} not interned")
            elif e.HasField("name"):
                name = e.name
            args = {}
            for a in e.debug_annotations:
                key = arg_names.get(a.name_iid, a.name)
                if key is None or key == "":
                    errors.append(f"packet {order}: annotation name {a.name_iid} not interned")
                for field in ("uint_value", "int_value", "string_value"):
                    if a.HasField(field):
                        args[key] = getattr(a, field)
            for f in e.flow_ids:
                flows_out[f] += 1
            for f in e.terminating_flow_ids:
                flows_in[f] += 1
            if e.type == TrackEvent.TYPE_COUNTER:
                v = e.double_counter_value if e.HasField("double_counter_value") else e.counter_value
                counters[e.track_uuid].append((p.timestamp, v))
            else:
                events[e.track_uuid].append((p.timestamp, order, e.type, name, args))

    for uuid in list(events) + list(counters):
        if uuid not in tracks:
            errors.append(f"events on undeclared track {uuid}")
    for uuid in counters:
        if uuid in tracks and not tracks[uuid]["counter"]:
            errors.append(f"counter values on track {uuid}, not a counter track")
    for f in set(flows_out) | set(flows_in):
        if flows_out[f] != 1 or flows_in[f] != 1:
            errors.append(f"flow {f}: {flows_out[f]} starts, {flows_in[f]} ends")

    def process_of(uuid):
        seen = set()
        while uuid is not None and uuid in tracks and uuid not in seen:
            seen.add(uuid)
            if tracks[uuid]["pid"] is not None:
                return uuid
            uuid = tracks[uuid]["parent"]
        return None

    processes = {}
    for uuid, t in tracks.items():
        if t["pid"] is not None:
            processes[uuid] = {"pid": t["pid"], "name": t["process_name"], "requests": [], "lanes": 0}
    max_depth = defaultdict(int)
    for uuid, evs in events.items():
        evs.sort(key=lambda e: (e[0], e[1]))  # the trace processor's order
        stack = []
        top = []
        for ts, order, typ, name, args in evs:
            if typ == TrackEvent.TYPE_SLICE_BEGIN:
                stack.append((ts, name))
                max_depth[uuid] = max(max_depth[uuid], len(stack))
            elif typ == TrackEvent.TYPE_SLICE_END:
                if not stack:
                    errors.append(f"track {uuid}: end at {ts} without a begin")
                    continue
                begin, bname = stack.pop()
                if not stack:
                    top.append([begin, ts, bname])
            elif typ == TrackEvent.TYPE_INSTANT:
                pass
            else:
                errors.append(f"track {uuid}: event type {typ}")
        if stack:
            errors.append(f"track {uuid}: {len(stack)} slices open at the end")
        proc = process_of(uuid)
        is_lane = tracks.get(uuid, {}).get("name", "").startswith("requests")
        if proc is not None and is_lane:
            processes[proc]["requests"].extend(top)
            processes[proc]["lanes"] += 1

    by_pid = {}
    for p in processes.values():
        p["requests"].sort()
        by_pid.setdefault(str(p["pid"]), p)
    out = {
        "packets": len(trace.packet),
        "tracks": len(tracks),
        "processes": by_pid,
        "max_depth": max(max_depth.values(), default=0),
        "counter_tracks": {tracks[u]["name"]: len(v) for u, v in counters.items() if u in tracks},
        "named_tracks": sorted({t["name"] for t in tracks.values() if t["name"]}),
        "slices_by_track_name": {},
        "flows": len(flows_out),
        "errors": errors,
    }
    for uuid, evs in events.items():
        name = tracks.get(uuid, {}).get("name") or "?"
        n = sum(1 for e in evs if e[2] == TrackEvent.TYPE_SLICE_BEGIN)
        out["slices_by_track_name"][name] = out["slices_by_track_name"].get(name, 0) + n
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1])
