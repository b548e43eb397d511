# ruff: noqa: E501, RUF001  (an HTML document: long lines and typographic dashes are fine)
"""The status page at `GET /`: one self-contained HTML document, no build step, nothing
loaded from the internet. It reads the same JSON APIs as any client
(`/broker/subscription`, `/broker/subscription/{id}/{groupId}`, `/delay/levels`, `/readyz`,
and `/cluster` when `[cluster] status_topic` is set: the cluster panel),
refreshes itself every few seconds, asks for the admin token when the API answers 401
(kept in the tab's sessionStorage only), and shows only what the APIs show (they redact
secrets).

The script is its own resource (`GET /status.js`, `SCRIPT`), so the page's
Content-Security-Policy (`CSP`) allows no inline script: text that reaches the page from
an API can never run as code. Only http(s) addresses become links. No page may frame it
(`frame-ancestors 'none'`)."""

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
  .state.failed, .state.waiting_for_broker, .state.stalled, .state.disabled { background: var(--bad); }
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
</style>
</head>
<body>
<header><h1>hookstream</h1><span class="ready" id="ready">…</span>
<span class="muted" id="updated"></span></header>
<main>
<div id="error"></div>
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
    el("td", {}, p.topic + "-" + p.partition), el("td", {}, p.committed ?? "–"),
    el("td", {}, p.highwater ?? "–"), el("td", {"class": "lag"}, p.lag ?? "–"),
    el("td", {}, p.inflight ?? 0), el("td", {}, p.retrying ?? 0),
    el("td", {}, ago(p.oldest_pending_ms)), el("td", {}, p.last_error || "")));
  return el("table", {}, head, ...rows);
}

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
      el("span", {"class": "muted"}, sub.subscriptionMethod.method + " " + sub.subscriptionMethod.uri),
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
        el("td", {"class": "owner"}, p.instance), el("td", {}, p.lag ?? "–")));
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
