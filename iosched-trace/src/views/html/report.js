// report --html: draws the page from the JSON in #data (written by views/html). Our own code,
// no library: SVG for the timeline (one <g class="lane"> per process, which the browser test
// counts), canvas for the dense plots. Every plot is drawn from binned data resampled to the
// screen's columns, so drawing costs the screen's width, not the trace's length.
// What was drawn is recorded in data attributes of <body> for the browser test.
"use strict";
(function () {
  const errors = [];
  window.addEventListener("error", (e) => {
    errors.push(String(e.message || e));
    document.body.dataset.errors = String(errors.length);
    const pre = document.getElementById("errors");
    if (pre) pre.textContent = errors.join("\n");
  });

  const D = JSON.parse(document.getElementById("data").textContent);
  const R = D.report;
  const W_NS = D.axis.width_ns;
  // replay --html's predicted runs share the time view (ns after each run's start).
  const SPAN = Math.max(1, D.axis.bins * W_NS, ...(D.predicted || []).map((p) => p.axis.bins * p.axis.width_ns));
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939", "#8c6d31", "#843c39"];
  const colorOf = {};
  D.lanes.forEach((l, i) => { colorOf[l.pid] = PALETTE[i % PALETTE.length]; });
  const color = (pid) => colorOf[pid] || "#999";
  const nameOf = {};
  D.lanes.forEach((l) => { nameOf[l.pid] = l.comm + " (" + l.pid + ")"; });
  const who = (pid) => nameOf[pid] || (pid === 0 ? "[none]" : "pid " + pid);
  const drawn = { plots: 0 };

  // --- formatting ---
  function fmtNs(ns) {
    if (!isFinite(ns)) return "-";
    const a = Math.abs(ns);
    const [v, u] = a < 1e3 ? [ns, "ns"] : a < 1e6 ? [ns / 1e3, "µs"] : a < 1e9 ? [ns / 1e6, "ms"] : [ns / 1e9, "s"];
    return (u === "ns" ? v.toFixed(0) : v.toPrecision(3)) + " " + u;
  }
  function fmtBytes(b) {
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toFixed(1)) + " " + u[i];
  }
  const fmtNum = (v, d) => (v === undefined || v === null) ? "-" : Number(v).toFixed(d === undefined ? 0 : d);
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const SVGNS = "http://www.w3.org/2000/svg";
  function sv(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }

  // --- the shared time view: [v0, v1) ns after the axis start ---
  const view = { v0: 0, v1: SPAN };
  const redraws = [];
  function setView(v0, v1) {
    const minSpan = Math.max(1000, W_NS / 64);
    if (v1 - v0 < minSpan) { const m = (v0 + v1) / 2; v0 = m - minSpan / 2; v1 = m + minSpan / 2; }
    const span = v1 - v0;
    if (v0 < 0) { v0 = 0; v1 = span; }
    if (v1 > SPAN) { v1 = SPAN; v0 = Math.max(0, SPAN - span); }
    view.v0 = v0; view.v1 = v1;
    document.getElementById("viewinfo").textContent =
      "showing " + fmtNs(v0) + " to " + fmtNs(v1) + " of " + fmtNs(SPAN) +
      " (bins of " + fmtNs(W_NS) + (D.exact ? "; exact bios when zoomed in" : "") + ")";
    for (const f of redraws) f();
  }
  // Wheel zooms around the pointer, drag pans, double click shows everything.
  function zoomable(node, leftPad, plotWidth) {
    node.addEventListener("wheel", (e) => {
      e.preventDefault();
      const r = node.getBoundingClientRect();
      const f = Math.min(1, Math.max(0, (e.clientX - r.left - leftPad) / plotWidth()));
      const t = view.v0 + f * (view.v1 - view.v0);
      const k = e.deltaY > 0 ? 1.25 : 0.8;
      setView(t - (t - view.v0) * k, t + (view.v1 - t) * k);
    }, { passive: false });
    let drag = null;
    node.addEventListener("mousedown", (e) => { drag = { x: e.clientX, v0: view.v0, v1: view.v1 }; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (e) => {
      if (!drag) return;
      const dt = (e.clientX - drag.x) / plotWidth() * (drag.v1 - drag.v0);
      setView(drag.v0 - dt, drag.v1 - dt);
    });
    node.addEventListener("dblclick", () => setView(0, SPAN));
  }

  // Per screen column of [v0, v1): the mean rate (value per ns) of a binned series, by
  // overlap, and whether any non-zero bin touched the column.
  function resample(arr, cols, v0, v1, width) {
    const w = width || W_NS;
    const out = new Float64Array(cols), touched = new Uint8Array(cols);
    const colNs = (v1 - v0) / cols;
    const b0 = Math.max(0, Math.floor(v0 / w)), b1 = Math.min(arr.length, Math.ceil(v1 / w));
    for (let b = b0; b < b1; b++) {
      const v = arr[b];
      if (!v) continue;
      const t0 = Math.max(b * w, v0), t1 = Math.min((b + 1) * w, v1);
      if (t1 <= t0) continue;
      const rate = v / w;
      let c = Math.floor((t0 - v0) / colNs);
      for (; c < cols; c++) {
        const c0 = v0 + c * colNs, c1 = c0 + colNs;
        if (c0 >= t1) break;
        out[c] += rate * (Math.min(c1, t1) - Math.max(c0, t0));
        touched[c] = 1;
      }
    }
    for (let c = 0; c < cols; c++) out[c] /= colNs;
    return { v: out, touched };
  }
  // Per column: the maximum of the bins overlapping it.
  function resampleMax(arr, cols, v0, v1) {
    const out = new Float64Array(cols);
    const colNs = (v1 - v0) / cols;
    for (let c = 0; c < cols; c++) {
      const b0 = Math.max(0, Math.floor((v0 + c * colNs) / W_NS));
      const b1 = Math.min(arr.length - 1, Math.floor((v0 + (c + 1) * colNs - 1e-9) / W_NS));
      let m = 0;
      for (let b = b0; b <= b1; b++) m = Math.max(m, arr[b]);
      out[c] = m;
    }
    return out;
  }
  // Per column: mean bios in the scheduler and in the device, from the exact bios of `pid`.
  function exactOccupancy(pid, cols, v0, v1) {
    const s = new Float64Array(cols), d = new Float64Array(cols), touched = new Uint8Array(cols);
    const colNs = (v1 - v0) / cols;
    const add = (arr, a, b) => {
      if (b <= v0 || a >= v1) return;
      const a1 = Math.max(a, v0), b1 = Math.max(Math.min(b, v1), a1);
      const c0 = Math.floor((a1 - v0) / colNs), c1 = Math.min(cols - 1, Math.floor((b1 - v0) / colNs));
      for (let c = c0; c <= c1; c++) {
        const lo = v0 + c * colNs;
        arr[c] += Math.max(0, Math.min(b1, lo + colNs) - Math.max(a1, lo)) / colNs;
        touched[c] = 1;
      }
    };
    const ex = D.exact;
    for (let i = 0; i < ex.length; i += 4) {
      if (ex[i] !== pid) continue;
      const q = ex[i + 1], dd = ex[i + 2] < 0 ? ex[i + 3] : ex[i + 2], c = ex[i + 3];
      add(s, q, dd);
      add(d, dd, c);
    }
    return { s, d, touched };
  }

  // --- the timeline (SVG) ---
  const LABEL = 170, LANE_H = 30, DEV_H = 22, AXIS_H = 22;
  function timeTicks(v0, v1, n) {
    const span = v1 - v0, raw = span / n;
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    const out = [];
    for (let t = Math.ceil(v0 / step) * step; t <= v1; t += step) out.push(t);
    return out;
  }
  function drawTimeline() {
    const host = document.getElementById("timeline");
    const width = Math.max(400, host.clientWidth - 2);
    const plotW = width - LABEL - 10;
    const cols = Math.max(50, Math.floor(plotW));
    const devs = D.devices;
    // explain --html: a row per finding that cites times, under the devices.
    const ev = (D.model && D.model.evidence) || [];
    const EV_H = 16;
    const height = AXIS_H + devs.length * DEV_H + ev.length * EV_H + D.lanes.length * LANE_H + 6;
    const svg = sv("svg", { width, height, class: "timeline" });
    const { v0, v1 } = view;
    const X = (t) => LABEL + (t - v0) / (v1 - v0) * plotW;
    // Axis.
    for (const t of timeTicks(v0, v1, 8)) {
      svg.appendChild(sv("line", { x1: X(t), x2: X(t), y1: AXIS_H - 4, y2: height, class: "grid" }));
      const tx = sv("text", { x: X(t), y: AXIS_H - 8, class: "tick", "text-anchor": "middle" });
      tx.textContent = fmtNs(t);
      svg.appendChild(tx);
    }
    let y = AXIS_H;
    let idleCount = 0;
    // Devices: service slices (who the device served) and idling waste.
    for (const dv of devs) {
      const g = sv("g", { class: "device", "data-dev": dv.name });
      const lab = sv("text", { x: 4, y: y + DEV_H - 7, class: "label" });
      lab.textContent = dv.name + " slices / idle";
      g.appendChild(lab);
      const owners = dv.slices.map((s) => ({ owner: s.owner, r: resample(s.ns, cols, v0, v1).v }));
      const paths = {};
      for (let c = 0; c < cols; c++) {
        let best = null, bv = 0;
        for (const o of owners) if (o.r[c] > bv) { bv = o.r[c]; best = o.owner; }
        if (best === null) continue;
        (paths[best] = paths[best] || []).push("M" + (LABEL + c * plotW / cols).toFixed(1) + "," + (y + 3) + "h" + (plotW / cols).toFixed(2) + "v" + (DEV_H / 2 - 3) + "h-" + (plotW / cols).toFixed(2) + "z");
      }
      for (const o in paths) {
        const p = sv("path", { d: paths[o].join(""), fill: color(Number(o)), class: "slice" });
        const t = sv("title"); t.textContent = "slices of " + who(Number(o)); p.appendChild(t);
        g.appendChild(p);
      }
      // Idle-with-pending intervals: one rect per screen column at most (merged), each
      // saying whom the device idled for and who waited.
      let last = null;
      const ivs = D.idle.filter((iv) => iv.dev === dv.dev).sort((a, b) => a.start - b.start);
      for (const iv of ivs) {
        if (iv.start + iv.duration <= v0 || iv.start >= v1) continue;
        const x0 = Math.max(LABEL, X(iv.start)), x1 = Math.max(x0 + 1, Math.min(LABEL + plotW, X(iv.start + iv.duration)));
        if (last && x0 < last.x1 + 1 && last.after === iv.after_pid) {
          last.x1 = Math.max(last.x1, x1); last.n++; last.ns += iv.duration;
          iv.waiting_pids.forEach((p) => last.waiting.add(p));
          continue;
        }
        last = { x0, x1, after: iv.after_pid, waiting: new Set(iv.waiting_pids), n: 1, ns: iv.duration, start: iv.start };
        (dv._rects = dv._rects || []).push(last);
      }
      for (const r of dv._rects || []) {
        idleCount += r.n;
        const waiting = [...r.waiting];
        const rect = sv("rect", { x: r.x0, y: y + DEV_H / 2, width: r.x1 - r.x0, height: DEV_H / 2 - 2, class: "idle",
          "data-after": r.after, "data-waiting": waiting.join(","), "data-count": r.n });
        const t = sv("title");
        t.textContent = (r.n > 1 ? r.n + " idle intervals, " : "idle ") + fmtNs(r.ns) + " at " + fmtNs(r.start) +
          ": idled for " + who(r.after) + "; waiting: " + waiting.map(who).join(", ");
        rect.appendChild(t);
        g.appendChild(rect);
        // Across the lanes: a band over the whole timeline, and marks on the lanes of the
        // process idled for (solid) and those that waited (hatched).
        const lanes0 = AXIS_H + devs.length * DEV_H + ev.length * EV_H;
        svg.appendChild(sv("rect", { x: r.x0, y: lanes0, width: r.x1 - r.x0, height: D.lanes.length * LANE_H, class: "idleband" }));
        D.lanes.forEach((l, i) => {
          const ly = lanes0 + i * LANE_H;
          if (l.pid === r.after) svg.appendChild(sv("rect", { x: r.x0, y: ly + 1, width: r.x1 - r.x0, height: 4, class: "idledfor" }));
          else if (r.waiting.has(l.pid)) svg.appendChild(sv("rect", { x: r.x0, y: ly + 1, width: r.x1 - r.x0, height: 4, class: "waited" }));
        });
      }
      dv._rects = null;
      svg.appendChild(g);
      y += DEV_H;
    }
    // The findings' evidence: the intervals each cites, and the idle intervals after the
    // processes it names.
    let evCount = 0;
    for (const f of ev) {
      const g = sv("g", { class: "evidence", "data-finding": f.finding + 1 });
      const lab = sv("text", { x: 4, y: y + EV_H - 4, class: "label" });
      lab.textContent = "finding " + (f.finding + 1) + " evidence";
      g.appendChild(lab);
      const marks = f.spans.map(([a, b, what]) => ({ a: a - D.axis.start_ns, b: b - D.axis.start_ns, what }));
      for (const iv of D.idle) {
        if (f.idle_after_pids.includes(iv.after_pid)) marks.push({ a: iv.start, b: iv.start + iv.duration, what: "idle " + fmtNs(iv.duration) + " after " + who(iv.after_pid) });
      }
      for (const m of marks) {
        if (m.b <= v0 || m.a >= v1) continue;
        const x0 = Math.max(LABEL, X(m.a)), x1 = Math.max(x0 + 1, Math.min(LABEL + plotW, X(m.b)));
        const rect = sv("rect", { x: x0, y: y + 2, width: x1 - x0, height: EV_H - 4, class: "evmark" });
        const t = sv("title"); t.textContent = "finding " + (f.finding + 1) + ": " + m.what + " at " + fmtNs(m.a); rect.appendChild(t);
        g.appendChild(rect);
        evCount++;
      }
      svg.appendChild(g);
      y += EV_H;
    }
    document.body.dataset.evidenceMarks = String(evCount);
    // One lane per process: time in the scheduler (Q->D, top half) and in the device (D->C,
    // bottom half); a bar's height is the mean number of its bios there over the column,
    // at least one pixel where any bio was.
    const useExact = D.exact && (v1 - v0) / cols < W_NS;
    for (const l of D.lanes) {
      const g = sv("g", { class: "lane", "data-pid": l.pid });
      const lab = sv("text", { x: 4, y: y + LANE_H / 2 + 4, class: "label", fill: color(l.pid) });
      lab.textContent = l.comm + " (" + l.pid + ")";
      g.appendChild(lab);
      let s, d, touched;
      if (useExact) {
        ({ s, d, touched } = exactOccupancy(l.pid, cols, v0, v1));
      } else {
        const rs = resample(l.sched_ns, cols, v0, v1), rd = resample(l.device_ns, cols, v0, v1), rq = resample(l.started, cols, v0, v1);
        s = rs.v; d = rd.v; touched = rs.touched.map((t, i) => t | rd.touched[i] | rq.touched[i]);
      }
      let max = 0;
      for (let c = 0; c < cols; c++) max = Math.max(max, s[c], d[c]);
      const half = LANE_H / 2 - 2;
      const part = (vals, top, cls) => {
        const segs = [];
        for (let c = 0; c < cols; c++) {
          if (!touched[c] && !vals[c]) continue;
          const h = Math.max(touched[c] && vals[c] >= 0 ? 1 : 0, max > 0 ? vals[c] / max * half : 0);
          if (h <= 0) continue;
          const x = (LABEL + c * plotW / cols).toFixed(1);
          segs.push(top ? "M" + x + "," + (y + LANE_H / 2 - h).toFixed(1) + "h" + (plotW / cols).toFixed(2) + "v" + h.toFixed(1) + "h-" + (plotW / cols).toFixed(2) + "z"
            : "M" + x + "," + (y + LANE_H / 2) + "h" + (plotW / cols).toFixed(2) + "v" + h.toFixed(1) + "h-" + (plotW / cols).toFixed(2) + "z");
        }
        const p = sv("path", { d: segs.join(""), class: cls });
        const t = sv("title"); t.textContent = l.comm + " (" + l.pid + "): " + (cls === "sched" ? "in the scheduler (Q->D)" : "in the device (D->C)");
        p.appendChild(t);
        g.appendChild(p);
      };
      part(s, true, "sched");
      part(d, false, "dev");
      g.appendChild(sv("line", { x1: LABEL, x2: LABEL + plotW, y1: y + LANE_H - 0.5, y2: y + LANE_H - 0.5, class: "sep" }));
      svg.appendChild(g);
      y += LANE_H;
    }
    host.replaceChildren(svg);
    document.body.dataset.lanes = String(svg.querySelectorAll("g.lane").length);
    document.body.dataset.idleIntervals = String(idleCount);
  }

  // replay --html: the recorded run's lanes and each predicted run's, one compact timeline
  // each (binned: time in the scheduler above the line, in the device below; the device's
  // slices on top), on the shared time view.
  function drawPredicted() {
    const host = document.getElementById("predicted");
    if (!host) return;
    const runs = [{ label: "recorded", axis: D.axis, lanes: D.lanes, devices: D.devices }, ...(D.predicted || [])];
    const width = Math.max(400, host.clientWidth - 2), plotW = width - LABEL - 10;
    const cols = Math.max(50, Math.floor(plotW)), H = 18, { v0, v1 } = view;
    host.replaceChildren();
    let lanesDrawn = 0;
    for (const run of runs) {
      const w = run.axis.width_ns;
      const height = 16 + run.devices.length * 8 + run.lanes.length * H + 4;
      const svg = sv("svg", { width, height, class: "timeline predicted", "data-run": run.label });
      const title = sv("text", { x: 4, y: 12, class: "label" });
      title.textContent = run.label + " (" + fmtNs(run.axis.bins * w) + ")";
      svg.appendChild(title);
      let y = 16;
      for (const dv of run.devices) {
        const owners = dv.slices.map((sl) => ({ owner: sl.owner, r: resample(sl.ns, cols, v0, v1, w).v }));
        for (let c = 0; c < cols; c++) {
          let best = null, bv = 0;
          for (const o of owners) if (o.r[c] > bv) { bv = o.r[c]; best = o.owner; }
          if (best !== null) svg.appendChild(sv("rect", { x: LABEL + c * plotW / cols, y, width: plotW / cols + 0.2, height: 6, fill: color(best) }));
        }
        y += 8;
      }
      for (const l of run.lanes) {
        const g = sv("g", { class: "plane", "data-pid": l.pid });
        const lab = sv("text", { x: 4, y: y + H / 2 + 4, class: "label", fill: color(l.pid) });
        lab.textContent = l.comm + " (" + l.pid + ")";
        g.appendChild(lab);
        const rs = resample(l.sched_ns, cols, v0, v1, w).v, rd = resample(l.device_ns, cols, v0, v1, w).v;
        let max = 0;
        for (let c = 0; c < cols; c++) max = Math.max(max, rs[c], rd[c]);
        for (const [vals, top, cls] of [[rs, true, "sched"], [rd, false, "dev"]]) {
          const segs = [];
          for (let c = 0; c < cols; c++) {
            if (!vals[c]) continue;
            const h = Math.max(1, vals[c] / max * (H / 2 - 1));
            const x = (LABEL + c * plotW / cols).toFixed(1), cw = (plotW / cols).toFixed(2);
            segs.push("M" + x + "," + (top ? (y + H / 2 - h).toFixed(1) : y + H / 2) + "h" + cw + "v" + h.toFixed(1) + "h-" + cw + "z");
          }
          g.appendChild(sv("path", { d: segs.join(""), class: cls }));
        }
        svg.appendChild(g);
        lanesDrawn++;
        y += H;
      }
      host.appendChild(svg);
    }
    document.body.dataset.predictedLanes = String(lanesDrawn);
  }

  // --- canvas plots ---
  function canvas(id, h) {
    const c = document.getElementById(id);
    const w = Math.max(300, c.parentElement.clientWidth - 2);
    const dpr = window.devicePixelRatio || 1;
    c.width = w * dpr; c.height = h * dpr; c.style.width = w + "px"; c.style.height = h + "px";
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.font = "11px sans-serif";
    return { c, ctx, w, h };
  }
  const PAD = { l: 60, r: 10, t: 32, b: 22 };
  // Axes: x from an array of [value, label] ticks, y linear or log.
  function frame(ctx, w, h, title, xticks, yr, ylog, yfmt) {
    ctx.clearRect(0, 0, w, h);
    ctx.fillStyle = "#222"; ctx.fillText(title, PAD.l, 12);
    ctx.strokeStyle = "#ccc"; ctx.lineWidth = 1;
    ctx.strokeRect(PAD.l, PAD.t, w - PAD.l - PAD.r, h - PAD.t - PAD.b);
    ctx.fillStyle = "#555";
    for (const [x, lab] of xticks) {
      ctx.beginPath(); ctx.moveTo(x, PAD.t); ctx.lineTo(x, h - PAD.b); ctx.strokeStyle = "#eee"; ctx.stroke();
      ctx.fillText(lab, x - ctx.measureText(lab).width / 2, h - 8);
    }
    const Y = yScale(yr, ylog, h);
    const yt = ylog ? logTicks(yr[0], yr[1]) : linTicks(yr[0], yr[1]);
    for (const v of yt) {
      const yy = Y(v);
      ctx.beginPath(); ctx.moveTo(PAD.l, yy); ctx.lineTo(w - PAD.r, yy); ctx.strokeStyle = "#eee"; ctx.stroke();
      const lab = yfmt(v);
      ctx.fillText(lab, PAD.l - 4 - ctx.measureText(lab).width, yy + 4);
    }
    return Y;
  }
  function yScale(yr, ylog, h) {
    const [a, b] = yr, H = h - PAD.t - PAD.b;
    if (ylog) { const la = Math.log10(a), lb = Math.log10(b); return (v) => PAD.t + H - (Math.log10(Math.max(v, a)) - la) / (lb - la || 1) * H; }
    return (v) => PAD.t + H - (v - a) / ((b - a) || 1) * H;
  }
  function linTicks(a, b) {
    const raw = (b - a) / 4 || 1, p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(a / step) * step; v <= b + 1e-9; v += step) out.push(v);
    return out;
  }
  function logTicks(a, b) {
    // Powers of ten, and their doubles and fives where the range spans few decades.
    const few = Math.log10(b / a) < 3;
    const out = [];
    for (let e = Math.floor(Math.log10(a)); e <= Math.ceil(Math.log10(b)); e++) {
      for (const m of few ? [1, 2, 5] : [1]) { const v = m * Math.pow(10, e); if (v >= a && v <= b) out.push(v); }
    }
    return out.length ? out : [a, b];
  }
  function fmtSI(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toPrecision(3) + "G";
    if (a >= 1e6) return (v / 1e6).toPrecision(3) + "M";
    if (a >= 1e3) return (v / 1e3).toPrecision(3) + "k";
    return a >= 1 || v === 0 ? String(Number(v.toPrecision(3))) : v.toPrecision(2);
  }
  function timeXTicks(w) {
    const pw = w - PAD.l - PAD.r;
    return timeTicks(view.v0, view.v1, 7).map((t) => [PAD.l + (t - view.v0) / (view.v1 - view.v0) * pw, fmtNs(t)]);
  }
  function line(ctx, xs, ys, Y, col, dash, width) {
    ctx.beginPath();
    ctx.setLineDash(dash ? [4, 3] : []);
    ctx.strokeStyle = col; ctx.lineWidth = width || 1.2;
    let started = false;
    for (let i = 0; i < xs.length; i++) {
      if (!isFinite(ys[i])) { started = false; continue; }
      if (!started) { ctx.moveTo(xs[i], Y(ys[i])); started = true; } else ctx.lineTo(xs[i], Y(ys[i]));
    }
    ctx.stroke();
    ctx.setLineDash([]);
  }
  // A time plot of several per-column series.
  // `step` px per column: rates of sparse completions are read better over wider columns.
  function timePlot(id, title, series, yfmt, step) {
    const { ctx, w, h } = canvas(id, 170);
    const pw = Math.floor(w - PAD.l - PAD.r), st = step || 1;
    const cols = Math.max(20, Math.floor(pw / st));
    const xs = Array.from({ length: cols }, (_, c) => PAD.l + (c + 0.5) * pw / cols);
    const vals = series.map((s) => s.f(cols));
    let max = 0;
    for (const v of vals) for (const x of v) if (isFinite(x)) max = Math.max(max, x);
    const Y = frame(ctx, w, h, title, timeXTicks(w), [0, max * 1.05 || 1], false, yfmt);
    series.forEach((s, i) => line(ctx, xs, vals[i], Y, s.color, s.dash, s.width));
    legend(ctx, w, series);
    drawn.plots++;
  }
  function legend(ctx, w, series) {
    let x = w - PAD.r - 4;
    for (let i = series.length - 1; i >= 0; i--) {
      const s = series[i], tw = ctx.measureText(s.name).width;
      x -= tw + 18;
      if (x < PAD.l) break;
      ctx.fillStyle = s.color; ctx.fillRect(x, 19, 10, 6);
      ctx.fillStyle = "#333"; ctx.fillText(s.name, x + 13, 26);
    }
  }
  function drawRates() {
    const { v0, v1 } = view;
    // The 8 processes with the most bytes each get a line (more would be a tangle), and
    // the total.
    const total = (l) => l.bytes.reduce((a, b) => a + b, 0);
    const top = [...D.lanes].sort((a, b) => total(b) - total(a)).slice(0, 8).sort((a, b) => a.pid - b.pid);
    const per = (key, k) => top.map((l) => ({ name: l.comm + " " + l.pid, color: color(l.pid), f: (cols) => resample(l[key], cols, v0, v1).v.map((x) => x * k) }));
    const more = D.lanes.length > top.length ? " (the " + top.length + " processes with the most bytes, and the total)" : "";
    const tot = (key, k) => ({ name: "total", color: "#000", width: 1.6, dash: true, f: (cols) => {
      const acc = new Float64Array(cols);
      for (const dv of D.devices) resample(dv[key], cols, v0, v1).v.forEach((x, i) => { acc[i] += x * k; });
      return acc;
    } });
    timePlot("tput", "throughput, MB/s (completions)" + more, [...per("bytes", 1e3), tot("bytes", 1e3)], fmtSI, 4);
    timePlot("iops", "IOPS (requests completed)" + more, [...per("requests", 1e9), tot("requests", 1e9)], fmtSI, 4);
    const depth = [];
    D.devices.forEach((dv, i) => {
      depth.push({ name: dv.name + " scheduler mean", color: PALETTE[(2 * i + 1) % PALETTE.length], f: (cols) => resample(dv.pending_area, cols, v0, v1).v });
      depth.push({ name: dv.name + " driver mean", color: PALETTE[(2 * i) % PALETTE.length], f: (cols) => resample(dv.driver_area, cols, v0, v1).v });
      depth.push({ name: "max", color: "#bbb", dash: true, f: (cols) => resampleMax(dv.max_pending, cols, v0, v1) });
    });
    timePlot("depth", "queue depth: waiting in the scheduler, in the driver", depth, fmtSI);
  }

  // Sector against time: dispatches, one cell per grid cell, coloured by the process most of
  // its dispatches came from; reads and writes apart.
  function drawSectors() {
    const g = D.sectors;
    for (const [id, cells, title] of [["sect-r", g.read, "reads: sector of each dispatch"], ["sect-w", g.write, "writes: sector of each dispatch"]]) {
      const { ctx, w, h } = canvas(id, 190);
      const pw = w - PAD.l - PAD.r, ph = h - PAD.t - PAD.b;
      let maxRow = 1, maxCount = 1;
      for (const arr of [g.read, g.write]) for (let i = 0; i < arr.length; i += 4) { maxRow = Math.max(maxRow, arr[i + 1] + 1); maxCount = Math.max(maxCount, arr[i + 2]); }
      const rowSectors = Math.pow(2, g.row_shift);
      const Y = frame(ctx, w, h, title + (cells.length ? "" : " (none)"), timeXTicks(w), [0, maxRow * rowSectors], false, (v) => fmtBytes(v * 512));
      const colNs = g.col_bins * W_NS, { v0, v1 } = view;
      for (let i = 0; i < cells.length; i += 4) {
        const t0 = cells[i] * colNs, t1 = t0 + colNs;
        if (t1 <= v0 || t0 >= v1) continue;
        const x0 = PAD.l + Math.max(0, (t0 - v0) / (v1 - v0)) * pw, x1 = PAD.l + Math.min(1, (t1 - v0) / (v1 - v0)) * pw;
        const r = cells[i + 1], a = 0.35 + 0.65 * Math.log(1 + cells[i + 2]) / Math.log(1 + maxCount);
        ctx.globalAlpha = a;
        ctx.fillStyle = color(cells[i + 3]);
        const y0 = Y((r + 1) * rowSectors), y1 = Y(r * rowSectors);
        // At least 2 px: a single dispatch stays visible.
        ctx.fillRect(x0, y0, Math.max(2, x1 - x0), Math.max(2, y1 - y0));
      }
      ctx.globalAlpha = 1;
      drawn.plots++;
    }
  }

  // Latency: histograms (log bins) and percentile curves, per process and per device.
  function drawLatency() {
    const host = document.getElementById("latency");
    host.replaceChildren();
    for (const stage of ["q2d", "d2c", "q2c"]) {
      // Each device, and the 8 processes with the most samples (more would be a tangle).
      const all = D.latency.filter((s) => s.stage === stage && s.count > 0);
      const procs = all.filter((s) => s.scope === "process").sort((a, b) => b.count - a.count).slice(0, 8).sort((a, b) => a.pid - b.pid);
      const ser = [...all.filter((s) => s.scope === "device"), ...procs];
      const row = el("div", { class: "latrow" });
      const hc = el("canvas", { id: "hist-" + stage }), pc = el("canvas", { id: "pct-" + stage });
      const hd = el("div", { class: "half" }), pd = el("div", { class: "half" });
      hd.appendChild(hc); pd.appendChild(pc); row.appendChild(hd); row.appendChild(pd); host.appendChild(row);
      const label = stage.toUpperCase();
      const devName = (dev) => (D.devices.find((d) => d.dev === dev) || { name: dev }).name;
      const sc = (s) => s.scope === "device" ? { name: devName(s.name), color: "#000", dash: true } : { name: s.name, color: color(s.pid), dash: false };
      let lo = Infinity, hi = 1, cmax = 1;
      for (const s of ser) for (let i = 0; i < s.bins.length; i += 2) { lo = Math.min(lo, Math.max(1, s.bins[i])); hi = Math.max(hi, s.bins[i] * 1.1 + 1); cmax = Math.max(cmax, s.bins[i + 1] / s.count); }
      if (!isFinite(lo)) lo = 1;
      // A decade at least, so one value alone still shows.
      if (hi / lo < 10) { const m = Math.sqrt(hi * lo); lo = Math.max(1, m / 4); hi = m * 4; }
      // Histogram: share of samples per log bin.
      {
        const { ctx, w, h } = canvas(hc.id, 190);
        const pw = w - PAD.l - PAD.r;
        const X = (v) => PAD.l + (Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo) || 1) * pw;
        const Y = frame(ctx, w, h, label + " histogram (share of samples; log time)", logTicks(lo, hi).map((v) => [X(v), fmtNs(v)]), [0, cmax * 1.05], false, (v) => (100 * v).toFixed(0) + "%");
        for (const s of ser) {
          const xs = [], ys = [];
          for (let i = 0; i < s.bins.length; i += 2) { xs.push(X(s.bins[i])); ys.push(s.bins[i + 1] / s.count); }
          const st = sc(s);
          line(ctx, xs, ys, Y, st.color, st.dash);
          ctx.fillStyle = st.color;
          xs.forEach((x, i) => ctx.fillRect(x - 1.5, Y(ys[i]) - 1.5, 3, 3));
        }
        legend(ctx, w, ser.map(sc));
        drawn.plots++;
      }
      // Percentiles: latency (log) against the percentile on a "nines" scale.
      {
        const { ctx, w, h } = canvas(pc.id, 190);
        const pw = w - PAD.l - PAD.r, nines = (p) => -Math.log10(Math.max(1e-4, 1 - p / 100));
        const X = (p) => PAD.l + nines(p) / 4 * pw;
        const Y = frame(ctx, w, h, label + " percentiles (log time)", [[X(0), "0"], [X(90), "90"], [X(99), "99"], [X(99.9), "99.9"], [X(99.99), "99.99"]], [lo, hi], true, fmtNs);
        for (const s of ser) {
          const xs = s.percentiles.map((p) => X(p[0])), ys = s.percentiles.map((p) => Math.max(p[1], lo));
          const st = sc(s);
          line(ctx, xs, ys, Y, st.color, st.dash);
        }
        drawn.plots++;
      }
    }
  }

  // --- the report's tables ---
  function table(title, head, rows) {
    const wrap = el("div", { class: "tbl" });
    wrap.appendChild(el("h3", {}, title));
    const t = el("table");
    const tr = el("tr");
    head.forEach((h) => tr.appendChild(el("th", {}, h)));
    t.appendChild(tr);
    for (const r of rows) {
      const row = el("tr");
      r.forEach((c) => row.appendChild(el("td", {}, String(c))));
      t.appendChild(row);
    }
    if (!rows.length) { const row = el("tr"); row.appendChild(el("td", { colspan: head.length }, "(none)")); t.appendChild(row); }
    wrap.appendChild(t);
    return wrap;
  }
  function drawTables() {
    const host = document.getElementById("tables");
    const L = (lat, st, q) => lat && lat[st] ? fmtNs(lat[st][q]) : "-";
    host.appendChild(table("Devices", ["device", "scheduler", "read req", "write req", "IOPS", "MB/s", "merges back/front/rq", "#Q/#D", "sched depth mean/max", "driver depth mean/max", "util %", "idle w/ pending", "intervals", "idle empty"],
      R.devices.map((d) => [d.name, d.scheduler || "?", d.read.requests, d.write.requests, fmtNum(d.read.iops + d.write.iops + d.other.iops), fmtNum(d.read.mb_per_s + d.write.mb_per_s, 2),
        d.merges.back + "/" + d.merges.front + "/" + d.merges.request, fmtNum(d.merge_ratio, 2), fmtNum(d.queue_depth.scheduler_mean, 2) + "/" + d.queue_depth.scheduler_max,
        fmtNum(d.queue_depth.driver_mean, 2) + "/" + d.queue_depth.driver_max, fmtNum(d.util_pct, 1), fmtNs(d.idle_with_pending_ns) + " (" + fmtNum(d.idle_with_pending_pct, 1) + "%)", d.idle_with_pending_intervals, fmtNs(d.idle_empty_ns)])));
    for (const d of R.devices) {
      const order = ["q2q", "q2g", "g2i", "q2m", "i2d", "m2d", "d2c", "q2c", "q2d"].filter((s) => d.latency[s]);
      host.appendChild(table("Stages, " + d.name, ["stage", "count", "mean", "p50", "p90", "p99", "p99.9", "max"],
        order.map((s) => { const x = d.latency[s]; return [s.toUpperCase(), x.count, fmtNs(x.mean_ns), fmtNs(x.p50_ns), fmtNs(x.p90_ns), fmtNs(x.p99_ns), fmtNs(x.p999_ns), fmtNs(x.max_ns)]; })));
    }
    host.appendChild(table("Processes (by submitter)", ["pid", "comm", "requests", "bytes", "IOPS", "MB/s", "seq %", "Q2D p50/p99", "D2C p50/p99", "Q2C p50/p99", "idle caused", "idle suffered"],
      R.processes.map((p) => [p.pid, p.comm, p.requests, fmtBytes(p.bytes), fmtNum(p.iops), fmtNum(p.mb_per_s, 2), fmtNum(p.sequential_pct, 1),
        L(p.latency, "q2d", "p50_ns") + " / " + L(p.latency, "q2d", "p99_ns"), L(p.latency, "d2c", "p50_ns") + " / " + L(p.latency, "d2c", "p99_ns"),
        L(p.latency, "q2c", "p50_ns") + " / " + L(p.latency, "q2c", "p99_ns"), fmtNs(p.idle_waste_caused_ns), fmtNs(p.idle_waste_suffered_ns)])));
    host.appendChild(table("Idling waste: longest intervals (device idle while I/O waited; at least " + fmtNs(R.idling.min_interval_ns) + ")", ["device", "at", "length", "idled for", "waiting"],
      R.idling.top_intervals.map((i) => [i.device, i.start_rel_s.toFixed(6) + " s", fmtNs(i.duration_ns), i.after_comm + " (" + i.after_pid + ")", i.waiting.join(", ")])));
    host.appendChild(table("Idling waste by pair", ["idled for", "waiting", "total"],
      R.idling.pairs.map((p) => [p.after_comm + " (" + p.after_pid + ")", p.waiting_comm + " (" + p.waiting_pid + ")", fmtNs(p.total_ns)])));
    host.appendChild(table("Service slices (runs of dispatches per process)", ["pid", "comm", "slices", "length p50", "length max", "requests p50", "switch seek mean (sectors)", "switch gap p50"],
      R.processes.filter((p) => p.slices).map((p) => [p.pid, p.comm, p.slices.slices, fmtNs(p.slices.length_ns.p50_ns), fmtNs(p.slices.length_ns.max_ns), p.slices.length_requests.p50_ns, fmtNum(p.slices.switch_seek_sectors.mean_ns), fmtNs(p.slices.switch_gap_ns.p50_ns)])));
  }

  function header() {
    const t = R.trace;
    document.getElementById("title").textContent = "iosched-trace " + (D.model ? D.model.command : "report") + ": " + t.path;
    const lines = [t.format + " trace, " + fmtNs(t.duration_ns) + ", " + t.events + " events" + (t.kernel_release ? ", kernel " + t.kernel_release : "") + (t.filters.length ? "; filters: " + t.filters.join("; ") : "")];
    for (const w of t.warnings) lines.push("warning: " + w);
    document.getElementById("summary").textContent = lines.join("\n");
    const leg = document.getElementById("legend");
    for (const l of D.lanes) {
      const s = el("span", { class: "key" });
      const sw = el("i", { style: "background:" + color(l.pid) });
      s.appendChild(sw); s.appendChild(document.createTextNode(l.comm + " (" + l.pid + ")"));
      leg.appendChild(s);
    }
  }

  // explain --html: the findings, ranked, with their evidence and estimates; replay --html:
  // the recorded run beside the predicted ones, in totals and per process. Both with the
  // command's own text (its first line says whether the model reproduces the recording).
  function drawModel() {
    const M = D.model;
    if (!M) return;
    const host = document.getElementById("model");
    const J = M.json;
    const first = M.text.split("\n")[0];
    if (M.command === "explain") {
      host.appendChild(el("h2", {}, "Explanation: " + J.device + " under " + (J.scheduler || "?")));
      if (first.includes("MODEL CHECK FAILED")) host.appendChild(el("p", { class: "warn" }, first));
      J.findings.forEach((f, i) => {
        const d = el("div", { class: "finding" });
        d.appendChild(el("div", { class: "claim" }, (i + 1) + ". [" + f.cause + "] " + f.title));
        const ul = el("ul");
        f.evidence.forEach((ev) => ul.appendChild(el("li", {}, ev)));
        d.appendChild(ul);
        if (f.estimate) {
          const e = f.estimate;
          d.appendChild(el("div", { class: "estimate" }, "=> with " + e.what_if + ": " + e.predicted_mb_s.toFixed(3) +
            " MB/s instead of " + e.measured_mb_s.toFixed(3) + " (" + (e.change_pct >= 0 ? "+" : "") + e.change_pct.toFixed(0) + "%)" +
            (e.reliable ? "" : " [unreliable: the model does not reproduce the recording]")));
        }
        host.appendChild(d);
      });
      host.appendChild(el("p", { class: "verdict" }, J.verdict));
      document.body.dataset.findings = String(J.findings.length);
    } else {
      host.appendChild(el("h2", {}, "Replay: " + J.device + ", recorded and predicted"));
      if (J.model_check && first.includes("MODEL CHECK FAILED")) host.appendChild(el("p", { class: "warn" }, first));
      const runs = [{ label: "recorded", s: J.recorded }, ...J.runs.map((r) => ({ label: r.config.label, s: r.summary }))];
      const rows = [["throughput MB/s", "mb_per_s", 3], ["IOPS", "iops", 0], ["requests", "requests", 0], ["merge ratio", "merge_ratio", 2],
        ["Q2C mean ms", "q2c_mean_ms", 3], ["Q2C p99 ms", "q2c_p99_ms", 3], ["Q2C max ms", "q2c_max_ms", 3], ["D2C mean ms", "d2c_mean_ms", 3],
        ["seek between dispatches (sectors)", "d2d_seek_mean_sectors", 0], ["idle with I/O waiting ms", "idle_with_pending_ms", 1], ["utilization %", "util_pct", 1]];
      host.appendChild(table("Totals", ["", ...runs.map((r) => r.label)], rows.map(([name, k, d]) => [name, ...runs.map((r) => fmtNum(r.s[k], d))])));
      // Per process: recorded against each prediction, side by side.
      const byPid = (r, pid) => r.s.processes.find((p) => p.pid === pid) || {};
      const side = el("div", { class: "side" });
      side.appendChild(table("Per process: MB/s", ["process", ...runs.map((r) => r.label)],
        J.recorded.processes.map((p) => [p.name, ...runs.map((r) => fmtNum(byPid(r, p.pid).mb_per_s, 3))])));
      side.appendChild(table("Per process: Q2C mean / p99 ms", ["process", ...runs.map((r) => r.label)],
        J.recorded.processes.map((p) => [p.name, ...runs.map((r) => fmtNum(byPid(r, p.pid).q2c_mean_ms, 2) + " / " + fmtNum(byPid(r, p.pid).q2c_p99_ms, 2))])));
      host.appendChild(side);
      // Bars: each run's throughput and mean Q2C against the recording's.
      host.appendChild(el("h3", {}, "Recorded and predicted over time (the same time scale, from each run's start)"));
      host.appendChild(el("div", { id: "predicted" }));
      redraws.push(drawPredicted);
      const cv = el("canvas", { id: "replay-bars" });
      host.appendChild(cv);
      const { ctx, w, h } = canvas("replay-bars", 40 + 26 * runs.length * 2);
      ctx.clearRect(0, 0, w, h);
      const half = (w - 200) / 2;
      [["throughput MB/s", "mb_per_s"], ["Q2C mean ms", "q2c_mean_ms"]].forEach(([title, k], col) => {
        const x0 = 180 + col * (half + 10), max = Math.max(...runs.map((r) => r.s[k] || 0)) || 1;
        ctx.fillStyle = "#222"; ctx.fillText(title, x0, 14);
        runs.forEach((r, i) => {
          const y = 24 + i * 22, v = r.s[k] || 0;
          ctx.fillStyle = i === 0 ? "#555" : PALETTE[i % PALETTE.length];
          ctx.fillRect(x0, y, v / max * (half - 70), 16);
          ctx.fillStyle = "#222"; ctx.fillText(v.toPrecision(4), x0 + v / max * (half - 70) + 4, y + 12);
          if (col === 0) ctx.fillText(r.label.slice(0, 28), 4, y + 12);
        });
      });
      drawn.plots++;
      document.body.dataset.runs = String(J.runs.length);
    }
    const det = el("details");
    det.appendChild(el("summary", {}, M.command + "'s text"));
    det.appendChild(el("pre", {}, M.text));
    host.appendChild(det);
  }

  header();
  drawModel();
  redraws.push(drawTimeline, drawRates, drawSectors);
  const tl = document.getElementById("timeline");
  zoomable(tl, LABEL, () => Math.max(400, tl.clientWidth - 2) - LABEL - 10);
  for (const id of ["tput", "iops", "depth", "sect-r", "sect-w"]) {
    const c = document.getElementById(id);
    zoomable(c, PAD.l, () => c.clientWidth - PAD.l - PAD.r);
  }
  document.getElementById("reset").addEventListener("click", () => setView(0, SPAN));
  setView(0, SPAN);
  drawLatency();
  drawTables();
  let resizeTimer = null;
  window.addEventListener("resize", () => { clearTimeout(resizeTimer); resizeTimer = setTimeout(() => { setView(view.v0, view.v1); drawLatency(); }, 100); });
  document.body.dataset.plots = String(drawn.plots);
  document.body.dataset.errors = String(errors.length);
  document.body.dataset.ready = "1";
})();
