// monotape embedded dashboards: polls the admin API for one dashboard and draws it with uPlot.
// The admin token lives in this tab's sessionStorage only and travels as a bearer header.
(function () {
  "use strict";
  const TOKEN_KEY = "monotape.adminToken";
  const REFRESH_MS = 2000;
  const PALETTE = ["#4ea1ff", "#ffb347", "#6fdc8c", "#ff7eb6", "#be95ff", "#3ddbd9",
    "#fa4d56", "#d2a106", "#a6c8ff", "#ff8389", "#08bdba", "#bae6ff"];
  const GC_FILL = "rgba(255, 93, 93, 0.28)";

  const $ = (id) => document.getElementById(id);
  const state = { dashboards: [], uid: null, window: "5m", plots: new Map(), timer: null,
    seq: 0 };

  // -- formatting ---------------------------------------------------------------------------
  function trim(x) { return String(+x.toPrecision(3)); }
  function scaled(v, base, units) {
    let i = 0;
    while (Math.abs(v) >= base && i < units.length - 1) { v /= base; i++; }
    return trim(v) + " " + units[i];
  }
  function short(v) {
    const a = Math.abs(v);
    if (a >= 1e9) return trim(v / 1e9) + "G";
    if (a >= 1e6) return trim(v / 1e6) + "M";
    if (a >= 1e4) return trim(v / 1e3) + "k";
    return trim(v);
  }
  function fmt(v, unit) {
    if (v == null || !isFinite(v)) return "–";
    const a = Math.abs(v);
    switch (unit) {
      case "s":
        if (a === 0) return "0";
        if (a < 1e-3) return trim(v * 1e6) + " µs";
        if (a < 1) return trim(v * 1e3) + " ms";
        return trim(v) + " s";
      case "bytes": return scaled(v, 1000, ["B", "kB", "MB", "GB", "TB"]);
      case "Bps": return scaled(v, 1000, ["B/s", "kB/s", "MB/s", "GB/s"]);
      case "ops": return short(v) + "/s";
      case "percentunit": return trim(v * 100) + "%";  // Grafana's unit for a 0-1 share
      default: return short(v);
    }
  }

  // -- the admin API --------------------------------------------------------------------------
  class SignedOut extends Error {}
  async function api(path) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new SignedOut("sign in with an admin token");
    const r = await fetch(path, { headers: { Authorization: "Bearer " + token },
      cache: "no-store", credentials: "omit" });
    if (r.status === 401 || r.status === 403) {
      let why = r.status === 401 ? "token refused" : "this token has no admin claim";
      try { why = (await r.json()).error || why; } catch (e) { /* keep the default */ }
      throw new SignedOut(why);
    }
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }

  // -- sign in / out --------------------------------------------------------------------------
  function showSignIn(message) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    $("board").hidden = true;
    $("signin").hidden = false;
    $("signout").hidden = true;
    $("tabs").replaceChildren();
    $("status").textContent = "signed out";
    $("signin-error").textContent = message || "";
    $("token").focus();
  }
  async function signIn(token) {
    sessionStorage.setItem(TOKEN_KEY, token.trim());
    try {
      const index = await api("/admin/dashboards");
      state.dashboards = index.dashboards;
    } catch (e) {
      showSignIn(e instanceof SignedOut ? e.message : String(e.message || e));
      return;
    }
    $("signin").hidden = true;
    $("signout").hidden = false;
    $("board").hidden = false;
    $("token").value = "";
    renderTabs();
    const wanted = location.hash.slice(1);
    select(state.dashboards.some((d) => d.uid === wanted) ? wanted : state.dashboards[0].uid);
  }

  // -- tabs and window --------------------------------------------------------------------------
  function renderTabs() {
    $("tabs").replaceChildren(...state.dashboards.map((d) => {
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = d.title;
      b.dataset.uid = d.uid;
      b.title = d.description;
      b.addEventListener("click", () => select(d.uid));
      return b;
    }));
  }
  function select(uid) {
    state.uid = uid;
    history.replaceState(null, "", "#" + uid); // the dashboard, never the token
    for (const b of $("tabs").children) {
      if (b.dataset.uid === uid) b.setAttribute("aria-current", "page");
      else b.removeAttribute("aria-current");
    }
    resetPlots();
    refresh();
  }
  function resetPlots() {
    for (const p of state.plots.values()) p.plot && p.plot.destroy();
    state.plots.clear();
    $("panels").replaceChildren();
  }
  function stop() {
    if (state.timer) clearTimeout(state.timer);
    state.timer = null;
  }

  // -- polling ----------------------------------------------------------------------------------
  async function refresh() {
    stop();
    const seq = ++state.seq;
    try {
      const body = await api("/admin/dashboards/" + encodeURIComponent(state.uid) +
        "?window=" + encodeURIComponent(state.window));
      if (seq !== state.seq) return; // a newer request (tab or window change) superseded it
      draw(body);
      const at = new Date().toISOString().slice(11, 19);
      $("status").textContent = "live · updated " + at + " UTC";
      $("status").classList.remove("stale");
    } catch (e) {
      if (e instanceof SignedOut) { showSignIn(e.message); return; }
      $("status").textContent = "stale: " + (e.message || e);
      $("status").classList.add("stale");
    }
    if (seq === state.seq) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  // -- drawing ------------------------------------------------------------------------------------
  function gcHook(entry) {
    return (u) => {
      const pauses = entry.pauses || [];
      if (!pauses.length) return;
      const ctx = u.ctx;
      const minW = 2 * devicePixelRatio;
      ctx.save();
      ctx.fillStyle = GC_FILL;
      for (const p of pauses) {
        if (p.end < u.scales.x.min || p.start > u.scales.x.max) continue;
        const x0 = u.valToPos(p.start, "x", true);
        const x1 = u.valToPos(p.end, "x", true);
        ctx.fillRect(x0, u.bbox.top, Math.max(x1 - x0, minW), u.bbox.height);
      }
      ctx.restore();
    };
  }

  function panelElement(panel) {
    const el = document.createElement("article");
    el.className = "panel";
    el.dataset.title = panel.title;
    const h = document.createElement("h2");
    const now = document.createElement("span");
    now.className = "now";
    h.append(panel.title, now);
    if (panel.upper_bound) {
      const b = document.createElement("span");
      b.className = "badge bound";
      b.textContent = "upper bound";
      b.title = "RTT/2 of timed pings: the most it can be, not a one-way measurement";
      h.append(b);
    }
    if (panel.log) {
      const b = document.createElement("span");
      b.className = "badge";
      b.textContent = "log";
      h.append(b);
    }
    const hint = document.createElement("p");
    hint.className = "hint";
    hint.textContent = panel.description;
    const chart = document.createElement("div");
    const note = document.createElement("div");
    note.className = "gcnote";
    el.append(h, hint, chart, note);
    return { el, now, chart, note };
  }

  function clock(ts, withSeconds) {
    return new Date(ts * 1000).toISOString().slice(11, withSeconds ? 19 : 16);
  }
  function decade(v) { return Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-6; }
  function labelWidth(u, values) {
    if (!values) return 50;
    return Math.max(...values.map((v) => String(v).length)) * 7 + 18;
  }

  function showLatest(u) {
    // Not hovering: the legend shows the newest values rather than dashes.
    const n = u.data[0].length;
    if (n && !(u.cursor.left >= 0)) u.setLegend({ idx: n - 1 }, false);
  }

  function options(panel, entry, width, windowS) {
    const stepped = panel.stepped && uPlot.paths && uPlot.paths.stepped
      ? uPlot.paths.stepped({ align: 1 }) : undefined;
    const series = [{ value: (u, v) => (v == null ? "–" : clock(v, true) + " UTC") }].concat(
      panel.series.map((s, i) => ({
        label: s.name,
        stroke: PALETTE[i % PALETTE.length],
        width: 1.5,
        dash: panel.upper_bound ? [6, 4] : undefined,
        paths: stepped,
        value: (u, v) => fmt(v, panel.unit),
        points: { show: false },
      })));
    // a log axis labels and grids its decades only: the minor splits read as noise
    const decades = panel.log ? (u, splits) => splits.map((v) => (decade(v) ? v : null))
      : undefined;
    const yAxis = { stroke: "#8a96a3", grid: { stroke: "#222a33" }, ticks: { stroke: "#2a323c" },
      size: labelWidth,
      values: (u, vals) => vals.map((v) => (v == null ? "" : fmt(v, panel.unit))) };
    if (decades) {
      yAxis.filter = decades;
      yAxis.grid.filter = decades;
      yAxis.ticks.filter = decades;
    }
    const y = panel.log
      ? { distr: 3, range: (u, mn, mx) => (mn > 0 && mx > 0 ? uPlot.rangeLog(mn, mx, 10, true)
          : [1e-6, 1]) }
      : { range: (u, mn, mx) => (mn == null ? [0, 1]
          : [Math.min(0, mn), mx > 0 ? mx * 1.12 : (mx === 0 && mn === 0 ? 1 : mx)]) };
    return {
      width: width, height: 190,
      scales: { x: { time: true, range: () => [entry.t0, entry.t1] }, y: y },
      series: series,
      axes: [
        { stroke: "#8a96a3", grid: { stroke: "#222a33" }, ticks: { stroke: "#2a323c" },
          values: (u, vals) => vals.map((v) => clock(v, windowS <= 300)) },
        yAxis,
      ],
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      hooks: { drawAxes: [gcHook(entry)], draw: [showLatest] },
    };
  }

  function values(panel, s) {
    // a log axis cannot show 0 or less: those points are gaps, counted as "0" in the header
    return panel.log ? s.values.map((v) => (v != null && v > 0 ? v : null)) : s.values;
  }

  function draw(body) {
    $("description").textContent = body.description;
    const container = $("panels");
    const t1 = body.t.length ? body.t[body.t.length - 1] : Date.now() / 1000;
    const t0 = t1 - body.window_s;
    body.panels.forEach((panel, i) => {
      const key = i + ":" + panel.title;
      let entry = state.plots.get(key);
      if (!entry) {
        entry = panelElement(panel);
        state.plots.set(key, entry);
        container.append(entry.el);
      }
      entry.t0 = t0;
      entry.t1 = t1;
      entry.pauses = panel.gc ? body.gc_pauses : [];
      const names = panel.series.map((s) => s.name).join("\u0000") + "|" + body.window_s;
      const data = [body.t].concat(panel.series.map((s) => values(panel, s)));
      const width = Math.max(entry.chart.clientWidth || entry.el.clientWidth - 20, 300);
      if (!entry.plot || entry.names !== names) {
        if (entry.plot) entry.plot.destroy();
        entry.plot = new uPlot(options(panel, entry, width, body.window_s), data, entry.chart);
        entry.names = names;
      } else {
        entry.plot.setData(data);
      }
      let finite = 0;
      for (const s of panel.series) for (const v of s.values) if (v != null) finite++;
      const head = panel.series.find((s) => s.name === panel.headline) || panel.series[0];
      let latest = null;
      if (head) {
        for (let k = head.values.length - 1; k >= 0 && latest == null; k--) latest = head.values[k];
      }
      entry.el.dataset.values = String(finite);
      entry.el.classList.toggle("empty", finite === 0);
      entry.now.textContent = finite
        ? (panel.headline && head ? head.name + " " : "") + fmt(latest, panel.unit) : "no data";
      entry.now.classList.toggle("nodata", finite === 0);
      if (panel.gc) {
        const shown = entry.pauses.filter((p) => p.end >= t0);
        const worst = shown.reduce((m, p) => Math.max(m, p.ms), 0);
        entry.note.textContent = shown.length
          ? "GC: " + shown.length + " pause" + (shown.length > 1 ? "s" : "") +
            " that matter (shaded), worst " + worst + " ms"
          : "GC: no pause that matters (gen 2 or > " + body.gc_threshold_ms + " ms) in window";
      }
    });
  }

  window.addEventListener("resize", () => {
    for (const e of state.plots.values()) {
      if (e.plot) e.plot.setSize({ width: Math.max(e.chart.clientWidth, 300), height: 190 });
    }
  });

  // -- start -------------------------------------------------------------------------------------
  $("signin").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const token = $("token").value;
    if (token.trim()) signIn(token);
  });
  $("signout").addEventListener("click", () => showSignIn(""));
  $("window").addEventListener("change", (ev) => {
    state.window = ev.target.value;
    resetPlots();
    refresh();
  });
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) signIn(saved); else showSignIn("");
})();
