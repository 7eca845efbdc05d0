/* The dashboard (/dashboard): polls GET /stats once a second and draws the
 * last two minutes on canvases.  Rates come from the counters' differences
 * between snapshots (over the server's own clock, clock_s); latency
 * percentiles and hit rates from the differences over the last 10 s, the
 * percentiles interpolated within the histogram buckets as Prometheus'
 * histogram_quantile does. */
"use strict";

(() => {
  const POLL_MS = 1000;
  const HISTORY_S = 120;
  const WINDOW_S = 10;
  const COLORS = ["#3b6fd8", "#e0782f", "#2f9e61", "#b8452f", "#8a5cc7"];
  const $ = (id) => document.getElementById(id);

  const snaps = []; /* the /stats answers of the last HISTORY_S + WINDOW_S seconds */
  const points = []; /* one per snapshot: what the charts draw */

  /* The q-quantile of the observations between two cumulative histograms,
   * or null when there were none.  In the +Inf bucket: the last finite bound. */
  function quantile(q, bounds, now, then) {
    const cum = now.map((v, i) => v - (then ? then[i] : 0));
    const total = cum[cum.length - 1];
    if (!(total > 0)) return null;
    const rank = q * total;
    for (let i = 0; i < cum.length; i++) {
      if (cum[i] < rank) continue;
      if (bounds[i] === null) return i ? bounds[i - 1] : null;
      const lo = i ? bounds[i - 1] : 0;
      const below = i ? cum[i - 1] : 0;
      const inside = cum[i] - below;
      return inside > 0 ? lo + (bounds[i] - lo) * (rank - below) / inside : bounds[i];
    }
    return null;
  }

  const ratio = (num, den) => (den > 0 ? num / den : null);
  const ms = (s) => (s === null ? null : s * 1000);

  function point(cur, prev, base) {
    const dt = prev ? cur.clock_s - prev.clock_s : 0;
    const rate = (f) => (dt > 0 ? (f(cur) - f(prev)) / dt : null);
    const h = cur.histograms;
    const hb = base && base.histograms;
    const lat = (name) => [0.5, 0.9, 0.99].map((q) =>
      ms(quantile(q, h.bounds_s, h[name].buckets, hb ? hb[name].buckets : null)));
    const d = (f) => (base ? f(cur) - f(base) : f(cur));
    return {
      t: cur.clock_s,
      tps: [rate((s) => s.tokens.generation), rate((s) => s.tokens.prompt)],
      ttft: lat("ttft"),
      itl: lat("itl"),
      seqs: [cur.requests.running, cur.requests.waiting],
      kv: [cur.kv_blocks.used, cur.kv_blocks.cached, cur.kv_blocks.free],
      ratio: [ratio(d((s) => s.prefix_cache.hit_tokens), d((s) => s.prefix_cache.query_tokens)),
        ratio(d((s) => s.speculative.accepted_tokens), d((s) => s.speculative.draft_tokens))],
    };
  }

  /* ---- numbers ---- */

  function fmt(v, digits = 0, unit = "") {
    if (v === null || v === undefined || !Number.isFinite(v)) return "–";
    return v.toFixed(digits) + unit;
  }

  const pct = (v) => (v === null ? "–" : (100 * v).toFixed(1) + " %");

  function showTiles(s, p) {
    $("model").textContent = s.model;
    $("v-gen-tps").textContent = fmt(p.tps[0], 1);
    $("v-prompt-tps").textContent = fmt(p.tps[1], 1);
    $("v-running").textContent = s.requests.running;
    $("v-waiting").textContent = s.requests.waiting;
    $("v-ttft-p50").textContent = fmt(p.ttft[0], 0, " ms");
    $("v-itl-p50").textContent = fmt(p.itl[0], 1, " ms");
    $("v-kv").textContent = s.kv_blocks.used + " / " + s.kv_blocks.total;
    $("v-prefix").textContent = pct(ratio(s.prefix_cache.hit_tokens, s.prefix_cache.query_tokens));
    $("v-spec").textContent = pct(ratio(s.speculative.accepted_tokens, s.speculative.draft_tokens));
    $("v-finished").textContent = s.requests.finished;
    $("v-gen-total").textContent = s.tokens.generation;
    $("v-preempt").textContent = s.preemptions;
  }

  /* ---- charts ---- */

  /* The axis maximum: 1, 2, 4, 6 or 8 times a power of ten, at least v
   * (four grid steps of round size). */
  function niceCeil(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 4, 6, 8]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function label(v) {
    if (v >= 1000) return (v / 1000).toFixed(v % 1000 ? 1 : 0) + "k";
    return String(Math.round(v * 100) / 100);
  }

  const CHARTS = [
    { id: "c-tps", key: "tps", names: ["generated", "prompt"] },
    { id: "c-ttft", key: "ttft", names: ["p50", "p90", "p99"] },
    { id: "c-itl", key: "itl", names: ["p50", "p90", "p99"] },
    { id: "c-seqs", key: "seqs", names: ["running", "waiting"] },
    { id: "c-kv", key: "kv", names: ["used", "cached", "free"], max: () => snaps.length && snaps[snaps.length - 1].kv_blocks.total },
    { id: "c-ratio", key: "ratio", names: ["prefix hits", "draft acceptance"], max: () => 1, percent: true },
  ];

  function draw(chart) {
    const canvas = $(chart.id);
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const hgt = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hgt * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(hgt * dpr);
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, hgt);
    const css = getComputedStyle(document.body);
    const fg = css.getPropertyValue("--muted").trim() || "#777";
    const grid = css.getPropertyValue("--grid").trim() || "#ddd";
    const left = 44, right = 8, top = 22, bottom = 18;
    const pw = w - left - right, ph = hgt - top - bottom;
    const now = points.length ? points[points.length - 1].t : 0;
    const values = points.map((p) => p[chart.key]);
    let max = chart.max ? chart.max() : 0;
    if (!chart.max) for (const v of values.flat()) if (v !== null && v > max) max = v;
    max = chart.max ? max || 1 : niceCeil(max);
    g.font = "11px system-ui, sans-serif";
    g.lineWidth = 1;
    g.textBaseline = "middle";
    for (let i = 0; i <= 4; i++) {
      const y = top + ph - (ph * i) / 4;
      g.strokeStyle = grid;
      g.beginPath();
      g.moveTo(left, y);
      g.lineTo(left + pw, y);
      g.stroke();
      g.fillStyle = fg;
      g.textAlign = "right";
      const v = (max * i) / 4;
      g.fillText(chart.percent ? Math.round(v * 100) + "%" : label(v), left - 4, y);
    }
    g.textBaseline = "top";
    for (const [s, align] of [[HISTORY_S, "left"], [HISTORY_S / 2, "center"], [0, "right"]]) {
      g.textAlign = align;
      g.fillText(s ? "-" + s + " s" : "now", left + pw - (pw * s) / HISTORY_S, top + ph + 4);
    }
    const x = (t) => left + pw - (pw * (now - t)) / HISTORY_S;
    const y = (v) => top + ph - (ph * Math.min(v, max)) / max;
    g.textBaseline = "middle";
    g.textAlign = "left";
    let lx = left;
    chart.names.forEach((name, k) => {
      g.strokeStyle = g.fillStyle = COLORS[k];
      g.lineWidth = 2;
      g.beginPath();
      let pen = false;
      points.forEach((p, i) => {
        const v = values[i][k];
        if (v === null) {
          pen = false;
          return;
        }
        if (pen) g.lineTo(x(p.t), y(v));
        else g.moveTo(x(p.t), y(v));
        pen = true;
      });
      g.stroke();
      const last = values.length ? values[values.length - 1][k] : null;
      const text = name + " " + (last === null ? "–" : chart.percent ? Math.round(last * 100) + "%" : label(last));
      g.fillRect(lx, 6, 10, 10);
      g.fillStyle = fg;
      g.fillText(text, lx + 14, 11);
      lx += 24 + g.measureText(text).width;
    });
  }

  function drawAll() {
    for (const c of CHARTS) draw(c);
  }

  /* ---- polling ---- */

  function setConn(ok, text) {
    const el = $("conn");
    el.textContent = text;
    el.className = "pill " + (ok ? "ok" : "bad");
  }

  async function poll() {
    try {
      const r = await fetch("/stats", { cache: "no-store" });
      if (!r.ok) throw new Error("/stats answered " + r.status);
      const s = await r.json();
      const prev = snaps[snaps.length - 1];
      if (prev && (s.clock_s < prev.clock_s || s.tokens.generation < prev.tokens.generation)) {
        snaps.length = 0; /* a restarted server: start over */
        points.length = 0;
      }
      snaps.push(s);
      while (s.clock_s - snaps[0].clock_s > HISTORY_S + WINDOW_S) snaps.shift();
      const base = snaps.find((b) => s.clock_s - b.clock_s <= WINDOW_S + 0.5);
      const p = point(s, snaps.length > 1 ? snaps[snaps.length - 2] : null, base !== s ? base : null);
      points.push(p);
      while (s.clock_s - points[0].t > HISTORY_S) points.shift();
      showTiles(s, p);
      setConn(true, "live");
    } catch (e) {
      setConn(false, "server unreachable: " + e.message);
    }
    drawAll();
    setTimeout(poll, POLL_MS);
  }

  window.addEventListener("resize", drawAll);
  poll();
})();
