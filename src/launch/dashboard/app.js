// The dashboard of `megascale launch`: polls /api/status every second and draws the job's numbers,
// the loss and tokens/s curves (uPlot), the stragglers, the rank x segment heatmap (cells of a
// chronic straggler get class "straggler" and data-straggler="chronic", one-off stalls "stall")
// and the per-rank table. The page keeps working when the launch ends (the last status stays).
"use strict";

const $ = (id) => document.getElementById(id);
const fmt = (v, digits) => (v === null || v === undefined || Number.isNaN(v) ? "–" : Number(v).toFixed(digits));
const fmtInt = (v) => (v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en-US"));

function makeChart(el, label, color) {
  const opts = {
    width: 520, height: 220,
    scales: { x: { time: false } },
    axes: [{ label: "step" }, { size: 70 }],
    series: [{ label: "step" }, { label, stroke: color, width: 2, spanGaps: true }],
    legend: { show: true },
  };
  return new uPlot(opts, [[], []], el);
}
const charts = { loss: makeChart($("loss-chart"), "loss", "#c0392b"), tps: makeChart($("tps-chart"), "tokens/s", "#2471a3") };

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.floor(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(sec).padStart(2, "0");
}

function rankState(r) {
  if (r.state === "exited") return r.exit_code === 0 ? "exited 0" : "exited " + r.exit_code;
  if (r.state === "killed") return "killed (signal " + r.signal + ")";
  return r.state;
}

// Heatmap colour against the cell's own stage peers: white at their median, red when slower, blue
// when faster, by the difference over max(median, floor ms), saturated at +/-30% (so a cell of a few
// ms does not saturate over a millisecond or two); no peer: white; no data: grey.
function heatColor(ms, peer, floor) {
  if (ms === null || ms === undefined) return "#f4f4f4";
  if (peer === null || peer === undefined) return "#ffffff";
  const d = Math.max(-1, Math.min(1, (ms - peer) / Math.max(peer, floor || 0) / 0.3));
  const a = Math.round(255 * (1 - Math.abs(d)));
  return d >= 0 ? `rgb(255,${a},${a})` : `rgb(${a},${a},255)`;
}

function drawHeatmap(h) {
  const thead = $("heatmap").tHead, tbody = $("heatmap").tBodies[0];
  thead.replaceChildren();
  tbody.replaceChildren();
  $("heatmap-note").textContent = h.ranks.length
    ? `(mean wall ms over the last ${h.window} steps; colour: difference from the stage peers' median, over max(median, ${h.colour_floor_ms} ms); outlined: straggler)` : "(no step records yet)";
  if (!h.ranks.length) return;
  const hr = el("tr");
  hr.appendChild(el("th", "rank"));
  for (const s of h.segments) hr.appendChild(el("th", s));
  thead.appendChild(hr);
  h.ranks.forEach((rank, i) => {
    const tr = el("tr", null, { "data-rank": rank });
    tr.appendChild(el("th", String(rank)));
    h.segments.forEach((seg, j) => {
      const ms = h.ms[i][j], ratio = h.ratio[i][j], slow = h.straggler[i][j];
      const peer = h.peer_ms ? h.peer_ms[i][j] : null;
      const td = el("td", fmt(ms, 1), { "class": "cell", "data-rank": rank, "data-segment": seg });
      td.style.background = heatColor(ms, peer, h.colour_floor_ms);
      td.title = `rank ${rank} ${seg}: ${fmt(ms, 2)} ms` + (ratio !== null ? `, ${fmt(ratio, 3)} x peers' median` : "");
      if (slow) { td.classList.add("straggler"); td.dataset.straggler = "chronic"; }
      tr.appendChild(td);
    });
    tbody.appendChild(tr);
  });
}

function markStalls(stragglers) {
  for (const s of stragglers) {
    if (s.chronic) continue;
    const td = document.querySelector(`#heatmap td[data-rank="${s.rank}"][data-segment="${CSS.escape(s.segment)}"]`);
    if (td && !td.dataset.straggler) { td.classList.add("stall"); td.dataset.straggler = "stall"; }
  }
}

function drawRanks(ranks) {
  const tbody = $("ranks").tBodies[0];
  tbody.replaceChildren();
  for (const r of ranks) {
    const failed = (r.state === "exited" && r.exit_code !== 0) || r.state === "killed";
    const tr = el("tr", null, { "data-rank": r.rank, "class": failed ? "failed" : r.state });
    const c = r.coord || {};
    const age = r.last_record_age_s;
    if (r.state === "running" && age !== null && age > 30) tr.classList.add("stale");
    for (const v of [r.rank, c.tp ?? "–", c.dp ?? "–", c.pp ?? "–", r.host ?? "–", r.pid || "–", r.step ?? "–"])
      tr.appendChild(el("td", String(v)));
    tr.appendChild(el("td", rankState(r), { "class": "state-cell" }));
    tr.appendChild(el("td", fmt(r.loss, 4)));
    tr.appendChild(el("td", fmtInt(r.tokens_per_s)));
    tr.appendChild(el("td", r.mfu === null ? "–" : fmt(100 * r.mfu, 1) + "%"));
    tr.appendChild(el("td", age === null ? "–" : fmt(age, 1) + " s ago", { "class": "age" }));
    tbody.appendChild(tr);
  }
}

function drawStragglers(list) {
  const ul = $("stragglers");
  ul.replaceChildren();
  if (!list.length) ul.appendChild(el("li", "none", { "class": "none" }));
  for (const s of list) ul.appendChild(el("li", s.text, { "class": s.chronic ? "chronic" : "stall", "data-rank": s.rank }));
}

// The driver's state (megascale launch --hosts): attempt, faults, hosts, the latest events.
function drawDriver(d) {
  $("driver").hidden = !d;
  if (!d) return;
  $("driver-note").textContent = `attempt ${d.attempt} · ${d.phase} · ${d.faults} fault(s) · ${d.restarts} restart(s)`;
  const hosts = $("driver-hosts");
  hosts.replaceChildren(...d.hosts.map((h) => {
    const li = document.createElement("li");
    li.className = "host " + h.state;
    li.textContent = `host ${h.index} (${h.name}): ${h.state}` + (h.reason ? ` (${h.reason})` : "");
    return li;
  }));
  // The last recovery: where the state came from and what it cost (the driver's recovery event).
  const r = d.last_recovery;
  $("driver-recovery").hidden = !r;
  if (r) {
    const from = r.path === "memory" ? `memory (${r.memory_local} own cop${r.memory_local === 1 ? "y" : "ies"}, ` +
      `${r.memory_peer} from a peer)` : r.path;
    $("driver-recovery").textContent = `last recovery (attempt ${r.attempt}): state from ${from}, restore ` +
      `${fmt(r.restore_s, 2)} s` + (r.recovery_s !== undefined ? `, first step done ${fmt(r.recovery_s, 1)} s after the ` +
      `fault, ${r.steps_repeated} step(s) repeated` : "") +
      (r.world !== undefined ? `, ${r.warm_ranks} of ${r.world} rank(s) from warm standbys` : "") +
      (r.memory_skipped ? ` (not from memory: ${r.memory_skipped})` : "");
  }
  const ev = $("driver-events");
  ev.replaceChildren(...d.events.filter((e) => e.event !== "summary").slice(-8).map((e) => {
    const li = document.createElement("li");
    const what = e.reason || e.why || e.text || (e.step !== undefined ? `step ${e.step}` : "");
    li.textContent = `${e.mono.toFixed(1)} s ${e.event}` + (what ? `: ${what}` : "");
    return li;
  }));
}

function render(st) {
  const j = st.job;
  $("step").textContent = j.step === null ? "–" : String(j.step);
  $("loss").textContent = fmt(j.loss, 4);
  $("tps").textContent = fmtInt(j.tokens_per_s);
  $("mfu").textContent = j.mfu === null ? "–" : fmt(100 * j.mfu, 1) + "%";
  $("elapsed").textContent = duration(j.elapsed_s);
  $("world").textContent = String(j.world);
  const state = $("job-state");
  state.textContent = j.state === "running" ? "running" : j.state + (j.failure ? ": " + j.failure : "");
  state.className = "state " + j.state;
  $("error").hidden = !j.error;
  $("error").textContent = j.error || "";
  $("run-dir").textContent = j.out_dir ? "· run: " + j.out_dir : "";
  document.title = `megascale: step ${j.step ?? "–"}`;
  const h = st.history;
  charts.loss.setData([h.step, h.loss]);
  charts.tps.setData([h.step, h.tokens_per_s]);
  drawStragglers(st.stragglers);
  drawHeatmap(st.heatmap);
  markStalls(st.stragglers);
  drawRanks(st.ranks);
  drawDriver(st.driver);
  document.body.dataset.step = j.step === null ? "" : String(j.step);
}

async function poll() {
  try {
    const res = await fetch("/api/status", { cache: "no-store" });
    if (!res.ok) throw new Error(`/api/status: HTTP ${res.status}`);
    render(await res.json());
  } catch (e) {
    const state = $("job-state");
    if (state.className.indexOf("finished") < 0) {
      state.textContent = "launcher unreachable (" + e.message + ")";
      state.className = "state error";
    }
  }
  setTimeout(poll, 1000);
}
poll();
