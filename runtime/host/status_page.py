# ruff: noqa: E501, RUF001  (an HTML document and its script: long lines and arrows are fine)
"""The status page at `GET /`: one self-contained HTML document, no build step, nothing
loaded from the internet, made for 10,000 subscriptions (issue 36).

One request per refresh: `GET /broker/summary` (actors/delivery/api/summary.py) answers
the totals, the origins with their circuit breakers, readiness, the cluster's instances
and one page of subscriptions, those that need attention first (failing, commit refused,
breaker open, stalled, lagging, paused), searched and filtered on the server (by id, group, topic,
endpoint, state). A subscription's details (buttons, charts, recent attempts, partitions,
the owner of each partition in a cluster) are fetched only while its row is open
(`GET /broker/subscription/{id}/{groupId}`), the delay levels only while their section is
open. A refresh starts `REFRESH_MS` after the last one ended: rounds never overlap, and a
slow runtime is asked less often. Values the API gives as `null` (nothing counted yet, a
partition never committed) show as "-", never as 0. A partition whose commits Kafka
refuses (a live consumer in the subscription's group, #34) shows the refused position
beside the last one Kafka accepted, in its row and in its details; when Kafka cannot be
asked what it holds, the details say so ("positions unavailable: ...") and still show the
refused positions, which the runtime knows itself.

It asks for the admin token when the API answers 401 (kept in the tab's sessionStorage
only), and shows only what the APIs show (they redact secrets).

The script is its own resource (`GET /status.js`, `SCRIPT`), so the page's
Content-Security-Policy (`CSP`) allows no inline script: text that reaches the page from
an API can never run as code. Only http(s) addresses become links. No page may frame it
(`frame-ancestors 'none'`).

`window.hookstreamRefreshes` keeps the start and end (`performance.now()`) of the last
rounds: the browser test checks from it that rounds never overlap and weighs them."""

from __future__ import annotations

from typing import Final

PAGE: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hookstream status</title>
<style>
  :root { --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --muted: #57606a; --line: #d0d7de; }
  body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2328; background: #f6f8fa; }
  header { background: #24292f; color: #fff; padding: 10px 20px; display: flex; gap: 16px;
           align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header .ready { font-weight: 600; }
  main { padding: 14px 20px; }
  h2 { font-size: 15px; margin: 16px 0 6px; }
  .panel { background: #fff; border: 1px solid var(--line); border-radius: 6px;
           padding: 8px 14px; margin-bottom: 12px; overflow-x: auto; }
  .totals { display: flex; gap: 8px 18px; flex-wrap: wrap; align-items: baseline; }
  .totals b { font-size: 16px; }
  .state, .why { padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
           color: #fff; background: var(--muted); white-space: nowrap; }
  .state.running, .state.closed { background: var(--ok); }
  .state.paused, .state.half_open, .why.paused, .why.lagging { background: var(--warn); }
  .state.failed, .state.waiting_for_broker, .state.stalled, .state.disabled, .state.open,
  .state.refused,
  .why.failing, .why.commit_refused, .why.breaker_open, .why.stalled { background: var(--bad); }
  .state.in-process { background: #0969da; }
  .state.gone { background: var(--bad); } .state.stopped { background: var(--muted); }
  a.filter { cursor: pointer; text-decoration: none; }
  a.filter .why { opacity: 0.35; } a.filter.some .why { opacity: 1; }
  .muted { color: var(--muted); }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: right; padding: 3px 6px; border-bottom: 1px solid var(--line); }
  th { font-weight: 600; background: #f6f8fa; white-space: nowrap; }
  th.l, td.l { text-align: left; }
  td.endpoint { max-width: 220px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  tr.sub td { white-space: nowrap; } tr.sub td .muted { white-space: normal; font-size: 12px; }
  td.topics { max-width: 200px; overflow: hidden; text-overflow: ellipsis; }
  tr.sub:hover { background: #f6f8fa; } tr.sub.open { background: #ddf4ff; }
  tr.sub td.name { font-weight: 600; cursor: pointer; }
  td.details { background: #fbfcfd; text-align: left; padding: 8px 14px 14px; }
  button { font: inherit; padding: 2px 10px; border: 1px solid var(--line); border-radius: 5px;
           background: #f6f8fa; cursor: pointer; }
  button:hover { background: #eaeef2; } button:disabled { opacity: 0.5; cursor: default; }
  .toolbar { display: flex; gap: 10px; align-items: center; flex-wrap: wrap; margin-bottom: 8px; }
  .toolbar input, .toolbar select { font: inherit; padding: 2px 6px; }
  .row { display: flex; gap: 14px; align-items: baseline; flex-wrap: wrap; }
  .failures { margin: 6px 0 0; padding-left: 18px; color: var(--bad); }
  #error { color: var(--bad); margin-bottom: 10px; }
  .charts { display: flex; gap: 18px; margin-top: 6px; flex-wrap: wrap; }
  .chart { font-size: 12px; } .chart svg { display: block; background: #f6f8fa;
           border: 1px solid var(--line); border-radius: 4px; }
  .p50 { stroke: #0969da; } .p99 { stroke: #cf222e; } .rate { stroke: #1a7f37; }
  .legend-p50 { color: #0969da; } .legend-p99 { color: #cf222e; } .legend-rate { color: #1a7f37; }
  table.inner { margin-top: 8px; } table.inner td, table.inner th { font-size: 12px; }
  td.response { max-width: 420px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
           text-align: left; font-family: monospace; }
  #lookup input { font: inherit; padding: 2px 6px; margin-right: 6px; }
  #lookup input.num { width: 70px; }
  #lookup-state { font-weight: 600; margin-left: 8px; }
  details > summary { cursor: pointer; font-weight: 600; }
</style>
</head>
<body>
<header><h1>hookstream</h1><span class="ready" id="ready">…</span>
<span class="muted" id="about"></span><span class="muted" id="updated"></span></header>
<main>
<div id="error"></div>
<div class="panel totals" id="totals"><span class="muted">loading…</span></div>
<div id="origins-box" hidden><h2>Origins <span class="muted" id="origins-more"></span></h2>
<div class="panel" id="origins"></div></div>
<div id="cluster" hidden><h2>Cluster <span class="muted" id="cluster-lag"></span></h2>
<div class="panel" id="cluster-instances"></div></div>
<h2>Subscriptions</h2>
<div class="panel">
<div class="toolbar">
<input id="search" type="search" placeholder="search id, group, topic, endpoint, state" size="40" aria-label="search">
<select id="state" aria-label="state">
<option value="">all</option><option value="attention">needing attention</option>
<option value="failing">failing</option><option value="commit_refused">commit refused</option>
<option value="breaker_open">breaker open</option>
<option value="stalled">stalled</option><option value="lagging">lagging</option>
<option value="paused">paused</option><option value="running">running</option>
<option value="starting">starting</option><option value="failed">failed</option>
<option value="waiting_for_broker">waiting for broker</option><option value="disabled">disabled</option>
</select>
<button id="prev" type="button">‹ prev</button><span id="range" class="muted"></span>
<button id="next" type="button">next ›</button>
</div>
<table id="subscriptions"><thead><tr><th class="l">subscription</th><th class="l">state</th>
<th class="l">endpoint</th><th class="l">topics</th><th>lag</th><th>delivered</th>
<th title="failed attempts">failed</th><th title="dead-lettered">dead</th>
<th title="the oldest record not finished">oldest</th><th title="partitions read here">parts</th>
<th class="l">breaker</th></tr></thead><tbody id="rows"></tbody></table>
</div>
<form id="lookup" class="panel"><b>What happened to a record?</b>
<input id="lookup-id" placeholder="subscription id" aria-label="subscription id" size="16">
<input id="lookup-group" placeholder="group" aria-label="group" size="16">
<input id="lookup-topic" placeholder="topic" aria-label="topic">
<input id="lookup-partition" class="num" placeholder="partition" aria-label="partition">
<input id="lookup-offset" class="num" placeholder="offset" aria-label="offset">
or <input id="lookup-webhook" placeholder="webhook-id" aria-label="webhook-id" size="30">
<button type="submit">Look up</button><span id="lookup-state"></span>
<div id="lookup-result"></div></form>
<details id="delay-box" class="panel"><summary>Delay levels</summary>
<div id="delay"><p class="muted">loading…</p></div></details>
</main>
<script src="/status.js"></script>
</body>
</html>
"""

SCRIPT: Final = """"use strict";
const REFRESH_MS = 3000;   // between the end of a round and the start of the next
const PAGE_SIZE = 50;
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v); else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
};
const $ = (id) => document.getElementById(id);
const dash = (v) => v == null ? "-" : String(v);
const token = () => sessionStorage.getItem("hookstream-token") || "";
// Only http(s) addresses become links: an address comes from the status topic, which any
// client of the broker may write (a `javascript:` one would run in this page).
const link = (address) => {
  let url = null;
  try { url = new URL(address); } catch (e) { url = null; }
  return url && (url.protocol === "http:" || url.protocol === "https:")
    ? el("a", {href: url.href, rel: "noopener noreferrer"}, address) : String(address ?? "");
};

async function api(path, options = {}) {
  const headers = Object.assign({"Accept": "application/json"}, options.headers || {});
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({}, options, {headers}));
  if (response.status === 401) {
    const given = prompt("Admin token for this hookstream instance");
    if (given) { sessionStorage.setItem("hookstream-token", given); return api(path, options); }
    throw new Error("the admin API needs a token");
  }
  const body = await response.json().catch(() => ({}));
  if (!response.ok && response.status !== 503) {
    throw new Error((body.reason || response.statusText) + (body.details ? ": " + body.details : ""));
  }
  return body;
}

const ago = (ms) => ms == null ? "-" : ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
const when = (at) => at == null ? "-" : new Date(at).toLocaleTimeString();
const pct = (r) => r == null ? "-" : (r * 100).toFixed(1) + "%";
const path = (id, group) => "/broker/subscription/" + encodeURIComponent(id) + "/" +
  encodeURIComponent(group);

// -- what is shown: the filter, the page, the open rows --------------------------------
const view = {q: "", state: "", offset: 0, matched: 0};
const opened = new Map();  // key -> {id, group, node}
let started = null;        // the runtime's start (ms, this clock), from /healthz once

function query() {
  const parts = ["limit=" + PAGE_SIZE, "offset=" + view.offset];
  if (view.q) parts.push("q=" + encodeURIComponent(view.q));
  if (view.state === "attention") parts.push("attention=true");
  else if (view.state) parts.push("state=" + encodeURIComponent(view.state));
  return "/broker/summary?" + parts.join("&");
}

// -- refresh: one summary request; the next round starts REFRESH_MS after this one ends --
window.hookstreamRefreshes = [];
let busy = false, again = false, timer = null;
async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  clearTimeout(timer);
  const round = {start: performance.now(), end: null};
  try { await round_(); showError(null); } catch (e) { showError(e); }
  round.end = performance.now();
  window.hookstreamRefreshes.push(round);
  if (window.hookstreamRefreshes.length > 50) window.hookstreamRefreshes.shift();
  busy = false;
  if (again) { again = false; refresh(); } else timer = setTimeout(refresh, REFRESH_MS);
}

async function round_() {
  const summary = (await api(query())).data;
  view.matched = summary.matched;
  readyView(summary.runtime);
  totalsView(summary.totals);
  originsView(summary.origins, summary.origins_total);
  clusterView(summary.cluster);
  rowsView(summary.items);
  const shown = new Set(summary.items.map((r) => r.key));  // open rows on this page only
  await Promise.all([...opened].filter(([key]) => shown.has(key)).map(([, e]) => openDetails(e)));
  if ($("delay-box").open) await delayRefresh();
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

function readyView(runtime) {
  const badge = $("ready");
  if (!runtime) return;
  const more = runtime.reasons_total > runtime.reasons.length
    ? " (and " + (runtime.reasons_total - runtime.reasons.length) + " more)" : "";
  badge.textContent = runtime.ready ? "ready" : "not ready: " + runtime.reasons.join("; ") + more;
  badge.style.color = runtime.ready ? "#4ac26b" : "#ff8182";
  if (started != null) {
    const up = (Date.now() - started) / 1000;
    $("about").textContent = "v" + runtime.version + " · up " +
      (up < 3600 ? Math.floor(up / 60) + " min" : (up / 3600).toFixed(1) + " h");
  }
}

const WHY = {failing: "failing", commit_refused: "commit refused", breaker_open: "breaker open",
             stalled: "stalled", lagging: "lagging", paused: "paused"};
// A refused commit: the position Kafka refused and the last one it accepted ("-": none).
const refusedText = (c) => c.topic + "-" + c.partition + ": " + dash(c.position) +
  " refused, " + dash(c.accepted) + " accepted";
function totalsView(t) {
  const states = Object.entries(t.states).map(([s, n]) => el("span", {}, s + " " + n));
  const reasons = Object.entries(WHY).map(([key, label]) => el("a", {
    "class": "filter" + (t.attention[key] ? " some" : ""), "data-why": key,
    title: "show only these", onclick: () => setFilter(key)},
    el("span", {"class": "why " + key}, label + " " + t.attention[key])));
  $("totals").replaceChildren(
    el("span", {}, el("b", {id: "total-subscriptions"}, t.subscriptions), t.subscriptions === 1 ? " subscription" : " subscriptions"),
    ...states,
    el("a", {"class": "filter" + (t.needing_attention ? " some" : ""), onclick: () => setFilter("attention")},
      el("span", {"class": "why failing", id: "total-attention"}, t.needing_attention + " need attention")),
    ...reasons,
    el("span", {}, "lag " + t.lag), el("span", {}, "delivered " + t.delivered),
    el("span", {}, "failed attempts " + t.failed_attempts),
    el("span", {}, "dead-lettered " + t.dead_lettered));
}

function originsView(origins, total) {
  $("origins-box").hidden = !origins.length;
  $("origins-more").textContent = total > origins.length
    ? "(" + origins.length + " of " + total + ": breakers not closed first)" : "";
  const head = el("tr", {}, ...["origin", "breaker", "opened", "next probe", "throttled until",
    "rate limit", "connections", "opens at"].map((h, i) => el("th", {"class": i < 2 ? "l" : ""}, h)));
  const rows = origins.map((o) => el("tr", {"data-origin": o.origin},
    el("td", {"class": "l"}, o.origin),
    el("td", {"class": "l"}, el("span", {"class": "state " + o.breaker}, o.breaker_enabled ? o.breaker.replace("_", "-") : "off"),
      o.transitions.length ? el("span", {"class": "muted"}, " " + o.transitions[0].why) : ""),
    el("td", {}, when(o.opened_at)), el("td", {}, when(o.probe_at)),
    el("td", {}, when(o.throttled_until)), el("td", {}, o.rate_limit == null ? "-" : o.rate_limit + "/s"),
    el("td", {}, o.max_connections),
    el("td", {}, pct(o.failure_ratio) + " of " + o.min_requests + ", for " + ago(o.open_ms))));
  $("origins").replaceChildren(el("table", {}, head, ...rows));
}

function clusterView(cluster) {
  const box = $("cluster");
  if (!cluster) { box.hidden = true; return; }
  box.hidden = false;
  $("cluster-lag").textContent = "total lag " + cluster.total_lag;
  const head = el("tr", {}, ...["instance", "admin", "state", "last seen", "partitions", "lag"]
    .map((h, i) => el("th", {"class": i < 3 ? "l" : ""}, h)));
  const rows = cluster.instances.map((i) => el("tr", {"data-instance": i.instance},
    el("td", {"class": "l"}, i.instance), el("td", {"class": "l"}, link(i.address)),
    el("td", {"class": "l"}, el("span", {"class": "state " + i.state}, i.state)),
    el("td", {}, ago(i.last_seen_ms_ago) + " ago"), el("td", {"class": "owned"}, i.partitions),
    el("td", {}, i.state === "running" ? dash(i.lag) : "-")));
  $("cluster-instances").replaceChildren(el("table", {}, head, ...rows));
}

function rowsView(items) {
  const last = Math.min(view.offset + items.length, view.matched);
  $("range").textContent = view.matched ? (view.offset + 1) + "-" + last + " of " + view.matched : "none";
  $("prev").disabled = view.offset === 0;
  $("next").disabled = last >= view.matched;
  const rows = [];
  for (const r of items) {
    const open = opened.get(r.key);
    rows.push(el("tr", {"class": "sub" + (open ? " open" : ""), "data-key": r.key},
      el("td", {"class": "l name", title: "show details", onclick: () => toggle(r)},
        (open ? "▾ " : "▸ ") + r.id + " / " + r.group),
      el("td", {"class": "l"}, el("span", {"class": "state " + r.state}, r.state),
        ...r.attention.filter((a) => a !== "paused" || r.state !== "paused").map((a) =>
          el("span", {"class": "why " + a}, WHY[a])),
        r.reason ? el("div", {"class": "muted"}, r.reason) : "",
        (r.refused_commits || []).length ? el("div", {"class": "muted refused"},
          "commits " + r.refused_commits.map(refusedText).join("; ")) : ""),
      el("td", {"class": "l endpoint", title: r.endpoint}, r.endpoint),
      el("td", {"class": "l topics", title: r.topics.join(", ")}, r.topics.join(", ")),
      el("td", {"class": "lag"}, dash(r.lag)), el("td", {}, dash(r.delivered)),
      el("td", {}, dash(r.failed_attempts)), el("td", {}, dash(r.dead_lettered)),
      el("td", {}, ago(r.oldest_pending_ms)), el("td", {}, r.partitions),
      el("td", {"class": "l"}, r.breaker ? el("span", {"class": "state " + r.breaker}, r.breaker) : "-")));
    if (open) rows.push(el("tr", {"class": "details-row"}, open.cell));
  }
  $("rows").replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", {"class": "l muted", colspan: 11},
    view.q || view.state ? "no subscription matches" : "no subscriptions yet: POST /broker/subscription"))]));
}

function toggle(r) {
  if (opened.has(r.key)) { opened.delete(r.key); refresh(); return; }
  const entry = {id: r.id, group: r.group, cell: el("td", {"class": "details", colspan: 11, "data-key": r.key},
    el("span", {"class": "muted"}, "loading…"))};
  opened.set(r.key, entry);
  refresh();
}

function setFilter(state) {
  view.state = state; view.offset = 0; $("state").value = state; refresh();
}

// -- one subscription, open ------------------------------------------------------------
async function openDetails(entry) {
  try {
    const one = (await api(path(entry.id, entry.group))).data;
    entry.cell.replaceChildren(detailsView(entry, one));
  } catch (e) { entry.cell.replaceChildren(el("p", {"class": "muted"}, String(e.message || e))); }
}

async function act(entry, verb, body) {
  try {
    await api(path(entry.id, entry.group) + "/" + verb, {method: "POST", body: JSON.stringify(body || {})});
  } catch (e) { showError(e); }
  refresh();
}

// Where records go: an HTTP endpoint, or an in-process subscription's Python handler.
const target = (m) => m.type === "handler" ? "handler " + m.handler : m.method + " " + m.uri;

function detailsView(entry, one) {
  const sub = one.consumer, status = one.status || {};
  const state = status.state || "unknown";
  const paused = state === "paused" || state === "disabled";
  const endpoint = status.endpoint || {};
  const inProcess = status.in_process;
  const buttons = inProcess ? [el("span", {"class": "state in-process"}, "in-process (read-only)")]
    : [el("button", {"class": paused ? "resume" : "pause", type: "button",
       onclick: () => act(entry, paused ? "resume" : "pause")}, paused ? "Resume" : "Pause")];
  if (!inProcess && sub.subscriptionMethod.deadLetterTopic) {
    buttons.push(el("button", {"class": "replay", type: "button",
      onclick: () => act(entry, "replay", {source: "deadLetter"})}, "Replay dead letters"));
  }
  const failures = (endpoint.recent_failures || []).slice(0, 5).map((f) =>
    el("li", {}, when(f.at) + " · " + (f.status == null ? "no answer" : "HTTP " + f.status) +
      (f.error ? ": " + f.error : "")));
  return el("section", {"class": "sub", "data-key": sub.id + "_" + (sub.group ? sub.group.id : sub["group.id"])},
    el("div", {"class": "row"}, el("span", {"class": "state " + state}, state),
      el("span", {"class": "muted target"}, target(sub.subscriptionMethod)), ...buttons,
      status.since ? el("span", {"class": "muted"}, "since " + new Date(status.since).toLocaleString()) : ""),
    status.reason ? el("div", {"class": "muted"}, status.reason) : "",
    endpoint.origin ? el("div", {"class": "muted"}, "origin " + endpoint.origin.origin + ": breaker " +
      endpoint.origin.breaker + ", last status " + dash(endpoint.last_status) +
      ", error rate " + pct(endpoint.error_rate)) : "",
    failures.length ? el("ul", {"class": "failures"}, ...failures) : "",
    activityView(entry, status.activity),
    partitionTable(status.partitions),
    status.positions_unavailable ? el("p", {"class": "muted unavailable"},
      "positions unavailable: " + status.positions_unavailable) : "",
    refusedTable(status.refused_commits, status.positions_unavailable),
    one.cluster ? ownersView(one.cluster) : "");
}

function partitionTable(partitions) {
  if (!partitions || !partitions.length) return el("p", {"class": "muted"}, "no partitions assigned here");
  const head = el("tr", {}, ...["partition", "committed", "high watermark", "lag", "in flight",
    "retrying", "oldest pending", "last error"].map((h, i) => el("th", {"class": i ? "" : "l"}, h)));
  const rows = partitions.map((p) => el("tr", {"data-partition": p.topic + "-" + p.partition},
    el("td", {"class": "l"}, p.topic + "-" + p.partition), el("td", {"class": "committed"}, dash(p.committed)),
    el("td", {"class": "highwater"}, dash(p.highwater)), el("td", {"class": "lag"}, dash(p.lag)),
    el("td", {}, dash(p.inflight)), el("td", {}, dash(p.retrying)),
    el("td", {}, ago(p.oldest_pending_ms)), el("td", {}, p.last_error || "-")));
  return el("table", {"class": "inner partitions"}, head, ...rows);
}

// Kafka's `committed` is in the partition table; what it refused is apart (#34). The
// refused positions are the runtime's own; when Kafka could not be read (`unavailable`)
// `accepted` is the last position Kafka took from this instance.
function refusedTable(refused, unavailable) {
  if (!refused || !refused.length) return "";
  const accepted = unavailable ? "accepted from here" : "accepted (Kafka holds)";
  const head = el("tr", {}, ...["partition", "refused", accepted, "why"]
    .map((h, i) => el("th", {"class": i === 0 || i === 3 ? "l" : ""}, h)));
  const rows = refused.map((c) => el("tr", {"data-refused": c.topic + "-" + c.partition},
    el("td", {"class": "l"}, c.topic + "-" + c.partition), el("td", {"class": "position"}, dash(c.position)),
    el("td", {"class": "accepted"}, dash(c.accepted)), el("td", {"class": "l"}, c.reason || "-")));
  return el("div", {}, el("b", {}, "Commits Kafka refused"), el("table", {"class": "inner refused"}, head, ...rows));
}

function ownersView(cluster) {
  const head = el("tr", {}, ...["partition", "owner", "lag"].map((h, i) => el("th", {"class": i < 2 ? "l" : ""}, h)));
  const rows = cluster.partitions.map((p) => el("tr", {"data-owner": p.topic + "-" + p.partition},
    el("td", {"class": "l"}, p.topic + "-" + p.partition),
    el("td", {"class": "l owner"}, p.instance ?? "unowned (was " + p.last_owner + ")"),
    el("td", {}, dash(p.lag))));
  return el("div", {}, el("b", {}, "Owners in the cluster (total lag " + cluster.total_lag + ")"),
    el("table", {"class": "inner owners"}, head, ...rows));
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A small line chart of equally spaced values (null: a gap); `log` for latencies. A lone
// value is a dot; values all equal sit in the middle (no span to scale).
function chart(series, title, unit, log) {
  const W = 260, H = 54, PAD = 4;
  const shown = (v) => v != null && (!log || v > 0);
  const all = series.flatMap((s) => s.values).filter(shown);
  const box = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img"});
  const scale = (v) => log ? Math.log10(v) : v;
  const top = all.length ? Math.max(...all.map(scale)) : 1;
  const bottom = log && all.length ? Math.min(...all.map(scale)) : 0;
  const span = top - bottom;
  const y = (v) => span ? H - PAD - (H - 2 * PAD) * (scale(v) - bottom) / span : H / 2;
  for (const s of series) {
    const n = s.values.length;
    let d = "";
    s.values.forEach((v, i) => {
      if (!shown(v)) return;
      const x = PAD + (W - 2 * PAD) * (n > 1 ? i / (n - 1) : 0.5);
      d += (d && shown(s.values[i - 1]) ? " L" : " M") + x.toFixed(1) + " " + y(v).toFixed(1);
      if (!shown(s.values[i - 1]) && !shown(s.values[i + 1])) {
        box.append(svg("circle", {cx: x, cy: y(v), r: 3, class: s.cls, fill: "none", "stroke-width": 2}));
      }
    });
    if (d) box.append(svg("path", {d, fill: "none", "stroke-width": 1.6, class: s.cls}));
  }
  if (!all.length) {
    const t = svg("text", {x: W / 2, y: H / 2 + 4, "text-anchor": "middle", fill: "#57606a", "font-size": 12});
    t.textContent = "no data";
    box.append(t);
  }
  const last = (s) => [...s.values].reverse().find((v) => v != null);
  const legend = series.map((s) => el("span", {"class": "legend-" + s.cls},
    " " + s.label + " " + dash(last(s)) + (last(s) != null ? " " + unit : "")));
  return el("div", {"class": "chart"}, el("div", {}, title, ...legend), box);
}

function activityView(entry, activity) {
  if (!activity) return "";
  const series = activity.series;
  const charts = el("div", {"class": "charts"},
    chart([{values: series.delivered_per_s, cls: "rate", label: "now"}],
      "delivered / s, last 15 min", "/s", false),
    chart([{values: series.p50_ms, cls: "p50", label: "p50"},
           {values: series.p99_ms, cls: "p99", label: "p99"}],
      "latency (log scale)", "ms", true));
  const attempts = activity.recent_attempts || [];
  if (!attempts.length) return el("div", {}, charts, el("p", {"class": "muted"}, "no attempts yet"));
  const head = el("tr", {}, ...["sent", "record", "attempt", "status", "latency", "error",
    "response"].map((h, i) => el("th", {"class": i < 2 ? "l" : ""}, h)));
  const rows = attempts.slice().reverse().map((a) => {
    const r = a.record, name = r.topic + "-" + r.partition + "@" + r.offset;
    return el("tr", {"class": "attempt"},
      el("td", {"class": "l"}, when(a.at)),
      el("td", {"class": "l"}, el("a", {href: "#lookup", "class": "record",
        onclick: () => lookup(entry, {topic: r.topic, partition: r.partition, offset: r.offset})}, name)),
      el("td", {}, a.attempt), el("td", {"class": "status"}, dash(a.status)),
      el("td", {}, a.latencyMs == null ? "-" : a.latencyMs.toFixed(1) + " ms"),
      el("td", {}, a.error || "-"), el("td", {"class": "response", title: a.response || ""}, a.response || ""));
  });
  return el("div", {}, charts, el("table", {"class": "inner attempts"}, head, ...rows));
}

// -- what happened to a record ---------------------------------------------------------
async function lookup(entry, record) {
  $("lookup-id").value = entry.id;
  $("lookup-group").value = entry.group;
  for (const f of ["topic", "partition", "offset"]) $("lookup-" + f).value = record[f] ?? "";
  $("lookup-webhook").value = record.webhookId ?? "";
  const query = record.webhookId ? "webhookId=" + encodeURIComponent(record.webhookId)
    : ["topic", "partition", "offset"].map((f) => f + "=" + encodeURIComponent(record[f])).join("&");
  const out = $("lookup-result"), state = $("lookup-state");
  try {
    const data = (await api(path(entry.id, entry.group) + "/attempts?" + query)).data;
    state.textContent = data.state + (data.record.webhookId ? " · " + data.record.webhookId : "");
    state.className = "state-" + data.state;
    const head = el("tr", {}, ...["sent", "attempt", "status", "latency", "error", "response"]
      .map((h, i) => el("th", {"class": i ? "" : "l"}, h)));
    const rows = data.attempts.map((a) => el("tr", {},
      el("td", {"class": "l"}, new Date(a.at).toLocaleString()), el("td", {}, a.attempt),
      el("td", {}, dash(a.status)), el("td", {}, a.latencyMs == null ? "-" : a.latencyMs.toFixed(1) + " ms"),
      el("td", {}, a.error || "-"), el("td", {"class": "response", title: a.response || ""}, a.response || "")));
    out.replaceChildren(data.reason ? el("p", {"class": "muted"}, data.reason) : "",
      rows.length ? el("table", {"class": "inner attempts"}, head, ...rows) : "");
  } catch (e) { state.textContent = ""; out.replaceChildren(el("p", {"class": "muted"}, String(e.message || e))); }
}

$("lookup").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = (f) => $("lookup-" + f).value.trim();
  if (!value("id") || !value("group")) { $("lookup-state").textContent = "name the subscription: id and group"; return; }
  lookup({id: value("id"), group: value("group")}, value("webhook") ? {webhookId: value("webhook")}
    : {topic: value("topic"), partition: value("partition"), offset: value("offset")});
});

// -- delay levels, while their section is open -----------------------------------------
async function delayRefresh() {
  const delay = await api("/delay/levels").catch(() => ({data: []}));
  const levels = delay.data;
  if (!levels || !levels.length) { $("delay").replaceChildren(el("p", {"class": "muted"}, "no delay levels configured")); return; }
  const head = el("tr", {}, ...["level", "delay", "topics", "waiting", "forwarded",
    "lateness p99"].map((h, i) => el("th", {"class": i ? "" : "l"}, h)));
  $("delay").replaceChildren(el("table", {}, head, ...levels.map((l) => el("tr", {},
    el("td", {"class": "l"}, l.name), el("td", {}, ago(l.delay_ms)), el("td", {}, (l.topics || []).join(", ")),
    el("td", {}, dash(l.waiting)), el("td", {}, dash(l.forwarded)), el("td", {}, ago(l.lateness_p99_ms))))));
}
$("delay-box").addEventListener("toggle", () => { if ($("delay-box").open) refresh(); });

function showError(e) { $("error").textContent = e ? String(e.message || e) : ""; }

let typing = null;
$("search").addEventListener("input", () => {
  clearTimeout(typing);  // one request when the typing pauses, not one per key
  typing = setTimeout(() => { view.q = $("search").value.trim(); view.offset = 0; refresh(); }, 250);
});
$("state").addEventListener("change", () => setFilter($("state").value));
$("prev").addEventListener("click", () => { view.offset = Math.max(0, view.offset - PAGE_SIZE); refresh(); });
$("next").addEventListener("click", () => { view.offset += PAGE_SIZE; refresh(); });

api("/healthz").then((h) => { if (h.uptime_s != null) started = Date.now() - h.uptime_s * 1000; })
  .catch(() => null);
refresh();
"""

CSP: Final = ("default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self'; "
              "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
              "frame-ancestors 'none'")
HEADERS: Final = {"Cache-Control": "no-store", "Content-Security-Policy": CSP,
                  "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
                  "Referrer-Policy": "no-referrer"}
