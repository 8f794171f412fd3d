// The league dashboard's script (served by experiments/dashboard.py with index.html).
//
// Fetches data.json (built by experiments.dashboard.DashboardData) and draws every chart with
// Plotly.react; asks again every few seconds with If-None-Match: <the ETag drawn last>, which
// the server answers with 304 Not Modified until the league's history changes. In an exported
// report the data are inlined (the element #dashboard-data) and nothing is fetched.
// Headline numbers have stable element ids (games-played, players, top-nash-weight,
// top-nash-player, ...) with the exact value in data-value; window.dashboardRendered turns
// true after each complete draw (window.dashboardTimings holds its phases in ms). #notices lists
// withdrawn players and stalled learners (one li each in #notice-list), hidden when there are none.
// A click on a payoff cell opens the watch page of a game between its row (side 0) and its
// column (watch.html, in a new tab); the exported report has no server, so its cells open nothing.
"use strict";
// The page refreshes every refresh_s, or every load_factor x (build + render) time if that is
// longer, so a large league costs the machine at most ~5% of a core.
// ?refresh=<seconds> sets a fixed period.
const CONFIG = {refresh_s: 5, load_factor: 20};
const PARAMS = new URLSearchParams(location.search);
if (PARAMS.has("refresh")) { CONFIG.refresh_s = Number(PARAMS.get("refresh")); CONFIG.load_factor = 0; }
// This script runs in <head>, before plotly.js: the data are asked for at once (the server
// builds them while the browser parses plotly.js) and drawn once the document has loaded.
const EMBEDDED = document.getElementById("dashboard-data");
let etag = null;      // the ETag of the data drawn last
let firstData = EMBEDDED ? null : fetchData();
if (firstData) firstData.catch(() => {});  // handled in poll(), which awaits it once the page has loaded
const ROLE_COLORS = {main_agent: "#d62728", main_exploiter: "#1f77b4", league_exploiter: "#2ca02c", historical: "#9ca3af"};
// Snapshots in a light shade of their parent's colour.
const SNAPSHOT_COLORS = {main_agent: "#f2a0a0", main_exploiter: "#9cc3e6", league_exploiter: "#9fd69f"};
const KINDS = ["main_agent", "main_exploiter", "league_exploiter", "snap:main_agent", "snap:main_exploiter", "snap:league_exploiter", "snap:"];
function kindOf(i) { const P = current.players; return P.role[i] === "historical" ? "snap:" + (SNAPSHOT_COLORS[P.parent_role[i]] ? P.parent_role[i] : "") : P.role[i]; }
function kindColor(kind) { return kind.startsWith("snap:") ? (SNAPSHOT_COLORS[kind.slice(5)] || ROLE_COLORS.historical) : ROLE_COLORS[kind]; }
function kindLabel(kind) { return kind.startsWith("snap:") ? "snapshots" + (kind.length > 5 ? " of " + ROLE_LABELS[kind.slice(5)] : "") : ROLE_LABELS[kind]; }
const ROLE_LABELS = {main_agent: "main agents", main_exploiter: "main exploiters", league_exploiter: "league exploiters", historical: "snapshots"};
// The plot toolbar (plotly's mode bar) sits in the top right corner of every chart, 2 px from
// the top and 22 px high: every chart's top margin (TOP) keeps titles, legends and colour bars
// below it. The box-select and lasso tools select nothing on these charts.
const PLOT_CONFIG = {responsive: true, displaylogo: false, modeBarButtonsToRemove: ["select2d", "lasso2d"]};
const TOP = 30;
const MARGIN = {l: 60, r: 20, t: TOP, b: 40};
// A time axis spans at least this: with one measurement (or a few seconds apart) plotly would
// zoom in to milliseconds around it and label its ticks in fractions of a second.
const MIN_TIME_SPAN_S = 120;
let current = null;   // the data drawn last
let decoded = null;   // typed arrays of `current`

window.dashboardRendered = false;
window.dashboardTimings = {};

const $ = (id) => document.getElementById(id);
function fmtInt(n) { return Number(n).toLocaleString("en-US"); }
function ms(t) { return t * 1000; }
function setStat(id, text, value) {
  const el = $(id); el.textContent = text;
  if (value !== undefined) el.dataset.value = value === null ? "" : String(value);
}
function decode(b64, Type) {
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new Type(bytes.buffer);
}
function decodeCounts(c) { return decode(c.b64, c.dtype === "uint16" ? Uint16Array : Uint32Array); }
// A withdrawn player (taken out of matchmaking: its parameter file is damaged) is marked
// wherever players are named: "✕ " before its id, "withdrawn" in its hover label.
const WITHDRAWN_MARK = "✕ ";
function isWithdrawn(i) { return !!(current.players.withdrawn && current.players.withdrawn[i]); }
function shownId(i) { return (isWithdrawn(i) ? WITHDRAWN_MARK : "") + current.players.id[i]; }
function playerLabel(i) {
  const P = current.players;
  const label = P.role[i] === "historical" ? `${P.id[i]} (snapshot of ${P.parent[i]})` : `${P.id[i]} (${P.role[i].replace("_", " ")})`;
  return isWithdrawn(i) ? `${WITHDRAWN_MARK}${label}, withdrawn from matchmaking` : label;
}
// A date x axis for data at these times (seconds; lists of them, nulls skipped): plotly's
// autorange, unless they span less than MIN_TIME_SPAN_S, then that span centred on them.
function timeAxis(...lists) {
  let lo = Infinity, hi = -Infinity;
  for (const list of lists) for (const t of list) if (t !== null && Number.isFinite(t)) { lo = Math.min(lo, t); hi = Math.max(hi, t); }
  if (!(hi >= lo) || hi - lo >= MIN_TIME_SPAN_S) return {type: "date"};
  const pad = (MIN_TIME_SPAN_S - (hi - lo)) / 2;
  return {type: "date", range: [ms(lo - pad), ms(hi + pad)]};
}
// Lines of one point draw nothing: such series get markers.
function lineMode(points) { return points > 1 ? "lines" : "lines+markers"; }
function duration(s) {
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

// -- headline ------------------------------------------------------------------------
function drawHeadline(d) {
  const h = d.headline;
  $("run-dir").textContent = d.run_dir;
  setStat("games-played", fmtInt(h.games), h.games);
  setStat("players", fmtInt(h.players), h.players);
  setStat("learning-agents", fmtInt(h.learning_agents), h.learning_agents);
  setStat("snapshots", fmtInt(h.snapshots), h.snapshots);
  setStat("resets", fmtInt(h.resets), h.resets);
  if (h.top_nash_weight === null) {
    setStat("top-nash-weight", "–", null); setStat("top-nash-player", "no Nash distribution yet", null);
  } else {
    setStat("top-nash-weight", h.top_nash_weight.toFixed(3), h.top_nash_weight);
    setStat("top-nash-player", h.top_nash_player, h.top_nash_player);
  }
  const span = h.start_time === null ? 0 : h.last_time - h.start_time;
  setStat("run-time", duration(Math.max(0, span)), span);
  $("last-update").textContent = h.last_time ? "last activity " + new Date(ms(h.last_time)).toLocaleString("en-GB") : "";
}

// -- notices: withdrawn players and stalled learners, while any exist --------------------
function drawNotices(d) {
  const N = d.notices || {withdrawn: [], stalled: []}, list = $("notice-list");
  const items = [
    ...N.withdrawn.map((w) => ["withdrawn", `${w.player} withdrawn from matchmaking: ${w.reason}`]),
    ...N.stalled.map((s) => ["stalled", `${s.agent} stalled since ${new Date(ms(s.since)).toLocaleString("en-GB")}: ${s.reason}`]),
  ];
  list.replaceChildren(...items.map(([cls, text]) => {
    const li = document.createElement("li");
    li.className = cls; li.textContent = text;
    return li;
  }));
  $("notices").hidden = !items.length;
  $("notices").classList.toggle("has-withdrawn", N.withdrawn.length > 0);
}

// -- payoff matrix -----------------------------------------------------------------
function fillRaceFilter(d) {
  const races = [...new Set(d.players.race)];
  const select = $("race-filter"), keep = select.value;
  const options = ["all"];
  for (const a of races) for (const b of races) options.push(`${a}|${b}`);
  if (select.options.length === options.length) return;
  select.innerHTML = "";
  for (const o of options) {
    const opt = document.createElement("option");
    opt.value = o; opt.textContent = o === "all" ? "all races" : o.replace("|", " vs ");
    select.appendChild(opt);
  }
  select.value = options.includes(keep) ? keep : "all";
}

function groupKey(i) {
  const P = current.players;
  return P.race[i] + " · " + (P.role[i] === "historical" ? `snapshots of ${ROLE_LABELS[P.parent_role[i]] || "others"}` : ROLE_LABELS[P.role[i]]);
}

function drawPayoff() {
  const P = current.players, n = current.payoff.n;
  const {wins: W, draws: D, decayed: R, selfLosses: SL} = decoded;
  const filter = $("race-filter").value, source = $("payoff-source").value;
  const all = [...Array(n).keys()];
  let rows = all, cols = all;
  if (filter !== "all") {
    const [a, b] = filter.split("|");
    rows = all.filter((i) => P.race[i] === a); cols = all.filter((i) => P.race[i] === b);
  }
  if ($("payoff-rows").value === "learning") rows = rows.filter((i) => P.role[i] !== "historical");
  const useDecayed = source === "decayed" && R !== null;
  const z = new Array(rows.length), custom = new Array(rows.length);
  for (let r = 0; r < rows.length; r++) {
    const i = rows[r], zr = new Array(cols.length), cr = new Array(cols.length), rowId = P.id[i];
    for (let c = 0; c < cols.length; c++) {
      const j = cols[c], w = W[i * n + j], l = i === j ? SL[i] : W[j * n + i], dr = D[i * n + j], g = w + l + dr;
      if (useDecayed) { const v = R[i * n + j]; zr[c] = v === 65535 ? null : v / 65534; }
      else zr[c] = g ? (w + dr / 2) / g : null;
      cr[c] = [g, w, dr, l, rowId, P.id[j]];
    }
    z[r] = zr; custom[r] = cr;
  }
  // Numeric axes (categorical ones cost twice the time at 1,000 players): every id as a tick
  // when few, else the group names (race, role) at each group's start; lines between groups.
  const groups = (idx) => {
    const vals = [];
    idx.forEach((k, pos) => { if (pos === 0 || groupKey(idx[pos - 1]) !== groupKey(k)) vals.push(pos); });
    return vals;
  };
  const gx = groups(cols), gy = groups(rows), shapes = [], line = {color: "#111", width: 1};
  for (const v of gx.slice(1)) shapes.push({type: "line", xref: "x", yref: "paper", x0: v - 0.5, x1: v - 0.5, y0: 0, y1: 1, line});
  for (const v of gy.slice(1)) shapes.push({type: "line", yref: "y", xref: "paper", y0: v - 0.5, y1: v - 0.5, x0: 0, x1: 1, line});
  const ticks = (idx, starts, pixels, minCell, minGap) => {
    const cell = pixels / Math.max(1, idx.length);
    if (cell >= minCell) return {tickvals: idx.map((_, k) => k), ticktext: idx.map(shownId)};
    // Group names at group starts, dropping those that would overlap the previous one.
    const vals = [], text = [];
    for (const v of starts) if (!vals.length || (v - vals[vals.length - 1]) * cell >= minGap) { vals.push(v); text.push(groupKey(idx[v])); }
    return {tickvals: vals, ticktext: text};
  };
  const plotHeight = Math.max(1, Math.min(24, 560 / rows.length)) * rows.length;
  const tx = ticks(cols, gx, $("chart-payoff").clientWidth - 300, 15, 22), ty = ticks(rows, gy, plotHeight, 10, 15);
  const width = (t) => Math.min(260, 12 + 6.2 * Math.max(0, ...t.ticktext.map((s) => s.length)));
  const trace = {
    type: "heatmap", z, customdata: custom, zmin: 0, zmax: 1, zmid: 0.5,
    colorscale: "RdBu", reversescale: true, colorbar: {title: {text: "win rate"}, thickness: 12},
    hovertemplate: "%{customdata[4]} vs %{customdata[5]}<br>win rate %{z:.3f}" + (useDecayed ? " (decayed payoff)" : "") +
      "<br>games %{customdata[0]}: W %{customdata[1]} / D %{customdata[2]} / L %{customdata[3]}" +
      (EMBEDDED ? "" : "<br>click to watch a game") + "<extra></extra>",
    hoverongaps: false,
  };
  const margin = {l: width(ty), r: 10, t: TOP, b: width(tx) * 0.75};
  const layout = {
    margin, shapes, uirevision: filter + source + $("payoff-rows").value, height: Math.round(Math.max(320, plotHeight + margin.t + margin.b)),
    xaxis: {tickmode: "array", ...tx, tickangle: -45, tickfont: {size: 10}, showgrid: false, zeroline: false, range: [-0.5, cols.length - 0.5]},
    yaxis: {tickmode: "array", ...ty, tickfont: {size: 10}, showgrid: false, zeroline: false, range: [rows.length - 0.5, -0.5]},
  };
  $("chart-payoff").style.height = layout.height + "px";
  return Plotly.react("chart-payoff", [trace], layout, PLOT_CONFIG).then((gd) => {
    if (!EMBEDDED && !gd.watchOnClick) { gd.on("plotly_click", watchCell); gd.watchOnClick = true; }
  });
}

// The watch page of the clicked cell's players: row against column, seed 0.
function watchCell(event) {
  const point = event.points && event.points[0];
  if (!point || !point.customdata) return;
  const [home, away] = point.customdata.slice(4, 6);
  window.open("watch?" + new URLSearchParams({home, away, seed: "0"}).toString(), "_blank");
}

// -- Nash ----------------------------------------------------------------------------
function drawNash() {
  const N = current.nash, P = current.players;
  if (!N.times.length) {
    const empty = {annotations: [{text: "no Nash distribution yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}], xaxis: {visible: false}, yaxis: {visible: false}, margin: MARGIN};
    return Promise.all([Plotly.react("chart-nash-now", [], empty, PLOT_CONFIG), Plotly.react("chart-nash-time", [], empty, PLOT_CONFIG)]);
  }
  const now = [...N.latest].sort((a, b) => b[1] - a[1]).slice(0, 25).reverse();
  const bar = {
    type: "bar", orientation: "h", x: now.map((p) => p[1]), y: now.map((p) => shownId(p[0])),
    marker: {color: now.map((p) => kindColor(kindOf(p[0])))},
    text: now.map((p) => p[1].toFixed(3)), textposition: "outside", cliponaxis: false,
    customdata: now.map((p) => playerLabel(p[0])), hovertemplate: "%{customdata}<br>weight %{x:.4f}<extra></extra>",
  };
  const weightTitle = N.latest.length > 25 ? `weight (top 25 of ${N.latest.length} players in the support)` : "weight";
  const nowLayout = {margin: {...MARGIN, l: 10}, xaxis: {title: {text: weightTitle}, rangemode: "tozero"}, yaxis: {automargin: true, type: "category", tickfont: {size: 10}}};
  const x = N.times.map(ms);
  let traces, layout;
  if (N.players.length <= 40) {
    traces = N.players.map((i, r) => ({
      type: "scatter", mode: lineMode(x.length), stackgroup: "nash", name: shownId(i), x, y: N.weights[r],
      line: {width: 0.5}, customdata: N.times.map(() => playerLabel(i)),
      hovertemplate: "%{customdata}<br>weight %{y:.3f}<extra></extra>",
    }));
    layout = {margin: MARGIN, xaxis: timeAxis(N.times), yaxis: {title: {text: "weight"}, range: [0, 1.001]}, showlegend: N.players.length <= 6, legend: {font: {size: 9}}};
  } else {
    // Numeric rows (categorical axes are slow for many players); the player in the hover.
    const names = N.players.map(shownId);
    traces = [{type: "heatmap", x, z: N.weights, customdata: N.weights.map((row, r) => row.map(() => names[r])),
      colorscale: "Viridis", zmin: 0, colorbar: {title: {text: "weight"}, thickness: 12},
      hovertemplate: "%{customdata}<br>%{x}<br>weight %{z:.3f}<extra></extra>"}];
    layout = {margin: MARGIN, xaxis: timeAxis(N.times), yaxis: {title: {text: `${names.length} players ever in the support`}, autorange: "reversed", showticklabels: false, showgrid: false}};
  }
  return Promise.all([Plotly.react("chart-nash-now", [bar], nowLayout, PLOT_CONFIG), Plotly.react("chart-nash-time", traces, layout, PLOT_CONFIG)]);
}

// -- exact exploitability (poker): NashConv of the Nash mixture and of each main agent ------

function drawExploitability() {
  // Shown once measured: poker runs get a point a minute from the evaluator; other games none.
  const series = Object.entries(current.exploitability || {});
  $("exploitability-card").style.display = series.length ? "" : "none";
  if (!series.length) return Plotly.purge("chart-exploitability");
  const names = {nash: "Nash mixture (latest)", nash_average: "average Nash mixture"};
  const traces = series.map(([subject, s]) => ({
    type: "scatter", mode: "lines+markers", name: names[subject] || subject, x: s.time.map(ms), y: s.nash_conv,
    line: {width: subject in names ? 3 : 1.5}, hovertemplate: `${subject}<br>NashConv %{y:.4f}<extra></extra>`,
  }));
  const layout = {margin: MARGIN, xaxis: timeAxis(...series.map(([, s]) => s.time)), yaxis: {title: {text: "NashConv"}, rangemode: "tozero"}, showlegend: true, legend: {font: {size: 10}}};
  return Plotly.react("chart-exploitability", traces, layout, PLOT_CONFIG);
}

// -- poker: each exploiter snapshot's gap to a best response against its target ------------

function drawExploiterGaps() {
  // Shown once measured: a point per exploiter snapshot, one series per exploiter role.
  const series = Object.entries(current.exploiter_gaps || {});
  $("exploiter-gaps-card").style.display = series.length ? "" : "none";
  if (!series.length) return Plotly.purge("chart-exploiter-gaps");
  const names = {main_exploiter: "main exploiters (target: the main agent)", league_exploiter: "league exploiters (target: the Nash mixture)"};
  const traces = series.map(([role, s]) => ({
    type: "scatter", mode: "markers", name: names[role] || role, x: s.time.map(ms), y: s.gap,
    customdata: s.time.map((_, k) => [s.player[k], s.target[k], s.br_value[k], s.exploiter_value[k]]), marker: {size: 8},
    hovertemplate: "%{customdata[0]} against %{customdata[1]}<br>gap %{y:.4f} = best response %{customdata[2]:.4f} − exploiter %{customdata[3]:.4f}<extra></extra>",
  }));
  const layout = {margin: MARGIN, xaxis: timeAxis(...series.map(([, s]) => s.time)), yaxis: {title: {text: "gap (chips)"}, rangemode: "tozero"}, showlegend: true, legend: {font: {size: 10}}};
  return Plotly.react("chart-exploiter-gaps", traces, layout, PLOT_CONFIG);
}

// -- SMAX: each main agent against the scripted heuristic (shown once measured) ------------
function drawHeuristic() {
  const series = Object.entries(current.heuristic || {});
  $("heuristic-card").style.display = series.length ? "" : "none";
  if (!series.length) return Plotly.purge("chart-heuristic");
  const traces = series.map(([agent, s]) => {
    const races = Object.keys(s.by_race);
    const detail = s.time.map((_, k) => races.filter((r) => s.by_race[r][k] !== null)
      .map((r) => `vs ${r} ${s.by_race[r][k].toFixed(3)}`).join("<br>"));
    return {
      type: "scatter", mode: "lines+markers", name: agent, x: s.time.map(ms), y: s.win_rate,
      customdata: s.time.map((_, k) => [s.version[k], s.games[k], detail[k]]), line: {width: 2},
      hovertemplate: `${agent}<br>win rate %{y:.3f} (version %{customdata[0]}, %{customdata[1]} games)<br>%{customdata[2]}<extra></extra>`,
    };
  });
  const layout = {margin: MARGIN, xaxis: timeAxis(...series.map(([, s]) => s.time)), yaxis: {title: {text: "win rate vs heuristic"}, range: [0, 1]},
    shapes: [{type: "line", xref: "paper", x0: 0, x1: 1, y0: 0.5, y1: 0.5, line: {dash: "dot", color: "#888", width: 1}}],
    showlegend: true, legend: {font: {size: 10}}};
  return Plotly.react("chart-heuristic", traces, layout, PLOT_CONFIG);
}

// -- ratings: one trace per role, players' lines separated by gaps ---------------
function drawRatings() {
  const R = decoded.ratings, times = current.ratings.times.map(ms);
  const perRole = (key) => {
    const byRole = Object.fromEntries(KINDS.map((r) => [r, {x: [], y: [], text: []}]));
    for (let k = 0; k < R.player.length; k++) {
      const i = R.player[k], t = byRole[kindOf(i)], v = R[key][k];
      if (k > 0 && R.player[k - 1] !== i) { t.x.push(null); t.y.push(null); t.text.push(""); }
      t.x.push(times[R.t[k]]); t.y.push(Number.isNaN(v) ? null : v); t.text.push(current.players.id[i]);
    }
    // Snapshots first, so that the learning agents' lines are drawn on top.
    const order = [...KINDS.filter((r) => r.startsWith("snap:")), ...KINDS.filter((r) => !r.startsWith("snap:"))];
    return order.filter((r) => byRole[r].x.length).map((r) => ({
      type: "scatter", mode: lineMode(times.length), name: kindLabel(r), x: byRole[r].x, y: byRole[r].y, text: byRole[r].text,
      line: {color: kindColor(r), width: r.startsWith("snap:") ? 1 : 2.5},
      connectgaps: false, hovertemplate: "%{text}<br>%{y:.1f}<extra></extra>",
    }));
  };
  const layout = (title) => ({margin: MARGIN, xaxis: timeAxis(current.ratings.times), yaxis: {title: {text: title}}, legend: {orientation: "h", y: -0.15}});
  return Promise.all([
    Plotly.react("chart-elo", perRole("elo"), layout("Elo"), PLOT_CONFIG),
    Plotly.react("chart-trueskill", perRole("mu"), layout("TrueSkill μ"), PLOT_CONFIG),
  ]);
}

// -- composition and events ------------------------------------------------------
function drawComposition() {
  const P = current.players, E = current.events;
  const races = [...new Set(P.race)];
  const kinds = P.id.map((_, i) => kindOf(i)), shown = KINDS.filter((k) => k !== "snap:" || kinds.includes(k));
  // Horizontal bars: each kind's label on its own line (side by side under vertical bars,
  // "snapshots of main exploiters" and its neighbours ran into each other). A count is written
  // inside its segment, or not at all where it would not fit (uniformtext hide).
  const bars = races.map((race) => ({
    type: "bar", orientation: "h", name: race, y: shown.map(kindLabel),
    x: shown.map((k) => kinds.filter((kind, i) => kind === k && P.race[i] === race).length),
    hovertemplate: `${race}: %{x} %{y}<extra></extra>`, texttemplate: "%{x}", textposition: "inside", insidetextanchor: "middle",
  }));
  const comp = {margin: {...MARGIN, l: 10}, barmode: "stack", uniformtext: {minsize: 9, mode: "hide"},
    xaxis: {title: {text: "players"}}, yaxis: {type: "category", automargin: true, autorange: "reversed", tickfont: {size: 11}},
    showlegend: races.length > 1, legend: {traceorder: "normal"}};
  const eventKinds = [["snapshot", "circle"], ["reset", "x"]];
  const roleOfAgent = Object.fromEntries(P.id.map((id, i) => [id, P.role[i]]));
  const events = eventKinds.map(([kind, symbol]) => {
    const idx = E.kind.map((k, i) => (k === kind ? i : -1)).filter((i) => i >= 0);
    return {
      type: "scatter", mode: "markers", name: kind + "s", x: idx.map((i) => ms(E.time[i])), y: idx.map((i) => E.agent[i]),
      marker: {symbol, size: kind === "reset" ? 9 : 7, color: kind === "reset" ? "#111" : idx.map((i) => ROLE_COLORS[roleOfAgent[E.agent[i]]] || "#555")},
      customdata: idx.map((i) => [E.player[i] || "", E.step[i], E.reason[i] || ""]),
      hovertemplate: kind === "snapshot" ? "%{y} → %{customdata[0]}<br>step %{customdata[1]}, %{customdata[2]}<extra></extra>" : "%{y} reset at step %{customdata[1]}<extra></extra>",
    };
  });
  // Withdrawals (on the withdrawn player's parent's row), stalls and recoveries: a series each, when any.
  const marks = {
    withdrawn: {name: "withdrawn players", marker: {symbol: "x-thin-open", size: 11, color: "#b91c1c", line: {width: 2, color: "#b91c1c"}},
      hovertemplate: "%{customdata[0]} withdrawn from matchmaking<br>%{customdata[2]}<extra></extra>"},
    stalled: {name: "learner stalled", marker: {symbol: "diamond", size: 9, color: "#f59e0b"},
      hovertemplate: "%{y} stalled<br>%{customdata[2]}<extra></extra>"},
    recovered: {name: "learner recovered", marker: {symbol: "diamond-open", size: 9, color: "#16a34a"},
      hovertemplate: "%{y} recovered<br>%{customdata[2]}<extra></extra>"},
  };
  for (const [kind, style] of Object.entries(marks)) {
    const idx = E.kind.map((k, i) => (k === kind ? i : -1)).filter((i) => i >= 0);
    if (!idx.length) continue;
    events.push({type: "scatter", mode: "markers", x: idx.map((i) => ms(E.time[i])), y: idx.map((i) => E.agent[i] || E.player[i]),
      customdata: idx.map((i) => [E.player[i] || "", E.step[i], E.reason[i] || ""]), ...style});
  }
  const ev = {margin: {...MARGIN, l: 10}, xaxis: timeAxis(E.time), yaxis: {type: "category", automargin: true, tickfont: {size: 10}}, legend: {orientation: "h", y: -0.15}};
  if (!E.kind.length) ev.annotations = [{text: "no snapshots or resets yet", showarrow: false, xref: "paper", yref: "paper", x: 0.5, y: 0.5}];
  return Promise.all([Plotly.react("chart-composition", bars, comp, PLOT_CONFIG), Plotly.react("chart-events", events, ev, PLOT_CONFIG)]);
}

// -- learning health ---------------------------------------------------------------
function drawLearners() {
  const L = current.learners, box = $("learner-charts");
  $("learner-empty").style.display = L.names.length ? "none" : "";
  const promises = [];
  L.names.forEach((name, k) => {
    const id = "chart-learner-" + name.replace(/[^A-Za-z0-9_-]/g, "_");
    let div = $(id);
    if (!div) { div = document.createElement("div"); div.id = id; div.className = "chart learner-chart"; box.appendChild(div); }
    const agents = Object.keys(L.series[name]).sort();
    const traces = agents.map((a) => ({
      type: "scatter", mode: lineMode(L.series[name][a].t.length), name: a, x: L.series[name][a].t.map(ms), y: L.series[name][a].v,
      line: {width: 1.5}, hovertemplate: `${a}<br>${name} %{y:.4g}<extra></extra>`,
    }));
    promises.push(Plotly.react(div, traces, {margin: MARGIN, title: {text: name, font: {size: 13}, x: 0.02, xanchor: "left"},
      xaxis: timeAxis(...agents.map((a) => L.series[name][a].t)), showlegend: k === 0 && agents.length <= 12, legend: {font: {size: 9}}}, PLOT_CONFIG));
  });
  return Promise.all(promises);
}

// -- the loop ---------------------------------------------------------------------
function setStatus(text, cls) { const s = $("status"); s.textContent = text; s.className = cls || ""; }

async function render(d) {
  const t0 = performance.now();
  current = d;
  decoded = {
    wins: decodeCounts(d.payoff.wins), draws: decodeCounts(d.payoff.draws), selfLosses: d.payoff.self_losses,
    decayed: d.payoff.decayed ? decode(d.payoff.decayed, Uint16Array) : null,
    ratings: Object.fromEntries(["player", "t", "elo", "mu", "sigma"].map((k) => [k, decode(d.ratings[k], k === "player" || k === "t" ? Int32Array : Float32Array)])),
  };
  const opt = $("payoff-source").querySelector('option[value="decayed"]');
  opt.disabled = decoded.decayed === null;
  drawHeadline(d);
  drawNotices(d);
  fillRaceFilter(d);
  const timings = {decode_ms: performance.now() - t0};
  for (const [name, draw] of [["payoff", drawPayoff], ["nash", drawNash], ["exploitability", drawExploitability], ["exploiter_gaps", drawExploiterGaps], ["heuristic", drawHeuristic], ["ratings", drawRatings], ["composition", drawComposition], ["learners", drawLearners]]) {
    const t = performance.now();
    await draw();
    timings[name + "_ms"] = performance.now() - t;
  }
  const t3 = performance.now();
  window.dashboardTimings = {...timings, render_ms: t3 - t0};
  window.dashboardRendered = true;
  return t3 - t0;
}

// The data, or {status: "unchanged"} when the server answers 304 to the ETag drawn last.
async function fetchData() {
  const response = await fetch("data.json", {cache: "no-store", headers: etag ? {"If-None-Match": etag} : {}});
  const body = await response.text();  // read to its end, even when empty: an unread body aborts the request
  if (response.status === 304) return {status: "unchanged"};
  if (!response.ok) throw new Error(`data.json: HTTP ${response.status} ${body.slice(0, 200)}`);
  const d = JSON.parse(body);
  d.etag = response.headers.get("ETag");
  return d;
}

function drawingFailed(e) {
  console.error("dashboard: drawing failed:", e);
  setStatus("drawing failed (" + e.message + ")", "error");
}

async function poll() {
  let wait = CONFIG.refresh_s, d = null;
  try {
    const t0 = performance.now();
    if (firstData) { d = await firstData; firstData = null; }  // asked for while plotly.js loaded
    else d = await fetchData();
    window.dashboardTimings.fetch_ms = performance.now() - t0;
  } catch (e) {
    firstData = null;
    setStatus("dashboard server unreachable (" + e.message + "); retrying", "error");
  }
  if (d?.status === "waiting") setStatus("waiting for the league to start", "waiting");
  else if (d?.status === "error") setStatus(d.message, "error");
  else if (d?.status === "unchanged") setStatus("live · no new data", "");
  else if (d) {
    try {
      const renderMs = await render(d);
      etag = d.etag;
      setStatus("live · refreshed " + new Date().toLocaleTimeString("en-GB"), "");
      wait = Math.max(wait, CONFIG.load_factor * (d.build_s + renderMs / 1000));
    } catch (e) {
      drawingFailed(e);
    }
  }
  setTimeout(poll, wait * 1000);
}

function start() {
  const redrawPayoff = () => { if (current) drawPayoff(); };
  for (const id of ["race-filter", "payoff-source", "payoff-rows"]) $(id).addEventListener("change", redrawPayoff);
  $("payoff-watch-note").hidden = !!EMBEDDED;
  if (EMBEDDED) {
    render(JSON.parse(EMBEDDED.textContent))
      .then(() => setStatus("report exported " + new Date(ms(current.generated)).toLocaleString("en-GB"), ""), drawingFailed);
  } else {
    poll();
  }
}

document.addEventListener("DOMContentLoaded", start);
