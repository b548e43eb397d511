# ruff: noqa: E501, RUF001  (an HTML document: long lines and typographic dashes are fine)
"""The status page at `GET /`: one self-contained HTML document, no build step, nothing
loaded from the internet. It reads the same JSON APIs as any client
(`/broker/subscription`, `/broker/subscription/{id}/{groupId}` and its `/attempts`,
`/delay/levels`, `/readyz`, `/healthz` for the version and uptime, and `/cluster` when
`[cluster] status_topic` is set: the cluster panel),
refreshes itself every few seconds, asks for the admin token when the API answers 401
(kept in the tab's sessionStorage only), and shows only what the APIs show (they redact
secrets).

The script is its own resource (`GET /status.js`, `SCRIPT`), so the page's
Content-Security-Policy (`CSP`) allows no inline script: text that reaches the page from
an API can never run as code. Only http(s) addresses become links. No page may frame it
(`frame-ancestors 'none'`).

Per subscription (issue 27): delivered per second and p50/p99 latency over the last 15
minutes as small inline SVG charts (the status API's `activity.series`, from memory; no
library), the recent attempts with status, latency and the start of a failed answer, each
row opening that record's attempts in the lookup box (topic/partition/offset or
webhook-id) at the top."""

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
           align-items: baseline; }
  header h1 { font-size: 18px; margin: 0; }
  header .ready { font-weight: 600; }
  main { padding: 16px 20px; max-width: 1200px; }
  section.sub { background: #fff; border: 1px solid var(--line); border-radius: 6px;
                margin-bottom: 14px; padding: 10px 14px; }
  .row { display: flex; gap: 14px; align-items: baseline; flex-wrap: wrap; }
  .name { font-weight: 600; font-size: 15px; }
  .state { padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600;
           color: #fff; background: var(--muted); }
  .state.running { background: var(--ok); } .state.paused { background: var(--warn); }
  .state.failed, .state.waiting_for_broker, .state.stalled, .state.disabled, .state.refused { background: var(--bad); }
  .state.in-process { background: #0969da; }
  .muted { color: var(--muted); }
  table { border-collapse: collapse; margin-top: 8px; width: 100%; }
  th, td { text-align: right; padding: 3px 8px; border-bottom: 1px solid var(--line); }
  th:first-child, td:first-child { text-align: left; }
  button { font: inherit; padding: 2px 10px; border: 1px solid var(--line); border-radius: 5px;
           background: #f6f8fa; cursor: pointer; }
  button:hover { background: #eaeef2; }
  .failures { margin: 6px 0 0; padding-left: 18px; color: var(--bad); }
  #error { color: var(--bad); margin-bottom: 10px; }
  .state.gone { background: var(--bad); } .state.stopped { background: var(--muted); }
  #cluster table { background: #fff; }
  .charts { display: flex; gap: 18px; margin-top: 6px; flex-wrap: wrap; }
  .chart { font-size: 12px; } .chart svg { display: block; background: #f6f8fa;
           border: 1px solid var(--line); border-radius: 4px; }
  .p50 { stroke: #0969da; } .p99 { stroke: #cf222e; } .rate { stroke: #1a7f37; }
  .legend-p50 { color: #0969da; } .legend-p99 { color: #cf222e; } .legend-rate { color: #1a7f37; }
  table.attempts td { font-size: 12px; } td.response { max-width: 420px; overflow: hidden;
           text-overflow: ellipsis; white-space: nowrap; text-align: left; font-family: monospace; }
  #lookup { background: #fff; border: 1px solid var(--line); border-radius: 6px;
            padding: 8px 14px; margin-bottom: 14px; }
  #lookup input, #lookup select { font: inherit; padding: 2px 6px; margin-right: 6px; }
  #lookup input.num { width: 70px; }
  #lookup-state { font-weight: 600; margin-left: 8px; }
</style>
</head>
<body>
<header><h1>hookstream</h1><span class="ready" id="ready">…</span>
<span class="muted" id="about"></span><span class="muted" id="updated"></span></header>
<main>
<div id="error"></div>
<form id="lookup"><b>What happened to a record?</b>
<select id="lookup-sub" aria-label="subscription"></select>
<input id="lookup-topic" placeholder="topic" aria-label="topic">
<input id="lookup-partition" class="num" placeholder="partition" aria-label="partition">
<input id="lookup-offset" class="num" placeholder="offset" aria-label="offset">
or <input id="lookup-webhook" placeholder="webhook-id" aria-label="webhook-id" size="38">
<button type="submit">Look up</button><span id="lookup-state"></span>
<div id="lookup-result"></div></form>
<div id="cluster" hidden><h2>Cluster <span class="muted" id="cluster-lag"></span></h2>
<div id="cluster-instances"></div><div id="cluster-owners"></div></div>
<div id="subscriptions"><p class="muted">loading…</p></div>
<h2>Delay levels</h2>
<div id="delay"><p class="muted">loading…</p></div>
</main>
<script src="/status.js"></script>
</body>
</html>
"""

SCRIPT: Final = """"use strict";
const REFRESH_MS = 3000;
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v); else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : String(c ?? ""));
  return node;
};
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

const ago = (ms) => ms == null ? "–" : ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(1) + " s";
const groupId = (sub) => sub.group ? sub.group.id : sub["group.id"];
const path = (sub) => "/broker/subscription/" + encodeURIComponent(sub.id) + "/" +
  encodeURIComponent(groupId(sub));

async function act(sub, verb, body) {
  try {
    await api(path(sub) + "/" + verb, {method: "POST", body: JSON.stringify(body || {})});
  } catch (e) { showError(e); }
  refresh();
}

function partitionTable(partitions) {
  const head = el("tr", {}, ...["partition", "committed", "high watermark", "lag", "in flight",
    "retrying", "oldest pending", "last error"].map((h) => el("th", {}, h)));
  const rows = (partitions || []).map((p) => el("tr", {"data-partition": p.topic + "-" + p.partition},
    el("td", {}, p.topic + "-" + p.partition), el("td", {}, p.committed ?? 0),
    el("td", {}, p.highwater ?? 0), el("td", {"class": "lag"}, p.lag ?? 0),
    el("td", {}, p.inflight ?? 0), el("td", {}, p.retrying ?? 0),
    el("td", {}, ago(p.oldest_pending_ms)), el("td", {}, p.last_error || "")));
  return el("table", {}, head, ...rows);
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

// A small line chart of equally spaced values (null: a gap); `log` for latencies.
function chart(series, title, unit, log) {
  const W = 260, H = 54, PAD = 3;
  const all = series.flatMap((s) => s.values).filter((v) => v != null && (!log || v > 0));
  const box = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img"});
  const scale = (v) => log ? Math.log10(v) : v;
  const top = all.length ? Math.max(...all.map(scale)) : 1;
  const bottom = log && all.length ? Math.min(...all.map(scale)) : 0;
  const span = top - bottom || 1;
  for (const s of series) {
    const n = s.values.length;
    let d = "";
    const shown = (v) => v != null && (!log || v > 0);
    s.values.forEach((v, i) => {
      if (!shown(v)) return;
      const x = PAD + (W - 2 * PAD) * (n > 1 ? i / (n - 1) : 0.5);
      const y = H - PAD - (H - 2 * PAD) * (scale(v) - bottom) / span;
      d += (d && shown(s.values[i - 1]) ? " L" : " M") + x.toFixed(1) + " " + y.toFixed(1);
      if (!shown(s.values[i - 1]) && !shown(s.values[i + 1])) {  // a lone point: a dot
        box.append(svg("circle", {cx: x, cy: y, r: 2.5, class: s.cls, fill: "none", "stroke-width": 2}));
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
    " " + s.label + " " + (last(s) ?? "–") + (last(s) != null ? " " + unit : "")));
  return el("div", {"class": "chart"}, el("div", {}, title, ...legend), box);
}

function activityView(sub, activity) {
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
    "response"].map((h) => el("th", {}, h)));
  const rows = attempts.slice().reverse().map((a) => {
    const r = a.record, name = r.topic + "-" + r.partition + "@" + r.offset;
    return el("tr", {"class": "attempt"},
      el("td", {}, new Date(a.at).toLocaleTimeString()),
      el("td", {}, el("a", {href: "#lookup", "class": "record",
        onclick: () => lookup(sub, {topic: r.topic, partition: r.partition, offset: r.offset})}, name)),
      el("td", {}, a.attempt), el("td", {"class": "status"}, a.status ?? "–"),
      el("td", {}, a.latencyMs == null ? "–" : a.latencyMs.toFixed(1) + " ms"),
      el("td", {}, a.error || ""), el("td", {"class": "response", title: a.response || ""}, a.response || ""));
  });
  return el("div", {}, charts, el("table", {"class": "attempts"}, head, ...rows));
}

const lookupSubs = new Map();
function fillLookup(subs) {
  const select = document.getElementById("lookup-sub"), chosen = select.value;
  lookupSubs.clear();
  select.replaceChildren(...subs.map((sub) => {
    const key = sub.id + "_" + groupId(sub);
    lookupSubs.set(key, sub);
    return el("option", {value: key}, key);
  }));
  if (lookupSubs.has(chosen)) select.value = chosen;
}

async function lookup(sub, record) {
  const key = sub.id + "_" + groupId(sub);
  document.getElementById("lookup-sub").value = key;
  for (const f of ["topic", "partition", "offset"]) {
    document.getElementById("lookup-" + f).value = record[f] ?? "";
  }
  document.getElementById("lookup-webhook").value = record.webhookId ?? "";
  const query = record.webhookId ? "webhookId=" + encodeURIComponent(record.webhookId)
    : ["topic", "partition", "offset"].map((f) => f + "=" + encodeURIComponent(record[f])).join("&");
  const out = document.getElementById("lookup-result"), state = document.getElementById("lookup-state");
  try {
    const data = (await api(path(sub) + "/attempts?" + query)).data;
    state.textContent = data.state + (data.record.webhookId ? " · " + data.record.webhookId : "");
    state.className = "state-" + data.state;
    const head = el("tr", {}, ...["sent", "attempt", "status", "latency", "error", "response"]
      .map((h) => el("th", {}, h)));
    const rows = data.attempts.map((a) => el("tr", {},
      el("td", {}, new Date(a.at).toLocaleString()), el("td", {}, a.attempt),
      el("td", {}, a.status ?? "–"), el("td", {}, a.latencyMs == null ? "–" : a.latencyMs.toFixed(1) + " ms"),
      el("td", {}, a.error || ""), el("td", {"class": "response", title: a.response || ""}, a.response || "")));
    out.replaceChildren(data.reason ? el("p", {"class": "muted"}, data.reason) : "",
      rows.length ? el("table", {"class": "attempts"}, head, ...rows) : "");
  } catch (e) { state.textContent = ""; out.replaceChildren(el("p", {"class": "muted"}, String(e.message || e))); }
}

document.getElementById("lookup").addEventListener("submit", (event) => {
  event.preventDefault();
  const sub = lookupSubs.get(document.getElementById("lookup-sub").value);
  if (!sub) return;
  const value = (f) => document.getElementById("lookup-" + f).value.trim();
  lookup(sub, value("webhook") ? {webhookId: value("webhook")}
    : {topic: value("topic"), partition: value("partition"), offset: value("offset")});
});

// Where records go: an HTTP endpoint, or an in-process subscription's Python handler.
const target = (m) => m.type === "handler" ? "handler " + m.handler : m.method + " " + m.uri;

function subscriptionView(entry) {
  const sub = entry.consumer, status = entry.status || {};
  const key = sub.id + "_" + groupId(sub);
  const state = status.state || "unknown";
  const paused = state === "paused" || state === "disabled";
  const endpoint = status.endpoint || {}, counters = status.counters || {};
  const inProcess = sub.inProcess || status.in_process;
  const buttons = inProcess ? [el("span", {"class": "state in-process"}, "in-process (read-only)")]
    : [el("button", {"class": paused ? "resume" : "pause",
       onclick: () => act(sub, paused ? "resume" : "pause")}, paused ? "Resume" : "Pause")];
  if (!inProcess && sub.subscriptionMethod.deadLetterTopic) {
    buttons.push(el("button", {"class": "replay",
      onclick: () => act(sub, "replay", {source: "deadLetter"})}, "Replay dead letters"));
  }
  const failures = (endpoint.recent_failures || []).slice(0, 5).map((f) =>
    el("li", {}, new Date(f.at).toLocaleTimeString() + " · " + (f.status || "") + " " + (f.error || "")));
  return el("section", {"class": "sub", "data-key": key},
    el("div", {"class": "row"}, el("span", {"class": "name"}, key),
      el("span", {"class": "state " + state}, state),
      el("span", {"class": "muted"}, target(sub.subscriptionMethod)),
      ...buttons),
    status.reason ? el("div", {"class": "muted"}, status.reason) : "",
    el("div", {"class": "row muted"},
      el("span", {}, "delivered " + (counters.delivered ?? "–")),
      el("span", {}, "failed attempts " + (counters.failed_attempts ?? "–")),
      el("span", {"class": "dead"}, "dead-lettered " + (counters.dead_lettered ?? "–")),
      counters.filtered ? el("span", {}, "filtered " + counters.filtered) : "",
      el("span", {}, "endpoint: last status " + (endpoint.last_status ?? "–") +
        ", error rate " + ((endpoint.error_rate ?? 0) * 100).toFixed(1) + "%")),
    failures.length ? el("ul", {"class": "failures"}, ...failures) : "",
    activityView(sub, status.activity),
    partitionTable(status.partitions));
}

function delayView(levels) {
  if (!levels || !levels.length) return el("p", {"class": "muted"}, "no delay levels configured");
  const head = el("tr", {}, ...["level", "delay", "topics", "waiting", "forwarded",
    "lateness p99"].map((h) => el("th", {}, h)));
  return el("table", {}, head, ...levels.map((l) => el("tr", {},
    el("td", {}, l.name), el("td", {}, ago(l.delay_ms)), el("td", {}, (l.topics || []).join(", ")),
    el("td", {}, l.waiting ?? 0), el("td", {}, l.forwarded ?? 0), el("td", {}, ago(l.lateness_p99_ms)))));
}

function clusterView(cluster) {
  const box = document.getElementById("cluster");
  if (!cluster) { box.hidden = true; return; }
  box.hidden = false;
  document.getElementById("cluster-lag").textContent = "total lag " + cluster.total_lag;
  const head = el("tr", {}, ...["instance", "admin", "state", "last seen", "partitions", "lag"]
    .map((h) => el("th", {}, h)));
  const rows = cluster.instances.map((i) => el("tr", {"data-instance": i.instance},
    el("td", {}, i.instance), el("td", {}, link(i.address)),
    el("td", {}, el("span", {"class": "state " + i.state}, i.state)),
    el("td", {}, ago(i.last_seen_ms_ago) + " ago"), el("td", {"class": "owned"}, i.partitions),
    el("td", {}, i.state === "running" ? i.lag : "–")));
  document.getElementById("cluster-instances").replaceChildren(el("table", {}, head, ...rows));
  const ohead = el("tr", {}, ...["subscription", "partition", "owner", "lag"]
    .map((h) => el("th", {}, h)));
  const owners = [];
  for (const [key, sub] of Object.entries(cluster.subscriptions)) {
    for (const p of sub.partitions) {
      owners.push(el("tr", {"data-owner": key + "/" + p.topic + "-" + p.partition},
        el("td", {}, key), el("td", {}, p.topic + "-" + p.partition),
        el("td", {"class": "owner"}, p.instance ?? "unowned (was " + p.last_owner + ")"),
        el("td", {}, p.lag ?? "–")));
    }
  }
  document.getElementById("cluster-owners").replaceChildren(el("table", {}, ohead, ...owners));
}

function showError(e) { document.getElementById("error").textContent = e ? String(e.message || e) : ""; }

async function refresh() {
  try {
    const ready = await api("/readyz");
    const badge = document.getElementById("ready");
    badge.textContent = ready.ready ? "ready" : "not ready: " + (ready.reasons || []).join("; ");
    badge.style.color = ready.ready ? "#4ac26b" : "#ff8182";
    const list = (await api("/broker/subscription")).data || [];
    const detailed = await Promise.all(list.map(async (sub) => {
      const one = (await api(path(sub))).data;
      one.consumer.inProcess = sub.inProcess;  // the list says which ones are in-process
      return one;
    }));
    fillLookup(list);
    const health = await api("/healthz").catch(() => ({}));
    if (health.version) {
      const up = health.uptime_s ?? 0;
      document.getElementById("about").textContent = "v" + health.version + " · up " +
        (up < 3600 ? Math.floor(up / 60) + " min" : (up / 3600).toFixed(1) + " h");
    }
    const target = document.getElementById("subscriptions");
    target.replaceChildren(...(detailed.length ? detailed.map(subscriptionView)
      : [el("p", {"class": "muted"}, "no subscriptions yet: POST /broker/subscription")]));
    const cluster = await fetch("/cluster", {headers: token() ? {"Authorization": "Bearer " + token()} : {}})
      .then((r) => r.ok ? r.json() : null).catch(() => null);
    clusterView(cluster && cluster.data);
    const delay = await api("/delay/levels").catch(() => ({data: []}));
    document.getElementById("delay").replaceChildren(delayView(delay.data));
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    showError(null);
  } catch (e) { showError(e); }
}
refresh();
setInterval(refresh, REFRESH_MS);
"""

CSP: Final = ("default-src 'none'; script-src 'self'; connect-src 'self'; img-src 'self'; "
              "style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
              "frame-ancestors 'none'")
HEADERS: Final = {"Cache-Control": "no-store", "Content-Security-Policy": CSP,
                  "X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff",
                  "Referrer-Policy": "no-referrer"}
