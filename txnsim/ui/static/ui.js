// txnsim's live view: the server pushes the live sections every interval (Server-Sent Events on /api/live);
// whenever that goes quiet (no EventSource, the stream reconnecting) the page polls their JSON endpoints
// instead. What the user picks (a timeline, a partition's records) is polled. Nothing needs a reload.
"use strict";

const INTERVAL = Number(document.body.dataset.intervalMs) || 1000;
const NODE_COLOURS = ["#2563eb", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#db2777", "#65a30d", "#854d0e"];
const KIND_STYLE = {
  InitProducerId: ["circle", "#6b7280"], AddPartitions: ["square", "#2563eb"], Produce: ["circle", "#60a5fa"],
  EndTxn: ["diamond", "#7c3aed"], Timeout: ["x", "#b91c1c"], Fence: ["x", "#b91c1c"],
  Prepare: ["star", "#7c3aed"], Marker: ["triangle-down", "#111827"], MarkerAck: ["triangle-up", "#16a34a"],
  Complete: ["star", "#16a34a"], Expired: ["circle-open", "#6b7280"], Failover: ["hexagram", "#ea580c"],
  Rebalance: ["diamond-wide", "#0d9488"], Membership: ["diamond-wide-open", "#0d9488"],
  Assignment: ["square", "#14b8a6"], MemberLeft: ["square-x-open", "#6b7280"], GroupDeleted: ["x", "#6b7280"],
};
const MARKED = {Failover: "#ea580c", Timeout: "#b91c1c", Fence: "#b91c1c", Rebalance: "#0d9488"};
const $ = (id) => document.getElementById(id);
let timelineId = null;
let timelineWhat = "transaction";  // or "group"
let lastOwners = {};

function colour(node) { return node < 0 ? "#9ca3af" : NODE_COLOURS[node % NODE_COLOURS.length]; }
function clock(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString([], {hour12: false}) + "." + String(d.getMilliseconds()).padStart(3, "0");
}
function duration(ms) {
  if (ms === null || ms === undefined) return "";
  return ms < 1000 ? ms + " ms" : ms < 120000 ? (ms / 1000).toFixed(1) + " s" : Math.round(ms / 60000) + " min";
}
function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}
function rows(tbody, items, fill) {
  tbody.replaceChildren(...items.map((item) => { const tr = document.createElement("tr"); fill(tr, item); return tr; }));
}
function logName(topic, partition) {
  if (topic === "__transaction_state") return "txn shard " + partition;
  if (topic === "__consumer_offsets") return "offsets shard " + partition;
  return topic + "-" + partition;
}

async function poll(url, errorId, draw) {
  try {
    const response = await fetch(url, {cache: "no-store"});
    const body = await response.json();
    $(errorId).textContent = body.error || "";
    if (response.ok) draw(body);
  } catch (exc) {
    $(errorId).textContent = "the web view's server does not answer (" + exc + ")";
  }
}
function every(fn) { fn(); setInterval(fn, INTERVAL); }

// ------------------------------------------------------------------ cluster
function drawCluster(c) {
  $("updated").textContent = "updated " + clock(Date.now()) +
    (document.body.dataset.live === "push" ? " (pushed)" : " (polled)");
  $("nodes").replaceChildren(...c.nodes.map((n) => {
    const div = document.createElement("div");
    div.className = "node";
    div.dataset.node = n.node_id;
    div.dataset.state = n.state;
    div.style.borderLeft = "8px solid " + colour(n.node_id);
    div.innerHTML = `<div>node ${n.node_id} <span class="state"></span></div><div class="muted"></div>`;
    div.querySelector(".state").textContent = n.state;
    div.querySelector(".muted").textContent = `${n.address} · owns ${n.owns} logs`;
    return div;
  }));
  const byTopic = {};
  for (const log of c.logs) (byTopic[log.topic] ||= {})[log.partition] = log;
  const order = ["__transaction_state", "__consumer_offsets",
    ...Object.keys(byTopic).filter((t) => !t.startsWith("__") && !t.startsWith("RMQ_SYS") && !t.startsWith("TRANS_")).sort()];
  const counts = {"__transaction_state": c.txn_shards, "__consumer_offsets": c.offsets_shards};
  const owners = {};
  const table = $("ownership");
  table.replaceChildren(...order.map((topic) => {
    const tr = document.createElement("tr");
    const th = document.createElement("th");
    th.textContent = topic === "__transaction_state" ? "txn shards" : topic === "__consumer_offsets" ? "offsets shards" : topic;
    tr.appendChild(th);
    const parts = byTopic[topic] || {};
    const n = Math.max(counts[topic] || 0, ...Object.keys(parts).map((p) => Number(p) + 1));
    for (let p = 0; p < n; p++) {
      const log = parts[p];
      const owner = log ? log.node_id : -1;
      const key = topic + "-" + p;
      owners[key] = owner;
      const td = cell(tr, owner >= 0 ? owner : "–");
      td.style.background = colour(owner);
      td.dataset.log = key;
      td.dataset.owner = owner;
      td.title = `${logName(topic, p)}: node ${owner}` + (log ? `, leader epoch ${log.leader_epoch}` : ", no live owner");
      if (key in lastOwners && lastOwners[key] !== owner) td.classList.add("changed");
    }
    return tr;
  }));
  lastOwners = owners;
  $("cluster-error").textContent = c.error || "";
  rows($("changes").tBodies[0], c.changes.filter((x) => !x.topic.startsWith("RMQ_SYS") && !x.topic.startsWith("TRANS_")).slice(0, 40),
    (tr, x) => {
      tr.dataset.node = x.node_id;
      tr.dataset.action = x.action;
      cell(tr, clock(x.time_ms)); cell(tr, "node " + x.node_id); cell(tr, x.action);
      cell(tr, logName(x.topic, x.partition)); cell(tr, x.leader_epoch); cell(tr, x.reason);
    });
}

// ------------------------------------------------------------------ partitions
function drawPartitions(body) {
  const parts = body.partitions;
  const traces = [];
  parts.slice(0, 12).forEach((p, i) => {
    const name = p.topic + "-" + p.partition;
    const x = p.history.time_ms.map((t) => new Date(t));
    const c = NODE_COLOURS[i % NODE_COLOURS.length];
    traces.push({x, y: p.history.high_watermark, name: name + " HW", mode: "lines", line: {color: c}});
    traces.push({x, y: p.history.last_stable_offset, name: name + " LSO", mode: "lines", line: {color: c, dash: "dash"}});
  });
  Plotly.react("partition-chart", traces, {margin: {t: 10, r: 10, b: 40, l: 50}, yaxis: {title: "offset"},
    legend: {orientation: "h"}}, {displaylogo: false, responsive: true});
  rows($("partition-table").tBodies[0], parts, (tr, p) => {
    tr.dataset.partition = p.topic + "-" + p.partition;
    cell(tr, p.topic + "-" + p.partition);
    cell(tr, p.leader >= 0 ? "node " + p.leader : "none", p.leader >= 0 ? "" : "offline");
    cell(tr, p.replicas.join(", "));
    cell(tr, p.isr.join(", "), p.isr.length < p.replicas.length ? "under-replicated" : "");
    cell(tr, p.offline_replicas.join(", "), p.offline_replicas.length ? "offline" : "");
    cell(tr, p.high_watermark); cell(tr, p.last_stable_offset);
    cell(tr, p.open_transactions.map((o) => `${o.producer_id} @ ${o.first_offset}`).join(", "),
      p.open_transactions.length ? "txn-open" : "");
  });
  const topics = [...new Set(parts.map((p) => p.topic))];
  if (!$("messages-topic").value && topics.length) $("messages-topic").value = topics[0];
}

// ------------------------------------------------------------------ transactions
function drawTransactions(body) {
  rows($("transaction-table").tBodies[0], body.transactions, (tr, t) => {
    tr.className = "clickable";
    tr.dataset.transactionalId = t.transactional_id;
    tr.dataset.state = t.state;
    tr.onclick = () => showTimeline(t.transactional_id);
    cell(tr, t.transactional_id); cell(tr, t.state, "state-" + t.state); cell(tr, duration(t.age_ms));
    cell(tr, `${t.producer_id} / ${t.producer_epoch}`); cell(tr, t.partitions.join(", ")); cell(tr, "node " + t.coordinator_id);
  });
}

// ------------------------------------------------------------------ timeline
// a transactional id's steps (with the rebalances of the groups it commits offsets for), or a group's generations
function showTimeline(id, what = "transaction") {
  timelineId = id;
  timelineWhat = what;
  $("timeline-id").value = id;
  $("timeline-what").value = what;
  $("timeline-unit").textContent = what === "group" ? "generations" : "transactions";
  pollTimeline();
  $("timeline").scrollIntoView();
}
function pollTimeline() {
  if (!timelineId) return;
  const base = timelineWhat === "group" ? "/api/groups/" : "/api/transactions/";
  poll(base + encodeURIComponent(timelineId) + "/timeline?last=" + $("timeline-last").value, "timeline-error",
    drawTimeline);
}
// Plotly renders a subset of HTML in titles, legends and hover text: a transactional id or a group id (any
// string a client chose) is shown as text, never as markup
function plain(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
function drawTimeline(t) {
  const name = t.group_id !== undefined ? "group " + t.group_id : t.transactional_id;
  if (!t.events.length) $("timeline-error").textContent = "no durable record of " + name + " yet";
  const traces = t.kinds.filter((k) => t.events.some((e) => e.kind === k)).map((kind) => {
    const events = t.events.filter((e) => e.kind === kind);
    const [symbol, color] = KIND_STYLE[kind] || ["circle", "#000"];
    return {x: events.map((e) => new Date(e.time_ms)), y: events.map((e) => plain(e.lane)), name: kind, mode: "markers",
      type: "scatter", marker: {symbol, color, size: 13, line: {width: 1, color: "#fff"}},
      text: events.map((e) => (e.generation ? `generation ${e.generation}` : `transaction ${e.transaction}`) +
        `: ${plain(e.label)}<br>${plain(e.detail)}`), hoverinfo: "text+x"};
  });
  const shapes = t.events.filter((e) => e.kind in MARKED).map((e) => ({
    type: "line", xref: "x", yref: "paper", x0: new Date(e.time_ms), x1: new Date(e.time_ms), y0: 0, y1: 1,
    line: {color: MARKED[e.kind], dash: "dot", width: 2}}));
  const groups = t.groups && t.groups.length ? ` with the rebalances of group ${t.groups.join(", ")}` : "";
  const unit = t.group_id !== undefined ? "generations" : "events";
  Plotly.react("timeline-chart", traces, {
    title: {text: plain("timeline of " + name + groups) + (t.left_out ? ` (${t.left_out} earlier ${unit} left out)` : ""),
      font: {size: 14}}, margin: {t: 40, r: 10, b: 40, l: 120},
    yaxis: {type: "category", categoryorder: "array", categoryarray: [...t.lanes].reverse().map(plain), automargin: true},
    xaxis: {type: "date", tickformat: "%H:%M:%S.%L"}, shapes, legend: {orientation: "h"}},
    {displaylogo: false, responsive: true});
  rows($("timeline-table").tBodies[0], t.events, (tr, e) => {
    tr.dataset.kind = e.kind;
    tr.dataset.lane = e.lane;
    tr.dataset.generation = e.generation;
    cell(tr, e.generation ? "gen " + e.generation : e.transaction || ""); cell(tr, clock(e.time_ms)); cell(tr, e.lane);
    cell(tr, e.kind); cell(tr, e.label); cell(tr, e.producer_epoch >= 0 ? e.producer_epoch : ""); cell(tr, e.detail);
  });
}
$("timeline-last").onchange = pollTimeline;
$("timeline-form").onsubmit = (ev) => {
  ev.preventDefault();
  showTimeline($("timeline-id").value.trim(), $("timeline-what").value);
};

// ------------------------------------------------------------------ groups
function drawGroups(body) {
  const now = new Date();
  Plotly.react("group-chart", body.groups.map((g) => ({
    x: [...g.rebalances.map((r) => new Date(r.time_ms)), now], y: [...g.rebalances.map((r) => r.generation), g.generation],
    text: [...g.rebalances.map((r) => `${plain(g.group_id)}: generation ${r.generation}, ${r.members} member(s), ${r.state}`), ""],
    name: plain(g.group_id), mode: "lines+markers", line: {shape: "hv"}, hoverinfo: "text+x"})),
    {margin: {t: 10, r: 10, b: 30, l: 50}, yaxis: {title: "generation", dtick: 1}, legend: {orientation: "h"}},
    {displaylogo: false, responsive: true});
  $("group-list").replaceChildren(...body.groups.map((g) => {
    const div = document.createElement("div");
    div.className = "group";
    div.dataset.groupId = g.group_id;
    div.dataset.generation = g.generation;
    div.dataset.members = g.members.length;
    div.dataset.rebalances = g.rebalances.length;
    div.innerHTML = `<h3></h3><table class="list members"><thead><tr><th>member</th><th>client</th><th>assignment</th>
      </tr></thead><tbody></tbody></table><table class="list offsets"><thead><tr><th>partition</th><th>committed offset</th>
      <th>lag</th></tr></thead><tbody></tbody></table>`;
    const h3 = div.querySelector("h3");
    const link = document.createElement("a");
    link.href = "#timeline";
    link.className = "group-timeline";
    link.textContent = g.group_id;
    link.title = "every generation of " + g.group_id + " on the timeline";
    link.onclick = (ev) => { ev.preventDefault(); showTimeline(g.group_id, "group"); };
    h3.append(link, `: ${g.state}, generation ${g.generation}, ` +
      `${g.members.length} member(s), coordinator node ${g.coordinator_id}`);
    rows(div.querySelector(".members tbody"), g.members, (tr, m) => {
      cell(tr, m.member_id); cell(tr, m.client_id); cell(tr, m.assignment.join(", "));
    });
    rows(div.querySelector(".offsets tbody"), g.offsets, (tr, o) => {
      cell(tr, o.partition); cell(tr, o.committed); cell(tr, o.lag);
    });
    return div;
  }));
  if (!body.groups.length) $("group-list").textContent = "no consumer groups";
}

// ------------------------------------------------------------------ half messages
function drawHalf(body) {
  rows($("half-table").tBodies[0], body.half_messages, (tr, m) => {
    tr.dataset.transactionId = m.transaction_id;
    tr.dataset.checkTimes = m.check_times;
    cell(tr, m.transaction_id); cell(tr, m.producer_group); cell(tr, m.topic); cell(tr, m.partition);
    cell(tr, duration(m.age_ms)); cell(tr, m.check_times); cell(tr, duration(Math.max(0, m.next_check_ms - Date.now())));
    cell(tr, m.storage); cell(tr, "node " + m.node_id);
  });
}

// ------------------------------------------------------------------ messages
function pollMessages() {
  const topic = $("messages-topic").value.trim();
  if (!topic) return;
  const q = new URLSearchParams({topic, partition: $("messages-partition").value, offset: $("messages-offset").value});
  poll("/api/messages?" + q, "messages-error", (body) => rows($("message-table").tBodies[0], body.records, (tr, r) => {
    tr.dataset.offset = r.offset;
    tr.dataset.transaction = r.transaction;
    cell(tr, r.offset); cell(tr, clock(r.timestamp_ms)); cell(tr, r.key); cell(tr, r.value);
    cell(tr, r.headers.map(([k, v]) => k + "=" + v).join(", ")); cell(tr, r.producer_id >= 0 ? r.producer_id : "");
    cell(tr, r.transaction || "(not transactional)", "txn-" + r.transaction);
  }));
}
$("messages-form").onsubmit = (ev) => { ev.preventDefault(); pollMessages(); };

// ------------------------------------------------------------------ live: pushed, polled as the fallback
const LIVE = {
  cluster: ["cluster-error", drawCluster], partitions: ["partitions-error", drawPartitions],
  transactions: ["transactions-error", drawTransactions], groups: ["groups-error", drawGroups],
  "half-messages": ["half-error", drawHalf],
};
let lastPush = 0;
function listen() {
  if (!window.EventSource) return;  // polling only
  const source = new EventSource("/api/live");
  for (const [name, [errorId, draw]] of Object.entries(LIVE)) {
    source.addEventListener(name, (ev) => {
      lastPush = Date.now();
      document.body.dataset.live = "push";
      const body = JSON.parse(ev.data);
      $(errorId).textContent = body.error || "";
      if (!body.failed) draw(body);
    });
  }
}
function pollIfQuiet() {
  if (Date.now() - lastPush <= 3 * INTERVAL) return;
  document.body.dataset.live = "poll";
  for (const [name, [errorId, draw]] of Object.entries(LIVE)) poll("/api/" + name, errorId, draw);
}
listen();
every(pollIfQuiet);
every(pollTimeline);
every(pollMessages);
